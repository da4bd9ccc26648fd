"""Compare two reports: what regressed, what got fixed, what is new.

Works on run reports (`report.json`) and matrix reports (`matrix.json`, whose
cells are compared as `runtime :: check`). A "new MUST failure" is a MUST cell
that fails (or errors) in NEW and did not fail in OLD, including a check that
did not exist in OLD: that is what blocks an upgrade.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAILING = ("fail", "error")


@dataclass(slots=True)
class Cell:
    key: str
    level: str
    status: str


@dataclass(slots=True)
class Change:
    key: str
    level: str
    old: str | None  # None: the check did not exist in OLD
    new: str | None  # None: the check is gone in NEW


@dataclass(slots=True)
class Diff:
    regressions: list[Change] = field(default_factory=list)  # was not failing, now fails
    fixes: list[Change] = field(default_factory=list)  # was failing, now passes
    other: list[Change] = field(default_factory=list)  # any other status change (skips, added, removed)

    @property
    def new_must_failures(self) -> list[Change]:
        return [c for c in self.regressions if c.level == "MUST"]


def cells(report: dict[str, Any]) -> dict[str, Cell]:
    if "matrix" in report:
        out = {}
        for row in report["matrix"]:
            for runtime, status in row["cells"].items():
                key = f"{runtime} :: {row['id']}"
                out[key] = Cell(key, row["level"], status)
        return out
    return {r["id"]: Cell(r["id"], r["level"], r["status"]) for r in report.get("results", [])}


def diff_reports(old: dict[str, Any], new: dict[str, Any]) -> Diff:
    a, b = cells(old), cells(new)
    d = Diff()
    for key in sorted(set(a) | set(b)):
        before, after = a.get(key), b.get(key)
        level = (after or before).level  # type: ignore[union-attr]
        change = Change(key, level, before.status if before else None, after.status if after else None)
        if change.old == change.new:
            continue
        if change.new in FAILING and change.old not in FAILING:
            d.regressions.append(change)
        elif change.old in FAILING and change.new == "pass":
            d.fixes.append(change)
        else:
            d.other.append(change)
    return d


def load(path: Path) -> dict[str, Any]:
    """A report.json or matrix.json; ValueError (naming the file) for anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not ("matrix" in data or "results" in data):
        raise ValueError(f"{path} is not a conformance report.json or matrix.json")
    return data


def render(d: Diff) -> str:
    def fmt(c: Change) -> str:
        return f"  [{c.level}] {c.key}: {c.old or '(absent)'} -> {c.new or '(absent)'}"

    lines = [f"regressions: {len(d.regressions)} ({len(d.new_must_failures)} MUST)"]
    lines += [fmt(c) for c in d.regressions]
    lines.append(f"fixes: {len(d.fixes)}")
    lines += [fmt(c) for c in d.fixes]
    if d.other:
        lines.append(f"other changes: {len(d.other)}")
        lines += [fmt(c) for c in d.other]
    return "\n".join(lines)
