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
    assert {c.key for c in d.lost_must} == {"a", "e"}  # passed, then failed / disappeared
    assert {c.key for c in d.other} == {"d"}  # skip -> pass


def test_a_must_that_passed_and_no_longer_does_is_lost_coverage_whatever_it_became() -> None:
    old = report(
        a=("MUST", "pass"), b=("MUST", "pass"), c=("MUST", "pass"), d=("MUST", "pass"), e=("MUST", "pass"),
        s=("SHOULD", "pass"), k=("MUST", "skip"), g=("MUST", "skip"),
    )  # fmt: skip
    new = report(
        a=("MUST", "skip"), b=("MUST", "na"), c=("MUST", "fail"), d=("MUST", "error"), s=("SHOULD", "skip"),
        k=("MUST", "na"), n=("MUST", "skip"),
    )  # fmt: skip
    d = diff_reports(old, new)
    lost = {c.key: (c.old, c.new) for c in d.lost_must}
    assert lost == {"a": ("pass", "skip"), "b": ("pass", "na"), "c": ("pass", "fail"), "d": ("pass", "error"),
                    "e": ("pass", None)}  # fmt: skip
    # Not lost: a SHOULD, a MUST that never passed (skip -> n/a, skip -> gone), a new skipped MUST.
    assert {c.key for c in d.other} == {"s", "k", "g", "n"}


def test_a_matrix_column_that_disappears_loses_its_must_cells() -> None:
    old = {"matrix": [{"id": "x", "level": "MUST", "cells": {"gateway/a": "pass", "gateway/b": "pass"}}]}
    new = {"matrix": [{"id": "x", "level": "MUST", "cells": {"gateway/a": "pass"}}]}
    assert [(c.key, c.new) for c in diff_reports(old, new).lost_must] == [("gateway/b :: x", None)]


def test_lost_must_coverage_fails_the_gate_and_is_listed_first(tmp_path: Path, capsys) -> None:
    tools = {f"tools_c{i}": ("MUST", "pass") for i in range(10)}
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(report(core=("MUST", "pass"), **tools) | {"server": {"name": "vllm", "version": "1"}}))
    skipped = {k: ("MUST", "skip") for k in tools}
    new.write_text(json.dumps(report(core=("MUST", "pass"), **skipped) | {"server": {"name": "vllm", "version": "2"}}))
    assert main(["conformance", "diff", str(old), str(new)]) == 1  # no failure at all, and still blocked
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "server: vllm 1 -> vllm 2"
    assert out[1] == "lost MUST coverage: 10 (passed in OLD, not in NEW)"
    assert out[2] == "  [MUST] tools.c0: pass -> skip" and "regressions: 0 (0 MUST)" in out
    del skipped["tools_c3"]  # tools.c3 gone from NEW: lost as well
    new.write_text(json.dumps(report(core=("MUST", "pass"), **skipped)))
    assert main(["conformance", "diff", str(old), str(new)]) == 1
    assert "  [MUST] tools.c3: pass -> (absent)" in capsys.readouterr().out


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
