"""gateway/serving/oneshot.py in detail, on the harness of test_oneshot.py's adapters: the
stand-in request routing reads, the answer's head (status, request id, the ticket's
headers), the time waited upstream, the client's deadline, the attempts as the trace
sees them, an ejected backend skipped (and the error kept when every other is), the
in-flight count, whose the outcomes are in the outlier detector, and the parse shim."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from adapters.base import Usage
from adapters.errors import FailureKind, GatewayError
from gateway.config.schema import parse_config
from gateway.intake import Admitted, Intent
from gateway.observe.context import NO_TRACE, RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder
from gateway.protection.gate import Protection
from gateway.serving.oneshot import OneShotCall, oneshot_parse, route_request
from policies.auth import Principal
from tests.gateway.scripted import backend_set
from tests.gateway.serving.test_oneshot import CALL, HANG, RESULT, EmbedAdapter

DOWN = GatewayError(503, "The backend is unavailable.", code="backend_unavailable", failure=FailureKind.CONNECT)


class Trace:
    """The trace hooks of a traced request, recording each attempt and how it ended."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, Any]] = []
        self.ends: list[Any] = []

    def attempt(self, backend, request):
        self.attempts.append((backend.name, request))
        trace = self

        class Attempt:
            def end(self, error=None) -> None:
                trace.ends.append(error)

        return Attempt()

    def __getattr__(self, name: str):
        return getattr(NO_TRACE, name)


async def one_call(
    adapters: dict[str, EmbedAdapter],
    *,
    order: list[str] | None = None,
    ejected: tuple[str, ...] = (),
    deadline_s: float | None = None,
    tenant: str | None = None,
    slow_send_s: float = 0.0,
    wait_before: float = 0.0,
    inflight: int = 0,
) -> dict[str, Any]:
    backends = backend_set({"m": {"backends": list(adapters)}}, adapters)  # type: ignore[arg-type]
    pool = backends.pools["m"]
    for name in ejected:
        for _ in range(5):  # consecutive_failures
            pool.ejection.record_failure(name, FailureKind.CONNECT)
        assert pool.ejection.is_ejected(name)
    for b in backends.backends.values():
        b.inflight = inflight
    protection = Protection(parse_config({}), CollectorRegistry())
    await protection.start()
    stand_in = route_request("rid", "m", prompt="hello")
    if deadline_s is not None:
        stand_in.deadline = time.monotonic() + deadline_s
    intent = Intent([stand_in], CALL, 2)

    async def never_gone() -> bool:
        return False

    ticket = await protection.admit(await protection.authenticate({}), "m", stand_in, 2, never_gone)
    ticket.headers = {"x-ratelimit-limit-requests": "9"}
    trace = Trace()
    ctx = RequestContext("rid", time.perf_counter(), operation="embeddings", model="m", tenant=tenant, trace=trace)
    ctx.upstream_wait = wait_before
    chosen = [backends.backends[n] for n in (order or list(adapters))]
    seen_inflight: list[int] = []

    async def invoke(adapter):
        seen_inflight.append(backends.backends[adapter.name].inflight)
        return await adapter.embed(CALL)

    call: OneShotCall = OneShotCall(
        RequestRecorder(GatewayMetrics(), backends.pools, None),
        Admitted(ctx, ticket, intent, pool, chosen),
        invoke,
        lambda result: ({"n": len(result.vectors)}, Usage(result.prompt_tokens or 0, 0)),
    )
    sent: list[dict] = []

    async def receive() -> dict:
        await asyncio.Event().wait()
        return {}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body" and slow_send_s:
            await asyncio.sleep(slow_send_s)
        sent.append(message)

    await call({"type": "http"}, receive, send)
    await protection.aclose()
    return {
        "call": call,
        "ctx": ctx,
        "pool": pool,
        "trace": trace,
        "sent": sent,
        "stand_in": stand_in,
        "seen_inflight": seen_inflight,
        "inflight": {n: b.inflight for n, b in backends.backends.items()},
    }


def test_the_stand_in_is_the_prompt_or_the_messages_with_no_completion_budget() -> None:
    completion = route_request("r1", "m1", prompt=[1, 2, 3])
    assert (completion.request_id, completion.model, completion.kind) == ("r1", "m1", "completion")
    assert completion.prompt == [1, 2, 3] and completion.messages is None
    assert completion.sampling.max_tokens == 0
    chat = route_request("r2", "m2", messages=[{"role": "user", "content": "hi"}])
    assert (chat.request_id, chat.model, chat.kind) == ("r2", "m2", "chat")
    assert chat.messages == [{"role": "user", "content": "hi"}] and chat.prompt is None
    assert chat.sampling.max_tokens == 0


