"""The front door (gateway/intake.py) in process, without a server: Intake.handle driven
with a scripted route (its parse and its serve note what they were given), a real
Protection and backend set, and a recorder and tracing that note what reached them.
A test costs milliseconds, so each mutant of the module is judged in about a second
(tests/gateway/test_intake.py serves a gateway over HTTP per test, to real simulators)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response

from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.intake import Admitted, ApiRoute, Intake, Intent, capable_order
from gateway.observe.context import NoTrace
from gateway.openai.requests import parse_chat, parse_completion
from gateway.protection.gate import Protection
from policies.auth import hash_key
from policies.token_bound import requests_token_bound
from tests.gateway.scripted import backend_set

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
KEY = "sk-intake-key"


class Trace(NoTrace):
    """A request's trace that notes the request its route parsed."""

    def __init__(self) -> None:
        self.parsed_requests: list[Any] = []

    def parsed(self, request: Any) -> None:
        self.parsed_requests.append(request)


class Tracing:
    def __init__(self) -> None:
        self.trace = Trace()
        self.calls: list[tuple[dict, str]] = []

    def request(self, scope: dict, operation: str) -> Trace:
        self.calls.append((scope, operation))
        return self.trace


class Recorder:
    def __init__(self) -> None:
        self.finished: list[tuple[Any, Any]] = []

    def finish(self, ctx: Any, outcome: Any) -> None:
        self.finished.append((ctx, outcome))


class Front:
    """An Intake over `config` (models "m" and "e", one backend each), its parts, and
    what its route and Protection.admit saw."""

    def __init__(self, config: dict, models: dict | None = None) -> None:
        self.config = parse_config(config)
        self.backends = backend_set(models or {"m": {"backends": ["a"]}, "e": {"backends": ["b"]}}, {})
        self.protection = Protection(self.config, CollectorRegistry())
        self.recorder = Recorder()
        self.tracing = Tracing()
        self.intake = Intake(
            lambda: self.config,
            self.protection,
            self.backends,
            self.recorder,  # type: ignore[arg-type]
            self.tracing,
            lambda: "v7",
        )
        self.parsed: list[tuple[Any, str, Any]] = []
        self.admitted: list[Admitted] = []
        self.admit_calls: list[tuple[tuple, dict]] = []
        real_admit = self.protection.admit

        async def admit(*args: Any, **kwargs: Any) -> Any:
            self.admit_calls.append((args, kwargs))
            await asyncio.sleep(0.05)  # a wait in the queue, for ctx.queue_wait
            return await real_admit(*args, **kwargs)

        self.protection.admit = admit  # type: ignore[method-assign]

    def route(
        self,
        *,
        capability: tuple[str, str] | None = None,
        estimate: int | None = None,
        size_units: int = 1,
        fail: BaseException | None = None,
    ) -> ApiRoute:
        async def parse(body: Any, upstream_id: str, principal: Any) -> Intent:
            self.parsed.append((body, upstream_id, principal))
            if fail is not None:
                raise fail
            reqs = parse_completion(body, upstream_id) if "prompt" in body else [parse_chat(body, upstream_id)]
            return Intent(reqs, payload="payload", prompt_estimate=estimate, size_units=size_units)

        def serve(admitted: Admitted) -> Response:
            self.admitted.append(admitted)
            return PlainTextResponse("served")

        return ApiRoute("chat", parse, serve, capability)

    async def post(
        self, route: ApiRoute, body: Any, headers: dict[str, str] | None = None, declared: int | None = None
    ) -> tuple[Response, dict]:
        data = orjson.dumps(body)
        head = {"content-type": "application/json", "content-length": str(len(data) if declared is None else declared)}
        head.update(headers or {})
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "scheme": "http",
            "server": ("127.0.0.1", 8000),
            "headers": [(k.lower().encode(), v.encode()) for k, v in head.items()],
        }
        sent = False

        async def receive() -> dict:
            nonlocal sent
            if declared is not None:
                raise AssertionError("a body declared over the limit is refused before it is read")
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            await asyncio.Event().wait()  # the client stays
            return {"type": "http.disconnect"}

        await self.protection.start()
        try:
            return await self.intake.handle(route, Request(scope, receive)), scope
        finally:
            for admitted in self.admitted:
                await admitted.ticket.release(None)
            await self.protection.aclose()


