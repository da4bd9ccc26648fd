"""The soak driver (bench/soak.py, `make soak`) run for 20 s, to keep it working:
the report is written, its checks passed, and the disruptions and every kind of
traffic happened. The full 10-minute run is `make soak`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.procs import ROOT


@pytest.mark.slow
def test_a_short_soak_passes_and_writes_its_report(tmp_path):
    out = tmp_path / "soak"
    # In 20 s the warm-up is 4 s and the gateway is still settling in: the 5% RSS
    # bound is for the 10-minute run; here it only has to stay sane.
    run = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--duration", "20", "--out", str(out), "--rss-limit-pct", "25"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((out / "soak.json").read_text())
    assert report["passed"] and all(report["checks"].values())
    assert report["held_gauges_at_end"] and not any(report["held_gauges_at_end"].values())
    assert {"switchyard_live_tickets", "switchyard_quota_leases_held"} <= {
        name.split("{")[0] for name in report["held_gauges_at_end"]
    }
    happened = " ".join(e["what"] for e in report["events"])
    assert "vLLM simulator back" in happened and "Redis back" in happened
    assert report["by_tenant"]["crowded"].get("429", 0) > 0  # over its concurrency limit
    assert (out / "soak.md").read_text().startswith("# Soak: PASSED")
