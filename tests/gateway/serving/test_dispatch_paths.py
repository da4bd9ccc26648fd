"""The dispatcher's paths through a failure before the first event, in process on
scripted adapters: a request no runtime of the model can serve (400, at once, or
after the fallback models were asked), a backend that timed out or whose
half-open probe another request took (skipped, the next one tried), a spent
retry budget (the last error, no backoff), the backoff's doubling, which
failures fail over and what kind of failure the outlier detector is told."""

from __future__ import annotations

import time

import pytest

from adapters.base import Capabilities, Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import (
    FailureKind,
    GatewayError,
    upstream_busy,
    upstream_failed,
    upstream_timeout,
    upstream_unavailable,
)
from adapters.openai import OpenAIDialect
from gateway.serving.dispatch import Dispatcher, check_choices
from tests.gateway.scripted import ScriptClock, ScriptedAdapter, always, backend_set

TOOLS = [{"type": "function", "function": {"name": "f"}}]


def chat(request_id: str = "req", **fields) -> GenerationRequest:
    fields.setdefault("sampling", SamplingParams())
    return GenerationRequest(
        request_id=request_id, model="m", messages=[{"role": "user", "content": "hi"}], stream=True, **fields
    )


def answer(text: str = "ok") -> list:
    return [TextDelta(0, text), Finish(0, "stop"), Usage(5, 1)]


def unavailable() -> GatewayError:
    return GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT)


def timeout() -> GatewayError:
    return GatewayError(504, "slow", code="upstream_timeout", failure=FailureKind.TIMEOUT)


async def serve(dispatcher: Dispatcher, req: GenerationRequest | None = None, waits: list | None = None) -> str:
    dispatched = await dispatcher.open("m", [req or chat()], None if waits is None else waits.append)
    async for _ in dispatched.events:
        pass
    await dispatched.aclose()
    return dispatched.label


def without_tools(adapter: ScriptedAdapter) -> ScriptedAdapter:
    adapter.capabilities = Capabilities(tools=False)
    return adapter


# ---- a request no runtime can serve -------------------------------------------------------------


async def test_a_request_no_runtime_can_serve_is_a_400_at_once_naming_what_they_lack():
    b1 = without_tools(ScriptedAdapter("b1", lambda r: answer()))
    b2 = ScriptedAdapter("b2", lambda r: answer())
    b2.capabilities = Capabilities(logprobs=False)
    model = {"backends": ["b1", "b2"], "max_retries": 2, "retry_backoff_s": 5}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    waits: list[bool] = []
    req = chat(tools=TOOLS, sampling=SamplingParams(logprobs=True))
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher, req, waits)
    err = info.value
    assert (err.status, err.code, err.type) == (400, "unsupported_by_runtime", "invalid_request_error")
    # what each runtime lacks (never the backends' names), once each, in the backends' order
    assert err.message == (
        "This request cannot be served: openai does not support tool calls; openai does not support logprobs."
    )
    assert waits == [] and not b1.requests and not b2.requests  # no round, no backoff: it would fail the same


async def test_the_same_gap_on_every_backend_is_named_once():
    b1, b2 = (without_tools(ScriptedAdapter(n, lambda r: answer())) for n in ("b1", "b2"))
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1", "b2"]}}, {"b1": b1, "b2": b2}))
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher, chat(tools=TOOLS))
    assert info.value.message == "This request cannot be served: openai does not support tool calls."


def fallback_pair(primary: ScriptedAdapter, fallback: ScriptedAdapter, **model) -> Dispatcher:
    models = {
        "m": {"backends": ["b1"], "fallback": ["m2"], "retry_backoff_s": 0.001, **model},
        "m2": {"backends": ["b2"]},
    }
    return Dispatcher(backend_set(models, {"b1": primary, "b2": fallback}))


async def test_a_model_whose_runtimes_cannot_serve_the_request_falls_back_to_one_that_can():
    b1 = without_tools(ScriptedAdapter("b1", lambda r: answer()))
    b2 = ScriptedAdapter("b2", lambda r: answer("from b2"))
    assert await serve(fallback_pair(b1, b2), chat(tools=TOOLS)) == "b2"
    assert not b1.requests and len(b2.requests) == 1


