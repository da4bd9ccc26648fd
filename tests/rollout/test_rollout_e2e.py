"""Rollouts end to end: real simulators, a real Redis, gateway processes, the official
client. Four bad candidates are each rolled back within one analysis window with the
requests that reached them bounded by the step's share; a good one is promoted through
every step with no failed request; a reload and a restart mid-rollout keep its state;
two replicas on one Redis take the same steps. Figures are printed (`-s` shows them).
Their own tier, `make test-rollout` (about 3 minutes; each test well under a minute)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import time

import httpx
import pytest

from tests.procs import SWITCHYARD, metric_samples, start_redis, stopped_after
from tests.rollout.rollout_e2e_kit import (
    ADMIN,
    ADMIN_KEY,
    Traffic,
    by_track,
    gateway,
    rollout_config,
    running,
    serves,
    simulators,
    status,
    until,
)

pytestmark = pytest.mark.rollout


@pytest.fixture
def redis(tmp_path):
    yield from stopped_after(start_redis(tmp_path))


def final(s: dict) -> bool:
    return s["state"]["phase"] in ("promoted", "rolled_back", "paused")


BAD_CANDIDATES = {
    # name: (the candidate simulator's flags, the rollout block's changes, traffic, the gate that must fail)
    # Every 20th candidate request fails: a window judged on 25 of them holds at least one.
    "five_percent_500s": ({"fault": "error_every=20"}, {"min_samples": 25}, {"workers": 10}, "error_rate"),
    # 150 ms against 300 ms: large beside a loaded machine's noise in the stable p95.
    "doubled_ttft": (
        {"stable_ttft_ms": 150, "ttft_ms": 300},
        {"gates": {"ttft_p95_ratio_max": 1.4}},
        {},
        "ttft_p95_ratio",
    ),
    "invalid_tool_call_json": (
        {"fault": "bad_tool_args"},
        {},
        {"tools": True, "stream": False},
        "tool_call_invalid_rate",
    ),
    "usage_counted_differently": (
        {"fault": "prompt_tokens_scale=1.3"},
        {"mirror": {"share": 0.5}},
        {},
        "usage_consistency",
    ),
}


@pytest.mark.parametrize("name", list(BAD_CANDIDATES))
async def test_a_bad_candidate_is_rolled_back_within_one_window(name, tmp_path, redis):
    flags, block, traffic_opts, gate = BAD_CANDIDATES[name]
    with simulators(**flags) as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, **block)
        window_s, share = config["models"]["m"]["rollout"]["window_s"], config["models"]["m"]["rollout"]["steps"][0]
        gw = gateway(tmp_path, config)
        try:
            started = time.monotonic()
            async with running(Traffic([gw.url], **traffic_opts)) as traffic:
                end, seen = await until(gw, final, timeout_s=60)
                took = time.monotonic() - started
            counts = await asyncio.to_thread(by_track, gw)
        finally:
            gw.stop()
    reached = counts["candidate"]
    total = counts["candidate"] + counts["stable"]
    print(
        f"\n{name}: {end['state']['phase']} after {took:.1f} s ({took / window_s:.1f} windows of {window_s} s); "
        f"client requests {traffic.sent}, failed {len(traffic.failed)}; reached the candidate {reached:.0f} "
        f"of {total:.0f} ({reached / max(total, 1):.1%}, step share {share:.0%}); reason: {end['state']['reason']}"
    )
    assert end["state"]["phase"] == "rolled_back", (seen, end["evidence"][:2])
    assert gate in end["state"]["reason"], end["state"]["reason"]
    # The first judged window is the first whole one after the step began: at most two
    # windows and the judging grace (0.75 s), plus the gateway's start, on a loaded machine.
    judged = [e for e in end["evidence"] if e["decision"] != "hold"]
    assert len(judged) == 1 and judged[0]["decision"] == "rollback"
    assert took < 3 * window_s + 10, took
    # Sessions are assigned at the step's share: the candidate's part of the traffic is
    # the share, within four standard deviations of the sessions drawn.
    sd = math.sqrt(share * (1 - share) / 400)
    assert reached / total < share + 4 * sd + 0.05, (reached, total)
    assert seen[-1] == ("rolled_back", 0) and all(step == 0 for _, step in seen)


async def test_a_good_candidate_is_promoted_to_every_request_with_none_failed(tmp_path, redis):
    with simulators() as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, steps=[0.25, 0.5, 1.0])
        gw = gateway(tmp_path, config)
        try:
            started = time.monotonic()
            async with running(Traffic([gw.url])) as traffic:
                end, seen = await until(gw, final, timeout_s=90)
                took = time.monotonic() - started
                await asyncio.sleep(1.0)  # served at 100% a while
            cli = [*SWITCHYARD, "rollout", "status", "m", "--url", gw.url, "--key", ADMIN_KEY]
            shown = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
        finally:
            gw.stop()
    assert shown.returncode == 0, shown.stderr
    assert "model m: promoted" in shown.stdout and "candidate 100%" in shown.stdout
    print(
        f"\ngood candidate: {end['state']['phase']} after {took:.1f} s through {seen}; client requests "
        f"{traffic.sent}, failed {len(traffic.failed)}, answered by the candidate {traffic.candidate_answers}"
    )
    assert end["state"]["phase"] == "promoted", (seen, end["evidence"][:2])
    assert [s for _, s in seen if _ == "step"] == [0, 1]  # the last step, everything, is the promotion
    assert traffic.failed == []
    assert traffic.candidate_answers > 0


async def test_a_reload_and_a_restart_mid_rollout_keep_the_state(tmp_path, redis):
    with simulators() as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, steps=[0.2, 0.5, 1.0], window_s=3.0)
        gw = gateway(tmp_path, config)
        try:
            async with running(Traffic([gw.url])):
                before, _ = await until(gw, lambda s: s["state"]["step"] >= 1 or final(s), timeout_s=60)
                assert before["state"]["phase"] == "step" and before["state"]["step"] == 1, before["state"]
                r = await asyncio.to_thread(httpx.post, gw.url + "/admin/reload", headers=ADMIN, timeout=30)
                assert r.status_code == 200, r.text
                after = await asyncio.to_thread(status, gw)
                assert after["state"]["rollout_id"] == before["state"]["rollout_id"]
                assert after["state"]["step"] >= 1 and after["state"]["phase"] in ("step", "promoted")
        finally:
            gw.stop()
        restarted = gateway(tmp_path, config)
        try:
            again = await asyncio.to_thread(status, restarted)
            assert again["state"]["rollout_id"] == before["state"]["rollout_id"]
            assert again["state"]["step"] >= 1 and again["state"]["version"] >= before["state"]["version"]
            async with running(Traffic([restarted.url])) as traffic:
                end, _ = await until(restarted, final, timeout_s=60)
        finally:
            restarted.stop()
    assert end["state"]["phase"] == "promoted" and traffic.failed == []


async def test_two_replicas_on_one_redis_take_every_step_together(tmp_path, redis):
    """Each replica serves the shares it last read; polled together, they show the same
    phases and steps in the same order, and one replica judged each window."""
    with simulators() as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, steps=[0.2, 0.5, 1.0])
        a, b = gateway(tmp_path, config), gateway(tmp_path, config)
        marks: dict[str, list[tuple]] = {"a": [], "b": []}
        try:
            async with running(Traffic([a.url, b.url])) as traffic:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    now = await asyncio.gather(asyncio.to_thread(serves, a), asyncio.to_thread(serves, b))
                    for name, s in zip(("a", "b"), now, strict=True):
                        mark = (s["phase"], s["step"], s["candidate_share"])
                        if not marks[name] or marks[name][-1] != mark:
                            marks[name].append(mark)
                    if all(s["phase"] in ("promoted", "rolled_back", "paused") for s in now):
                        break
                    await asyncio.sleep(0.1)
            texts = [
                await asyncio.to_thread(lambda g=g: httpx.get(g.url + "/metrics", timeout=10).text) for g in (a, b)
            ]
        finally:
            a.stop()
            b.stop()
    promotions = [
        sum(
            v
            for k, v in metric_samples(t).items()
            if k.startswith("switchyard_rollout_decisions_total{") and 'decision="promote"' in k
        )
        for t in texts
    ]
    print(f"\ntwo replicas: a {marks['a']}\n              b {marks['b']}; windows promoted by each {promotions}")
    steps = [m for m in marks["a"] if m[0] in ("step", "promoted")]
    assert steps == [("step", 0, 0.2), ("step", 1, 0.5), ("promoted", 1, 1.0)], marks
    assert [m for m in marks["b"] if m[0] in ("step", "promoted")] == steps
    assert sum(promotions) == 2  # each window judged once, by one replica or the other
    assert traffic.failed == []


async def test_redis_hung_mid_rollout_fails_no_request_and_keeps_the_step(tmp_path, redis):
    """Redis stopped (SIGSTOP: connections kept, nothing answered) under traffic: every
    client request is still answered, the replica serves the step it had, and once Redis
    answers again the rollout goes on to its promotion."""
    with simulators() as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, steps=[0.25, 0.5, 1.0], window_s=3.0)
        config["quota_store"]["timeout_s"] = 0.3
        gw = gateway(tmp_path, config)
        try:
            async with running(Traffic([gw.url])) as traffic:
                await until(gw, lambda s: s["state"]["phase"] == "step", timeout_s=30)
                held = await asyncio.to_thread(serves, gw)
                os.kill(redis.child.pid, signal.SIGSTOP)
                try:
                    sent = traffic.sent
                    await asyncio.sleep(8.0)  # more than two windows: none can be judged
                    during = await asyncio.to_thread(serves, gw)
                    served_meanwhile = traffic.sent - sent
                finally:
                    os.kill(redis.child.pid, signal.SIGCONT)
                end, _ = await until(gw, final, timeout_s=60)
            errors = await asyncio.to_thread(lambda: httpx.get(gw.url + "/metrics", timeout=10).text)
        finally:
            gw.stop()
    print(f"\nredis hung 8 s: {served_meanwhile} requests served meanwhile at share {during['candidate_share']}")
    assert (during["phase"], during["step"], during["candidate_share"]) == (
        held["phase"],
        held["step"],
        held["candidate_share"],
    )
    assert served_meanwhile > 0 and traffic.failed == []
    assert end["state"]["phase"] == "promoted"
    assert "switchyard_rollout_store_errors_total" in errors


@pytest.mark.parametrize("fault", [None, "status=500"])
async def test_the_preflight_runs_the_conformance_suite_before_the_first_step(fault, tmp_path, redis):
    """`preflight: true`: the candidate alone behind a gateway of its own, judged by the
    conformance suite; a candidate answering 500 to everything is refused, its MUST
    failures named, and never served; a good one starts its first step."""
    flags = {"fault": fault} if fault else {}
    with simulators(**flags) as (stable, cand):
        config = rollout_config(stable.url, cand.url, redis.url, preflight=True)
        gw = gateway(tmp_path, config)
        try:
            async with running(Traffic([gw.url])) as traffic:
                end, seen = await until(gw, lambda s: s["state"]["phase"] in ("step", "rolled_back"), timeout_s=120)
            counts = await asyncio.to_thread(by_track, gw)
        finally:
            gw.stop()
    print(f"\npreflight, candidate fault {fault}: {seen}; {end['state']['reason'][:160]}")
    assert seen[0][0] == "preflight"
    if fault:
        assert (
            end["state"]["phase"] == "rolled_back"
            and "preflight refused: MUST checks failed: " in end["state"]["reason"]
        )
        assert counts["candidate"] == 0 and traffic.failed == []
    else:
        assert end["state"]["phase"] == "step" and end["state"]["reason"] == "preflight passed"
