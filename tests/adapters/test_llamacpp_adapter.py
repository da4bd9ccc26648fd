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
