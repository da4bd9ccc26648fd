"""`make bench-routing` in a tiny configuration (synthetic simulators, seconds per
run; three native engines on builtin:tiny in the gateway): the report has a row per
pool, policy and rate with measured numbers, blended precise among the native ones,
the hot-prefix and killed-backend sections, and a PNG."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.routing_bench import NATIVE, main
from bench.routing_config import UNEVENTED_POLICIES, RoutingBenchConfig
from bench.routing_workload import sessions

RATES = (2.0, 4.0)
NATIVE_POLICIES = ("round_robin", "blended", "blended_precise")  # a few, to keep it to seconds


def check_rows(runs: list[dict], policies: tuple[str, ...], backends: tuple[str, ...] | None = None) -> dict:
    rows = {(r["policy"], r["rate"]): r for r in runs}
    assert set(rows) == {(p, rate) for p in policies for rate in RATES}
    for row in rows.values():
        assert row["requests"] > 0 and row["ok"] == row["requests"]
        assert 0 <= row["hit_rate"] <= 1 and row["ttft_p50_ms"] > 0 and row["goodput_rps"] >= 0
        assert sum(row["served"].values()) == row["requests"]  # every request counted by exactly one backend
        if backends is not None:
            assert set(row["served"]) == set(backends)
    return rows


def check_goodput(runs: list[dict]) -> None:
    """Goodput is judged against the SLO; how many requests meet it is the machine's load's
    business, so each run is checked where its own times decide: all within, or none."""
    slo = RoutingBenchConfig().slo
    assert slo.ttft_ms is not None and slo.tpot_ms is not None and runs
    for run in runs:
        ttft_ms, tpot_ms = [1000 * t for t in run["ttft_s"]], [1000 * t for t in run["tpot_s"]]
        if max(ttft_ms) <= slo.ttft_ms and max(tpot_ms, default=0) <= slo.tpot_ms:
            assert run["goodput_rps"] == run["ok"] / run["duration_s"]
        if min(ttft_ms) > slo.ttft_ms:
            assert run["goodput_rps"] == 0


def test_a_tiny_run_reports_every_policy_at_both_rates(tmp_path: Path) -> None:
    out = tmp_path / "routing"
    argv = ["--out", str(out), "--source", "synthetic", "--duration", "2", "--rates", "2,4", "--sim-rates", "2,4"]
    argv += ["--turns", "2"]
    argv += [
        "--native-duration",
        "2",
        "--native-policies",
        ",".join(NATIVE_POLICIES),
        "--repeats",
        "1",
        "--sim-repeats",
        "1",
    ]
    assert main(argv) == 0
    result = orjson.loads((out / "result.json").read_bytes())
    rows = check_rows(result["pooled"], UNEVENTED_POLICIES)  # no KV events: no blended precise
    assert len(result["runs"]) == len(UNEVENTED_POLICIES) * len(RATES)  # the simulators: one run each here
    # Prefix affinity keeps each system prompt (and each conversation's history) on one backend.
    for rate in RATES:
        assert rows[("prefix_affinity", rate)]["hit_rate"] >= rows[("round_robin", rate)]["hit_rate"]
    # The native pool: its engines' own counters, read from the gateway, per engine.
    native = check_rows(result["native_pooled"], NATIVE_POLICIES, NATIVE)
    check_goodput(result["runs"] + result["native_runs"])
    # Every turn after the first repeats its conversation, so engines that serve requests find prefixes.
    assert all(native[("blended_precise", rate)]["hit_rate"] > 0 for rate in RATES)
    assert result["kill"]["lost_before_streaming"] == 0
    assert result["hot"]["requests"] > 0 and result["hot"]["ok"] == result["hot"]["requests"]
    text = (out / "README.md").read_text()
    for policy in UNEVENTED_POLICIES:
        assert text.count(f"| {policy} |") == 2 + 2 * (policy in NATIVE_POLICIES)
    assert text.count("| blended_precise |") == 2 and "## Three native engines in the gateway" in text
    assert text.count("best TTFT p99 **") == 2  # the goal, judged at each rate
    assert "## One hot prefix" in text and "killed mid-run" in text
    png = (out / "policies.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_a_policy_a_pool_cannot_run_is_refused(tmp_path: Path) -> None:
    # blended_precise over simulators that publish no KV events would read nothing: refused.
    for source in ("engine", "synthetic"):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path), "--source", source, "--policies", "blended_precise"])
    assert not (tmp_path / "result.json").exists()


def test_every_policy_of_a_rate_gets_one_workload_under_a_label_of_its_own():
    cfg = RoutingBenchConfig()
    a, b = sessions(cfg, "native-prefix_affinity@5", 20), sessions(cfg, "native-blended_precise@5", 20)
    label = [c["system"].split("]")[0].split()[-1] for c in a]  # which of the system prompts, per session
    assert label == [c["system"].split("]")[0].split()[-1] for c in b] and len(set(label)) > 1
    # ...but no text in common at its start, so no run finds what another cached; of one length, one cost.
    assert all(x["system"][:8] != y["system"][:8] and len(x["system"]) == len(y["system"]) for x, y in zip(a, b))


def test_the_native_pool_alone_prints_its_table_and_writes_each_request(tmp_path: Path, capsys) -> None:
    argv = ["--native-only", "--out", str(tmp_path), "--rates", "2", "--native-duration", "2", "--turns", "2"]
    assert main([*argv, "--native-policies", "round_robin,blended_precise", "--repeats", "2"]) == 0
    result = orjson.loads((tmp_path / "result.json").read_bytes())
    assert result["runs"] == [] and "hot" not in result and not (tmp_path / "README.md").exists()
    runs = result["native_runs"]
    # Two repetitions, the second in the other order, each on a label (and so a cache) of its own.
    assert [(r["repetition"], r["policy"]) for r in runs] == [
        (0, "round_robin"),
        (0, "blended_precise"),
        (1, "blended_precise"),
        (1, "round_robin"),
    ]
    assert len({r["tag"] for r in runs}) == 4
    for run in runs:
        assert len(run["per_request"]) == run["ok"] == run["requests"] > 0
        assert all(ttft > 0 and prompt > 0 for _, _, _, ttft, prompt, _ in run["per_request"])
    pooled = {r["policy"]: r for r in result["native_pooled"]}
    assert set(pooled) == {"round_robin", "blended_precise"}
    for policy, row in pooled.items():
        mine = [r for r in runs if r["policy"] == policy]
        assert row["repeats"] == 2 and row["requests"] == sum(r["requests"] for r in mine)
        lo, hi = row["ttft_p99_spread_ms"]
        assert lo == min(r["ttft_p99_ms"] for r in mine) and hi == max(r["ttft_p99_ms"] for r in mine)
    assert "| blended_precise | 2.000 |" in capsys.readouterr().out
