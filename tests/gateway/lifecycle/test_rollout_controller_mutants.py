"""The rollout controller's parts its end-to-end tests leave open (gateway/lifecycle/rollout.py),
in process on a scripted memory store: the buffers' bound and what a failed push keeps, the
store outage logged once, the judging grace at, below and above its bound and the lease it
takes, the mirror judged only when it runs, the evidence and event lines, a lost
compare-and-set, the operator action's retries, the preflight runner, and the task's life."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.lifecycle.rollout import BUFFER_MAX, PREFLIGHT_LEASE_S, RolloutController, UnknownRollout
from gateway.observe.rollout_metrics import RolloutMetrics
from policies.rollout_records import MirrorComparison, TrackRecord, TrackShares
from policies.rollout_state import Plan, TransitionRefused
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_store import RolloutStoreUnavailable
from tests.manual_clock import Clock

W = 2.0
PLAN = Plan(rollout_id="r1", steps=(0.1, 1.0), window_s=W, min_samples=1)


class Scripted(MemoryRolloutStore):
    """The memory store, its calls recorded; it can be down, refuse pushes, or lose swaps
    to another replica (which pauses the rollout first)."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.pushes: list[tuple[int, list[TrackRecord], list[MirrorComparison]]] = []
        self.leases: list[tuple[str, str, float]] = []
        self.swaps = 0
        self.down = False
        self.push_down = False
        self.lost_swaps = 0

    async def ensure(self, model, rollout_id, now):
        if self.down:
            raise RolloutStoreUnavailable("connection refused")
        return await super().ensure(model, rollout_id, now)

    async def push(self, model, rollout_id, window, window_s, records, comparisons):
        if self.push_down:
            raise RolloutStoreUnavailable("connection refused")
        self.pushes.append((window, list(records), list(comparisons)))
        await super().push(model, rollout_id, window, window_s, records, comparisons)

    async def lease(self, model, owner, ttl_s):
        self.leases.append((model, owner, ttl_s))
        return await super().lease(model, owner, ttl_s)

    async def swap(self, model, expected_version, new):
        self.swaps += 1
        if self.lost_swaps:
            self.lost_swaps -= 1
            current = self._states[model]
            self._states[model] = dataclasses.replace(
                current, version=current.version + 1, phase="paused", resume_to=current.phase, reason="by b"
            )
            return False
        return await super().swap(model, expected_version, new)


def controller(clock, plans=None, store=None, **kwargs):
    plans = plans if plans is not None else {"m": PLAN}
    store = store if store is not None else Scripted(clock)
    return RolloutController(store, lambda: plans, RolloutMetrics(CollectorRegistry()), clock=clock, **kwargs)


def stable(at: float) -> TrackRecord:
    return TrackRecord("stable", at, ttft_s=0.1, itl_s=0.01, finish_reason="stop")


def test_a_replica_is_named_by_its_process_and_a_random_part():
    c = controller(Clock(1001.0))
    assert re.fullmatch(rf"{os.getpid()}-[0-9a-f]{{8}}", c.replica)
    assert controller(Clock(1001.0), replica="a").replica == "a"


async def test_the_buffers_keep_the_newest_records_and_comparisons_up_to_their_bound():
    clock = Clock(1001.0)
    c = controller(clock)
    await c.tick()
    for i in range(BUFFER_MAX + 5):
        c.record("m", stable(1000.0 + i * 1e-6))
        c.compare("m", MirrorComparison(1000.0 + i * 1e-6))
    await c.tick()
    ((window, records, comparisons),) = c.store.pushes
    assert window == 500 and len(records) == len(comparisons) == BUFFER_MAX
    assert records[0].at == pytest.approx(1000.0 + 5e-6) and comparisons[0].at == pytest.approx(1000.0 + 5e-6)


