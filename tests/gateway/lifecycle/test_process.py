"""The process's life once it serves (gateway/lifecycle/process.py) on its own, with a stand-in
gateway and reloader: the 503 of a process shutting down, which retired backends are kept and
when they are closed, the ticker's file watch and its look at the supervisor, and the drain
step by step (ready off, the accept grace, refusing, the wait, the cut, the end)."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from gateway.backends.backend_set import Retired
from gateway.config.schema import parse_config
from gateway.lifecycle import process
from gateway.lifecycle.inflight import InFlight
from gateway.lifecycle.process import Lifecycle, shutting_down


class Served:
    def __init__(self, **config) -> None:
        self.config = parse_config(config)
        self.draining = False
        self.refusing = False


class Reloader:
    def __init__(self, changed: bool = False) -> None:
        self.changed = changed
        self.looks = 0
        self.reloads: list[str] = []

    def file_changed(self) -> bool:
        self.looks += 1
        if self.looks == 2:
            raise OSError("the file went away for a moment")  # one failed tick; the loop goes on
        return self.changed

    async def reload(self, trigger: str) -> None:
        self.reloads.append(trigger)


class Closing:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name = name
        self.closed = closed

    async def aclose(self) -> None:
        self.closed.append(self.name)


def retired(name: str, closed: list[str]) -> Retired:
    return Retired([Closing(name, closed)], [Closing(name + "-adapter", closed)], [])  # type: ignore[list-item]


def test_a_process_shutting_down_answers_503_with_its_retry_after():
    err = shutting_down(2.5)
    assert (err.status, err.code, err.retry_after) == (503, "gateway_shutting_down", 2.5)
    assert err.message == "This gateway process is shutting down; retry the request."


async def test_what_a_reload_retired_is_kept_until_no_request_of_its_version_is_left(caplog):
    inflight = InFlight()
    life = Lifecycle(Served(), inflight, Reloader())  # type: ignore[arg-type]
    closed: list[str] = []
    life.retire(1, Retired([], [], []))  # nothing taken out: nothing kept
    assert life.retired == []
    for version, kept in ((1, Retired([], [Closing("a", closed)], [])), (2, Retired([], [], [object()]))):
        life.retire(version, kept)  # type: ignore[arg-type, list-item]
        assert life.retired[-1] == (version, kept)
    life.retired.clear()
    life.retire(1, retired("v1", closed))
    life.retire(2, retired("v2", closed))
    assert [b.name for b in life.retired_backends()] == ["v1", "v2"]
    gate = asyncio.Event()

    async def request(version: int) -> None:
        ex = inflight.enter(version, None)
        await gate.wait()
        inflight.leave(ex)

    held = asyncio.create_task(request(2))
    await asyncio.sleep(0)
    life.retired[0][1].backends.append(Closing("v1b", closed))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, "switchyard.lifecycle"):
        await life.close_unused()  # the oldest request is of version 2: version 1's go, version 2's stay
    assert caplog.messages == ["closing backends no longer in use: v1, v1b"]
    assert closed == ["v1-adapter"] and [v for v, _ in life.retired] == [2]
    gate.set()
    await held
    await life.close_unused()
    assert closed == ["v1-adapter", "v2-adapter"] and life.retired == []


async def test_a_reload_from_a_signal_runs_in_the_background():
    reloader = Reloader()
    life = Lifecycle(Served(), InFlight(), reloader)  # type: ignore[arg-type]
    life.reload_soon("SIGHUP")
    assert reloader.reloads == [] and len(life._tasks) == 1
    await asyncio.sleep(0.01)
    assert reloader.reloads == ["SIGHUP"] and not life._tasks  # a finished task is let go


async def ticking(life: Lifecycle, monkeypatch, seconds: float) -> None:
    monkeypatch.setattr(process, "TICK_S", 0.01)
    life.start()
    await asyncio.sleep(seconds)
    await life.aclose()


async def test_the_ticker_reloads_a_changed_file_at_its_poll_interval_and_outlives_a_failure(monkeypatch, caplog):
    reloader = Reloader(changed=True)
    life = Lifecycle(Served(reload={"poll_interval_s": 0.05}), InFlight(), reloader)  # type: ignore[arg-type]
    monkeypatch.setattr(process, "TICK_S", 0.01)
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.ERROR, "switchyard.lifecycle"):
        began = loop.time()
        life.start()
        while reloader.looks < 4 and loop.time() - began < 10:
            await asyncio.sleep(0.01)
        took = loop.time() - began
        await life.aclose()
    # one look every 0.05 s at most (not one per 0.01 s tick), the second of them failing
    assert 4 <= reloader.looks <= took / 0.05 + 1 and reloader.reloads == ["file changed"] * (reloader.looks - 1)
    assert caplog.messages == ["lifecycle tick failed"] and "the file went away" in caplog.text


async def test_the_ticker_looks_at_once_and_not_at_all_when_the_watch_is_off(monkeypatch):
    reloader = Reloader(changed=True)
    life = Lifecycle(Served(reload={"poll_interval_s": 100}), InFlight(), reloader)  # type: ignore[arg-type]
    await ticking(life, monkeypatch, 0.1)
    assert reloader.looks == 1 and reloader.reloads == ["file changed"]
    off = Reloader(changed=True)
    life = Lifecycle(Served(reload={"watch": False}), InFlight(), off)  # type: ignore[arg-type]
    await ticking(life, monkeypatch, 0.1)
    assert off.looks == 0


async def test_the_ticker_closes_what_no_request_holds_and_aclose_the_rest(monkeypatch):
    closed: list[str] = []
    inflight = InFlight()
    life = Lifecycle(Served(reload={"watch": False}), inflight, Reloader())  # type: ignore[arg-type]
    life.retire(1, retired("v1", closed))
    monkeypatch.setattr(process, "TICK_S", 0.01)
    life.start()
    assert life._ticker is not None and life._ticker.get_name() == "lifecycle"
    await asyncio.sleep(0.1)
    assert closed == ["v1-adapter"] and life.retired == []
    held = inflight.enter(2, None)
    life.retire(2, retired("v2", closed))
    await asyncio.sleep(0.05)
    assert closed == ["v1-adapter"]  # held by a request of its version
    await life.aclose()  # at shutdown: closed all the same
    assert closed == ["v1-adapter", "v2-adapter"] and life.retired == [] and life._ticker.done()
    inflight.leave(held)


async def test_a_worker_drains_at_once_when_its_supervisor_is_gone(monkeypatch, caplog):
    parent = Lifecycle(Served(), InFlight(), Reloader(), supervisor_pid=os.getppid())  # type: ignore[arg-type]
    await ticking(parent, monkeypatch, 0.05)
    assert not parent.served.draining
    served = Served(reload={"watch": False}, drain={"accept_grace_s": 30})
    orphan = Lifecycle(served, InFlight(), Reloader(), supervisor_pid=os.getppid() + 100000)  # type: ignore[arg-type]
    monkeypatch.setattr(process, "TICK_S", 0.01)
    with caplog.at_level(logging.ERROR, "switchyard.lifecycle"):
        orphan.start()
        await asyncio.wait_for(orphan.drained.wait(), 5)  # no accept grace: not a graceful stop
    assert served.draining and served.refusing
    assert caplog.messages == ["the supervisor process is gone; draining"]
    await orphan.aclose()


async def test_a_drain_serves_for_its_grace_then_refuses_and_waits_for_the_requests():
    served = Served(drain={"accept_grace_s": 0.1, "timeout_s": 5})
    inflight = InFlight()
    life = Lifecycle(served, inflight, Reloader())  # type: ignore[arg-type]
    ended: list[str] = []
    life.on_drained = lambda: ended.append("stopped")
    ex = inflight.enter(1, None)
    life.stop()
    life.stop()  # once begun it goes its way: a second stop changes nothing
    assert served.draining and not served.refusing and len(life._tasks) == 1
    await asyncio.sleep(0.05)
    assert not served.refusing  # still in the accept grace
    await asyncio.sleep(0.15)
    assert served.refusing and not life.drained.is_set()
    inflight.leave(ex)
    await asyncio.wait_for(life.drained.wait(), 5)
    assert ended == ["stopped"] and not ex.cut


async def test_a_drain_whose_time_is_up_cuts_what_is_left(caplog):
    served = Served(drain={"accept_grace_s": 5, "timeout_s": 0.05})
    inflight = InFlight()
    life = Lifecycle(served, inflight, Reloader())  # type: ignore[arg-type]
    cut: list[bool] = []

    async def request() -> None:
        ex = inflight.enter(1, None)
        try:
            await asyncio.Event().wait()
        finally:
            cut.append(ex.cut)
            inflight.leave(ex)

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    with caplog.at_level(logging.INFO, "switchyard.lifecycle"):
        life.stop(grace=False)  # no accept grace
        await asyncio.wait_for(life.drained.wait(), 3)
    assert cut == [True] and task.cancelled() and served.refusing
    assert caplog.messages[1:] == ["drain time is up: 1 request(s) ended with an error", "drained; stopping"]
    assert caplog.messages[0] == (
        "draining: /readyz answers 503; new requests are served for 0 s more, then refused; "
        "the 1 under way get 0.05 s to finish"
    )


@pytest.mark.parametrize("grace", [True, False])
async def test_a_stopped_lifecycle_with_nothing_under_way_ends_at_once(grace):
    life = Lifecycle(Served(drain={"timeout_s": 30}), InFlight(), Reloader())  # type: ignore[arg-type]
    life.stop(grace=grace)  # no on_drained set: its default does nothing
    await asyncio.wait_for(life.drained.wait(), 3)
    assert life._drain is not None
    await life._drain  # ended without an error
    await life.aclose()
