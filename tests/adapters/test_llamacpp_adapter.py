"""LlamaCppDialect against hand-written llama.cpp wire samples, each in the shape
llama.cpp's server code writes (docs/runtimes.md §6); what the real server wrote is
replayed by test_recorded_llamacpp.py. The replay server stands in for llama-server."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from adapters.base import ErrorEvent, Finish, SamplingParams, TextDelta, TokenLogprob, TopLogprob
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.llamacpp import LlamaCppDialect, TopLogprobsCut
from adapters.llamacpp_load import parse_slots
from adapters.oneshot import TokenizeRequest
from tests.adapters.wire_samples import chat, collect_closed, delivered_closed, json_response, refusal, sse, streamed
from tests.procs import start_gateway


def chunk(delta: dict, finish: str | None = None, logprobs: dict | None = None) -> dict:
    choice = {"finish_reason": finish, "index": 0, "delta": delta}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"choices": [choice], "created": 1, "id": "chatcmpl-x", "model": "tiny", "object": "chat.completion.chunk"}


def alternatives(n: int) -> list[dict]:
    return [{"id": i, "token": f"t{i}", "bytes": [116], "logprob": -float(i)} for i in range(n)]


def adapter(url: str) -> HTTPAdapter:
    return HTTPAdapter(LlamaCppDialect, "lc-1", url, "tiny")


@pytest.mark.parametrize(("asked", "sent", "kept"), [(0, 1, 0), (2, 2, 2)])
async def test_logprobs_ask_at_least_one_alternative_and_keep_what_was_asked(replay, asked, sent, kept) -> None:
    # llama.cpp computes no probabilities for top_logprobs 0, and 20 for logprobs: true alone.
    lp = {"content": [{"id": 5, "token": "Ri", "bytes": [82, 105], "logprob": -0.5, "top_logprobs": alternatives(20)}]}
    replay.reply(
        json_response(
            200,
            {
                "choices": [
                    {
                        "finish_reason": "length",
                        "index": 0,
                        "logprobs": lp,
                        "message": {"role": "assistant", "content": "Ri"},
                    }
                ]
            },
        )
    )
    request = chat(stream=False, sampling=SamplingParams(logprobs=True, top_logprobs=asked, max_tokens=1))
    events = await collect_closed(adapter(replay.url), request)
    assert replay.bodies("/v1/chat/completions")[-1]["top_logprobs"] == sent
    (text,) = [e for e in events if isinstance(e, TextDelta)]
    assert text.logprobs is not None and len(text.logprobs[0].top) == kept


def test_the_lowest_float_becomes_openais_floor() -> None:
    item = TokenLogprob("a", -3.4e38, None, [TopLogprob("a", -3.4e38), TopLogprob("b", -1.0)])
    TopLogprobsCut(1).feed(TextDelta(0, "a", [item]))
    assert item.logprob == -9999.0 and [(t.token, t.logprob) for t in item.top] == [("a", -9999.0)]


async def test_completion_logprobs_are_read_from_llamacpps_chat_shape(replay) -> None:
    lp = {
        "content": [
            {
                "id": 5,
                "token": " sea",
                "bytes": [32],
                "logprob": -0.25,
                "top_logprobs": [{"id": 5, "token": " sea", "bytes": [32], "logprob": -0.25}],
            }
        ]
    }
    body = {
        "choices": [{"text": " sea", "index": 0, "logprobs": lp, "finish_reason": "length"}],
        "object": "text_completion",
        "usage": {"completion_tokens": 1, "prompt_tokens": 3, "total_tokens": 4},
    }
    replay.reply(json_response(200, body), route="POST /v1/completions")
    request = chat(
        stream=False,
        messages=None,
        kind="completion",
        prompt="Rivers",
        sampling=SamplingParams(logprobs=True, top_logprobs=1, max_tokens=1),
    )
    events = await collect_closed(adapter(replay.url), request)
    (text,) = [e for e in events if isinstance(e, TextDelta)]
    assert text.logprobs == [TokenLogprob(" sea", -0.25, None, [TopLogprob(" sea", -0.25)])]
    assert replay.bodies("/v1/completions")[-1]["logprobs"] == 1


async def test_legacy_completions_stop_at_16_tokens_unless_told(replay) -> None:
    body = {"choices": [{"text": "x", "index": 0, "finish_reason": "length"}], "object": "text_completion"}
    replay.reply(json_response(200, body), route="POST /v1/completions")
    await collect_closed(adapter(replay.url), chat(stream=False, messages=None, kind="completion", prompt="a"))
    assert replay.bodies("/v1/completions")[-1]["max_tokens"] == 16


async def test_an_error_mid_stream_is_a_failure_not_a_finish(replay) -> None:
    # A decode failure after the first token: an `error` event and no [DONE] (server-context.cpp).
    error = {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}
    replay.reply(streamed(sse(chunk({"role": "assistant", "content": "Ri"})), sse(error)))
    events = await collect_closed(adapter(replay.url), chat())
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.status == 502
    assert not [e for e in events if isinstance(e, Finish)]


@pytest.mark.parametrize("stream", [False, True])
async def test_context_overflow_is_context_length_exceeded(replay, stream) -> None:
    # Refused before the first result, so an HTTP error even for a stream.
    body = {
        "error": {
            "code": 400,
            "message": "request (700 tokens) exceeds the available context size (256 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 700,
            "n_ctx": 256,
        }
    }
    replay.reply(json_response(400, body))
    err = await refusal(adapter(replay.url), chat(stream=stream))
    assert (err.status, err.code) == (400, "context_length_exceeded")


async def test_n_is_never_sent_and_parameters_llamacpp_lacks_are_refused(replay) -> None:
    replay.reply(streamed(sse(chunk({"content": "a"}, "stop")), sse("[DONE]")))
    await delivered_closed(adapter(replay.url), chat(sampling=SamplingParams(n=1, repetition_penalty=1.1)))
    sent = replay.bodies("/v1/chat/completions")[-1]
    assert "n" not in sent and sent["repeat_penalty"] == 1.1 and "repetition_penalty" not in sent
    err = await refusal(adapter(replay.url), chat(sampling=SamplingParams(stop_token_ids=[2])))
    assert (err.status, err.code, err.param) == (400, "unsupported_by_backend", "stop_token_ids")


async def test_echo_and_token_strings_are_refused_before_any_call(replay) -> None:
    replay.script({})  # clears the records
    a = adapter(replay.url)
    err = await refusal(a, chat(stream=False, messages=None, kind="completion", prompt="a", echo=True))
    assert err.param == "echo"
    with pytest.raises(GatewayError) as info:
        await a.tokenize(TokenizeRequest("r", "m", prompt="hi", return_token_strs=True))
    assert info.value.param == "return_token_strs"
    await a.aclose()
    assert replay.recorded()["requests"] == []


async def test_messages_are_rendered_by_apply_template_then_tokenized(replay) -> None:
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    replay.script(
        {
            "POST /apply-template": [json_response(200, {"prompt": prompt})],
            "POST /tokenize": [json_response(200, {"tokens": [1, 7, 2]})],
        }
    )
    a = adapter(replay.url)
    messages = [{"role": "user", "content": "hi"}]
    result = await a.tokenize(TokenizeRequest("r", "m", messages=messages))
    await a.aclose()
    assert result.tokens == [1, 7, 2]
    assert replay.bodies("/apply-template") == [{"messages": messages, "add_generation_prompt": True}]
    # The template adds its own markers: no BOS on top, and its markers read as special tokens.
    assert replay.bodies("/tokenize") == [{"content": prompt, "add_special": False, "parse_special": True}]


def test_slots_give_busy_slots_and_the_kv_they_hold() -> None:
    slots = [
        {"id": 0, "n_ctx": 256, "is_processing": True, "n_prompt_tokens": 40, "next_token": [{"n_decoded": 24}]},
        {"id": 1, "n_ctx": 256, "is_processing": False, "n_prompt_tokens": 99},
    ]
    assert parse_slots(slots) == (1, 64 / 512)
    assert parse_slots({"error": "x"}) == (None, None)


METRICS = (
    "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 30\n"
    "llamacpp:prompt_tokens_cached_total 10\n"
    "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 3\n"
)


async def test_every_adapter_on_one_server_shares_one_metrics_scrape(replay) -> None:
    # A scrape resets llama.cpp's throughput averages: two adapters (two models served
    # by one server) polling together read /metrics once.
    replay.script(
        {
            "GET /metrics": [{"status": 200, "body": METRICS}],
            "GET /slots": [json_response(200, [])],
            "GET /props": [json_response(200, {})],
        }
    )
    a, b = adapter(replay.url), adapter(replay.url)
    loads = await asyncio.gather(a.load(), b.load())
    await asyncio.gather(a.aclose(), b.aclose())
    assert [(x.running, x.waiting, x.prefix_hit_rate) for x in loads] == [(2, 3, 0.25)] * 2
    scraped = [r for r in replay.recorded()["requests"] if r["path"] == "/metrics"]
    assert len(scraped) == 1


def test_a_clients_conversation_id_never_reaches_llamacpp(replay, tmp_path) -> None:
    # llama.cpp tees a request with X-Conversation-Id into a resumable session that keeps
    # generating after the client left: the gateway must never forward it.
    replay.script(
        {
            "POST /v1/chat/completions": [
                json_response(
                    200,
                    {
                        "choices": [
                            {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": "ok"}}
                        ]
                    },
                )
            ],
            "GET /health": [json_response(200, {"status": "ok"})],
            "GET /metrics": [{"status": 200, "body": METRICS}],
            "GET /slots": [json_response(200, [])],
            "GET /props": [json_response(200, {})],
        }
    )
    backend = {"name": "lc", "adapter": "llamacpp", "url": str(replay.url), "served_model": "tiny"}
    gateway = start_gateway(tmp_path, {"models": {"m": {"backends": [backend]}}})
    try:
        r = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"X-Conversation-Id": "keep-going"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
    finally:
        gateway.stop()
    assert r.status_code == 200, r.text
    (sent,) = [q for q in replay.recorded()["requests"] if q["path"] == "/v1/chat/completions"]
    assert "x-conversation-id" not in sent["headers"] and sent["headers"]["x-request-id"]
    assert orjson.dumps(sent).find(b"keep-going") == -1


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
OTHER_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def props(template: str) -> dict:
    return json_response(
        200, {"default_generation_settings": {"n_ctx": 1024}, "total_slots": 2, "chat_template": template}
    )


async def sent_for(replay, template: str, **request) -> dict:
    """The chat body the adapter sends, once a health probe found the server ready."""
    replay.script(
        {
            "GET /health": [json_response(200, {"status": "ok"})],
            "GET /props": [props(template)],
            "POST /v1/chat/completions": [
                json_response(
                    200,
                    {
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}
                        ]
                    },
                )
            ],
        }
    )
    a = adapter(replay.url)
    assert (await a.health()).ok
    await collect_closed(a, chat(stream=False, **request))
    return replay.bodies("/v1/chat/completions")[-1]


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
async def test_a_forced_tool_choice_opens_the_call_and_ends_after_one(replay, choice) -> None:
    # llama.cpp's grammar lets text come before a forced call, reads no named choice
    # and repeats calls without end; with a <tool_call> template the dialect opens it.
    body = await sent_for(replay, "... <tool_call> ...", tools=[TOOL, OTHER_TOOL], tool_choice=choice)
    assert body["messages"][-1] == {"role": "assistant", "content": "<tool_call>\n"}
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["stop"] == ["</tool_call>"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == (["get_weather"] if isinstance(choice, dict) else ["get_weather", "get_time"])


async def test_no_opener_for_another_template_nor_over_the_clients_own_prefill(replay) -> None:
    body = await sent_for(replay, "{{ messages }}", tools=[TOOL], tool_choice="required")
    assert body["messages"][-1]["role"] == "user" and "stop" not in body
    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: "}]
    body = await sent_for(replay, "<tool_call>", tools=[TOOL], tool_choice="required", messages=prefill)
    assert body["messages"] == prefill  # llama.cpp continues one trailing assistant turn, never two


@pytest.mark.parametrize("choice", [None, "auto", "none"])
async def test_an_unforced_choice_is_sent_as_asked(replay, choice) -> None:
    body = await sent_for(replay, "<tool_call>", tools=[TOOL], tool_choice=choice)
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "stop" not in body


async def test_an_earlier_calls_empty_arguments_are_sent_as_an_empty_object(replay) -> None:
    # llama.cpp parses every call's arguments as JSON: "" would be its 500.
    turns = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
                {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    body = await sent_for(replay, "<tool_call>", tools=[TOOL, OTHER_TOOL], messages=turns)
    calls = body["messages"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ["{}", '{"tz": "UTC"}']
    assert turns[1]["tool_calls"][0]["function"]["arguments"] == ""  # the client's request is left as it was
