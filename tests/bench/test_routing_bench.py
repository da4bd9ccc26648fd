"""`make bench-routing` in a tiny configuration (synthetic simulators, seconds per
run): the report has a row per policy and rate with measured numbers, the hot-prefix
and killed-backend sections, and a PNG."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.routing_bench import POLICIES, main


def test_a_tiny_run_reports_every_policy_at_both_rates(tmp_path: Path) -> None:
    out = tmp_path / "routing"
    assert main(["--out", str(out), "--source", "synthetic", "--duration", "2", "--rates", "2,4", "--turns", "2"]) == 0
    result = orjson.loads((out / "result.json").read_bytes())
    rows = {(r["model"], r["rate"]): r for r in result["runs"]}
    assert set(rows) == {(p, rate) for p in POLICIES for rate in (2.0, 4.0)}
    for row in rows.values():
        assert row["requests"] > 0 and row["ok"] == row["requests"]
        assert 0 <= row["hit_rate"] <= 1 and row["ttft_p50_ms"] > 0 and row["goodput_rps"] > 0
        assert sum(row["served"].values()) == row["requests"]  # every request counted by exactly one backend
    # Prefix affinity keeps each system prompt (and each conversation's history) on one backend.
    for rate in (2.0, 4.0):
        assert rows[("prefix_affinity", rate)]["hit_rate"] >= rows[("round_robin", rate)]["hit_rate"]
    assert result["kill"]["lost_before_streaming"] == 0
    assert result["hot"]["requests"] > 0 and result["hot"]["ok"] == result["hot"]["requests"]
    text = (out / "README.md").read_text()
    for policy in POLICIES:
        assert text.count(f"| {policy} |") == 2
    assert "blended precise: not measured" in text and "## One hot prefix" in text and "killed mid-run" in text
    png = (out / "policies.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
