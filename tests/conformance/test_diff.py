"""`conformance diff`: regressions, fixes, and the exit status on a new MUST failure."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cli import main
from conformance.diff import diff_reports


def report(**statuses: tuple[str, str]) -> dict:
    return {
        "results": [
            {"id": cid.replace("_", "."), "level": level, "status": status} for cid, (level, status) in statuses.items()
        ]
    }


def test_regressions_fixes_and_other_changes() -> None:
    old = report(a=("MUST", "pass"), b=("SHOULD", "pass"), c=("MUST", "fail"), d=("MUST", "skip"), e=("MUST", "pass"))
    new = report(a=("MUST", "fail"), b=("SHOULD", "error"), c=("MUST", "pass"), d=("MUST", "pass"), f=("MUST", "fail"))
    d = diff_reports(old, new)
    assert {c.key for c in d.regressions} == {"a", "b", "f"}  # f is new and failing: it counts
    assert {c.key for c in d.new_must_failures} == {"a", "f"}
    assert [c.key for c in d.fixes] == ["c"]
    assert {c.key for c in d.other} == {"d", "e"}  # skip -> pass, and a check that disappeared


def test_a_failure_that_was_already_failing_is_not_new() -> None:
    d = diff_reports(report(a=("MUST", "fail")), report(a=("MUST", "error")))
    assert d.regressions == [] and d.new_must_failures == []


def test_matrix_reports_are_compared_cell_by_cell() -> None:
    def matrix(cell: str) -> dict:
        return {"matrix": [{"id": "x", "level": "MUST", "cells": {"gateway/a": "pass", "gateway/b": cell}}]}

    d = diff_reports(matrix("pass"), matrix("fail"))
    assert [c.key for c in d.new_must_failures] == ["gateway/b :: x"]


def test_cli_exit_status(tmp_path: Path, capsys) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(report(a=("MUST", "pass"), b=("SHOULD", "pass"))))
    new.write_text(json.dumps(report(a=("MUST", "pass"), b=("SHOULD", "fail"))))
    assert main(["conformance", "diff", str(old), str(new)]) == 0  # a SHOULD regression is listed, not blocking
    assert "[SHOULD] b: pass -> fail" in capsys.readouterr().out
    new.write_text(json.dumps(report(a=("MUST", "fail"), b=("SHOULD", "pass"))))
    assert main(["conformance", "diff", str(old), str(new)]) == 1
