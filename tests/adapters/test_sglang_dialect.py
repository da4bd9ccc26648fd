"""adapters/sglang.py's dialect on its own (no server): the capabilities its options
declare, a refused served model read as the deployment's fault, what its /tokenize
cannot do refused by name, and the load from /v1/loads or /metrics as `load_source`
says, with every way /v1/loads can fail."""

from __future__ import annotations

import logging
import time

import pytest

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import GatewayError
from adapters.oneshot import DetokenizeRequest, TokenizeRequest
from adapters.runtime_errors import ParsedError
from adapters.sglang import SGLangDialect, parse_loads

METRICS = (
    'sglang:num_running_reqs{tp_rank="0"} 6\nsglang:num_queue_reqs{tp_rank="0"} 2\n'
    'sglang:token_usage{tp_rank="0"} 0.5\nsglang:cache_hit_rate{tp_rank="0"} 0.25\n'
)
LOADS = b'{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 3, "token_usage": 0.1, "cache_hit_rate": 0.9}]}'


class Endpoints:
    """A Reader answering each path from `answers` ((status, body), or an exception to raise)."""

    base_url = "http://sglang.invalid"

    def __init__(self, **answers) -> None:
        self.answers = {"/v1/loads?include=core" if k == "loads" else "/metrics": v for k, v in answers.items()}
        self.asked: list[str] = []

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        self.asked.append(path)
        answer = self.answers.get(path, (404, b""))
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_capabilities_and_their_defaults() -> None:
    caps = SGLangDialect("b", "m").capabilities
    assert (caps.tools, caps.cached_tokens, caps.explicit_abort, caps.embeddings, caps.tokenize) == (
        True,
        False,
        True,
        False,
        True,
    )
    flipped = SGLangDialect("b", "m", {"tools": False, "cache_report": True, "embeddings": True}).capabilities
    assert (flipped.tools, flipped.cached_tokens, flipped.embeddings) == (False, True, True)


def test_an_unknown_served_model_is_the_deployment_s_fault_and_nothing_else_is_reclassified() -> None:
    d = SGLangDialect("b", "m")
    unknown = ParsedError("The model `m` does not exist.")
    assert d.classify(400, unknown) == 404
    assert d.classify(422, unknown) is None  # only SGLang's 400 says it
    assert d.classify(400, ParsedError("max_tokens must be positive")) is None


def test_tokenize_refuses_what_sglang_cannot_do_by_name() -> None:
    d = SGLangDialect("b", "m")
    with pytest.raises(GatewayError) as strs:
        d.tokenize_call(TokenizeRequest("r", "m", prompt="hi", return_token_strs=True))
    assert (strs.value.status, strs.value.param, strs.value.code) == (
        400,
        "return_token_strs",
        "unsupported_by_backend",
    )
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(GatewayError) as bare:
        d.tokenize_call(TokenizeRequest("r", "m", messages=messages, add_generation_prompt=False))
    assert bare.value.param == "add_generation_prompt"
    # a continued final message needs no generation prompt; SGLang is not sent the flag
    call = d.tokenize_call(
        TokenizeRequest("r", "m", messages=messages, add_generation_prompt=False, continue_final_message=True)
    )
    assert call.path == "/v1/tokenize" and "add_generation_prompt" not in call.body
    assert d.tokenize_call(TokenizeRequest("r", "m", prompt="hi")).body["prompt"] == "hi"


def test_detokenize_keeps_the_special_tokens() -> None:
    call = SGLangDialect("b", "m").detokenize_call(DetokenizeRequest("r", "m", [1, 2]))
    assert call.path == "/v1/detokenize" and call.body["skip_special_tokens"] is False
    assert call.body["tokens"] == [1, 2]


async def test_auto_reads_v1_loads_first() -> None:
    http = Endpoints(loads=(200, LOADS), metrics=(200, METRICS.encode()))
    snap = await SGLangDialect("b").load(http)
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate) == (1, 3, 0.1, 0.9)
    assert http.asked == ["/v1/loads?include=core"]


async def test_auto_falls_back_to_metrics_for_good_once_v1_loads_is_missing(caplog) -> None:
    d, http = SGLangDialect("gpu-1"), Endpoints(metrics=(200, METRICS.encode()))
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"):
        for _ in range(3):
            snap = await d.load(http)
            assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate) == (6, 2, 0.5, 0.25)
    assert http.asked == ["/v1/loads?include=core", "/metrics", "/metrics", "/metrics"]  # not asked again
    # said once, naming the backend (the log, never a tenant, sees backend names)
    assert [r.getMessage() for r in caplog.records] == [
        "backend gpu-1 has no GET /v1/loads (HTTP 404): its load is read from /metrics"
    ]