def keyed(tier: int = 3, models: list[str] | None = None, **config: Any) -> dict:
    key: dict[str, Any] = {"sha256": hash_key(KEY), "tenant": "t", "tier": tier}
    if models is not None:
        key["models"] = models
    return {"auth": {"mode": "keys", "api_keys": [key]}, **config}


AUTH = {"Authorization": f"Bearer {KEY}"}


def error_of(answer: Response) -> dict:
    return orjson.loads(answer.body)["error"]


async def test_an_admitted_request_carries_what_the_front_door_read():
    front = Front(keyed(tenants={"t": {"max_concurrent": 8}}))
    headers = {**AUTH, "x-request-id": "client-1", "x-session-id": "s-1", "x-request-timeout": "5"}
    body = {"model": "m", "prompt": ["a", "b"], "max_tokens": 2}
    before = time.monotonic()
    answer, scope = await front.post(front.route(), body, headers)
    after = time.monotonic()
    assert (answer.status_code, answer.body) == (200, b"served")
    [admitted] = front.admitted
    [(parsed_body, upstream_id, principal)] = front.parsed
    ctx = admitted.ctx
    assert parsed_body == body and principal.tenant == "t"
    # the gateway's own id goes upstream, the client's names the request in logs and answers
    assert len(upstream_id) == 32 and int(upstream_id, 16) >= 0
    assert (ctx.request_id, ctx.upstream_id) == ("client-1", upstream_id)
    assert (ctx.operation, ctx.config_version) == ("chat", "v7")
    assert (ctx.tenant, ctx.model) == ("t", "m")
    assert time.perf_counter() - 30 < ctx.started <= time.perf_counter()
    assert 0.05 <= ctx.queue_wait < 30  # the admission spy waits 0.05 s
    assert front.tracing.calls == [(scope, "chat")] and ctx.trace is front.tracing.trace
    reqs = admitted.requests
    assert len(reqs) == 2 and front.tracing.trace.parsed_requests == [reqs[0]]
    for r in reqs:
        assert before + 5 <= r.deadline <= after + 5
        assert (r.tenant, r.priority, r.unsupported_params) == ("t", 3, "reject")
        assert r.session_keys == {"x-session-id": "s-1"}
    assert admitted.intent.payload == "payload" and admitted.pool is front.backends.pools["m"]
    assert admitted.backends == []  # no capability asked: a generation is routed later, per attempt
    [(args, kwargs)] = front.admit_calls
    assert args[:3] == (principal, "m", reqs[0])
    estimate = args[3]  # sized only when a quota asks for it
    assert isinstance(estimate, functools.partial) and estimate.func is requests_token_bound
    assert estimate.args == (reqs,) and estimate() == requests_token_bound(reqs)
    assert args[4].__self__.scope is scope and args[4].__name__ == "is_disconnected"
    assert kwargs == {"choices": 2, "size_units": 1}


async def test_the_route_s_estimate_and_size_are_what_admission_gets():
    front = Front({})
    answer, _ = await front.post(front.route(estimate=7, size_units=3), CHAT)
    assert answer.status_code == 200
    [(args, kwargs)] = front.admit_calls
    assert args[3] == 7 and kwargs == {"choices": 1, "size_units": 3}


async def test_the_model_s_unsupported_params_and_no_session_key_without_the_header():
    models = {"m": {"backends": ["a"], "unsupported_params": "drop"}}
    front = Front({}, models)
    answer, _ = await front.post(front.route(), CHAT)
    assert answer.status_code == 200
    [r] = front.admitted[0].requests
    assert r.unsupported_params == "drop" and r.session_keys == {} and r.deadline is None