async def test_comparisons_alone_are_pushed_to_their_own_window():
    clock = Clock(1001.0)
    c = controller(clock)
    await c.tick()
    c.record("m", stable(1000.5))
    c.compare("m", MirrorComparison(1002.5))  # a window with no record
    await c.tick()
    assert [(w, len(r), len(m)) for w, r, m in c.store.pushes] == [(500, 1, 0), (501, 0, 1)]
    c.compare("m", MirrorComparison(1001.0))
    await c.tick()
    assert [(w, len(r), len(m)) for w, r, m in c.store.pushes[2:]] == [(500, 0, 1)]


@pytest.mark.parametrize("kept", ["records", "comparisons"])
async def test_a_failed_push_keeps_what_it_took_and_the_buffer_stays_bounded(kept):
    clock = Clock(1001.0)
    c = controller(clock)
    await c.tick()
    feed = c.record if kept == "records" else c.compare
    make = stable if kept == "records" else MirrorComparison
    feed("m", make(1000.5))
    c.store.push_down = True
    await c.tick()
    c.store.push_down = False
    # the other buffer was made by the failed push: it is bounded as the first one is
    other = c.compare if kept == "records" else c.record
    other_make = MirrorComparison if kept == "records" else stable
    for i in range(BUFFER_MAX + 1):
        other("m", other_make(1000.6 + i * 1e-7))
    await c.tick()
    ((_, records, comparisons),) = c.store.pushes
    mine, others = (records, comparisons) if kept == "records" else (comparisons, records)
    assert [x.at for x in mine] == [1000.5] and len(others) == BUFFER_MAX


async def test_an_outage_is_logged_once_and_its_end_once(caplog):
    clock = Clock(1001.0)
    c = controller(clock)
    said = []
    with caplog.at_level(logging.INFO, "switchyard.rollout"):
        for down in (True, True, False, False, True, False):
            c.store.down = down
            caplog.clear()
            await c.tick()
            said.append([r.levelname for r in caplog.records if r.getMessage().startswith("rollout store")])
    assert said == [["WARNING"], [], ["INFO"], [], ["WARNING"], ["INFO"]]


async def test_a_started_rollout_says_so_in_its_state_and_its_event_line(caplog):
    clock = Clock(1001.0)
    c = controller(clock, replica="a")
    with caplog.at_level(logging.INFO, "switchyard.rollout"):
        await c.tick()
    (line,) = [orjson.loads(r.getMessage()) for r in caplog.records]
    assert line == {
        "event": "rollout_started",
        "model": "m",
        "rollout_id": "r1",
        "step": 0,
        "share": 0.1,
        "reason": "started by the config",
        "version": 1,
        "replica": "a",
    }
    assert (await c.status("m"))["state"]["reason"] == "started by the config"


async def test_a_pending_rollout_is_read_at_the_clocks_time():
    clock = Clock(1001.0)
    c = controller(clock, {"m": PLAN.model_copy(update={"auto_start": False})})
    await c.tick()
    assert (await c.store.load("m")).updated_at == 1001.0


def started_in(window: int) -> float:
    return window * W + 0.1


@pytest.mark.parametrize(("after", "judged"), [(0.74, False), (0.75, True), (0.76, True)])
async def test_a_window_is_judged_once_its_grace_has_passed(after, judged):
    clock = Clock(started_in(500))
    c = controller(clock)  # tick_s 0.25: a grace of 0.75 s
    await c.tick()  # started in window 500: 501 is the first judged
    clock.now = started_in(501)
    c.record("m", stable(clock.now))
    await c.tick()
    clock.now = 502 * W + after
    await c.tick()
    evidence = await c.store.evidence("m", "r1")
    assert [e["window"] for e in evidence] == ([501] if judged else [])


async def test_the_grace_is_three_ticks_when_that_is_longer():
    clock = Clock(started_in(500))
    c = controller(clock, tick_s=1.0)  # a grace of 3 s
    await c.tick()
    clock.now = 502 * W + 3.5  # 501 closed 3.5 s ago (judged), 502 1.5 s ago (not yet)
    await c.tick()
    assert [e["window"] for e in await c.store.evidence("m", "r1")] == [501]
    assert c.store.leases == [("m", c.replica, 4 * 1.0 + 3.0)]


