"""What a Generation writes on the wire and records about it, exactly: the
response's headers (content type, request id, the ticket's rate-limit headers, the
parameters a runtime dropped), the shape of the ASGI messages, the usage it falls
back on when the runtime gave none, and the outcome, timings and token metrics the
recorder and the trace are told. In process: scripted adapters, a real Protection
(memory quota store), the real recorder; the trace is a recording NoTrace."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from adapters.base import (
    ErrorEvent,
    Finish,
    GenerationRequest,
    ParameterSupport,
    SamplingParams,
    TextDelta,
    TokenLogprob,
    Usage,
)
from adapters.errors import FailureKind, GatewayError
from gateway.config.schema import parse_config
from gateway.observe.context import NoTrace, Outcome, RequestContext
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.recorder import RequestRecorder
from gateway.openai.answer_format import AnswerFormat
from gateway.openai.requests import estimate_prompt_tokens
from gateway.protection.gate import Protection
from gateway.serving import generation as generation_module
from gateway.serving.dispatch import Dispatcher
from gateway.serving.generation import Generation
from gateway.serving.phases import CancelPhase
from tests.gateway.scripted import HANG, Pause, ScriptClock, ScriptedAdapter, always, backend_set, count_releases
from tests.gateway.serving.test_generation import chat, sse_data
from tests.procs import sample_value

LIMITED = {"tenants": {"anonymous": {"requests_per_minute": 50}}}


class Trace(NoTrace):
    """The trace hooks a Generation calls, recorded."""

    def __init__(self) -> None:
        self.ttfts: list[float] = []
        self.reasons: list[str] = []
        self.outcomes: list[tuple[RequestContext, Outcome]] = []

    def first_token(self, ttft: float) -> None:
        self.ttfts.append(ttft)

    def finish_reason(self, reason: str) -> None:
        self.reasons.append(reason)

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        self.outcomes.append((ctx, outcome))


@dataclass
class Served:
    sent: list[dict] = field(default_factory=list)
    releases: list[tuple[Usage | None, CancelPhase | None]] = field(default_factory=list)
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    trace: Trace = field(default_factory=Trace)
    inflight: list[float] = field(default_factory=list)  # the model's in-flight gauge at each message
    receives: int = 0  # calls of the ASGI receive: one per disconnect watcher

    @property
    def start(self) -> dict:
        [start] = [m for m in self.sent if m["type"] == "http.response.start"]
        return start

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.start["headers"]}

    @property
    def bodies(self) -> list[dict]:
        return [m for m in self.sent if m["type"] == "http.response.body"]

    @property
    def body(self) -> bytes:
        return b"".join(m["body"] for m in self.bodies)

    @property
    def outcome(self) -> Outcome:
        [(_, outcome)] = self.trace.outcomes
        return outcome

    @property
    def ctx(self) -> RequestContext:
        [(ctx, _)] = self.trace.outcomes
        return ctx

    def count(self, name: str, **labels: str) -> float:
        return sample_value(self.metrics.registry, name, labels)


async def serve(
    adapters: dict[str, ScriptedAdapter],
    requests: list[GenerationRequest],
    *,
    config: dict | None = None,
    model: dict | None = None,
    leave_after: float | None = None,
    served: Served | None = None,
    answer: AnswerFormat | None = None,
    last_send_s: float = 0.0,
    send_fails: bool = False,
) -> Served:
    """Admit `requests` (one request's sub-requests) and run their Generation to its end.
    `last_send_s`: how long the client takes to read the answer's last message; `send_fails`:
    the connection breaks at the first body that is not the last."""
    served = served or Served()
    backends = backend_set({"m": model or {"backends": list(adapters)}}, adapters)
    protection = Protection(parse_config(config or {}), CollectorRegistry())
    await protection.start()
    units = sum(r.sampling.n for r in requests)

    async def never_gone() -> bool:
        return False

    principal = await protection.authenticate({})
    ticket = await protection.admit(principal, "m", requests[0], 10, never_gone, choices=units)
    count_releases(ticket, served.releases)

    async def send(message: dict) -> None:
        served.sent.append(dict(message))  # the stream reuses its body message
        served.inflight.append(served.count("switchyard_inflight_requests", model="m"))
        if send_fails and message.get("more_body") and message["body"]:
            raise OSError("the connection broke")
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await asyncio.sleep(last_send_s)

    async def receive() -> dict:
        served.receives += 1
        if leave_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(leave_after)
        return {"type": "http.disconnect"}

    recorder = RequestRecorder(served.metrics, backends.pools, None)
    # Arrival on the generation's stopwatch (a ScriptClock's when a test installs one).
    ctx = RequestContext("rid-7", generation_module.time.perf_counter(), operation=requests[0].kind, model="m")
    ctx.trace = served.trace
    generation = Generation(Dispatcher(backends), recorder, ctx, ticket, requests, answer)
    await generation({"type": "http"}, receive, send)
    await protection.aclose()
    return served


def one(adapter: ScriptedAdapter, request: GenerationRequest, **kw: Any):
    return serve({"b1": adapter}, [request], **kw)


def answered(request: GenerationRequest) -> list:
    """A script: fresh events each time (a batch's merge renumbers its events' choices in place)."""
    return [TextDelta(0, "Hi"), TextDelta(0, " there"), Finish(0, "stop"), Usage(5, 2)]


# ---- headers and messages -------------------------------------------------------------------------


async def test_a_stream_starts_with_its_headers_and_every_body_but_the_last_has_more():
    served = await one(ScriptedAdapter("b1", answered), chat(include_usage=True), config=LIMITED)
    h = served.headers
    assert served.start["status"] == 200
    assert h["content-type"] == "text/event-stream" and h["cache-control"] == "no-cache"
    assert h["x-request-id"] == "rid-7"
    assert h["x-ratelimit-limit-requests"] == "50" and h["x-ratelimit-remaining-requests"] == "49"
    bodies = served.bodies
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    frames = sse_data(served.body)
    # the opening frames go out with the first event's, in the first body
    assert orjson.loads(bodies[0]["body"].removeprefix(b"data: "))["choices"][0]["delta"]["content"] == "Hi"
    assert frames[0]["id"] == served.ctx.response_id and frames[0]["model"] == "m"
    assert abs(frames[0]["created"] - time.time()) < 5
    assert served.ctx.stream is True and frames[-1] == "[DONE]"
    assert set(served.inflight) == {1.0}  # counted in flight while it answers
    assert served.count("switchyard_inflight_requests", model="m") == 0


async def test_a_whole_answer_has_its_length_and_the_same_headers():
    served = await one(ScriptedAdapter("b1", answered), chat(stream=False), config=LIMITED)
    h = served.headers
    assert h["content-type"] == "application/json" and "cache-control" not in h
    assert int(h["content-length"]) == len(served.body) and h["x-request-id"] == "rid-7"
    assert h["x-ratelimit-limit-requests"] == "50"
    [body] = served.bodies
    assert "more_body" not in body  # one message, the whole answer
    answer = orjson.loads(served.body)
    assert answer["choices"][0]["message"]["content"] == "Hi there" and answer["id"] == served.ctx.response_id
    assert served.ctx.stream is False


async def test_every_answer_carries_its_models_fingerprint():
    adapter = ScriptedAdapter("b1", answered)
    fingerprint = backend_set({"m": {"backends": ["b1"]}}, {"b1": adapter}).pools["m"].fingerprint
    assert fingerprint.startswith("fp_")
    whole = orjson.loads((await one(adapter, chat(stream=False))).body)
    assert (whole["object"], whole["system_fingerprint"]) == ("chat.completion", fingerprint)
    frames = sse_data((await one(adapter, chat())).body)[:-1]
    assert {(f["object"], f["system_fingerprint"]) for f in frames} == {("chat.completion.chunk", fingerprint)}


async def test_an_error_response_carries_the_request_id_and_the_ticket_headers():
    adapter = ScriptedAdapter("b1", always(GatewayError(400, "bad", param="messages", code="bad_messages")))
    served = await one(adapter, chat(), config=LIMITED)
    h = served.headers
    assert served.start["status"] == 400 and h["x-request-id"] == "rid-7"
    assert h["x-ratelimit-limit-requests"] == "50" and h["content-type"] == "application/json"
    assert orjson.loads(served.body)["error"]["code"] == "bad_messages"
    assert (served.outcome.status, served.outcome.error, served.outcome.code) == (400, "bad", "bad_messages")
    assert served.outcome.backend is None and served.outcome.dropped_params == ()
    assert served.releases == [(None, None)]


# ---- parameters a runtime dropped --------------------------------------------------------------------

DROPS = ParameterSupport(rejected={"top_k": "no top-k", "min_p": "no min-p", "logit_bias": "no bias"})


def asking(unsupported: str, **sampling: Any) -> GenerationRequest:
    return chat(sampling=SamplingParams(**sampling), unsupported_params=unsupported)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_the_dropped_parameters_are_named_in_table_order(stream):
    adapter = ScriptedAdapter("b1", answered)
    adapter.parameters = DROPS
    request = asking("drop", min_p=0.1, top_k=5, temperature=0.5)
    request.stream = stream
    served = await one(adapter, request)
    assert served.headers["x-switchyard-dropped-params"] == "top_k,min_p"
    assert served.outcome.dropped_params == ("top_k", "min_p")


async def test_nothing_is_named_dropped_unless_the_model_drops_or_the_runtime_lacks_it():
    refusing = ScriptedAdapter("b1", answered)
    refusing.parameters = DROPS
    served = await one(refusing, asking("reject", top_k=5))  # the adapter refuses it itself
    assert "x-switchyard-dropped-params" not in served.headers and served.outcome.dropped_params == ()
    passing = ScriptedAdapter("b1", answered)  # passes every parameter
    served = await one(passing, asking("drop", top_k=5))
    assert "x-switchyard-dropped-params" not in served.headers and served.outcome.dropped_params == ()


async def test_the_dropped_parameters_of_every_serving_backend_are_named():
    b1 = ScriptedAdapter("b1", answered)
    b1.parameters = ParameterSupport(rejected={"top_k": "no"})
    b2 = ScriptedAdapter("b2", answered)
    b2.parameters = ParameterSupport(rejected={"min_p": "no"})
    requests = [asking("drop", top_k=5, min_p=0.1), asking("drop", top_k=5, min_p=0.1)]
    for i, r in enumerate(requests):
        r.request_id = f"rid-{i}"
    served = await serve({"b1": b1, "b2": b2}, requests, model={"backends": ["b1", "b2"], "routing": "round_robin"})
    assert served.outcome.backend == "b1,b2"
    assert served.headers["x-switchyard-dropped-params"] == "top_k,min_p"


# ---- usage, when the runtime gives none --------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_without_a_usage_event_the_usage_is_the_prompt_estimate_and_the_tokens_seen(stream):
    # Tokens, not events (gateway/serving/usage.py): two deltas of 13 characters are 4
    # tokens at four characters a token; a delta with logprobs is exactly its tokens.
    request = chat(stream=stream, include_usage=True)
    logprobs = [TokenLogprob("x", -0.1, [120], [])] * 3
    script = always(TextDelta(0, "abcdefgh"), TextDelta(0, "ijklm"), TextDelta(0, "xyz", logprobs), Finish(0, "stop"))
    served = await one(ScriptedAdapter("b1", script), request)
    estimate = Usage(estimate_prompt_tokens(request), 4 + 3)
    assert estimate.prompt_tokens > 0
    assert served.releases == [(estimate, None)] and served.outcome.usage == estimate
    if not stream:  # (a stream's usage chunk is the runtime's own)
        usage = orjson.loads(served.body)["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (estimate.prompt_tokens, 7)


async def test_an_answer_with_no_content_and_no_usage_still_counts_its_prompt():
    request = chat(stream=False)
    served = await one(ScriptedAdapter("b1", always(Finish(0, "stop"))), request)
    estimate = Usage(estimate_prompt_tokens(request), 0)
    assert served.releases == [(estimate, None)]
    assert orjson.loads(served.body)["usage"]["prompt_tokens"] == estimate.prompt_tokens


# ---- what the recorder and the trace are told -----------------------------------------------------------


async def test_the_first_token_and_the_gaps_between_tokens_are_measured_once_each(monkeypatch):
    clock = ScriptClock(monkeypatch)
    gap = Pause(0.05)
    script = always(
        Pause(0.03), TextDelta(0, "a"), gap, TextDelta(0, "b"), gap, TextDelta(0, "c"), Finish(0, "length"), Usage(3, 3)
    )
    served = await one(ScriptedAdapter("b1", script), chat())
    assert served.count("switchyard_time_to_first_token_seconds_count", model="m", backend="b1") == 1
    assert served.count("switchyard_inter_token_latency_seconds_count", model="m") == 2
    assert served.count("switchyard_inter_token_latency_seconds_sum", model="m") == pytest.approx(0.1)
    ctx = served.ctx
    assert served.trace.ttfts == [ctx.ttft] and ctx.ttft == pytest.approx(0.03)
    assert served.count("switchyard_time_to_first_token_seconds_sum", model="m", backend="b1") == pytest.approx(
        ctx.ttft
    )
    assert served.trace.reasons == ["length"]
    assert clock.slept == [0.03, 0.05, 0.05]


@pytest.mark.parametrize("stream", [True, False])
async def test_the_upstream_wait_is_the_time_spent_waiting_for_events(monkeypatch, stream):
    clock = ScriptClock(monkeypatch)
    slow = Pause(0.2)
    script = always(slow, TextDelta(0, "a"), slow, Finish(0, "stop"), Pause(0.1))  # and for the stream's end
    served = await one(ScriptedAdapter("b1", script), chat(stream=stream))
    assert served.ctx.upstream_wait == pytest.approx(0.5) and clock.now - served.ctx.started == pytest.approx(0.5)


async def test_a_wait_cut_short_by_a_failing_send_or_an_upstream_error_counts_only_its_own_time(monkeypatch):
    clock = ScriptClock(monkeypatch)
    slow = Pause(0.2)
    broken = Served()
    with pytest.raises(OSError):
        await one(
            ScriptedAdapter("b1", always(slow, TextDelta(0, "a"), Finish(0, "stop"))),
            chat(),
            served=broken,
            send_fails=True,
        )
    error = GatewayError(502, "cut", code="upstream_cut")
    failed = await one(ScriptedAdapter("b1", always(slow, TextDelta(0, "a"), ErrorEvent(error))), chat(stream=False))
    assert failed.outcome.status == 502 and failed.ctx.upstream_wait == pytest.approx(0.2)
    assert clock.slept == [0.2, 0.2]
    [(ctx, _)] = broken.trace.outcomes
    assert ctx.upstream_wait == pytest.approx(0.2)


async def test_a_retry_backoff_is_counted_as_such_and_a_client_leaving_after_it_left_waiting(monkeypatch):
    calls: list[GenerationRequest] = []

    def down_once(request: GenerationRequest) -> list:
        calls.append(request)
        return [GatewayError(503, "down", failure=FailureKind.CONNECT)] if len(calls) == 1 else [HANG]

    clock = ScriptClock(monkeypatch)
    model = {"backends": ["b1"], "max_retries": 1, "retry_backoff_s": 0.25}
    served = await one(ScriptedAdapter("b1", down_once), chat(), model=model, leave_after=0.4)
    assert len(calls) == 2 and clock.slept == [0.25]
    assert served.releases == [(None, CancelPhase.UPSTREAM_HEADERS)]
    assert served.ctx.backoff_wait == pytest.approx(0.25)
    assert served.ctx.upstream_wait == pytest.approx(0)  # the backoff is not upstream time


async def test_an_error_event_mid_stream_is_the_outcome():
    script = always(TextDelta(0, "Hi"), ErrorEvent(GatewayError(502, "cut", code="upstream_cut")))
    served = await one(ScriptedAdapter("b1", script), chat())
    o = served.outcome
    assert (o.status, o.error, o.code, o.backend) == (502, "cut", "upstream_cut", "b1")
    assert served.start["status"] == 200  # already started: the error is in the stream


async def test_a_clean_answer_has_no_error_in_its_outcome():
    served = await one(ScriptedAdapter("b1", answered), chat())
    o = served.outcome
    assert (o.status, o.error, o.code, o.cancelled_phase, o.usage) == (200, None, None, None, Usage(5, 2))


# ---- the server stopping is not the client leaving ------------------------------------------------------


async def test_a_cancellation_from_the_server_propagates_and_still_releases_the_ticket():
    adapter = ScriptedAdapter("b1", always(TextDelta(0, "Hi"), HANG))
    served = Served()
    task = asyncio.create_task(one(adapter, chat(), served=served))
    await adapter.called.wait()
    await asyncio.sleep(0.05)  # past the first chunk: the stream is going
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # not a client's cancellation: no phase, no 499; the usage seen is still charged
    [(usage, phase)] = served.releases
    assert phase is None and usage is not None and usage.completion_tokens == 1
    assert served.outcome.status == 200 and served.outcome.cancelled_phase is None
    assert adapter.ended == 1