async def test_the_answer_is_one_200_with_the_request_id_and_the_ticket_s_headers() -> None:
    out = await one_call({"a": EmbedAdapter("a", RESULT)})
    start, body = out["sent"]
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"x-request-id"] == b"rid" and headers[b"x-ratelimit-limit-requests"] == b"9"
    assert headers[b"content-type"] == b"application/json"
    assert orjson.loads(body["body"]) == {"n": 1} and headers[b"content-length"] == str(len(body["body"])).encode()
    call = out["call"]
    assert (call.status, call.backend, call.started, call.ended) == (200, "a", True, True)


async def test_the_time_waited_upstream_is_added_to_what_was_waited_before() -> None:
    class Slow(EmbedAdapter):
        async def embed(self, request):
            await asyncio.sleep(0.2)
            return await super().embed(request)

    out = await one_call({"a": Slow("a", RESULT)}, wait_before=5.0)
    assert 5.2 <= out["ctx"].upstream_wait < 5.2 + 3.0


async def test_a_deadline_passing_while_the_backend_works_is_a_504() -> None:
    out = await one_call({"a": EmbedAdapter("a", HANG)}, deadline_s=0.2)
    start, body = out["sent"]
    assert start["status"] == 504 and orjson.loads(body["body"])["error"]["code"] == "deadline_exceeded"


async def test_a_deadline_passing_while_the_answer_is_written_adds_no_second_answer() -> None:
    # The body's write outlives the deadline (a slow reader): it is cut there, and no
    # 504 follows the 200 already begun.
    out = await one_call({"a": EmbedAdapter("a", RESULT)}, deadline_s=0.2, slow_send_s=0.5)
    assert [(m["type"], m.get("status")) for m in out["sent"]] == [("http.response.start", 200)]
    assert out["call"].status == 200


async def test_each_attempt_is_traced_with_its_backend_the_stand_in_and_its_end() -> None:
    out = await one_call({"a": EmbedAdapter("a", DOWN), "b": EmbedAdapter("b", RESULT)})
    assert out["trace"].attempts == [("a", out["stand_in"]), ("b", out["stand_in"])]
    assert out["trace"].ends == [DOWN, None]
    assert out["call"].backend == "b"


async def test_an_ejected_backend_is_skipped_and_the_next_one_tried() -> None:
    adapters = {"a": EmbedAdapter("a", RESULT), "b": EmbedAdapter("b", RESULT)}
    out = await one_call(adapters, order=["a", "b"], ejected=("a",))
    assert out["sent"][0]["status"] == 200 and adapters["a"].calls == 0 and adapters["b"].calls == 1


async def test_when_the_rest_are_ejected_the_last_failure_is_the_answer() -> None:
    adapters = {"a": EmbedAdapter("a", DOWN), "b": EmbedAdapter("b", RESULT)}
    out = await one_call(adapters, order=["a", "b"], ejected=("b",))
    start, body = out["sent"]
    assert start["status"] == 503 and orjson.loads(body["body"])["error"]["code"] == "backend_unavailable"
    assert adapters["b"].calls == 0


async def test_an_attempt_counts_in_flight_on_top_of_the_others_and_gives_it_back() -> None:
    out = await one_call({"a": EmbedAdapter("a", RESULT)}, inflight=3)
    assert out["seen_inflight"] == [4] and out["inflight"] == {"a": 3}


async def test_outcomes_are_the_tenant_s_in_the_outlier_detector() -> None:
    for tenant, key in (("t1", "t1"), (None, "")):
        out = await one_call({"a": EmbedAdapter("a", RESULT)}, tenant=tenant)
        assert set(out["pool"].ejection._backends["a"].served) == {key}


async def test_a_one_shot_route_s_parse_is_given_the_body_and_the_request_id() -> None:
    seen = []

    def parse(body: Any, request_id: str) -> Intent:
        seen.append((body, request_id))
        return Intent([route_request(request_id, "m", prompt="x")])

    intent = await oneshot_parse(parse)({"input": "x"}, "rid-7", Principal("a", None, ["*"], 1))
    assert seen == [({"input": "x"}, "rid-7")] and intent.requests[0].request_id == "rid-7"
