"""`bakeoff compare`: regressions first, tolerance respected, reports refused when not ours."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.compare import compare, load
from tests.bakeoff.report_doc import candidate, document

ROOT = Path(__file__).resolve().parents[2]


def test_regressions_come_first() -> None:
    before = document([candidate("vllm", 8.0, ttft_p99=100.0), candidate("sglang", 4.0)])
    after_sglang = candidate("sglang", 8.0)
    after_vllm = candidate("vllm", 4.0, ttft_p99=300.0)
    after_vllm["stages"][3]["checks"][0]["outcome"] = "fail"
    rows = compare(before, document([after_vllm, after_sglang]))
    kinds = [r["kind"] for r in rows]
    assert kinds == sorted(kinds, key=["regression", "changed", "improvement", "unchanged"].index)
    regressions = {(r["candidate"], r["what"]) for r in rows if r["kind"] == "regression"}
    assert ("vllm", "knee sessions/s") in regressions
    assert ("vllm", "TTFT p99 ms at knee") in regressions
    assert ("vllm", "check production.cancellation") in regressions
    assert ("sglang", "knee sessions/s") in {(r["candidate"], r["what"]) for r in rows if r["kind"] == "improvement"}


def test_a_change_within_the_tolerance_is_unchanged() -> None:
    rows = compare(document([candidate("a", 8.0)]), document([candidate("a", 7.0)]), tolerance=0.25)
    knee = next(r for r in rows if r["what"] == "knee sessions/s")
    assert knee["kind"] == "unchanged" and knee["change"] == pytest.approx(-0.125)


def test_the_command_exits_1_on_a_regression_and_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(document([candidate("x", 8.0)])))
    (tmp_path / "b" / "report.json").write_text(json.dumps(document([candidate("x", 2.0)])))
    cmd = [sys.executable, "-m", "gateway.cli", "bakeoff", "compare"]
    out = subprocess.run([*cmd, str(tmp_path / "a"), str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("| ")][1:]
    assert lines[0].startswith("| REGRESSION | x | knee sessions/s | 8 | 2 | -75% |")
    (tmp_path / "c.json").write_text("{}")
    bad = subprocess.run(
        [*cmd, str(tmp_path / "a"), str(tmp_path / "c.json")], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "not a bake-off report" in bad.stderr
    with pytest.raises(ValueError):
        load(tmp_path / "c.json")
