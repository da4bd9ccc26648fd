"""Compare two reports: what coverage was lost, what regressed, what got fixed, what is new.

Works on run reports (`report.json`) and matrix reports (`matrix.json`, whose
cells are compared as `runtime :: check`). Two things block an upgrade:

- "lost MUST coverage": a MUST cell that passed in OLD and does not pass in NEW,
  whatever it became: fail or error, skip, n/a, or gone from NEW altogether. A
  check that no longer runs proves no more than one that fails.
- a "new MUST failure": a MUST cell that fails (or errors) in NEW and did not fail
  in OLD, including a check that did not exist in OLD.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.server_info import server_info_from

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
    lost_must: list[Change] = field(default_factory=list)  # a MUST that passed and no longer does
    regressions: list[Change] = field(default_factory=list)  # was not failing, now fails
    fixes: list[Change] = field(default_factory=list)  # was failing, now passes
    other: list[Change] = field(default_factory=list)  # any other status change (skips, added, removed)
    servers: tuple[str, str] = ("unidentified", "unidentified")  # OLD's and NEW's server, as each reported itself

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
        if level == "MUST" and change.old == "pass":
            d.lost_must.append(change)
        if change.new in FAILING and change.old not in FAILING:
            d.regressions.append(change)
        elif change.old in FAILING and change.new == "pass":
            d.fixes.append(change)
        elif change not in d.lost_must:
            d.other.append(change)
    d.servers = (server_label(old), server_label(new))
    return d


def server_label(report: dict[str, Any]) -> str:
    """A run report's server (`server` in report.json); a matrix has one per column."""
    if "matrix" in report:
        return "matrix"
    return server_info_from(report.get("server")).label()


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

    lines = [f"server: {d.servers[0]} -> {d.servers[1]}"] if d.servers[0] != "matrix" else []
    lines.append(f"lost MUST coverage: {len(d.lost_must)} (passed in OLD, not in NEW)")
    lines += [fmt(c) for c in d.lost_must]
    lines.append(f"regressions: {len(d.regressions)} ({len(d.new_must_failures)} MUST)")
    lines += [fmt(c) for c in d.regressions]
    lines.append(f"fixes: {len(d.fixes)}")
    lines += [fmt(c) for c in d.fixes]
    if d.other:
        lines.append(f"other changes: {len(d.other)}")
        lines += [fmt(c) for c in d.other]
    return "\n".join(lines)
