"""Each runtime adapter against its wire-faithful simulator, through a real gateway
process, with the official `openai` client: what a tenant sees must be the same
OpenAI dialect whichever runtime answers.

Faults are asked for with the simulators' prompt markers (`[[sim:...]]`, see
simulators/faults.py), which the gateway forwards verbatim.
"""

from __future__ import annotations

import importlib
import json
import time

import openai
import pytest

from adapters.base import SAMPLING_PARAMETERS
from gateway.backends.backend_set import ADAPTER_CLASSES
from simulators.testing import start_simulator
from tests.adapters.wire_samples import PARAMETER_VALUES, parameter_on_the_wire
from tests.adapters.wire_samples import WEATHER_TOOLS as TOOLS
from tests.procs import start_gateway

# kind -> (adapter, simulator flags, backend options)
STACKS = {
    "vllm": (
        "vllm",
        {"enable_auto_tool_choice": True, "tool_call_parser": "hermes", "enable_prompt_tokens_details": True},
        {"prompt_tokens_details": True},
    ),
    "sglang": (
        "sglang",
        {"tool_call_parser": "qwen25", "enable_cache_report": True, "enable_metrics": True},
        {"cache_report": True},
    ),
    "trtllm": ("trtllm", {"tool_parser": "qwen3", "max_num_tokens": 1024}, {}),
    "tgi": ("tgi", {"tgi_version": "3.3"}, {}),
    "tgi-3.1": ("tgi", {"tgi_version": "3.1"}, {}),
}


class Stack:
    def __init__(self, kind: str, sim, gateway) -> None:
        self.kind = kind
        self.sim = sim
        self.gateway = gateway
        self.client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=30)


# TGI before 3.2 differs only in tool-call shapes, but its whole stack is cheap (about
# 3 s for all of its tests here), so it runs in the default tier with the others.
@pytest.fixture(scope="module", params=list(STACKS))
def stack(request, module_tmp):
    adapter, flags, options = STACKS[request.param]
    # Both processes start at once: the gateway does not need the runtime to boot.
    sim = start_simulator(
        adapter, wait=False, model_name="tiny", output_tokens=6, itl_ms=1, max_model_len=1024, **flags
    )
    backend = {
        "name": f"{request.param}-1",
        "adapter": adapter,
        "url": sim.url,
        "served_model": "tiny",
        "options": options,
    }
    # m-drop: the same backend, dropping the parameters its runtime rejects
    config = {"models": {"m": {"backends": [backend]}, "m-drop": {"backends": [backend], "unsupported_params": "drop"}}}
    try:
        gateway = start_gateway(module_tmp, config)
        sim.wait_ready()
    except Exception:
        sim.stop()
        raise
    yield Stack(request.param, sim, gateway)
    gateway.stop()
    sim.stop()


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_non_stream(stack):
    resp = stack.client.chat.completions.create(model="m", messages=ask("hello there"), max_tokens=5)
    choice = resp.choices[0]
    assert resp.id.startswith("chatcmpl-") and resp.model == "m" and resp.object == "chat.completion"
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert resp.usage.prompt_tokens > 0 and 0 < resp.usage.completion_tokens <= 6


def test_stream_one_finish_and_usage_last(stack):
    chunks = list(
        stack.client.chat.completions.create(
            model="m", messages=ask("hello"), stream=True, stream_options={"include_usage": True}
        )
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(finishes) == 1 and finishes[0] in ("stop", "length")
    assert text and len({c.id for c in chunks}) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0 and not chunks[-1].choices
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:] if c.choices)


def test_stream_without_include_usage_has_no_usage(stack):
    chunks = list(stack.client.chat.completions.create(model="m", messages=ask("hello"), stream=True))
    assert all(c.usage is None for c in chunks)


def test_tool_call_non_stream(stack):
    resp = stack.client.chat.completions.create(
        model="m", messages=ask("weather in Paris? [[sim:tool_call]]"), tools=TOOLS
    )
    choice = resp.choices[0]
    calls = choice.message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and calls[0].type == "function"
    assert calls[0].id and calls[0].id not in ("0", "")
    assert isinstance(json.loads(calls[0].function.arguments), dict)
    assert choice.finish_reason == "tool_calls"
    again = stack.client.chat.completions.create(model="m", messages=ask("again [[sim:tool_call]]"), tools=TOOLS)
    assert again.choices[0].message.tool_calls[0].id != calls[0].id


