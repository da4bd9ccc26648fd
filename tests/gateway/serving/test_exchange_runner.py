"""The runner under every admitted exchange (gateway/serving/exchange.py), driven with a
hand-written `_run`: the outcome handed to the recorder field by field, the ticket's one
release, the in-flight gauge, a bug before and after the answer started, the client's
deadline before, during and after the answer, a client that leaves and a server that
shuts down, and when the disconnect watcher starts."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import pytest

from adapters.base import Usage
from adapters.errors import FailureKind, GatewayError
from gateway.observe.context import Outcome, RequestContext
from gateway.serving import exchange
from gateway.serving.exchange import ExchangeRunner
from gateway.serving.phases import CancelPhase


class Gauge:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1


class Recorder:
    def __init__(self) -> None:
        self.gauges: dict[str, Gauge] = {}
        self.finished: list[tuple[RequestContext, Outcome]] = []

    def inflight(self, model: str) -> Gauge:
        return self.gauges.setdefault(model, Gauge())

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        self.finished.append((ctx, outcome))


class Ticket:
    def __init__(self) -> None:
        self.headers = {"x-ratelimit-remaining-requests": 7}
        self.releases: list[tuple[Usage | None, CancelPhase | None]] = []

    async def release(self, usage: Usage | None, phase: CancelPhase | None = None) -> None:
        self.releases.append((usage, phase))


class Runner(ExchangeRunner):
    """Runs `work(self, send)` as its exchange; notes a past-deadline ending."""

    def __init__(self, work, deadline: float | None = None, model: str | None = "m") -> None:
        ctx = RequestContext("rid-7", time.perf_counter(), operation="chat", model=model)
        super().__init__(Recorder(), ctx, Ticket(), deadline, CancelPhase.UPSTREAM_HEADERS)  # type: ignore[arg-type]
        self.work = work
        self.past: list[GatewayError] = []

    async def _run(self, send) -> None:
        await self.work(self, send)

    async def _past_deadline(self, send, err: GatewayError) -> None:
        self.past.append(err)


async def stay() -> dict:
    await asyncio.Event().wait()
    return {"type": "http.disconnect"}


async def play(runner: Runner, receive=stay) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await runner({"type": "http"}, receive, send)
    return sent


def outcome(runner: Runner) -> Outcome:
    [(ctx, out)] = runner.recorder.finished  # type: ignore[attr-defined]
    assert ctx is runner.ctx
    return out


async def start(runner: Runner, send) -> None:
    runner.started = True
    await send({"type": "http.response.start", "status": 200, "headers": []})


async def test_a_clean_exchange_hands_the_recorder_every_field_it_kept_and_releases_once():
    async def work(r: Runner, send) -> None:
        await start(r, send)
        r.usage, r.backend, r.status = Usage(3, 4), "b1", 502
        r.error, r.code, r.failure = "upstream cut", "upstream_error", FailureKind.SERVER_ERROR

    runner = Runner(work)
    await play(runner)
    assert outcome(runner) == Outcome(
        502, Usage(3, 4), "b1", "upstream cut", None, code="upstream_error", failure=FailureKind.SERVER_ERROR
    )
    assert runner.ticket.releases == [(Usage(3, 4), None)]  # type: ignore[attr-defined]
    assert runner.recorder.gauges["m"].value == 0  # type: ignore[attr-defined]


async def test_an_exchange_that_sets_nothing_is_recorded_as_a_plain_200():
    async def work(r: Runner, send) -> None:
        pass

    runner = Runner(work)
    await play(runner)
    assert outcome(runner) == Outcome(200)
    assert (outcome(runner).backend, outcome(runner).error, outcome(runner).failure) == (None, None, None)


async def test_the_gauge_counts_the_exchange_while_it_runs_under_its_model_or_a_dash():
    seen: list[int] = []

    async def work(r: Runner, send) -> None:
        seen.append(r.recorder.gauges[r.ctx.model or "-"].value)  # type: ignore[attr-defined]

    for model in ("m", None):
        runner = Runner(work, model=model)
        await play(runner)
        assert runner.recorder.gauges[model or "-"].value == 0  # type: ignore[attr-defined]
    assert seen == [1, 1]


async def test_a_bug_before_the_answer_is_a_500_with_the_tickets_headers(caplog):
    async def work(r: Runner, send) -> None:
        raise RuntimeError("a bug")

    runner = Runner(work)
    with caplog.at_level(logging.ERROR, logger="switchyard.gateway"):
        sent = await play(runner)
    assert [r.getMessage() for r in caplog.records] == ["chat failed"]  # the operation, with the traceback
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 500
    headers = dict(sent[0]["headers"])
    assert headers[b"x-ratelimit-remaining-requests"] == b"7" and headers[b"x-request-id"] == b"rid-7"
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "internal_error"
    out = outcome(runner)
    assert (out.status, out.code, out.failure) == (500, "internal_error", FailureKind.SERVER_ERROR)
    assert out.error and "internal error" in out.error and runner.started and runner.ended


async def test_a_bug_after_the_answer_started_is_raised_and_recorded_as_500():
    async def work(r: Runner, send) -> None:
        await start(r, send)
        raise RuntimeError("a bug")

    runner = Runner(work)
    with pytest.raises(RuntimeError):
        await play(runner)
    out = outcome(runner)
    assert (out.status, out.code, out.failure) == (500, None, FailureKind.SERVER_ERROR)
    assert out.error and "internal error" in out.error
    assert runner.ticket.releases == [(None, None)]  # type: ignore[attr-defined]


async def test_the_deadline_before_the_answer_is_a_504_and_after_it_the_runner_ends_what_it_began():
    async def hang(r: Runner, send) -> None:
        await asyncio.sleep(3600)

    runner = Runner(hang, deadline=time.monotonic() + 0.05)
    sent = await play(runner)
    assert sent[0]["status"] == 504 and runner.past == []
    assert (outcome(runner).status, outcome(runner).code) == (504, "deadline_exceeded")

    async def started_then_hang(r: Runner, send) -> None:
        await start(r, send)
        await asyncio.sleep(3600)

    runner = Runner(started_then_hang, deadline=time.monotonic() + 0.05)
    sent = await play(runner)
    assert len(sent) == 1 and [e.code for e in runner.past] == ["deadline_exceeded"]
    out = outcome(runner)
    assert (out.status, out.code, out.failure) == (504, "deadline_exceeded", FailureKind.TIMEOUT)

    async def ended_then_hang(r: Runner, send) -> None:
        await start(r, send)
        r.ended = True
        await asyncio.sleep(3600)

    runner = Runner(ended_then_hang, deadline=time.monotonic() + 0.05)
    await play(runner)
    assert runner.past == [] and outcome(runner).status == 200


async def test_a_timeout_of_the_exchanges_own_is_no_deadline():
    async def own_timeout(r: Runner, send) -> None:
        raise TimeoutError

    runner = Runner(own_timeout, deadline=time.monotonic() + 30)
    sent = await play(runner)
    assert sent[0]["status"] == 500 and outcome(runner).code == "internal_error"


async def test_a_client_leaving_is_a_499_in_the_phase_it_left_and_releases_with_it(monkeypatch):
    monkeypatch.setattr(exchange, "WATCH_AFTER_S", 0.0)
    left = asyncio.Event()

    async def receive() -> dict:
        await left.wait()
        return {"type": "http.disconnect"}

    async def work(r: Runner, send) -> None:
        r.usage = Usage(5, 1)
        r.phase = CancelPhase.MID_STREAM
        left.set()
        await asyncio.sleep(3600)

    runner = Runner(work)
    await play(runner, receive)
    out = outcome(runner)
    assert (out.status, out.error, out.cancelled_phase) == (499, "client disconnected", CancelPhase.MID_STREAM)
    assert runner.ticket.releases == [(Usage(5, 1), CancelPhase.MID_STREAM)]  # type: ignore[attr-defined]


async def test_other_messages_than_a_disconnect_are_read_past():
    messages = [{"type": "http.request", "body": b""}, {"type": "http.disconnect"}]

    async def receive() -> dict:
        return messages.pop(0) if messages else await stay()

    async def work(r: Runner, send) -> None:
        r._watch_now()
        await asyncio.sleep(3600)

    runner = Runner(work)
    await play(runner, receive)
    assert outcome(runner).status == 499 and messages == []


async def test_a_server_shutting_down_cancels_the_exchange_as_no_client_leaving():
    async def work(r: Runner, send) -> None:
        await asyncio.sleep(3600)

    runner = Runner(work)
    task = asyncio.create_task(play(runner))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome(runner).status == 200 and outcome(runner).cancelled_phase is None
    assert runner.ticket.releases == [(None, None)]  # type: ignore[attr-defined]


async def test_the_watcher_starts_only_once_an_exchange_has_lasted_and_never_after_it_ended(monkeypatch):
    async def quick(r: Runner, send) -> None:
        pass

    runner = Runner(quick)
    await play(runner)
    assert runner._watcher is None and runner._timer is not None and runner._timer.cancelled()
    runner._watch_now()  # a late timer after the end starts nothing
    assert runner._watcher is None

    async def slow(r: Runner, send) -> None:
        await asyncio.sleep(exchange.WATCH_AFTER_S * 3)
        assert r._watcher is not None
        watcher = r._watcher
        r._watch_now()  # once
        assert r._watcher is watcher

    runner = Runner(slow)
    await play(runner)
    assert runner._watcher is not None
    await asyncio.sleep(0)
    assert runner._watcher.cancelled()  # it ends with the exchange
    assert exchange.WATCH_AFTER_S == 0.02


async def test_the_release_after_a_client_left_finishes_even_if_the_task_is_cancelled_again(monkeypatch):
    monkeypatch.setattr(exchange, "WATCH_AFTER_S", 0.0)
    go_on, released = asyncio.Event(), []

    class SlowTicket(Ticket):
        async def release(self, usage, phase=None) -> None:
            await go_on.wait()
            released.append(phase)

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def work(r: Runner, send) -> None:
        await asyncio.sleep(3600)

    runner = Runner(work)
    runner.ticket = SlowTicket()  # type: ignore[assignment]
    task = asyncio.create_task(play(runner, receive))
    while not task.done() and runner.status != 499:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.01)  # the release is under way, waiting
    task.cancel()  # the server shuts down meanwhile
    with pytest.raises(asyncio.CancelledError):
        await task
    go_on.set()
    await asyncio.sleep(0.01)
    assert released == [CancelPhase.UPSTREAM_HEADERS]  # shielded: the slot is given back all the same
