"""A bake-off stopped by SIGTERM mid-run leaves no child behind: every runtime and gateway
it started is stopped before it exits (with 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PLAN = {
    "budget_s": 300,
    "candidates": [
        {
            "name": "slow",
            "backend": {"adapter": "vllm"},
            "launch": {"kind": "simulator", "simulator": "vllm", "options": {"ttft_ms": 200, "itl_ms": 50}},
        },
    ],  # fmt: skip
    "workload": {"generator": {"requests": 200}},
    "slo": {"ttft_ms": 1000},
    "measure": {"start_rate": 1, "max_rate": 2, "min_probe_s": 0},
}


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (the command's and its children's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_mid_run_stops_every_child(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    marker = f"BAKEOFF_SIGNAL_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "bakeoff", "run", str(plan), "--report", str(tmp_path / "r")],
            cwd=ROOT,
            env={**os.environ, key: value},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "[slow] measure ..." not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        assert len(_marked(marker)) >= 3  # the command, the simulator, the gateway
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped by SIGTERM" in log.read_text()
    assert _marked(marker) == []
    assert not (tmp_path / "r").exists()