async def test_a_v1_loads_that_answers_is_no_fallback_and_says_nothing(caplog) -> None:
    http = Endpoints(loads=(200, LOADS), metrics=(200, METRICS.encode()))
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"):
        await SGLangDialect("gpu-1").load(http)
    assert caplog.records == []


async def test_load_source_metrics_never_asks_v1_loads() -> None:
    http = Endpoints(loads=(200, LOADS), metrics=(200, METRICS.encode()))
    snap = await SGLangDialect("b", options={"load_source": "metrics"}).load(http)
    assert snap.running == 6 and http.asked == ["/metrics"]


@pytest.mark.parametrize("answer", [OSError("refused"), (200, b"not json"), (200, b'{"loads": []}')])
async def test_load_source_loads_reads_nothing_rather_than_metrics_when_v1_loads_fails(answer) -> None:
    http = Endpoints(loads=answer, metrics=(200, METRICS.encode()))
    snap = await SGLangDialect("b", options={"load_source": "loads"}).load(http)
    assert (snap.running, snap.waiting, snap.kv_usage) == (None, None, None) and snap.read_at is not None
    assert http.asked == ["/v1/loads?include=core"]


async def test_load_source_loads_never_switches_to_metrics_on_a_404(caplog) -> None:
    # An explicit `loads` is the operator's choice of endpoint: a 404 is the load unknown
    # (read now), said once per backend, and /v1/loads is asked again on the next read.
    d, http = SGLangDialect("gpu-1", options={"load_source": "loads"}), Endpoints(metrics=(200, METRICS.encode()))
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"):
        for _ in range(2):
            before = time.time()
            snap = await d.load(http)
            assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate) == (None, None, None, None)
            assert snap.read_at >= before
    assert http.asked == ["/v1/loads?include=core", "/v1/loads?include=core"]
    assert [r.getMessage() for r in caplog.records] == [
        "backend gpu-1 has no GET /v1/loads (HTTP 404) and its load_source is loads: its load is unknown "
        "(load_source: metrics or auto reads /metrics)"
    ]


def test_a_loads_report_skips_ranks_it_cannot_read() -> None:
    data = {"loads": [{"num_running_reqs": 2, "token_usage": 0.5}, "rank 1 broken", {"num_running_reqs": "x"}]}
    snap = parse_loads(data, 7.0)
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate, snap.read_at) == (2, None, 0.5, None, 7.0)
    for empty in ({}, {"loads": {}}, [], {"loads": []}):
        assert parse_loads(empty, 8.0).running is None and parse_loads(empty, 8.0).read_at == 8.0


def test_tokenize_answers_are_read_in_sglang_s_shape(caplog) -> None:
    d = SGLangDialect("sg-1", "served")
    call = d.tokenize_call(TokenizeRequest("r", "m", prompt="hi"))
    assert call.body["model"] == "served"  # the served model's name, not the client's
    request = TokenizeRequest("r", "m", prompt="hi")
    result = d.read_tokenize({"tokens": [1, 2], "count": 2, "max_model_len": 1 << 70}, request)
    assert (result.tokens, result.token_strs) == ([1, 2], None) and result.max_model_len < 1 << 70
    with pytest.raises(GatewayError) as bad:
        d.read_tokenize({"count": 2}, request)
    assert bad.value.status == 502 and "sg-1" in caplog.text  # the backend named in the log only


def test_detokenize_answers_are_read_from_text(caplog) -> None:
    d = SGLangDialect("sg-2", "served")
    request = DetokenizeRequest("r", "m", [1, 2])
    assert d.detokenize_call(request).body["model"] == "served"
    assert d.read_detokenize({"text": "hi"}, request).prompt == "hi"
    with pytest.raises(GatewayError) as bad:
        d.read_detokenize({"prompt": "hi"}, request)  # vLLM's key, not SGLang's
    assert bad.value.status == 502 and "sg-2" in caplog.text


def test_refusals_say_what_sglang_cannot_do() -> None:
    d = SGLangDialect("b", "m")
    with pytest.raises(GatewayError) as strs:
        d.tokenize_call(TokenizeRequest("r", "m", prompt="hi", return_token_strs=True))
    assert (
        strs.value.message
        == "The backend serving this model runs SGLang, which does not support token strings in /tokenize answers."
    )
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(GatewayError) as bare:
        d.tokenize_call(TokenizeRequest("r", "m", messages=messages, add_generation_prompt=False))
    assert bare.value.message == (
        "The backend serving this model runs SGLang, which does not support tokenizing messages without the "
        "generation prompt."
    )


@pytest.mark.parametrize("stream", [True, False])
def test_a_body_streams_as_asked_and_names_the_rid(stream) -> None:
    request = GenerationRequest("gw-5", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams())
    body = SGLangDialect("b", "served").body(request, stream)
    assert (body["rid"], body["model"], body["stream"]) == ("gw-5", "served", stream)
