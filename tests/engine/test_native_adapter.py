"""The native adapter end to end on the tiny model: real engine, real tokenizer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.base import (
    Finish,
    GenerationRequest,
    LogprobsDelta,
    SamplingParams,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from adapters.errors import GatewayError
from adapters.native import NativeAdapter
from adapters.native_choice import ChoiceEvents
from engine.llm_engine import TokenOutput
from engine.make_tiny import make_tiny
from engine.text.tokenizer import TextTokenizer
from engine.text.tool_call_stage import ToolCallStage
from tests.native_adapters import started_native

MAX_MODEL_LEN = 256
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("native") / "tiny-chat")


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    yield from started_native(model_dir, num_blocks=96, block_size=16, max_model_len=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> TextTokenizer:
    return TextTokenizer(model_dir)


def chat(messages=None, request_id: str = "r", **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 24)
    return GenerationRequest(
        request_id,
        "tiny-chat",
        messages=messages or [{"role": "user", "content": "Hello"}],
        sampling=SamplingParams(**sampling),
    )


def completion(prompt, **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 24)
    return GenerationRequest("c", "tiny-chat", kind="completion", prompt=prompt, sampling=SamplingParams(**sampling))


async def collect(adapter: NativeAdapter, request: GenerationRequest) -> list:
    return [event async for event in adapter.generate(request)]


def texts(events: list, n: int = 1) -> list[str]:
    out = [""] * n
    for e in events:
        if isinstance(e, TextDelta):
            out[e.index] += e.text
    return out


def finishes(events: list) -> dict[int, str]:
    seen: dict[int, str] = {}
    for e in events:
        if isinstance(e, Finish):
            assert e.index not in seen, "one Finish per choice"
            seen[e.index] = e.reason
    return seen


def assert_engine_idle(adapter: NativeAdapter) -> None:
    stats = adapter.async_engine.stats()
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.num_free_blocks == stats.num_blocks  # nothing leaked
    engine = adapter.async_engine.engine
    assert not engine.requests
    engine.check_integrity()  # safe: with no requests the step thread does not touch the engine


async def test_greedy_is_deterministic_and_text_matches_tokens(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    first = await collect(adapter, chat(logprobs=True, top_logprobs=3))
    second = await collect(adapter, chat(logprobs=True, top_logprobs=3))
    assert texts(first) == texts(second)
    assert finishes(first) == {0: "length"}
    assert isinstance(first[-1], Usage) and sum(isinstance(e, Usage) for e in first) == 1
    logprobs = [lp for e in first if isinstance(e, (TextDelta, LogprobsDelta)) for lp in (e.logprobs or [])]
    assert len(logprobs) == 24 == first[-1].completion_tokens
    assert all(lp.logprob <= 0 and len(lp.top) == 3 for lp in logprobs)
    assert all(lp.top[0].logprob >= lp.top[1].logprob >= lp.top[2].logprob for lp in logprobs)
    # Greedy: the chosen token is the most likely one.
    assert all(lp.logprob == pytest.approx(lp.top[0].logprob) for lp in logprobs)
    joined = b"".join(bytes(lp.bytes) for lp in logprobs).decode("utf-8", errors="replace")
    assert texts(first)[0] == joined


async def test_usage_counts_the_rendered_prompt(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    request = chat(messages, max_tokens=5)
    request.tools = TOOLS
    events = await collect(adapter, request)
    usage = events[-1]
    rendered = tok.apply_chat_template(messages, tools=TOOLS)
    assert "get_weather" in rendered
    assert usage.prompt_tokens == len(tok.encode(rendered))
    assert usage.completion_tokens == 5
    # The same prompt again hits the prefix cache (all full blocks but the last token's).
    again = await collect(adapter, request)
    assert again[-1].cached_tokens >= (usage.prompt_tokens - 1) // 16 * 16 - 16
    assert again[-1].cached_tokens > 0


async def test_completion_prompt_as_text_and_as_ids(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    by_text = await collect(adapter, completion("The weather in Paris is"))
    by_ids = await collect(adapter, completion(tok.encode("The weather in Paris is")))
    assert texts(by_text) == texts(by_ids)
    assert by_text[-1].prompt_tokens == len(tok.encode("The weather in Paris is"))
    echo = completion("Once upon", max_tokens=3)
    echo.echo = True
    events = await collect(adapter, echo)
    assert texts(events)[0].startswith("Once upon")


async def test_n_choices_with_a_seed(adapter: NativeAdapter) -> None:
    request = chat(n=3, temperature=1.0, seed=7, max_tokens=12)
    events = await collect(adapter, request)
    assert finishes(events) == {0: "length", 1: "length", 2: "length"}
    assert events[-1].completion_tokens == 36
    outs = texts(events, 3)
    assert len(set(outs)) > 1  # sampled choices differ...
    again = await collect(adapter, chat(n=3, temperature=1.0, seed=7, max_tokens=12))
    assert texts(again, 3) == outs  # ...and the seed reproduces them
    assert_engine_idle(adapter)


async def test_stop_string_across_token_boundary(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    base = await collect(adapter, chat(logprobs=True, max_tokens=24))
    tokens = [lp for e in base if isinstance(e, TextDelta) for lp in (e.logprobs or [])]
    # Choose a stop string made of the end of one token and the start of the next, both plain text.
    full = texts(base)[0]
    stop = None
    for a, b in zip(tokens, tokens[1:]):
        if (
            a.token.isprintable()
            and b.token.isprintable()
            and "\ufffd" not in a.token + b.token
            and len(a.token) >= 1
            and len(b.token) >= 1
        ):
            stop = a.token[-1:] + b.token[:1]
            break
    assert stop is not None, full
    events = await collect(adapter, chat(stop=[stop], max_tokens=24))
    cut = full[: full.index(stop)]
    assert texts(events)[0] == cut
    assert finishes(events) == {0: "stop"}
    streamed = ""
    for e in events:  # no prefix of the stop string ever appeared at the end of the stream early
        if isinstance(e, TextDelta):
            streamed += e.text
            assert stop not in streamed
    assert events[-1].completion_tokens < 24
    assert_engine_idle(adapter)


async def test_stop_string_on_one_of_several_choices(adapter: NativeAdapter) -> None:
    base = await collect(adapter, chat(n=2, temperature=1.0, seed=3, max_tokens=16))
    first = texts(base, 2)[0]
    stop = first[4:6]
    assert len(stop) == 2
    events = await collect(adapter, chat(n=2, temperature=1.0, seed=3, max_tokens=16, stop=[stop]))
    outs = texts(events, 2)
    assert outs[0] == first[: first.index(stop)]
    assert finishes(events)[0] == "stop"
    assert set(finishes(events)) == {0, 1}
    assert_engine_idle(adapter)


async def test_stop_token_id_ends_without_its_text(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    base = await collect(adapter, chat(logprobs=True, max_tokens=10))
    tokens = [lp for e in base if isinstance(e, (TextDelta, LogprobsDelta)) for lp in (e.logprobs or [])]
    stop_id = next(
        i for i in range(tok.vocab_size) if tok.token_bytes(i) == bytes(tokens[3].bytes) and i not in tok.special_ids
    )
    events = await collect(adapter, chat(stop_token_ids=[stop_id], max_tokens=10))
    assert finishes(events) == {0: "stop"}
    assert events[-1].completion_tokens <= 4
    prefix = b"".join(bytes(t.bytes) for t in tokens[: events[-1].completion_tokens - 1])
    assert texts(events)[0] == prefix.decode("utf-8", errors="replace")


async def test_closing_the_stream_aborts_and_frees_blocks(adapter: NativeAdapter) -> None:
    stream = adapter.generate(chat(max_tokens=200, ignore_eos=True))
    for _ in range(3):
        assert not isinstance(await stream.__anext__(), (Finish, Usage))
    assert adapter.async_engine.engine.requests  # still generating
    await stream.aclose()
    assert_engine_idle(adapter)


async def test_cancelling_the_consumer_aborts(adapter: NativeAdapter) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in adapter.generate(chat(max_tokens=200, ignore_eos=True)):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_engine_idle(adapter)


async def test_an_engine_side_abort_ends_the_stream_with_an_error(adapter: NativeAdapter) -> None:
    stream = adapter.generate(chat(max_tokens=200, ignore_eos=True))
    await stream.__anext__()
    (engine_id,) = adapter.async_engine.engine.requests
    adapter.async_engine.abort(engine_id)
    with pytest.raises(GatewayError) as info:
        while True:
            await stream.__anext__()
    assert info.value.status == 503
    assert_engine_idle(adapter)


async def test_context_length_errors(adapter: NativeAdapter) -> None:
    long_prompt = "hello " * 400
    with pytest.raises(GatewayError) as info:
        await collect(adapter, chat([{"role": "user", "content": long_prompt}], max_tokens=None))
    assert info.value.status == 400 and info.value.code == "context_length_exceeded"
    with pytest.raises(GatewayError) as info:
        await collect(adapter, chat(max_tokens=MAX_MODEL_LEN))
    assert info.value.code == "context_length_exceeded"
    # max_tokens left out: generation may use the rest of the context.
    events = await collect(adapter, completion("hi", max_tokens=None, ignore_eos=True))
    assert events[-1].prompt_tokens + events[-1].completion_tokens == MAX_MODEL_LEN
    assert finishes(events) == {0: "length"}


@pytest.mark.parametrize(
    "request_factory",
    [
        lambda: chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
        lambda: chat(logit_bias={100000: 5.0}),
        lambda: chat(stop_token_ids=[-1]),
        lambda: chat(top_p=0.0),
        lambda: chat(min_tokens=50, max_tokens=10),
        lambda: completion([1, 2, 999999]),
        lambda: completion(""),
        lambda: completion(None),
    ],
)
async def test_bad_requests_are_400(adapter: NativeAdapter, request_factory) -> None:
    with pytest.raises(GatewayError) as info:
        await collect(adapter, request_factory())
    assert info.value.status == 400
    assert_engine_idle(adapter)


async def test_logit_bias_forces_a_token(adapter: NativeAdapter, tok: TextTokenizer) -> None:
    forced = tok.token_to_id("weather")
    assert forced is not None
    events = await collect(adapter, chat(logit_bias={forced: 100.0}, max_tokens=4))
    assert texts(events)[0] == "weather" * 4


async def test_tool_choice_none_keeps_text(adapter: NativeAdapter) -> None:
    request = chat(max_tokens=8)
    request.tools, request.tool_choice = TOOLS, "none"
    events = await collect(adapter, request)
    assert not any(isinstance(e, ToolCallDelta) for e in events)


async def test_health_models_load_and_capabilities(adapter: NativeAdapter, tmp_path: Path) -> None:
    assert (await adapter.health()).ok
    assert await adapter.models() == ["tiny-chat"]
    load = await adapter.load()
    assert load.running == 0 and load.waiting == 0 and 0.0 <= load.kv_usage <= 1.0
    caps = adapter.capabilities
    # structured_output belongs to the structured-output work (engine/structured/), not asserted here.
    assert caps.tools and caps.parallel_tool_calls and caps.n and caps.logprobs
    assert caps.cached_tokens and caps.explicit_abort and caps.completions
    broken = NativeAdapter("bad", str(tmp_path))
    health = await broken.health()
    assert not health.ok and "config.json" in health.detail
    assert await NativeAdapter("b", "builtin:tiny").models() == ["tiny"]
    assert await NativeAdapter("s", str(tmp_path), served_name="alias").models() == ["alias"]


# ---- the adapter's per-choice pipeline on scripted engine output ---------------------


def scripted(tok: TextTokenizer, text: str, finish_reason: str = "stop", end_with_eos: bool = True) -> list:
    """TokenOutputs a model would produce for `text`, one token per step."""
    ids = tok.encode(text) + ([tok.token_to_id("<|im_end|>")] if end_with_eos else [])
    return [
        TokenOutput("r", 0, [t], None, i == len(ids) - 1, finish_reason if i == len(ids) - 1 else None, 5, 0)
        for i, t in enumerate(ids)
    ]


def run_choice(tok: TextTokenizer, outputs: list, *, stop=(), parallel=True, tools=True) -> list:
    choice = ChoiceEvents(
        0,
        tok,
        list(stop),
        [],
        {tok.token_to_id("<|im_end|>")},
        ToolCallStage(forced=False, tool_names={"get_weather", "now"}, parallel_tool_calls=parallel) if tools else None,
    )
    events = []
    for out in outputs:
        events += choice.step(out, want_logprobs=False)
        if choice.done:
            break
    return events


def tool_calls(events: list) -> list[dict]:
    calls: dict[int, dict] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            call = calls.setdefault(e.tool_index, {"id": None, "name": None, "arguments": ""})
            assert not (call["name"] and e.name), "name sent once"
            call["id"] = call["id"] or e.id
            call["name"] = call["name"] or e.name
            call["arguments"] += e.arguments
    return [calls[i] for i in sorted(calls)]


TWO_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
)


def test_scripted_tool_calls_finish_with_tool_calls(tok: TextTokenizer) -> None:
    events = run_choice(tok, scripted(tok, TWO_CALLS))
    calls = tool_calls(events)
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Paris"}'), ("now", "{}")]
    assert all(c["id"] is None for c in calls)  # the engine makes no ids: the gateway gives each call its own
    assert texts(events)[0] == ""
    assert finishes(events) == {0: "tool_calls"}


def test_scripted_single_tool_call_when_parallel_is_off(tok: TextTokenizer) -> None:
    events = run_choice(tok, scripted(tok, TWO_CALLS), parallel=False)
    assert [c["name"] for c in tool_calls(events)] == ["get_weather"]
    assert finishes(events) == {0: "tool_calls"}


def test_scripted_malformed_call_is_dropped_and_logged(tok: TextTokenizer, caplog: pytest.LogCaptureFixture) -> None:
    # Neither its markup in content nor a broken call: the text around it stays, the call is logged.
    text = "Sure <tool_call>{oops}</tool_call> done"
    with caplog.at_level("WARNING", logger="adapters.native"):
        events = run_choice(tok, scripted(tok, text))
    assert texts(events)[0] == "Sure  done" and not tool_calls(events)
    assert finishes(events) == {0: "stop"}
    assert "<tool_call>{oops}</tool_call>" in caplog.text and "not JSON" in caplog.text


def test_scripted_calls_cut_by_max_tokens_finish_with_length(tok: TextTokenizer) -> None:
    # A complete call followed by a cut one: the complete one stands, `length` says the answer was cut.
    cut = TWO_CALLS[: TWO_CALLS.rindex('"now"') + 3]
    events = run_choice(tok, scripted(tok, cut, finish_reason="length", end_with_eos=False))
    assert [(c["name"], c["arguments"]) for c in tool_calls(events)] == [("get_weather", '{"city": "Paris"}')]
    assert texts(events)[0] == ""
    assert finishes(events) == {0: "length"}


def test_scripted_without_tools_the_tags_are_text(tok: TextTokenizer) -> None:
    events = run_choice(tok, scripted(tok, TWO_CALLS), tools=False)
    assert texts(events)[0] == TWO_CALLS
    assert finishes(events) == {0: "stop"}


def test_scripted_stop_string_inside_multibyte_text(tok: TextTokenizer) -> None:
    text = "caf\u00e9 \U0001f600 end"
    events = run_choice(
        tok, scripted(tok, text, finish_reason="length", end_with_eos=False), stop=["\U0001f600"], tools=False
    )
    assert texts(events)[0] == "caf\u00e9 "
    assert finishes(events) == {0: "stop"}


async def test_default_max_tokens_fits_a_small_kv_cache(model_dir: Path) -> None:
    small = NativeAdapter(
        "small", str(model_dir), engine_options={"num_blocks": 6, "block_size": 16, "max_model_len": MAX_MODEL_LEN}
    )
    try:
        events = await collect(small, completion("hi", max_tokens=None, ignore_eos=True))
        assert events[-1].prompt_tokens + events[-1].completion_tokens == 6 * 16
        assert finishes(events) == {0: "length"}
    finally:
        await small.aclose()


@pytest.mark.parametrize("reason", ["error", "abort_later", None])
def test_an_engine_finish_outside_stop_and_length_is_an_upstream_error_not_a_stop(tok, reason):
    """A finish reason the adapter does not know is a defect somewhere below it: the
    client gets an upstream error, never a normal-looking `stop`."""
    outputs = scripted(tok, "Hello", finish_reason=reason, end_with_eos=False)
    with pytest.raises(GatewayError) as info:
        run_choice(tok, outputs, tools=False)
    assert info.value.status == 502 and info.value.code == "upstream_error"


async def test_a_legacy_completion_too_long_names_the_prompt(adapter: NativeAdapter) -> None:
    # legacy completions have a `prompt`, not `messages`: the error says which field to shorten
    with pytest.raises(GatewayError) as info:
        await collect(adapter, completion("hello " * 400, max_tokens=None))
    assert (info.value.param, info.value.code) == ("prompt", "context_length_exceeded")
    assert "your prompt" in info.value.message and "messages" not in info.value.message
    with pytest.raises(GatewayError) as info:
        await collect(adapter, completion("hi", max_tokens=MAX_MODEL_LEN))
    assert info.value.param == "prompt" and "in the prompt" in info.value.message
    with pytest.raises(GatewayError) as info:
        await collect(adapter, chat([{"role": "user", "content": "hello " * 400}], max_tokens=None))
    assert info.value.param == "messages" and "your messages" in info.value.message