async def test_when_no_model_of_the_chain_can_serve_it_the_first_ones_gap_is_answered():
    b1 = without_tools(ScriptedAdapter("b1", lambda r: answer()))
    b2 = ScriptedAdapter("b2", lambda r: answer())
    b2.capabilities = Capabilities(tools=False)
    with pytest.raises(GatewayError) as info:
        await serve(fallback_pair(b1, b2, max_retries=1), chat(tools=TOOLS))
    assert (info.value.status, info.value.code) == (400, "unsupported_by_runtime")
    assert not b1.requests and not b2.requests


async def test_a_backend_failure_is_answered_over_a_fallback_that_cannot_serve_the_request():
    # The primary's runtime failed (the client may retry); the fallback could never serve it.
    b1 = ScriptedAdapter("b1", always(unavailable()))
    b2 = without_tools(ScriptedAdapter("b2", lambda r: answer()))
    with pytest.raises(GatewayError) as info:
        await serve(fallback_pair(b1, b2, max_retries=0), chat(tools=TOOLS))
    assert (info.value.status, info.value.code) == (503, "backend_unavailable")


# ---- skipped backends ----------------------------------------------------------------------------


async def test_a_later_round_skips_the_backend_that_timed_out_and_tries_the_next():
    b1 = ScriptedAdapter("b1", always(timeout()))
    tries = []

    def second_time_lucky(request):
        tries.append(request.request_id)
        return [unavailable()] if len(tries) == 1 else answer("from b2")

    b2 = ScriptedAdapter("b2", second_time_lucky)
    model = {"backends": ["b1", "b2"], "routing": "least_loaded", "max_retries": 1, "retry_backoff_s": 0.001}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    assert await serve(dispatcher) == "b2"
    assert len(b1.requests) == 1 and tries == ["req.1", "req.2"]


async def test_a_backend_whose_probe_another_request_took_is_skipped_for_the_next():
    # b1 is half-open: routing lists it, but while b0 fails, another request takes
    # its one probe; this request then goes on to b2 instead of giving up.
    b0, b1, b2 = (ScriptedAdapter(n, lambda r: answer(f"from {r.request_id}")) for n in ("b0", "b1", "b2"))
    model = {
        "backends": ["b0", "b1", "b2"],
        "routing": "least_loaded",
        "max_retries": 0,
        "ejection": {"consecutive_failures": 1, "base_ejection_s": 5},
    }
    dispatcher = Dispatcher(backend_set({"m": model}, {"b0": b0, "b1": b1, "b2": b2}))
    ejection = dispatcher.pool("m").ejection
    ejection.record_failure("b1", FailureKind.SERVER_ERROR, now=time.monotonic() - 10)  # ejected, backoff over

    async def another_request_takes_the_probe():
        assert not ejection.is_ejected("b1")  # the other request is the probe

    b0.script = always(another_request_takes_the_probe, unavailable())
    assert await serve(dispatcher) == "b2"
    assert not b1.requests and len(b0.requests) == 1


# ---- the retry budget and the backoff -------------------------------------------------------------


def spent_budget_model() -> dict:
    # no retry allowed at all: a ratio of 0 and no floor
    return {"retry_backoff_s": 0.001, "ejection": {"retry_ratio": 0, "min_retries": 0, "consecutive_failures": 99}}


async def test_with_the_budget_spent_the_next_backend_is_not_tried_and_the_last_error_is_answered():
    b1 = ScriptedAdapter(
        "b1", always(GatewayError(429, "busy", code="upstream_overloaded", failure=FailureKind.OVERLOAD))
    )
    b2 = ScriptedAdapter("b2", lambda r: answer())
    model = {"backends": ["b1", "b2"], "routing": "least_loaded", "max_retries": 0, **spent_budget_model()}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher)
    assert (info.value.status, info.value.code) == (429, "upstream_overloaded") and not b2.requests


