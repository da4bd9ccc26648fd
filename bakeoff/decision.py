"""The report's verdict, generated from the numbers: which candidates meet the SLOs, at
what rate, with what margin, and what separates them. Pure (report JSON in, text out).

A candidate is *ranked* when it was measured, its conditions are complete
(bakeoff/conditions.py `missing`), its knee exists and no comparability check failed; a
comparability check that failed or warned (not comparable, or another quality level:
other tokens, another template) puts it in a list of its own, never in the same ranking.
"""

from __future__ import annotations

from typing import Any

from bakeoff.conditions import missing


def stage(c: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in c.get("stages", []) if s["stage"] == name), None)


def check(c: dict[str, Any], stage_name: str, check_name: str) -> dict[str, Any] | None:
    s = stage(c, stage_name)
    if s is None:
        return None
    return next((ch for ch in s["checks"] if ch["name"] == check_name), None)


def knee_of(c: dict[str, Any]) -> float | None:
    k = check(c, "measure", "knee")
    return None if k is None else k.get("evidence", {}).get("knee_rate")


def knee_point(c: dict[str, Any]) -> dict[str, Any] | None:
    """The probe at the knee (its summary), or None."""
    k = check(c, "measure", "knee")
    rate = knee_of(c)
    if k is None or rate is None:
        return None
    return next((p for p in points(c) if p["rate"] == rate), None)


def points(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes that decided the search, by rate (an undetermined probe run again longer
    is superseded by its rerun)."""
    k = check(c, "measure", "knee")
    found = [] if k is None else k.get("evidence", {}).get("points", [])
    return sorted((p for p in found if not p.get("superseded")), key=lambda p: p["rate"])


def failed(c: dict[str, Any], stage_name: str) -> list[dict[str, Any]]:
    s = stage(c, stage_name)
    return [] if s is None else [ch for ch in s["checks"] if ch["outcome"] == "fail"]


def flagged(c: dict[str, Any], stage_name: str) -> list[dict[str, Any]]:
    """Checks that failed or warned (in `comparable`: not comparable, or another quality level)."""
    s = stage(c, stage_name)
    return [] if s is None else [ch for ch in s["checks"] if ch["outcome"] in ("fail", "warn")]


def standing(c: dict[str, Any]) -> str:
    """ranked | apart (comparability) | no_knee | eliminated | not_reported | failed_to_start |
    skipped (its runtime is not installed here) | not_run"""
    if c["status"] in ("eliminated", "failed_to_start", "skipped", "not_run"):
        return c["status"]
    if missing(c.get("conditions")):
        return "not_reported"
    if knee_of(c) is None:
        return "no_knee"
    if flagged(c, "comparable"):
        return "apart"
    return "ranked"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


def _stopped_at_max(c: dict[str, Any]) -> bool:
    k = check(c, "measure", "knee")
    return k is not None and k.get("evidence", {}).get("stop_reason") == "max_rate_reached"


def _rank(c: dict[str, Any]) -> tuple[float, float]:
    """Highest knee first; at the same knee, the lower TTFT p99 there."""
    p = knee_point(c)
    ttft = p["summary"]["ttft_ms"]["p99"] if p and p["summary"]["ttft_ms"]["p99"] is not None else float("inf")
    return (-(knee_of(c) or 0.0), ttft)


def paragraph(doc: dict[str, Any]) -> str:
    cands = doc["candidates"]
    slo = doc["plan"]["slo"]
    ranked = sorted((c for c in cands if standing(c) == "ranked"), key=_rank)
    apart = [c for c in cands if standing(c) == "apart"]
    out: list[str] = []
    if not ranked:
        out.append("No candidate met the SLOs at any probed rate with comparable outputs and complete conditions.")
    else:
        best = ranked[0]
        kb = knee_of(best) or 0.0
        p = knee_point(best)
        s = p["summary"] if p else None
        at_most = _stopped_at_max(best)
        head = (
            f"**{best['name']}** sustains the highest rate within the SLOs: {'at least ' if at_most else ''}"
            f"{kb:.3g} sessions/s{' (the plan' + chr(39) + 's max_rate: its knee lies higher)' if at_most else ''} "
            f"({slo['attainment']:.0%} of requests good at {slo['confidence']:.0%} confidence)"
        )
        if s:
            head += (
                f", TTFT p99 {_ms(s['ttft_ms']['p99'])} against {_ms(slo['ttft_ms'])}, "
                f"{s['throughput']['output_tokens_per_s']:.0f} output tokens/s"
            )
        out.append(head + ".")
        for other in ranked[1:]:
            ko = knee_of(other) or 0.0
            po = knee_point(other)
            if ko == kb:
                text = f"{other['name']} meets them up to the same rate"
                if p and po:
                    text += (
                        f"; there its TTFT p99 is {_ms(po['summary']['ttft_ms']['p99'])} against "
                        f"{_ms(p['summary']['ttft_ms']['p99'])} and it serves "
                        f"{po['summary']['throughput']['output_tokens_per_s']:.0f} output tokens/s against "
                        f"{p['summary']['throughput']['output_tokens_per_s']:.0f}"
                    )
                out.append(text + ".")
                continue
            trade = ""
            if p and po:
                t_best, t_other = p["summary"]["ttft_ms"]["p50"], po["summary"]["ttft_ms"]["p50"]
                if t_best is not None and t_other is not None and t_other < t_best:
                    trade = f"; at its own knee its TTFT p50 is lower ({_ms(t_other)} against {_ms(t_best)})"
            out.append(f"{other['name']} meets them up to {ko:.3g} sessions/s ({kb / ko:.2f}x less){trade}.")
    for c in apart:
        names = ", ".join(f"{ch['name']} {ch['outcome']}" for ch in flagged(c, "comparable"))
        out.append(
            f"{c['name']} reaches {knee_of(c) or 0:.3g} sessions/s but is ranked apart: its outputs are not "
            f"comparable ({names})."
        )
    for c in cands:
        st = standing(c)
        if st == "no_knee":
            out.append(f"{c['name']} met the SLOs at no probed rate.")
        elif st == "eliminated":
            names = ", ".join(f"{ch['name']}" for ch in failed(c, "eliminate"))
            out.append(f"{c['name']} was eliminated ({names}) and not measured.")
        elif st == "not_reported":
            out.append(
                f"{c['name']}'s numbers are not reported: conditions missing ({', '.join(missing(c.get('conditions')))})."
            )
        elif st == "failed_to_start":
            out.append(f"{c['name']} did not start.")
        elif st == "skipped":
            out.append(f"{c['name']} was skipped: {c['error']}.")
        production = failed(c, "production")
        if production and st in ("ranked", "apart"):
            out.append(f"{c['name']} failed production checks: {', '.join(ch['name'] for ch in production)}.")
    return " ".join(out)
