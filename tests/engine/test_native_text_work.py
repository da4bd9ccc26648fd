"""Issue 25, finding 1: the native engine's text work is never the event loop's.

The worker pool (adapters/native_work.py) takes tenants in turn, bounds what each may
queue, and runs nothing that was cancelled before it started; the tokenizer releases
the interpreter lock while it works, so the loop keeps turning; a text longer than
the model's context by its bytes alone is refused before any tokenizing."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import GatewayError
from adapters.native_work import TextWork
from adapters.oneshot import EmbeddingRequest, TokenizeRequest
from engine.make_tiny import make_tiny
from gateway.observe.ops import TextWorkCollector
from tests.native_adapters import started_native

MAX_MODEL_LEN = 128


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory):
    model_dir: Path = make_tiny(tmp_path_factory.mktemp("text-work") / "tiny")
    yield from started_native(model_dir, num_blocks=64, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=32)


async def test_tenants_take_turns_and_one_tenants_queue_is_bounded():
    work = TextWork(workers=1, per_tenant=4, max_waiting=100)
    gate = threading.Event()
    order: list[str] = []

    def piece(name: str):
        def run() -> str:
            gate.wait(10)
            order.append(name)
            return name

        return run

    first = asyncio.ensure_future(work.run("attacker", piece("a0")))  # takes the one worker
    await asyncio.sleep(0.05)
    attacker = [asyncio.ensure_future(work.run("attacker", piece(f"a{i}"))) for i in range(1, 5)]
    await asyncio.sleep(0)
    with pytest.raises(GatewayError) as busy:
        await work.run("attacker", piece("a5"))  # a fifth one waiting: refused
    assert busy.value.status == 429 and busy.value.code == "tokenizer_busy" and busy.value.retry_after
    victim = asyncio.ensure_future(work.run("victim", piece("v")))
    gate.set()
    await asyncio.gather(first, victim, *attacker)
    # The victim came after four of the attacker's pieces but ran right after the one running.
    assert order[:3] == ["a0", "a1", "v"]


async def test_work_cancelled_before_it_started_never_runs():
    work = TextWork(workers=1)
    gate = threading.Event()
    ran: list[str] = []
    running = asyncio.ensure_future(work.run("t", lambda: gate.wait(10)))
    await asyncio.sleep(0.05)
    queued = asyncio.ensure_future(work.run("t", lambda: ran.append("late")))
    await asyncio.sleep(0)
    queued.cancel()
    gate.set()
    await running
    await asyncio.sleep(0.1)
    assert ran == [] and work.waiting() == 0 and work.running == 0


def test_tokenizing_a_long_text_on_a_worker_leaves_the_event_loop_turning(adapter):
    """`encode` held the interpreter lock for its whole run: a loop ticking every
    millisecond beside it stalled for the whole encode. Now the loop's worst gap is a
    small part of the encode's time (bound: half of it, generous on a loaded machine)."""
    text = "héllo wörld 😀 " * 40_000  # 760 KB
    tok = adapter.tokenizer

    async def measure() -> tuple[float, float]:
        worst, ticking = 0.0, True

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while ticking:
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                worst, last = max(worst, now - last), now

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await TextWork(workers=1).run("t", lambda: tok.encode(text))
        took = time.perf_counter() - started
        ticking = False
        await task
        return worst, took

    worst, took = asyncio.run(measure())
    assert took > 0.2, took  # long enough to tell a stall from a scheduling hiccup
    assert worst < took / 2, (worst, took)


@pytest.mark.parametrize("call", ["chat", "tokenize", "embed"])
def test_a_text_over_the_context_by_its_bytes_is_refused_before_tokenizing(adapter, call, monkeypatch):
    huge = "x" * (4 << 20)  # 4 MB

    def never(*args, **kwargs):
        raise AssertionError("tokenized")

    monkeypatch.setattr(adapter.tokenizer, "encode", never)
    monkeypatch.setattr(adapter.tokenizer, "apply_chat_template", never)

    async def go() -> None:
        if call == "chat":
            req = GenerationRequest(
                request_id="r", model="m", messages=[{"role": "user", "content": huge}], sampling=SamplingParams()
            )
            async for _ in adapter.generate(req):
                pass
        elif call == "tokenize":
            await adapter.tokenize(TokenizeRequest(request_id="r", model="m", prompt=huge))
        else:
            await adapter.embed(EmbeddingRequest(request_id="r", model="m", inputs=["ok", huge]))

    started = time.perf_counter()
    with pytest.raises(GatewayError) as refused:
        asyncio.run(go())
    assert refused.value.status == 400 and refused.value.code == "context_length_exceeded"
    assert refused.value.param == {"chat": "messages", "tokenize": "prompt", "embed": "input"}[call]
    assert time.perf_counter() - started < 5  # generous: the old path took 12-15 s for this


async def test_the_pool_shows_what_waits_and_runs_on_the_metrics():
    """switchyard_native_text_work_{waiting,running,refused}, read at scrape time
    (gateway/observe/ops.py `TextWorkCollector`), follow the pool and return to zero."""
    registry = CollectorRegistry()
    work = TextWork(workers=1, per_tenant=2, max_waiting=100)
    registry.register(TextWorkCollector(work))

    def shown() -> tuple[float | None, ...]:
        names = ("waiting", "running", "refused_total")
        return tuple(registry.get_sample_value(f"switchyard_native_text_work_{n}") for n in names)

    assert shown() == (0, 0, 0)
    gate = threading.Event()
    pieces = [asyncio.ensure_future(work.run("t", lambda: gate.wait(10))) for _ in range(3)]
    await asyncio.sleep(0.05)
    with pytest.raises(GatewayError):
        await work.run("t", lambda: None)  # a third one waiting: refused
    assert shown() == (2, 1, 1)
    gate.set()
    await asyncio.gather(*pieces)
    assert shown() == (0, 0, 1)
