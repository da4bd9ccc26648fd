"""`switchyard bakeoff compare A B`: two bake-off reports (an upgrade: the same runtime
before and after), regressions first.

For each candidate in both: a knee that fell by more than `tolerance` (relative) is a
regression, one that rose by more an improvement; so are the goodput, TTFT p99 and the
failure rate at the knee, and a check that passed in A and fails in B (or the reverse).
A candidate in one report only is listed as added or removed. The default tolerance is the
run-to-run tolerance docs/bakeoff.md states for knees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from bakeoff.decision import knee_of, knee_point
from bakeoff.run import REPORT_KIND

Kind = Literal["regression", "improvement", "unchanged", "changed"]
DEFAULT_TOLERANCE = 0.25


def load(path: Path) -> dict[str, Any]:
    p = path / "report.json" if path.is_dir() else path
    doc = json.loads(p.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != REPORT_KIND:
        raise ValueError(f"{p}: not a bake-off report (kind {REPORT_KIND!r})")
    return doc


def _relative(name: str, a: float | None, b: float | None, higher_is_better: bool, tol: float) -> dict[str, Any]:
    if a is None or b is None:
        kind: Kind = "unchanged" if a == b else "changed"
        return {"what": name, "a": a, "b": b, "kind": kind}
    if a == 0:
        change = 0.0 if b == 0 else float("inf")
    else:
        change = (b - a) / abs(a)
    worse = change < -tol if higher_is_better else change > tol
    better = change > tol if higher_is_better else change < -tol
    kind = "regression" if worse else "improvement" if better else "unchanged"
    return {"what": name, "a": a, "b": b, "change": change, "kind": kind}


def _outcomes(c: dict[str, Any]) -> dict[str, str]:
    return {f"{s['stage']}.{ch['name']}": ch["outcome"] for s in c["stages"] for ch in s["checks"]}


def compare(a: dict[str, Any], b: dict[str, Any], tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """Every difference, regressions first, then changes, improvements, the unchanged."""
    rows: list[dict[str, Any]] = []
    ca = {c["name"]: c for c in a["candidates"]}
    cb = {c["name"]: c for c in b["candidates"]}
    for name in sorted(ca.keys() - cb.keys()):
        rows.append({"candidate": name, "what": "candidate", "a": "present", "b": "absent", "kind": "changed"})
    for name in sorted(cb.keys() - ca.keys()):
        rows.append({"candidate": name, "what": "candidate", "a": "absent", "b": "present", "kind": "changed"})
    for name in sorted(ca.keys() & cb.keys()):
        x, y = ca[name], cb[name]
        found = [_relative("knee sessions/s", knee_of(x), knee_of(y), True, tolerance)]
        px, py = knee_point(x), knee_point(y)
        if px and py:
            sx, sy = px["summary"], py["summary"]
            found.append(_relative("goodput req/s at knee", sx["goodput"]["requests_per_s"],
                                   sy["goodput"]["requests_per_s"], True, tolerance))  # fmt: skip
            found.append(_relative("TTFT p99 ms at knee", sx["ttft_ms"]["p99"], sy["ttft_ms"]["p99"], False, tolerance))
            fx, fy = sx["failure_rate"], sy["failure_rate"]
            kind: Kind = "regression" if fy > fx else "improvement" if fy < fx else "unchanged"
            found.append({"what": "failure rate at knee", "a": fx, "b": fy, "kind": kind})
        if x["status"] != y["status"]:
            worse = y["status"] != "measured"
            found.append(
                {"what": "status", "a": x["status"], "b": y["status"], "kind": "regression" if worse else "improvement"}
            )
        ox, oy = _outcomes(x), _outcomes(y)
        for check in sorted(ox.keys() & oy.keys()):
            if ox[check] != oy[check]:
                kind = "regression" if oy[check] == "fail" else "improvement" if ox[check] == "fail" else "changed"
                found.append({"what": f"check {check}", "a": ox[check], "b": oy[check], "kind": kind})
        rows += [{"candidate": name, **r} for r in found]
    order = {"regression": 0, "changed": 1, "improvement": 2, "unchanged": 3}
    return sorted(rows, key=lambda r: order[r["kind"]])


def _v(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def markdown(rows: list[dict[str, Any]], a: str, b: str, tolerance: float) -> str:
    regressions = sum(r["kind"] == "regression" for r in rows)
    lines = [
        f"# Bake-off comparison: {a} -> {b}",
        "",
        f"{regressions} regression(s); a relative change within {tolerance:.0%} counts as unchanged.",
        "",
        "| kind | candidate | what | A | B | change |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        change = f"{r['change']:+.0%}" if isinstance(r.get("change"), float) else ""
        lines.append(f"| {r['kind'].upper() if r['kind'] == 'regression' else r['kind']} | {r['candidate']} "
                     f"| {r['what']} | {_v(r['a'])} | {_v(r['b'])} | {change} |")  # fmt: skip
    return "\n".join([*lines, ""])