async def test_a_window_is_judged_under_the_lease_once_with_its_evidence():
    clock = Clock(started_in(500))
    c = controller(clock)
    await c.tick()
    clock.now = 502 * W + 1.0
    await c.tick()
    await c.tick()  # the same window again: no lease asked, nothing judged
    assert c.store.leases == [("m", c.replica, 4 * 0.25 + 0.75)]
    (entry,) = await c.store.evidence("m", "r1")
    assert {k: entry[k] for k in ("window", "at", "step", "share", "decision")} == {
        "window": 501,
        "at": 502 * W + 1.0,
        "step": 0,
        "share": 0.1,
        "decision": "hold",
    }


async def test_another_replicas_lease_keeps_this_one_from_judging():
    clock = Clock(started_in(500))
    c = controller(clock)
    await c.tick()
    assert await c.store.lease("m", "other", 60.0)
    clock.now = 502 * W + 1.0
    await c.tick()
    assert await c.store.evidence("m", "r1") == []


@pytest.mark.parametrize(("mirror", "verdict"), [(0.0, "pass"), (0.1, "insufficient"), (1.0, "insufficient")])
async def test_the_mirror_gate_wants_comparisons_only_when_the_mirror_runs(mirror, verdict):
    clock = Clock(started_in(500))
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), window_s=W, min_samples=1, mirror={"share": mirror})
    c = controller(clock, {"m": plan})
    await c.tick()
    clock.now = 502 * W + 1.0
    await c.tick()
    (entry,) = await c.store.evidence("m", "r1")
    gates = {g["gate"]: g["verdict"] for g in entry["gates"]}
    assert gates["mirror_difference_rate"] == verdict, gates


async def test_a_decision_that_lost_its_compare_and_set_leaves_no_evidence_and_reads_the_winner():
    clock = Clock(started_in(500))
    c = controller(clock)
    await c.tick()
    clock.now = 502 * W + 1.0
    c.store.lost_swaps = 1
    await c.tick()
    assert await c.store.evidence("m", "r1") == []
    assert c.summary()[0]["phase"] == "paused" and c.shares("m") == TrackShares(0.1, 0.0)


async def test_an_action_is_tried_five_times_then_refused_as_an_outage():
    clock = Clock(1001.0)
    c = controller(clock)
    await c.tick()
    c.store.lost_swaps = 4
    before = c.store.swaps
    assert (await c.act("m", "abort", "ops")).phase == "rolled_back"  # the fifth landed
    assert c.store.swaps - before == 5
    c2 = controller(clock)
    await c2.tick()
    c2.store.lost_swaps = 5
    with pytest.raises(RolloutStoreUnavailable, match=r"^the rollout kept changing under the action: try again$"):
        await c2.act("m", "abort", "ops")


async def test_an_unknown_model_is_named_and_a_first_read_keeps_the_clocks_time():
    clock = Clock(1001.0)
    c = controller(clock, {"m": PLAN.model_copy(update={"auto_start": False})})
    for call in (c.act("nope", "pause", "ops"), c.status("nope")):
        with pytest.raises(UnknownRollout) as err:
            await call
        assert err.value.args == ("nope",)
    with pytest.raises(TransitionRefused):
        await c.act("m", "resume", "ops")  # read first (pending, now), then refused
    assert (await c.store.load("m")).updated_at == 1001.0
    assert c.summary()[0]["phase"] == "pending"


async def test_the_status_of_a_first_read():
    clock = Clock(1001.0)
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), window_s=W, auto_start=False, mirror={"share": 0.2})
    c = controller(clock, {"m": plan})
    status = await c.status("m")
    assert status == {
        "model": "m",
        "state": {**status["state"], "phase": "pending", "updated_at": 1001.0},
        "candidate_share": 0.0,
        "mirror_share": 0.0,
        "steps": [0.1, 1.0],
        "window_s": W,
        "evidence": [],
    }
    assert c.summary()[0]["phase"] == "pending"
    await c.act("m", "start", "ops")
    assert (await c.status("m"))["mirror_share"] == 0.2