async def test_with_the_budget_spent_no_later_round_waits_out_a_backoff():
    b1 = ScriptedAdapter("b1", always(unavailable()))
    model = {"backends": ["b1"], "max_retries": 3, **spent_budget_model()}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1}))
    waits: list[bool] = []
    with pytest.raises(GatewayError) as info:
        await serve(dispatcher, waits=waits)
    assert info.value.code == "backend_unavailable" and len(b1.requests) == 1
    assert waits == []


async def test_the_backoff_doubles_from_its_base_each_round(monkeypatch):
    clock = ScriptClock(monkeypatch)
    b1 = ScriptedAdapter("b1", always(unavailable()))
    model = {"backends": ["b1"], "max_retries": 2, "retry_backoff_s": 0.2, "ejection": {"consecutive_failures": 9}}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1}))
    marks: list[bool] = []
    with pytest.raises(GatewayError):
        await dispatcher.open("m", [chat()], marks.append)
    # 0.2 s then 0.4 s, each announced as a wait and its end (a doubling that starts a
    # round late asks 0.4 s first, a third power 0.6 s second).
    assert clock.slept == [0.2, 0.4] and marks == [True, False, True, False]


# ---- what fails over, and what the outlier detector is told --------------------------------------


@pytest.mark.parametrize(
    "error, fails",
    [
        (GatewayError(500, "internal", code="upstream_error"), True),  # a fault of the backend's, kind unsaid
        (GatewayError(502, "bad gateway", code="upstream_error"), True),
        (GatewayError(429, "busy", code="upstream_overloaded", failure=FailureKind.OVERLOAD), True),
        (GatewayError(429, "a tenant's limit", code="rate_limit_exceeded"), False),
        (GatewayError(499, "odd"), False),
        (GatewayError(400, "bad", param="messages"), False),
    ],
)
def test_what_fails_over_is_a_backend_fault_or_a_retryable_failure(error, fails):
    assert error.fails_over is fails


@pytest.mark.parametrize(
    "error, kind",
    [
        (upstream_timeout("b", "slow", 1.0, first_byte=True), FailureKind.TIMEOUT),
        (upstream_busy("b", "busy", 1.0), FailureKind.OVERLOAD),
        (OpenAIDialect("b").error(429, b"{}"), FailureKind.OVERLOAD),
        (upstream_unavailable("b", "refused"), FailureKind.CONNECT),
        (upstream_failed("b", "boom"), FailureKind.SERVER_ERROR),
        (GatewayError(500, "boom"), FailureKind.SERVER_ERROR),
    ],
)
def test_each_failure_carries_its_kind_from_where_it_is_built(error, kind):
    # The kind the outlier detector is told is the error's own, never read from its code.
    assert error.failure is kind


async def test_the_outlier_detector_learns_the_kind_of_each_failure():
    b1 = ScriptedAdapter("b1", always(timeout()))
    b2 = ScriptedAdapter("b2", always(unavailable()))
    model = {"backends": ["b1", "b2"], "routing": "least_loaded", "max_retries": 0}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    with pytest.raises(GatewayError):
        await serve(dispatcher)
    ejection = dispatcher.pool("m").ejection
    assert ejection.failures("b1") == {FailureKind.TIMEOUT: 1}
    assert ejection.failures("b2") == {FailureKind.CONNECT: 1}


async def test_a_500_that_is_not_marked_retryable_still_fails_over():
    b1 = ScriptedAdapter("b1", always(GatewayError(500, "internal", code="upstream_error")))
    b2 = ScriptedAdapter("b2", lambda r: answer())
    assert await serve(fallback_pair(b1, b2, max_retries=0)) == "b2"


# ---- the choice cap ----------------------------------------------------------------------------


def test_the_cap_names_n_when_the_prompts_alone_fit():
    reqs = [
        GenerationRequest(f"r{i}", "m", kind="completion", prompt="p", sampling=SamplingParams(n=2)) for i in range(4)
    ]
    with pytest.raises(GatewayError) as info:
        check_choices(reqs, 4)  # four prompts fit a cap of four; two choices each do not
    assert info.value.param == "n"