def test_tool_call_stream(stack):
    chunks = list(
        stack.client.chat.completions.create(
            model="m", messages=ask("weather? [[sim:tool_call]]"), tools=TOOLS, stream=True
        )
    )
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    ids = [p.id for p in pieces if p.id]
    names = [p.function.name for p in pieces if p.function and p.function.name]
    args = "".join(p.function.arguments or "" for p in pieces if p.function)
    assert len(ids) == 1 and ids[0] not in ("0", "") and names == ["get_weather"]
    assert isinstance(json.loads(args), dict)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


def test_cached_tokens_reported_where_the_runtime_gives_them(stack):
    resp = stack.client.chat.completions.create(model="m", messages=ask("cache me please"), max_tokens=3)
    details = resp.usage.prompt_tokens_details
    if stack.kind.startswith("tgi"):
        assert details is None or details.cached_tokens in (None, 0)
    else:
        assert details is not None and isinstance(details.cached_tokens, int)


def test_context_length_exceeded(stack):
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            r = stack.client.chat.completions.create(
                model="m", messages=ask("long [[sim:prompt_tokens=5000]]"), stream=stream
            )
            if stream:
                list(r)
        assert info.value.status_code == 400 and info.value.code == "context_length_exceeded", info.value.body


def test_a_legacy_completion_too_long_is_about_the_prompt(stack):
    # whatever the runtime's own words, the field to shorten on /v1/completions is `prompt`
    with pytest.raises(openai.BadRequestError) as info:
        stack.client.completions.create(model="m", prompt="long [[sim:prompt_tokens=5000]]", max_tokens=4)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "prompt"), info.value.body


def test_in_stream_error_becomes_an_error_event(stack):
    stream = stack.client.chat.completions.create(model="m", messages=ask("go [[sim:error_after=2]]"), stream=True)
    with pytest.raises(openai.APIError) as info:
        for _ in stream:
            pass
    # after the first event a failure is the backend's, whatever the runtime called it
    # (SGLang says 400 BadRequestError, TRT-LLM cuts the connection, TGI says 422)
    assert (info.value.type, info.value.code) == ("server_error", "upstream_error"), info.value.body


def test_cut_connection_becomes_an_error_event(stack):
    stream = stack.client.chat.completions.create(model="m", messages=ask("go [[sim:cut_after=2]]"), stream=True)
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass


def test_stream_without_done_is_not_taken_for_complete(stack):
    # A runtime that finished every choice and only forgot [DONE] gave a whole
    # answer; one that stopped early did not. The simulator's no_done keeps
    # the finish, so the answer is complete and must arrive intact.
    chunks = list(stack.client.chat.completions.create(model="m", messages=ask("go [[sim:no_done]]"), stream=True))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1


def test_runtime_failure_status_is_openai_shaped(stack):
    with pytest.raises(openai.APIStatusError) as info:
        stack.client.chat.completions.create(model="m", messages=ask("x [[sim:status=500]]"))
    assert info.value.status_code in (502, 503)
    assert isinstance(info.value.body, dict) and info.value.body.get("message")


def test_n_greater_than_one(stack):
    resp = stack.client.chat.completions.create(model="m", messages=ask("two please"), n=2, max_tokens=4)
    assert sorted(c.index for c in resp.choices) == [0, 1]
    assert all(c.finish_reason in ("stop", "length") for c in resp.choices)


def test_cancellation_reaches_the_runtime(stack):
    stack.sim.reset()
    stream = stack.client.chat.completions.create(
        model="m", messages=ask("long one [[sim:output_tokens=400,itl_ms=20]]"), stream=True
    )
    got = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got += 1
            if got == 2:
                break
    stream.close()
    deadline = time.monotonic() + 6
    stats = stack.sim.stats()
    while time.monotonic() < deadline and stats["aborted"] < 1:
        time.sleep(0.1)
        stats = stack.sim.stats()
    assert stats["aborted"] >= 1, stats
    assert stats["completed"] == 0
    if stack.kind == "sglang":
        # SGLang notices a closed connection only by polling: the adapter names
        # the request in POST /abort_request, with the rid it sent.
        bodies = {r["path"]: r["body"] for r in stats["last_requests"]}
        assert bodies["/abort_request"] == {"rid": bodies["/v1/chat/completions"]["rid"]}
        # and it is that call, well before SGLang's own 2 s disconnect check, that ended it
        assert [a["how"] for a in stats["aborts"]] == ["abort_request"]


