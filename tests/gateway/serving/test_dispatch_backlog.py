"""The prefill backlog dispatch holds per backend (the `backlog` scorer's signal,
policies/scorers.py): an attempt's uncached prompt tokens are on its backend from
its start until its first event, and come off on every other way out too: an
error before the first event, an upstream that ends without a word, a failover to
another backend, a client leaving before the first byte, a failed fan-out. A leak
would skew routing for good, so each path is checked back at 0. In process, on
scripted adapters behind real backend sets and pools."""

from __future__ import annotations

import asyncio

import pytest

from adapters.base import ErrorEvent, Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.openai.requests import estimate_prompt_tokens
from gateway.serving.dispatch import Dispatcher
from tests.gateway.scripted import HANG, ScriptedAdapter, backend_set

PROMPT = "Tell me about the weather in a long and winding way. " * 20  # about 270 tokens


def chat(n: int = 1) -> GenerationRequest:
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "and tomorrow?"}]
    return GenerationRequest("req", "m", messages=messages, stream=True, sampling=SamplingParams(n=n))


TOKENS = estimate_prompt_tokens(chat())


def answer(text: str = "ok") -> list:
    return [TextDelta(0, text), Finish(0, "stop"), Usage(5, 1)]


class Gate:
    """A script item that holds the upstream (before its first event) until opened."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def __call__(self) -> None:
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()


def dispatcher_of(*adapters: ScriptedAdapter, **model) -> Dispatcher:
    names = [a.name for a in adapters]
    cfg = {"backends": names, "max_retries": 0, **model}
    return Dispatcher(backend_set({"m": cfg}, {a.name: a for a in adapters}))


def backlogs(dispatcher: Dispatcher) -> dict[str, int]:
    return {name: b.backlog for name, b in dispatcher.backends.backends.items()}


async def until(predicate) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


async def test_the_prompt_is_on_the_backlog_until_the_first_event_not_until_the_end():
    gate = Gate()
    b1 = ScriptedAdapter("b1", lambda r: [gate, TextDelta(0, "a"), HANG])
    dispatcher = dispatcher_of(b1)
    opening = asyncio.create_task(dispatcher.open("m", [chat()]))
    await until(b1.called.is_set)
    assert TOKENS > 200 and backlogs(dispatcher) == {"b1": TOKENS}  # no index: the whole prompt
    gate.open()
    dispatched = await opening
    # Streaming (still in flight), its prefill done: off the backlog.
    assert dispatcher.backends.backends["b1"].inflight == 1 and backlogs(dispatcher) == {"b1": 0}
    await dispatched.aclose()
    assert backlogs(dispatcher) == {"b1": 0}


@pytest.mark.parametrize(
    "script",
    [
        [GatewayError(400, "bad prompt")],  # the client's mistake: answered at once
        [GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT)],  # nowhere else to go
        [ErrorEvent(GatewayError(500, "boom"))],  # an error as the stream's first event
        [],  # the upstream ended without a word: 502
    ],
    ids=["a 4xx", "a 5xx", "an error event", "an empty answer"],
)
async def test_a_request_failing_before_its_first_event_leaves_no_backlog(script):
    gate = Gate()
    b1 = ScriptedAdapter("b1", lambda r: [gate, *script])
    dispatcher = dispatcher_of(b1)
    opening = asyncio.create_task(dispatcher.open("m", [chat()]))
    await until(b1.called.is_set)
    assert backlogs(dispatcher) == {"b1": TOKENS}
    gate.open()
    with pytest.raises(GatewayError):
        await opening
    assert backlogs(dispatcher) == {"b1": 0}


async def test_a_failover_moves_the_backlog_to_the_next_backend_and_leaves_none():
    first, second = Gate(), Gate()
    b1 = ScriptedAdapter(
        "b1", lambda r: [first, GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT)]
    )
    b2 = ScriptedAdapter("b2", lambda r: [second, *answer()])
    dispatcher = dispatcher_of(b1, b2, routing="round_robin")
    opening = asyncio.create_task(dispatcher.open("m", [chat()]))
    await until(lambda: b1.called.is_set() or b2.called.is_set())
    tried, other = ("b1", "b2") if b1.called.is_set() else ("b2", "b1")
    assert tried == "b1", "round robin starts with the first backend"
    assert backlogs(dispatcher) == {"b1": TOKENS, "b2": 0}
    first.open()
    await until(b2.called.is_set)
    assert backlogs(dispatcher) == {"b1": 0, "b2": TOKENS}
    second.open()
    dispatched = await opening
    assert dispatched.backends == ("b2",) and backlogs(dispatcher) == {"b1": 0, "b2": 0}
    await dispatched.aclose()


async def test_a_client_leaving_before_the_first_byte_takes_its_prompt_off():
    b1 = ScriptedAdapter("b1", lambda r: [HANG])
    dispatcher = dispatcher_of(b1)
    opening = asyncio.create_task(dispatcher.open("m", [chat()]))
    await until(b1.called.is_set)
    assert backlogs(dispatcher) == {"b1": TOKENS}
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert backlogs(dispatcher) == {"b1": 0} and b1.active == 0


async def test_a_fan_out_holds_each_sub_request_and_a_failed_one_releases_all():
    def script(request):
        i = request.request_id.rsplit("-", 1)[1]
        return {"0": [HANG], "1": answer(), "2": [gate, GatewayError(400, "no")]}[i]

    gate = Gate()
    b1 = ScriptedAdapter("b1", script, n=False)
    dispatcher = dispatcher_of(b1)
    opening = asyncio.create_task(dispatcher.open("m", [chat(n=3)]))
    await until(lambda: len(b1.requests) == 3)
    await asyncio.sleep(0.01)  # the second answered its first event: off already
    assert backlogs(dispatcher) == {"b1": 2 * TOKENS}
    gate.open()
    with pytest.raises(GatewayError):
        await opening
    assert backlogs(dispatcher) == {"b1": 0} and b1.active == 0


async def test_a_prompt_the_backend_was_sent_before_adds_only_what_its_index_does_not_match():
    gate = Gate()
    adapters = [ScriptedAdapter(f"b{i}", lambda r: [gate, *answer()]) for i in range(3)]
    dispatcher = dispatcher_of(*adapters, routing={"scorers": {"prefix_approx": 3.0, "backlog": 2.0}})
    gate.open()
    dispatched = await dispatcher.open("m", [chat()])  # its blocks go into its backend's approximate index
    home = dispatched.label
    await dispatched.aclose()
    pool = dispatcher.pool("m")
    assert pool is not None
    estimates = {v.name: v.prefill_tokens for v in pool.route(chat()).candidates}
    assert 0 <= estimates[home] < TOKENS // 4  # all but the prompt's last partial block matched
    assert all(tokens == TOKENS for name, tokens in estimates.items() if name != home)
    gate.opened.clear()
    opening = asyncio.create_task(dispatcher.open("m", [chat()]))
    await until(lambda: sum(len(a.requests) for a in adapters) == 2)
    assert backlogs(dispatcher) == {name: estimates[home] if name == home else 0 for name in estimates}
    gate.open()
    await (await opening).aclose()
    assert set(backlogs(dispatcher).values()) == {0}
