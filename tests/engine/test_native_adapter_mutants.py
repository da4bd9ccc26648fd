"""adapters/native.py around one generation, on the tiny model (one engine for the
module, others only where a test is about starting one): starting once and failing to,
the load it reports, the prefix-cache events it hands on, the prompts' ids it keeps and
reuses, the blocks it names for routing (ROUTE_TEXT_BYTES at, below and above), the
engine's exceptions as gateway errors, echo, and the served name."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import GatewayError
from adapters.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from adapters.native import (
    RECENT_PROMPTS,
    ROUTE_TEXT_BYTES,
    NativeAdapter,
    SharedTokenizer,
    _default_served_name,
    _engine_errors,
    _forces_tool_calls,
    _prompt_key,
    shared_tokenizer,
)
from engine.llm_engine import ContextLengthError, TokenOutput
from engine.make_tiny import make_tiny
from tests.native_adapters import started_native

BLOCK = 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("adapter-edges") / "tiny")


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    yield from started_native(model_dir, one_thread=True, num_blocks=32, block_size=BLOCK, max_model_len=128)


def chat(content: str = "hi", **sampling) -> GenerationRequest:
    sampling.setdefault("max_tokens", 2)
    sampling.setdefault("temperature", 0.0)
    messages = [{"role": "user", "content": content}]
    return GenerationRequest("r", "m", messages=messages, sampling=SamplingParams(**sampling))


def events_of(adapter: NativeAdapter, request: GenerationRequest) -> list:
    async def go() -> list:
        return [e async for e in adapter.generate(request)]

    return asyncio.run(go())


# ---- starting ------------------------------------------------------------------------------


def test_concurrent_first_calls_build_one_engine_and_its_metrics_carry_the_name(model_dir: Path) -> None:
    registry = CollectorRegistry()
    adapter = NativeAdapter("nat-a", str(model_dir), engine_options={"num_blocks": 8}, registry=registry)
    seen: list = []
    adapter.subscribe_kv_events(seen.append)  # before the engine exists: attached when it starts

    async def go() -> None:
        await asyncio.gather(adapter.start(), adapter.start(), adapter.start())
        assert [e async for e in adapter.generate(chat("a prompt of more than one block of tokens"))]
        assert any(isinstance(e, BlockStored) for e in seen)
        engine = adapter.async_engine
        await adapter.start()
        assert adapter.async_engine is engine
        assert adapter.tokenizer is shared_tokenizer(model_dir).tokenizer
        assert engine.engine.pool.num_blocks == 8
        assert registry.get_sample_value("switchyard_engine_running_sequences", {"engine": "nat-a"}) == 0
        assert (await adapter.health()).detail == f"native engine serving {model_dir.name}"
        await adapter.aclose()

    asyncio.run(go())


def test_a_model_that_cannot_load_is_a_503_and_its_reason_goes_to_readiness(model_dir: Path, caplog) -> None:
    bad = NativeAdapter("nat-b", str(model_dir), engine_options={"no_such_option": 1})

    async def go() -> None:
        with caplog.at_level("WARNING", logger="switchyard.upstream"), pytest.raises(GatewayError) as info:
            await bad.start()
        assert f"backend nat-b failed: the model could not be loaded ({model_dir}: bad engine_options" in caplog.text
        assert (info.value.status, info.value.code) == (503, "upstream_error")
        assert info.value.message.endswith("failed: the model could not be loaded")
        health = await bad.health()
        assert health.ok is False
        assert health.detail.startswith(f"cannot load {model_dir}: bad engine_options ['no_such_option']: ")
        load = await bad.load()  # nothing known about a model not loaded
        assert bad.async_engine is None
        assert (load.waiting, load.running, load.kv_usage, load.prefix_hit_rate) == (None, None, None, None)
        await bad.aclose()  # nothing to close

    asyncio.run(go())


def test_the_served_name_of_a_builtin_and_of_a_directory(tmp_path: Path) -> None:
    assert _default_served_name("builtin:tiny") == "tiny"
    (tmp_path / "my-model").mkdir()
    assert _default_served_name(str(tmp_path / "my-model" / ".." / "my-model")) == "my-model"
    home = Path(os.path.expanduser("~"))
    assert _default_served_name("~") == home.resolve().name


# ---- what it reports ---------------------------------------------------------------------


def test_the_load_is_the_engines_while_a_generation_runs(adapter: NativeAdapter) -> None:
    async def go() -> None:
        stream = adapter.generate(chat(max_tokens=60, ignore_eos=True))
        await stream.__anext__()
        load, stats = await adapter.load(), adapter.async_engine.stats()
        assert (load.running, load.waiting) == (stats.running, stats.waiting) == (1, 0)
        assert load.kv_usage == stats.kv_usage > 0
        assert load.prefix_hit_rate == stats.prefix_hit_rate
        await stream.aclose()

    asyncio.run(go())
    events_of(adapter, chat("a prompt long enough to fill a whole block of sixteen tokens or more"))
    events_of(adapter, chat("a prompt long enough to fill a whole block of sixteen tokens or more"))
    load = asyncio.run(adapter.load())
    assert load.prefix_hit_rate == adapter.async_engine.stats().prefix_hit_rate > 0


def test_prefix_cache_events_are_handed_on_as_the_contracts(adapter: NativeAdapter) -> None:
    seen: list = []
    adapter.subscribe_kv_events(seen.append)
    try:
        events_of(adapter, chat("the events of a prompt that is longer than two blocks of sixteen tokens each " * 2))
        stored = [e for e in seen if isinstance(e, BlockStored)]
        assert len(stored) >= 2
        assert all(len(e.block_hashes) == 1 and e.block_size == BLOCK and e.medium == "GPU" for e in stored)
        assert stored[1].parent_block_hash == stored[0].block_hashes[0]
        pool = adapter.async_engine.engine.pool
        pool.reset_prefix_cache()
        assert isinstance(seen[-1], AllBlocksCleared)
        seen.clear()
        for i in range(8):  # the cache is small: new prompts evict earlier blocks
            events_of(adapter, chat(f"evicting prompt {i} " * 6, max_tokens=1))
        removed = [e for e in seen if isinstance(e, BlockRemoved)]
        assert removed and all(len(e.block_hashes) == 1 and e.medium == "GPU" for e in removed)
    finally:
        adapter.async_engine.engine.pool.event_sink = None
        adapter._kv_sink = None


# ---- the prompts' ids ----------------------------------------------------------------------


def test_a_tokenizer_keeps_the_last_recent_prompts_ids_as_copies(adapter: NativeAdapter) -> None:
    shared = SharedTokenizer(adapter.tokenizer)
    ids = [1, 2]
    shared.remember(b"k0", ids)
    ids.append(3)
    assert shared.recent[b"k0"] == [1, 2]
    shared.remember(None, [9])
    assert list(shared.recent) == [b"k0"]
    for i in range(1, RECENT_PROMPTS):
        shared.remember(f"k{i}".encode(), [i])
    assert len(shared.recent) == RECENT_PROMPTS and b"k0" in shared.recent
    shared.remember(b"one more", [0])
    assert len(shared.recent) == RECENT_PROMPTS and b"k0" not in shared.recent and b"one more" in shared.recent


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "config.json", "chat_template.jinja"])
def test_a_changed_tokenizer_file_loads_the_tokenizer_again(model_dir: Path, tmp_path: Path, name: str) -> None:
    copy = tmp_path / "model"
    copy.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (copy / f).write_bytes((model_dir / f).read_bytes())
    (copy / "chat_template.jinja").write_text("{{ messages }}")
    first = shared_tokenizer(copy)
    assert shared_tokenizer(copy / ".." / "model") is first
    stat = (copy / name).stat()
    os.utime(copy / name, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert shared_tokenizer(copy) is not first


def test_a_tokenizer_is_one_directorys_even_beside_an_identical_copy(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy2(model_dir / f, copy / f)  # same names, same times
    config = copy / "tokenizer_config.json"
    stat = config.stat()
    config.write_text(config.read_text().replace("You are a helpful assistant.", "You are a copy."))
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    original, copied = shared_tokenizer(model_dir), shared_tokenizer(copy)
    assert copied is not original and "You are a copy." in copied.tokenizer.chat_template


def test_a_prompts_key_holds_its_kind_messages_tools_and_prompt() -> None:
    base = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    key = _prompt_key(base)
    assert key is not None and key == _prompt_key(GenerationRequest("other", "m2", messages=base.messages))
    tools = GenerationRequest("r", "m", messages=base.messages, tools=[{"type": "function"}])
    other = GenerationRequest("r", "m", messages=[{"role": "user", "content": "ho"}])
    as_completion = GenerationRequest("r", "m", kind="completion", prompt="hi")
    as_chat_prompt = GenerationRequest("r", "m", kind="chat", prompt="hi")
    keys = {key, _prompt_key(tools), _prompt_key(other), _prompt_key(as_completion), _prompt_key(as_chat_prompt)}
    assert len(keys) == 5
    assert _prompt_key(GenerationRequest("r", "m", kind="completion", prompt=[1, 2])) is None  # ids: nothing to save
    assert _prompt_key(GenerationRequest("r", "m", messages=[{"content": {1, 2}}])) is None  # not JSON


def test_ids_reused_are_a_copy_and_the_cache_keeps_the_newest_use(adapter: NativeAdapter) -> None:
    shared = adapter._shared
    first, second = chat("reuse order one"), chat("reuse order two")
    ids = adapter._prompt_ids(first)
    adapter._prompt_ids(second)
    before = shared.reused
    again = adapter._prompt_ids(first)
    assert again == ids and shared.reused == before + 1
    assert list(shared.recent)[-1] == _prompt_key(first)  # used last: evicted last
    again.append(99)
    assert adapter._prompt_ids(first) == ids


def test_a_generations_prompt_ids_are_kept_for_routing(adapter: NativeAdapter) -> None:
    request = chat("a prompt first seen by a generation")
    events_of(adapter, request)
    assert _prompt_key(request) in adapter._shared.recent
    before = adapter._shared.reused
    assert adapter.kv_block_hashes(request)
    assert adapter._shared.reused == before + 1


def test_routing_names_blocks_of_a_text_up_to_route_text_bytes(adapter: NativeAdapter) -> None:
    engine = adapter.async_engine.engine
    template = len("<|im_start|>user\n")  # the chat template adds no bytes the count sees
    assert template
    at = GenerationRequest("r", "m", kind="completion", prompt="y" * ROUTE_TEXT_BYTES)
    over = GenerationRequest("r", "m", kind="completion", prompt="z" * (ROUTE_TEXT_BYTES + 1))
    hashes = adapter.kv_block_hashes(at)
    assert hashes == engine.kv.block_hashes(adapter._prompt_ids(at)) and hashes
    assert adapter.kv_block_hashes(over) is None  # tokenized off the loop, later
    adapter._prompt_ids(over)  # once its ids are known, routing reuses them whatever its length
    assert adapter.kv_block_hashes(over) == engine.kv.block_hashes(adapter._prompt_ids(over))
    assert adapter.kv_block_hashes(GenerationRequest("r", "m", kind="completion", prompt="")) is None  # bad: none
    ids = list(range(5, 5 + 3 * BLOCK))
    by_ids = GenerationRequest("r", "m", kind="completion", prompt=ids)  # no key, no text: named at once
    assert adapter.kv_block_hashes(by_ids) == engine.kv.block_hashes(ids) and len(engine.kv.block_hashes(ids)) == 3


def test_no_block_names_before_the_engine_is_loaded(model_dir: Path) -> None:
    assert NativeAdapter("nat-c", str(model_dir)).kv_block_hashes(chat()) is None


# ---- one generation ------------------------------------------------------------------------


def test_echo_gives_each_choice_the_prompt_first(adapter: NativeAdapter) -> None:
    request = GenerationRequest(
        "r", "m", kind="completion", prompt="Once upon", sampling=SamplingParams(max_tokens=2, n=2, temperature=0.0)
    )
    request.echo = True
    events = events_of(adapter, request)
    assert [(e.index, e.text) for e in events[:2]] == [(0, "Once upon"), (1, "Once upon")]
    text = ["".join(e.text for e in events if isinstance(e, TextDelta) and e.index == i) for i in (0, 1)]
    request.echo = False
    plain = events_of(adapter, request)
    assert ["".join(e.text for e in plain if isinstance(e, TextDelta) and e.index == i) for i in (0, 1)] == [
        t[len("Once upon") :] for t in text
    ]
    request.echo, request.prompt = True, "<|im_start|>Once"
    assert events_of(adapter, request)[0].text == "<|im_start|>Once"  # special tokens shown
    request.kind = "chat"
    request.messages, request.prompt = [{"role": "user", "content": "Once upon"}], None
    assert not any(isinstance(e, TextDelta) and e.text == "Once upon" for e in events_of(adapter, request))


def test_a_choice_ended_early_gets_no_more_events_and_usage_counts_each(adapter: NativeAdapter) -> None:
    base = events_of(adapter, chat("stops", n=2, temperature=1.0, seed=5, max_tokens=12, ignore_eos=True))
    first = "".join(e.text for e in base if isinstance(e, TextDelta) and e.index == 0)
    stop = first[2:4]
    events = events_of(
        adapter, chat("stops", n=2, temperature=1.0, seed=5, max_tokens=12, stop=[stop], ignore_eos=True)
    )
    finish_at = next(i for i, e in enumerate(events) if isinstance(e, Finish) and e.index == 0)
    assert not any(getattr(e, "index", None) == 0 for e in events[finish_at + 1 :])
    usage = events[-1]
    assert isinstance(usage, Usage) and usage.completion_tokens > 12 and usage.prompt_tokens > 0


def test_cached_tokens_are_the_most_any_step_reported(adapter: NativeAdapter) -> None:
    prompt = "a completion prompt no other test sends, more than one block of tokens long"
    request = GenerationRequest(
        "r", "m", kind="completion", prompt=prompt, sampling=SamplingParams(max_tokens=2, n=2, temperature=1.0, seed=1)
    )
    assert events_of(adapter, request)[-1].cached_tokens == 0  # not seen before
    usage = events_of(adapter, request)[-1]
    assert usage.cached_tokens >= BLOCK and usage.cached_tokens % BLOCK == 0


def test_waiting_requests_run_by_their_priority_each_under_its_own_engine_id(model_dir: Path) -> None:
    one = NativeAdapter("nat-p", str(model_dir), engine_options={"max_num_seqs": 1, "max_model_len": 512})
    done: list[str] = []

    async def run(name: str, priority: int, max_tokens: int) -> None:
        request = chat(f"request {name}", max_tokens=max_tokens, ignore_eos=True)
        request.request_id, request.priority = "same-id", priority
        async for event in one.generate(request):
            if isinstance(event, Usage):
                done.append(name)

    async def go() -> None:
        await one.start()
        first = asyncio.ensure_future(run("first", 0, 450))
        while not one.async_engine.engine.requests:
            await asyncio.sleep(0.001)
        later = asyncio.ensure_future(run("later", 1, 2))  # arrives first, less urgent
        while len(one.async_engine.engine.requests) < 2:
            await asyncio.sleep(0.001)
        urgent = asyncio.ensure_future(run("urgent", 0, 2))
        while len(one.async_engine.engine.requests) < 3:
            await asyncio.sleep(0.001)
        assert not first.done()  # both waited behind it
        await asyncio.gather(first, later, urgent)
        await one.aclose()

    asyncio.run(go())
    assert done == ["first", "urgent", "later"]


def test_an_engine_side_abort_is_logged_as_this_backends_failure(adapter: NativeAdapter, caplog) -> None:
    async def go() -> None:
        stream = adapter.generate(chat(max_tokens=100, ignore_eos=True))
        await stream.__anext__()
        (engine_id,) = adapter.async_engine.engine.requests
        assert engine_id.startswith("r-") and len(engine_id) == len("r-") + 8
        adapter.async_engine.abort(engine_id)
        with pytest.raises(GatewayError) as info:
            while True:
                await stream.__anext__()
        assert info.value.status == 503

    with caplog.at_level("WARNING", logger="switchyard.upstream"):
        asyncio.run(go())
    assert "backend local failed: the engine aborted the request (shutting down?)" in caplog.text


# ---- the engine's exceptions ----------------------------------------------------------------


def outputs_then(exc: BaseException | None, *outs: TokenOutput):
    async def stream():
        for o in outs:
            yield o
        if exc is not None:
            raise exc

    return stream()


def collected(stream, kind: str = "chat") -> list:
    async def go() -> list:
        return [o async for o in _engine_errors(stream, "nat", kind)]

    return asyncio.run(go())


def test_the_engines_outputs_pass_and_its_exceptions_become_gateway_errors(caplog) -> None:
    ok = TokenOutput("r", 0, [5], None, True, "stop", 3, 0)
    assert collected(outputs_then(None, ok)) == [ok]
    with caplog.at_level("WARNING", logger="switchyard.upstream"), pytest.raises(GatewayError) as aborted:
        collected(outputs_then(None, TokenOutput("r", 0, [], None, True, "abort", 3, 0)))
    assert "backend nat failed: the engine aborted the request (shutting down?)" in caplog.text
    assert (aborted.value.status, aborted.value.code) == (503, "upstream_error")
    assert aborted.value.message.endswith("failed: the engine aborted the request (shutting down?)")
    for kind, param in (("chat", "messages"), ("completion", "prompt")):
        with pytest.raises(GatewayError) as too_long:
            collected(outputs_then(ContextLengthError("too long for it"), ok), kind)
        assert (too_long.value.message, too_long.value.param) == ("too long for it", param)
        assert too_long.value.code == "context_length_exceeded"
    with pytest.raises(GatewayError) as bad:
        collected(outputs_then(ValueError("bad value")))
    assert (bad.value.status, bad.value.message, bad.value.code) == (400, "bad value", None)
    mine = GatewayError(429, "busy")
    with pytest.raises(GatewayError) as passed:
        collected(outputs_then(mine))
    assert passed.value is mine
    with caplog.at_level("WARNING", logger="switchyard.upstream"), pytest.raises(GatewayError) as broken:
        collected(outputs_then(RuntimeError("boom")))
    assert (broken.value.status, broken.value.code) == (500, "upstream_error")
    assert broken.value.message.endswith("failed: the engine failed")
    assert "backend nat failed: the engine failed (RuntimeError('boom'))" in caplog.text


def test_which_tool_choices_force_calls() -> None:
    assert _forces_tool_calls(GenerationRequest("r", "m", tool_choice="required"))
    assert _forces_tool_calls(GenerationRequest("r", "m", tool_choice={"type": "function"}))
    assert not any(_forces_tool_calls(GenerationRequest("r", "m", tool_choice=c)) for c in ("auto", "none", None))
