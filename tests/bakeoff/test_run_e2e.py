"""`switchyard bakeoff run` end to end on two simulator candidates (real processes: the
simulators and a gateway each), with a tiny budget: all three report files are written,
the good candidate goes through every stage and has a knee, and the candidate built to
fail (it answers every generation 500) is eliminated, named among the failures, and
never measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PLAN = {
    "seed": 3,
    "budget_s": 240,
    "model": "m",
    "budgets": {"measure": 90},
    "candidates": [
        {
            "name": "good",
            "backend": {"adapter": "vllm"},
            "launch": {
                "kind": "simulator",
                "simulator": "vllm",
                "options": {"ttft_ms": 5, "itl_ms": 2, "output_tokens": 8, "enable_prompt_tokens_details": True},
            },
        },
        {
            "name": "broken",
            "backend": {"adapter": "sglang"},
            "launch": {
                "kind": "simulator",
                "simulator": "sglang",
                "options": {"ttft_ms": 5, "itl_ms": 2, "output_tokens": 8, "fault": "status=500"},
            },
        },
    ],  # fmt: skip
    "workload": {
        "generator": {"requests": 12, "mix": [{"input_tokens": 16, "output_tokens": 8}], "tenants": {"a": 1, "b": 1}}
    },  # fmt: skip
    "slo": {"ttft_ms": 2000, "tpot_ms": 500, "attainment": 0.8, "confidence": 0.8},
    "requirements": {"features": ["streaming"], "conformance_profiles": []},
    "production": {"checks": ["cancel", "overload"], "cancel_streams": 2, "overload_requests": 16, "settle_s": 5},
    "measure": {"start_rate": 8, "max_rate": 16, "max_probes": 2, "cold_warm": True, "min_probe_s": 1},
}


def test_a_bakeoff_run_writes_the_three_reports_and_names_the_broken_candidate(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "gateway.cli", "bakeoff", "run", str(plan), "--report", str(out), "--no-plots"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p.name for p in out.iterdir()} >= {"report.json", "report.md", "report.html"}
    doc = json.loads((out / "report.json").read_text())
    by = {c["name"]: c for c in doc["candidates"]}
    stages = {c: {s["stage"]: s for s in by[c]["stages"]} for c in by}
    assert list(stages["good"]) == ["eliminate", "comparable", "measure", "production"]
    knee = next(ch for ch in stages["good"]["measure"]["checks"] if ch["name"] == "knee")
    assert knee["outcome"] == "pass" and knee["evidence"]["knee_rate"] >= 8
    assert all(ch["outcome"] != "fail" for s in by["good"]["stages"] for ch in s["checks"]), by["good"]["stages"]
    assert by["good"]["conditions"]["runtime"]["name"] == "vllm"
    # the runtime's own metrics were sampled beside the gateway's
    series = knee["evidence"]["points"][0]["runtime_metrics"]["runtime"]["series"]
    assert "vllm:num_requests_running" in series
    assert by["broken"]["status"] == "eliminated"
    failed = [ch["name"] for ch in stages["broken"]["eliminate"]["checks"] if ch["outcome"] == "fail"]
    assert "feature:streaming" in failed
    assert [ch["detail"] for ch in stages["broken"]["measure"]["checks"]] == ["eliminated"]
    md = (out / "report.md").read_text()
    failures = md[md.index("## Failures and eliminations") : md.index("## Summary")]
    assert "| broken | eliminate | feature:streaming |" in failures and "| good |" not in failures
    assert md.index("**good** sustains") < md.index("## Failures")
    assert "broken was eliminated (feature:streaming" in md