@pytest.mark.parametrize(("stream", "has_deadline"), [(False, True), (True, False)])
async def test_a_read_timeout_bounds_only_an_answer_not_streamed(stream, has_deadline):
    front = Front({})
    answer, _ = await front.post(front.route(), {**CHAT, "stream": stream}, {"x-stainless-read-timeout": "5"})
    assert answer.status_code == 200
    [r] = front.admitted[0].requests
    assert (r.deadline is not None) is has_deadline


@pytest.mark.parametrize("rid", [None, "not an id"])
async def test_a_refusal_is_recorded_once_with_the_gateway_s_id_when_the_client_s_will_not_do(rid):
    front = Front({})
    headers = {"x-request-id": rid} if rid else {}
    answer, _ = await front.post(front.route(), {**CHAT, "model": "nope"}, headers)
    [(_, upstream_id, _)] = front.parsed
    assert answer.status_code == 404 and answer.headers["x-request-id"] == upstream_id
    assert error_of(answer) == {
        "message": "The model `nope` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    [(ctx, outcome)] = front.recorder.finished
    assert (ctx.request_id, ctx.model) == (upstream_id, "nope")
    assert (outcome.status, outcome.code, outcome.admitted) == (404, "model_not_found", False)
    assert front.admitted == [] and front.admit_calls == []


async def test_a_model_the_key_may_not_use_answers_as_one_that_does_not_exist():
    front = Front(keyed(models=["m"]))
    answer, _ = await front.post(front.route(), {**CHAT, "model": "e"}, {**AUTH, "x-request-id": "mine"})
    assert answer.status_code == 404 and error_of(answer)["code"] == "model_not_found"
    assert answer.headers["x-request-id"] == "mine"
    mine, _ = await front.post(front.route(), CHAT, AUTH)
    assert mine.status_code == 200


async def test_an_unknown_key_is_refused_before_the_body_is_read():
    front = Front(keyed())
    answer, _ = await front.post(front.route(), CHAT, {"Authorization": "Bearer sk-wrong"})
    assert answer.status_code == 401 and front.parsed == []
    [(ctx, outcome)] = front.recorder.finished
    assert ctx.tenant is None and outcome.status == 401


@pytest.mark.parametrize(("declared_over", "status"), [(False, 200), (True, 413)])
async def test_a_body_declared_over_the_limit_is_refused_unread(declared_over, status):
    front = Front({"limits": {"max_body_bytes": 1024}})
    answer, _ = await front.post(front.route(), CHAT, declared=1025 if declared_over else None)
    assert answer.status_code == status
    if declared_over:
        assert error_of(answer)["code"] == "request_too_large" and front.parsed == []


@pytest.mark.parametrize(("size", "status"), [(1024, 200), (1025, 413)])
async def test_the_configured_body_limit_is_the_one_enforced(size, status):
    front = Front({"limits": {"max_body_bytes": 1024}})
    body = {**CHAT, "user": ""}
    body["user"] = "x" * (size - len(orjson.dumps(body)))
    assert len(orjson.dumps(body)) == size
    answer, _ = await front.post(front.route(), body)
    assert answer.status_code == status


@pytest.mark.parametrize(("levels", "status"), [(7, 200), (8, 400)])
async def test_the_configured_json_depth_is_the_one_enforced(levels, status):
    nested: object = 1
    for _ in range(levels):
        nested = [nested]
    front = Front({"limits": {"max_json_depth": 8}})
    answer, _ = await front.post(front.route(), {**CHAT, "metadata_x": nested})
    assert answer.status_code == status


@pytest.mark.parametrize(("n", "status"), [(3, 200), (4, 400)])
async def test_the_configured_choices_limit_is_the_one_enforced(n, status):
    front = Front({"limits": {"max_choices_per_request": 3}})
    answer, _ = await front.post(front.route(), {**CHAT, "n": n})
    assert answer.status_code == status
    if status == 400:
        assert (error_of(answer)["code"], error_of(answer)["param"]) == ("too_many_choices", "n")


@pytest.mark.parametrize(("unknown", "status"), [("pass", 200), ("reject", 400)])
async def test_the_model_s_unknown_params_rule_is_applied(unknown, status):
    front = Front({}, {"m": {"backends": ["a"], "unknown_params": unknown}})
    answer, _ = await front.post(front.route(), {**CHAT, "vendor_knob": 1})
    assert answer.status_code == status
    if status == 400:
        assert error_of(answer)["param"] == "vendor_knob"


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        (GatewayError(400, "no good", code="bad_thing"), 400, "bad_thing"),
        (ClientDisconnect(), 499, "client_closed"),
        (RuntimeError("a bug"), 500, "internal_error"),
    ],
    ids=["refusal", "client-left", "bug"],
)
async def test_what_a_route_raises_is_answered_in_the_envelope_and_recorded(raised, status, code, caplog):
    front = Front({})
    with caplog.at_level(logging.ERROR, logger="switchyard.gateway"):
        answer, _ = await front.post(front.route(fail=raised), CHAT, {"x-request-id": "rid-1"})
    assert answer.status_code == status and error_of(answer)["code"] == code
    assert answer.headers["x-request-id"] == "rid-1"
    [(ctx, outcome)] = front.recorder.finished
    assert ctx.request_id == "rid-1" and (outcome.status, outcome.code) == (status, code)
    logged = [r for r in caplog.records if r.name == "switchyard.gateway"]
    if status == 500:  # a bug is logged with the path, for operators
        assert [r.getMessage() for r in logged] == ["unhandled error on /v1/chat/completions"]
        assert logged[0].exc_info is not None
    else:
        assert logged == []