def test_openai_defaults_every_runtime_accepts(stack):
    # TGI rejects top_p 1.0 (422), reads presence_penalty 0 as repetition 2.0 and
    # wants `stop` as an array; OpenAI clients send all three.
    resp = stack.client.chat.completions.create(
        model="m", messages=ask("defaults"), top_p=1.0, presence_penalty=0, stop="zzz", max_tokens=4, temperature=0.7
    )
    assert resp.choices[0].finish_reason in ("stop", "length")
    body = stack.sim.stats()["last_requests"][-1]["body"]
    if stack.kind.startswith("tgi"):
        assert "top_p" not in body and "presence_penalty" not in body and body["stop"] == ["zzz"]


def test_what_the_runtime_cannot_do_is_a_400_naming_it(stack):
    if not stack.kind.startswith("tgi"):
        resp = stack.client.chat.completions.create(
            model="m", messages=ask("penalty"), presence_penalty=0.5, max_tokens=3
        )
        assert resp.choices[0].finish_reason in ("stop", "length")
        return
    with pytest.raises(openai.BadRequestError) as info:
        stack.client.chat.completions.create(model="m", messages=ask("penalty"), presence_penalty=0.5)
    assert "TGI" in info.value.message and info.value.param == "presence_penalty"


def test_overload_is_a_retryable_status(stack):
    # vLLM (queue limits) and SGLang answer 503, TGI 429; TRT-LLM has no admission
    # control and queues. Whatever the runtime's shape, the tenant gets 429 or 503.
    for stream in (False, True):
        try:
            r = stack.client.chat.completions.create(
                model="m", messages=ask("busy [[sim:overloaded]]"), stream=stream, max_tokens=3
            )
            if stream:
                list(r)
        except openai.APIStatusError as exc:
            assert exc.status_code in (429, 503), exc
            assert stack.kind != "trtllm"
        else:
            assert stack.kind == "trtllm"


def test_parameter_table_through_the_gateway(stack):
    """docs/adapters.md "Request parameters per runtime", through a gateway: what the
    runtime passes reaches the simulator as written; what it rejects is a 400 naming
    the backend, or dropped, named in x-switchyard-dropped-params and the access log."""
    module, name = ADAPTER_CLASSES[STACKS[stack.kind][0]]
    table = getattr(importlib.import_module(module), name).parameters
    by_support = {kind: [p for p in SAMPLING_PARAMETERS if table.support(p) == kind] for kind in ("pass", "reject")}
    body = {p: parameter_on_the_wire(p) for p in by_support["pass"]}
    if "logprobs" in body:
        body["top_logprobs"] = 2
    rejected = {p: parameter_on_the_wire(p) for p in by_support["reject"]}
    assert set(PARAMETER_VALUES) == set(SAMPLING_PARAMETERS)

    stack.client.chat.completions.create(model="m", messages=ask("hello"), extra_body=body)
    sent = stack.sim.stats()["last_requests"][-1]["body"]
    assert {p: sent.get(p) for p in by_support["pass"]} == {p: body[p] for p in by_support["pass"]}

    if rejected:
        with pytest.raises(openai.BadRequestError) as info:
            stack.client.chat.completions.create(model="m", messages=ask("hello"), extra_body={**body, **rejected})
        assert info.value.code == "unsupported_by_backend" and info.value.param == by_support["reject"][0]
        assert f"{stack.kind}-1" not in info.value.message  # a tenant never reads a backend's name
        assert all(p in info.value.message for p in rejected)

    raw = stack.client.chat.completions.with_raw_response.create(
        model="m-drop", messages=ask("hello"), extra_body={**body, **rejected}
    )
    raw.parse()
    assert raw.headers.get("x-switchyard-dropped-params") == (",".join(rejected) or None)
    sent = stack.sim.stats()["last_requests"][-1]["body"]
    assert not set(rejected) & set(sent) and sent.get("max_tokens") == PARAMETER_VALUES["max_tokens"]
    if rejected:
        # The access-log line is written as the response ends: it may trail the client's read.
        deadline = time.monotonic() + 10
        while not (logged := [ln for ln in stack.gateway.log().splitlines() if '"dropped_params"' in ln]):
            assert time.monotonic() < deadline, "no access-log line with dropped_params"
            time.sleep(0.05)
        assert json.loads(logged[-1])["dropped_params"] == list(rejected)
