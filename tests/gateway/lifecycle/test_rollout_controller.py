"""The rollout controller (gateway/lifecycle/rollout.py) at the sink: records fed as the
request path feeds them, windows closed by a clock the test moves, the store a real
Redis (or the memory store where one replica is the point)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from prometheus_client import CollectorRegistry

from gateway.lifecycle.rollout import RolloutController, UnknownRollout
from gateway.observe.rollout_metrics import RolloutMetrics
from policies.rollout_records import MirrorComparison, TrackRecord, TrackShares
from policies.rollout_state import Plan, TransitionRefused
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore
from stores.rollout_store import RolloutStoreUnavailable
from tests.manual_clock import Clock

W = 2.0
PLAN = Plan(rollout_id="r1", steps=(0.1, 0.5, 1.0), mirror={"share": 0.1}, window_s=W, min_samples=10)


def controller(store, clock, plans=None, replica=None):
    registry = CollectorRegistry()
    plans = plans if plans is not None else {"m": PLAN}
    c = RolloutController(store, lambda: plans, RolloutMetrics(registry), clock=clock, replica=replica)
    c.registry = registry  # type: ignore[attr-defined]
    return c


def metric(c, name, **labels):
    return c.registry.get_sample_value(name, labels)


def feed(c, clock, candidate_failure=None, candidate_ttft=0.1, n=(40, 12), mirror=None):
    """One window's traffic at the controller's sink, spread over the window in progress."""
    start = (clock.now // W) * W
    for i in range(n[0]):
        c.record("m", TrackRecord("stable", start + i * W / n[0], ttft_s=0.1, itl_s=0.01, finish_reason="stop"))
    for i in range(n[1]):
        c.record(
            "m",
            TrackRecord(
                "candidate",
                start + i * W / n[1],
                failure=candidate_failure if i == 0 else None,
                ttft_s=candidate_ttft,
                itl_s=0.01,
                finish_reason="stop",
            ),
        )
    for m in mirror if mirror is not None else [MirrorComparison(start + 0.5) for _ in range(10)]:
        c.compare("m", m)


async def next_window(controllers, clock):
    """Tick into the next window and past its grace: the window just fed is judged."""
    for c in controllers:
        await c.tick()  # pushes what was fed
    clock.now = (clock.now // W + 1) * W + 1.0
    for c in controllers:
        await c.tick()


@pytest.fixture
async def redis_store(redis_server):
    stores = []

    def make():
        s = RedisRolloutStore(redis_server.url, key_prefix="t", timeout_s=0.3)
        stores.append(s)
        return s

    yield make
    for s in stores:
        await s.aclose()


async def test_a_good_candidate_is_promoted_through_every_step(redis_store):
    clock = Clock(1001.0)
    c = controller(redis_store(), clock)
    await c.tick()
    assert c.shares("m") == TrackShares(0.1, 0.1)
    seen = []
    for _ in range(3):
        await next_window([c], clock)  # the window the step began in is not judged
        feed(c, clock)
        await next_window([c], clock)
        seen.append(c.shares("m").candidate)
    assert seen == [0.5, 1.0, 1.0]
    assert (await c.status("m"))["state"]["phase"] == "promoted"
    assert metric(c, "switchyard_rollout_decisions_total", model="m", decision="promote") == 2  # 0.1 -> 0.5 -> all
    assert metric(c, "switchyard_rollout_state", model="m", state="promoted") == 1


async def test_a_failing_candidate_is_rolled_back_in_its_first_window_with_the_evidence(redis_store):
    clock = Clock(1001.0)
    c = controller(redis_store(), clock)
    await c.tick()
    await next_window([c], clock)
    feed(c, clock, candidate_ttft=0.2)  # doubled TTFT
    await next_window([c], clock)
    assert c.shares("m") == TrackShares(0.0, 0.0)
    status = await c.status("m")
    assert status["state"]["phase"] == "rolled_back" and "ttft_p95_ratio" in status["state"]["reason"]
    ttft = next(g for g in status["evidence"][0]["gates"] if g["gate"] == "ttft_p95_ratio")
    assert ttft["verdict"] == "fail" and ttft["value"] == pytest.approx(2.0)
    assert metric(c, "switchyard_rollout_gate_verdict", model="m", gate="ttft_p95_ratio") == -1
    assert metric(c, "switchyard_rollout_candidate_share", model="m") == 0


async def test_too_few_candidate_requests_hold_then_pause_for_a_human(redis_store):
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), window_s=W, min_samples=10, pause_after_holds=2)
    clock = Clock(1001.0)
    c = controller(redis_store(), clock, {"m": plan})
    await c.tick()
    await next_window([c], clock)
    for _ in range(2):
        feed(c, clock, n=(40, 3))
        await next_window([c], clock)
    status = await c.status("m")
    assert status["state"]["phase"] == "paused" and c.shares("m").candidate == 0.1
    assert [e["decision"] for e in status["evidence"]] == ["pause", "hold"]
    await c.act("m", "resume", "ops")
    assert (await c.status("m"))["state"]["phase"] == "step"


async def test_two_replicas_share_one_state_and_judge_each_window_once(redis_store):
    clock = Clock(1001.0)
    a, b = controller(redis_store(), clock, replica="a"), controller(redis_store(), clock, replica="b")
    await a.tick()
    await b.tick()
    for _ in range(2):
        await next_window([a, b], clock)
        feed(a, clock, n=(20, 6))  # each replica sees part of the traffic: only together enough
        feed(b, clock, n=(20, 6))
        await next_window([a, b], clock)
        assert a.shares("m") == b.shares("m")
    assert a.shares("m").candidate == 1.0
    judged = [metric(x, "switchyard_rollout_decisions_total", model="m", decision="promote") or 0 for x in (a, b)]
    assert sum(judged) == 2


async def test_a_restarted_replica_and_a_reload_keep_the_rollout_and_a_changed_block_starts_anew(redis_store):
    clock = Clock(1001.0)
    plans = {"m": PLAN}
    c = controller(redis_store(), clock, plans)
    await c.tick()
    await next_window([c], clock)
    feed(c, clock)
    await next_window([c], clock)
    assert c.shares("m").candidate == 0.5
    await c.aclose()
    restarted = controller(redis_store(), clock, plans)
    assert restarted.shares("m").candidate == 0.0  # nothing read yet: stable only
    await restarted.tick()
    assert restarted.shares("m").candidate == 0.5
    plans["m"] = Plan(
        rollout_id="r2", steps=(0.2, 1.0), window_s=PLAN.window_s, min_samples=PLAN.min_samples
    )  # a changed rollout block
    await restarted.tick()
    status = await restarted.status("m")
    assert status["state"]["rollout_id"] == "r2" and status["state"]["step"] == 0
    assert restarted.shares("m").candidate == 0.2


async def test_redis_hung_keeps_the_last_shares_and_never_raises_on_the_request_path(redis_server, redis_store):
    clock = Clock(1001.0)
    c = controller(redis_store(), clock)
    await c.tick()
    os.kill(redis_server.child.pid, signal.SIGSTOP)
    try:
        feed(c, clock)
        await c.tick()  # the store times out: counted, logged, nothing raised
        assert c.shares("m") == TrackShares(0.1, 0.1)
        assert metric(c, "switchyard_rollout_store_errors_total", model="m") >= 1
        with pytest.raises(RolloutStoreUnavailable):
            await c.act("m", "pause", "ops")
    finally:
        os.kill(redis_server.child.pid, signal.SIGCONT)
    await c.tick()  # the kept records are pushed now
    got = await c.store.window("m", "r1", int(clock.now // W))
    assert len(got.records) == 52


async def test_operator_actions_and_their_refusals():
    clock = Clock(1001.0)
    c = controller(MemoryRolloutStore(clock), clock)
    with pytest.raises(UnknownRollout):
        await c.act("nope", "pause", "ops")
    await c.tick()
    assert (await c.act("m", "pause", "ops")).phase == "paused"
    with pytest.raises(TransitionRefused):
        await c.act("m", "pause", "ops")
    await c.act("m", "resume", "ops")
    assert (await c.act("m", "promote", "ops")).step == 1
    assert (await c.act("m", "abort", "ops")).phase == "rolled_back"
    assert c.shares("m") == TrackShares(0.0, 0.0)
    assert metric(c, "switchyard_rollout_actions_total", model="m", action="abort") == 1


async def test_records_of_models_without_a_rollout_are_dropped_and_buffers_are_bounded():
    clock = Clock(1001.0)
    store = MemoryRolloutStore(clock)
    c = controller(store, clock)
    c.record("m", TrackRecord("stable", 1000.5))  # before the first read: no step runs yet
    await c.tick()
    assert (await store.window("m", "r1", 500)).records == []
    c.record("other", TrackRecord("stable", 1000.5))
    for i in range(20000):
        c.record("m", TrackRecord("candidate", 1000.5 + i * 1e-6))
    await c.tick()
    got = await store.window("m", "r1", 500)
    assert 0 < len(got.records) <= 2000
    assert c.shares("other") == TrackShares()


async def test_a_preflight_without_a_runner_refuses_the_rollout_by_name():
    clock = Clock(1001.0)
    plan = Plan(rollout_id="r1", steps=(0.1, 1.0), preflight=True, window_s=W)
    c = controller(MemoryRolloutStore(clock), clock, {"m": plan})
    await c.tick()
    await c.tick()
    task = c._preflights["m"]
    await task
    status = await c.status("m")
    assert status["state"]["phase"] == "rolled_back" and "preflight" in status["state"]["reason"]


async def test_server_errors_on_the_candidate_roll_it_back(redis_store):
    clock = Clock(1001.0)
    c = controller(redis_store(), clock)
    await c.tick()
    await next_window([c], clock)
    feed(c, clock, candidate_failure="server_error")  # 1 of 12, stable none
    await next_window([c], clock)
    status = await c.status("m")
    assert status["state"]["phase"] == "rolled_back" and "error_rate" in status["state"]["reason"]


class BrokenOnce(MemoryRolloutStore):
    """A store whose first read raises what no store should (a bug, not an outage)."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.broken = True

    async def ensure(self, model, rollout_id, now):
        if self.broken:
            self.broken = False
            raise RuntimeError("a bug in one tick")
        return await super().ensure(model, rollout_id, now)


async def test_a_tick_that_raises_is_logged_and_the_task_goes_on(caplog):
    clock = Clock(1001.0)
    c = RolloutController(
        BrokenOnce(clock), lambda: {"m": PLAN}, RolloutMetrics(CollectorRegistry()), clock=clock, tick_s=0.01
    )
    c.start()
    try:
        for _ in range(500):
            if c.shares("m").candidate == 0.1:
                break
            await asyncio.sleep(0.01)
    finally:
        await c.aclose()
    assert c.shares("m").candidate == 0.1
    assert "rollout tick failed" in caplog.text


def test_a_conformance_report_that_is_not_there_says_the_suite_did_not_run(tmp_path):
    from gateway.lifecycle.rollout_preflight import must_failures

    assert must_failures(tmp_path / "report.json", "no module named openai") == (
        "preflight: the conformance suite did not run: no module named openai",
    )
    (tmp_path / "report.json").write_text(
        '{"results": [{"id": "a", "level": "MUST", "status": "fail"}, {"id": "b", "level": "SHOULD", "status": "fail"},'
        ' {"id": "c", "level": "MUST", "status": "error"}, {"id": "d", "level": "MUST", "status": "pass"}]}'
    )
    assert must_failures(tmp_path / "report.json") == ("a", "c")
