"""Multi-turn conversations, shared prefixes and trace replay through the runner."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest

from bench.benchmark import BenchOptions, plan_for
from bench.client import Client, ClientConfig
from bench.runner import LoadPlan, Runner
from bench.workloads import shared_prefix, synthetic


def reset_stats(base: str) -> None:
    urllib.request.urlopen(urllib.request.Request(base + "/_sim/reset", method="POST")).close()


def stats_bodies(base: str) -> list[dict]:
    with urllib.request.urlopen(base + "/_sim/stats") as r:
        return orjson.loads(r.read())["bodies"]


async def run(base: str, plan: LoadPlan):
    async with Client(ClientConfig(base_url=base, model="m")) as client:
        return await Runner(client, plan).run()


async def test_multi_turn_sends_real_answers_as_history(upstream: str) -> None:
    reset_stats(upstream)
    records = await run(upstream, LoadPlan(synthetic(2, 5, 3, turns=3), concurrency=2))
    assert len(records) == 6 and all(r.outcome == "ok" for r in records)
    third = [b for b in stats_bodies(upstream) if len(b["messages"]) == 5]
    assert len(third) == 2
    msgs = third[0]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == "alpha bravo charlie"  # the simulator's actual answer
    by_session = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    for turns in by_session.values():
        a, b, _ = sorted(turns, key=lambda r: r.turn)
        assert b.sent_s >= a.sent_s + a.end_s  # turn 2 waits for turn 1's answer


async def test_shared_prefix_leads_every_request(upstream: str) -> None:
    reset_stats(upstream)
    records = await run(upstream, LoadPlan(shared_prefix(2, 3, 10, 4, 2), concurrency=3))
    assert all(r.outcome == "ok" for r in records)
    systems = [b["messages"][0]["content"] for b in stats_bodies(upstream)]
    assert len(systems) == 6 and len(set(systems)) == 2


async def test_trace_replay_keeps_the_trace_timing(upstream: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            orjson.dumps({"timestamp": 50.0 + t, "input_tokens": 4, "output_tokens": 2}).decode() + "\n"
            for t in (0.0, 0.2, 0.25, 0.6)
        )
    )
    o = BenchOptions(base_url=upstream, model="m", out_dir=tmp_path, trace=trace, time_scale=0.5)
    plan = plan_for(o, None)
    assert plan.arrivals == pytest.approx([0.0, 0.1, 0.125, 0.3])
    records = await run(upstream, plan)
    assert [r.sent_s for r in records] == pytest.approx([0.0, 0.1, 0.125, 0.3], abs=0.03)
    assert all(r.max_tokens == 2 for r in records)
