"""Hostile bodies through the request handling, in process: JSON parsing and the
depth limit, the chat and completions readers, the Responses API's
`prepare_response`, then what every admitted request goes through next (the
prompt estimate, and the upstream body an adapter writes). Each body ends as a
request or as a 4xx GatewayError in the error envelope naming its `param`;
nothing else may escape.

`make test` runs a bounded number of examples; `make test-slow` many more."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from adapters.base import GenerationRequest
from adapters.errors import GatewayError
from adapters.openai_wire import build_body
from gateway.openai.requests import estimate_prompt_tokens, parse_chat, parse_completion, parse_json_body
from gateway.openai.responses import MemoryResponseStore, prepare_response
from tests.fuzz.bodies import Hostile, hostile_body, wrong_type_sweep

CHAT, COMPLETION, RESPONSE = "CreateChatCompletionRequest", "CreateCompletionRequest", "CreateResponse"
FAST, SLOW = 120, 3000


def handle(api: str, raw: bytes) -> list[GenerationRequest]:
    body = parse_json_body(raw)
    if api == CHAT:
        return [parse_chat(body, "rid")]
    if api == COMPLETION:
        return parse_completion(body, "rid")
    prepared = asyncio.run(prepare_response(body, tenant="t", store=MemoryResponseStore(), request_id="rid"))
    return [prepared.generation]


def judge(api: str, raw: bytes) -> None:
    try:
        requests = handle(api, raw)
    except GatewayError as err:
        assert 400 <= err.status < 500, err
        envelope = orjson.loads(orjson.dumps(err.to_dict()))["error"]
        assert set(envelope) == {"message", "type", "param", "code"}
        assert len(err.message) < 1000, err.message[:200]
        if err.status == 400 and raw.lstrip().startswith(b"{") and "could not parse" not in err.message:
            assert err.param is not None, err  # a mistake inside an object names where it is
        return
    for request in requests:
        estimate_prompt_tokens(request)
        orjson.dumps(build_body(request, "served", stream=request.stream))


def hypothesis_test(api: str, examples: int):
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(hostile_body(api, "m"))
    def run(hostile: Hostile) -> None:
        judge(api, hostile.raw)

    return run


@pytest.mark.parametrize("api", [CHAT, COMPLETION, RESPONSE])
def test_hostile_bodies_are_requests_or_400s(api):
    hypothesis_test(api, FAST)()


@pytest.mark.slow
@pytest.mark.parametrize("api", [CHAT, COMPLETION, RESPONSE])
def test_many_hostile_bodies_are_requests_or_400s(api):
    hypothesis_test(api, SLOW)()


@pytest.mark.parametrize("api", [CHAT, COMPLETION, RESPONSE])
def test_a_wrong_type_at_every_path_is_a_request_or_a_400(api):
    failures = []
    for how, raw in wrong_type_sweep(api, "m"):
        try:
            judge(api, raw)
        except Exception as exc:  # collected: one run shows every path that fails
            failures.append(f"{how}: {type(exc).__name__}: {exc}"[:300])
    assert not failures, "\n".join(failures)