async def test_the_summary_before_and_after_the_first_read():
    clock = Clock(1001.0)
    c = controller(clock)
    row = {"model": "m", "rollout_id": "r1", "phase": "unknown", "step": None}
    assert c.summary() == [{**row, "candidate_share": 0.0, "mirror_share": 0.0}]
    await c.tick()
    assert c.summary() == [{**row, "phase": "step", "step": 0, "candidate_share": 0.1, "mirror_share": 0.0}]


async def test_the_task_is_named_runs_again_after_a_close_and_the_close_stops_a_preflight():
    clock = Clock(1001.0)
    never = asyncio.Event()

    async def hangs(model):
        await never.wait()
        return ()

    c = controller(clock, {"m": PLAN.model_copy(update={"preflight": True})}, preflight=hangs, tick_s=0.01)
    for _ in range(2):
        c.start()
        async with asyncio.timeout(5):
            while not [t for t in asyncio.all_tasks() if t.get_name() == "preflight-m"]:
                await asyncio.sleep(0.01)
        assert [t for t in asyncio.all_tasks() if t.get_name() == "rollout-controller"]
        (preflight,) = [t for t in asyncio.all_tasks() if t.get_name() == "preflight-m"]
        await c.aclose()
        assert preflight.cancelled()
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "rollout-controller" and not t.done()]


async def preflighted(runner, store=None):
    """A rollout with a preflight, ticked into it and through the runner's answer."""
    clock = Clock(1001.0)
    c = controller(clock, {"m": PLAN.model_copy(update={"preflight": True})}, store=store, preflight=runner)
    await c.tick()  # pending -> preflight
    await c.tick()  # the runner starts
    clock.now = 1002.0
    await c._preflights["m"]
    return c


async def test_a_preflight_runs_once_for_its_model_under_the_lease_and_its_pass_starts_the_rollout():
    calls = []
    gate = asyncio.Event()

    async def runner(model):
        calls.append(model)
        await gate.wait()
        return ()

    clock = Clock(1001.0)
    c = controller(clock, {"m": PLAN.model_copy(update={"preflight": True})}, preflight=runner)
    await c.tick()
    for _ in range(3):
        await c.tick()  # still running: not started again
        await asyncio.sleep(0)
    assert calls == ["m"] and c.store.leases == [("m", c.replica, PREFLIGHT_LEASE_S)]
    clock.now = 1002.0
    gate.set()
    await c._preflights["m"]
    state = (await c.status("m"))["state"]
    assert (state["phase"], state["reason"], state["updated_at"]) == ("step", "preflight passed", 1002.0)


async def test_a_failed_preflight_names_the_checks_and_a_broken_runner_says_what_broke():
    async def fails(model):
        return ("streaming.role", "tools.shape")

    c = await preflighted(fails)
    state = (await c.status("m"))["state"]
    assert state["phase"] == "rolled_back" and state["reason"].endswith(
        "MUST checks failed: streaming.role, tools.shape"
    )

    async def breaks(model):
        raise ValueError("x" * 400)

    reason = (await (await preflighted(breaks)).status("m"))["state"]["reason"]
    said = "preflight: could not run: ValueError: " + "x" * 400
    assert reason.endswith(said[:300]) and not reason.endswith(said[:301])


async def test_a_preflight_waits_for_the_lease_and_a_result_that_cannot_land_is_dropped():
    async def passes(model):
        return ()

    clock = Clock(1001.0)
    store = Scripted(clock)
    assert await store.lease("m", "other", 300.0)
    c = await preflighted(passes, store)
    assert (await c.status("m"))["state"]["phase"] == "preflight"  # another replica runs it

    class Down(Scripted):
        async def swap(self, model, expected_version, new):
            if new.phase != "preflight":
                raise RolloutStoreUnavailable("connection refused")
            return await super().swap(model, expected_version, new)

    c = await preflighted(passes, Down(Clock(1001.0)))
    assert (await c.status("m"))["state"]["phase"] == "preflight"


async def test_a_preflight_without_a_runner_says_so_as_its_failed_check():
    c = await preflighted(None)
    reason = (await c.status("m"))["state"]["reason"]
    assert reason.endswith("MUST checks failed: preflight runner: none configured for this gateway")