def serve_embeddings(front: Front, **capable: bool) -> None:
    for name, flag in capable.items():
        adapter = front.backends.backends[name].adapter
        adapter.capabilities = dataclasses.replace(adapter.capabilities, embeddings=flag)


async def test_a_one_shot_call_is_admitted_with_its_capable_backends():
    front = Front({}, {"m": {"backends": ["a", "b"]}})
    serve_embeddings(front, a=False, b=True)
    answer, _ = await front.post(front.route(capability=("embeddings", "embeddings")), CHAT)
    assert answer.status_code == 200
    assert [b.name for b in front.admitted[0].backends] == ["b"]


async def test_a_one_shot_call_no_backend_serves_is_refused_before_admission():
    front = Front({})
    serve_embeddings(front, a=False)
    answer, _ = await front.post(front.route(capability=("embeddings", "embeddings")), CHAT)
    assert answer.status_code == 400 and error_of(answer)["code"] == "unsupported_by_runtime"
    assert front.admit_calls == []


def fake_backend(name: str, capable: bool, runtime: str) -> Any:
    return SimpleNamespace(name=name, adapter=SimpleNamespace(capabilities=SimpleNamespace(x=capable), runtime=runtime))


def test_capable_order_follows_the_routing_and_falls_back_to_the_capable_when_it_names_none():
    a, b, c = fake_backend("a", True, "vllm"), fake_backend("b", False, "sglang"), fake_backend("c", True, "vllm")
    routed: list[Any] = [SimpleNamespace(name="c"), SimpleNamespace(name="a")]
    seen: list[Any] = []

    def order(req: Any, capable: list[Any]) -> Any:
        seen.append((req, capable))
        return SimpleNamespace(candidates=routed)

    pool = SimpleNamespace(name="m", backends=[a, b, c], order=order)
    assert capable_order(pool, "x", "x calls", "req") == [c, a]  # type: ignore[arg-type]
    assert seen == [("req", [a, c])]
    routed.clear()
    assert capable_order(pool, "x", "x calls", "req") == [a, c]  # type: ignore[arg-type]


def test_capable_order_names_the_model_and_its_runtimes_when_none_serves():
    pool = SimpleNamespace(
        name="m",
        backends=[fake_backend(name, False, runtime) for name, runtime in zip("abc", ["vllm", "sglang", "vllm"])],
        order=None,
    )
    with pytest.raises(GatewayError) as refused:
        capable_order(pool, "x", "x calls", "req")  # type: ignore[arg-type]
    assert refused.value.status == 400 and refused.value.code == "unsupported_by_runtime"
    assert refused.value.message == (
        "The model `m` does not serve x calls: its backends (sglang, vllm) do not offer it."
    )
