"""`switchyard bench compare A.json B.json`: the same figures side by side with
B/A ratios, for two runs (result.json) or two sweeps (sweep.json)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.report import RUN_KIND, SWEEP_KIND

Getter = Callable[[dict[str, Any]], float | None]


def _percentile_getter(key: str, p: str) -> Getter:
    return lambda s: s[key][p]


# (label, how to read it from a summary, True if lower is better)
RUN_ROWS: list[tuple[str, Getter, bool]] = [
    ("requests/s", lambda s: s["throughput"]["requests_per_s"], False),
    ("output tokens/s", lambda s: s["throughput"]["output_tokens_per_s"], False),
    ("goodput requests/s", lambda s: s["goodput"]["requests_per_s"], False),
    ("goodput fraction", lambda s: s["goodput"]["fraction"], False),
    ("failure rate", lambda s: s["failure_rate"], True),
    *[
        (f"{label} {p} ms", _percentile_getter(key, p), True)
        for key, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "e2e"))
        for p in ("p50", "p90", "p99")
    ],
]


def load(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a bench report ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") not in (RUN_KIND, SWEEP_KIND):
        raise ValueError(f"{path}: not a switchyard bench result.json or sweep.json")
    return doc


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return b / a


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, get, lower_better in RUN_ROWS:
        va, vb = get(a["summary"]), get(b["summary"])
        r = _ratio(va, vb)
        better = None if r is None or r == 1 else ("B" if (r < 1) == lower_better else "A")
        rows.append({"metric": label, "a": va, "b": vb, "ratio_b_over_a": r, "better": better})
    return rows


def render(path_a: Path, path_b: Path) -> str:
    a, b = load(path_a), load(path_b)
    if a["kind"] != b["kind"]:
        raise ValueError("compare two runs or two sweeps, not one of each")
    lines = [f"A: {path_a}", f"B: {path_b}", ""]
    if a["kind"] == SWEEP_KIND:
        lines += [
            f"highest rate meeting the SLO: A {a['best_rate']}, B {b['best_rate']}",
            "",
            "| offered req/s | goodput A | goodput B | B/A |",
            "|---|---|---|---|",
        ]
        pb = {p["rate"]: p for p in b["points"]}
        for p in a["points"]:
            q = pb.get(p["rate"])
            ga = p["summary"]["goodput"]["requests_per_s"]
            gb = q["summary"]["goodput"]["requests_per_s"] if q else None
            lines.append(f"| {p['rate']:g} | {_num(ga)} | {_num(gb)} | {_num(_ratio(ga, gb))} |")
        return "\n".join(lines) + "\n"
    lines += ["| metric | A | B | B/A | better |", "|---|---|---|---|---|"]
    for row in compare_runs(a, b):
        lines.append(
            f"| {row['metric']} | {_num(row['a'])} | {_num(row['b'])} | "
            f"{_num(row['ratio_b_over_a'])} | {row['better'] or '='} |"
        )
    return "\n".join(lines) + "\n"
