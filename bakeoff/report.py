"""The bake-off report: `report.json` (everything, read back by `bakeoff compare`),
`report.md` and `report.html` (the same blocks), and the figures (bakeoff/report_plots.py).

Order: the decision paragraph, then failures and eliminations, then one section per
candidate: its stages' checks, its rate sweep (goodput at each rate, p50/p95/p99 of
TTFT/ITL/TPOT/E2E, failure rates, cache hit rates), cold against warm, the runtime's own
metrics at the knee, and its conditions. A candidate whose conditions are incomplete has
its numbers withheld (bakeoff/conditions.py `missing`).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from bakeoff.conditions import missing
from bakeoff.decision import check, failed, knee_of, knee_point, paragraph, standing

Block = tuple[str, Any]  # ("h1"|"h2"|"h3"|"p"|"table"|"img"|"pre", content)


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _dist(s: dict[str, Any], key: str) -> str:
    d = s[key]
    return "/".join(_f(d.get(p), 0) for p in ("p50", "p95", "p99"))


# what a rerun of a rate was for (bakeoff/knee.py `rerun`)
RERUN_NOTE = {"longer": " (rerun twice as long)", "confirm": " (rerun to confirm a failure)"}


def sweep_rows(points: list[dict[str, Any]]) -> list[list[str]]:
    header = [
        "offered/s", "verdict", "good/judged", "Wilson interval", "goodput req/s", "output tok/s",
        "TTFT p50/95/99 ms", "ITL p50/95/99 ms", "TPOT p50/95/99 ms", "E2E p50/95/99 ms", "failure rate",
        "cache hit %",
    ]  # fmt: skip
    rows = [header]
    for p in sorted(points, key=lambda p: p["rate"]):  # stable: a rerun stays after its first run
        s = p["summary"]
        rows.append([
            f"{p['rate']:.3g}", p["verdict"] + (f" ({p['why']})" if p["why"] else "")
            + RERUN_NOTE.get(p.get("rerun") or "", "") + (" (run again: next row)" if p.get("superseded") else ""),
            f"{p['good']}/{p['judged']}",
            f"{p['interval'][0]:.2f}-{p['interval'][1]:.2f}", _f(s["goodput"]["requests_per_s"], 2),
            _f(s["throughput"]["output_tokens_per_s"], 0), _dist(s, "ttft_ms"), _dist(s, "itl_ms"),
            _dist(s, "tpot_ms"), _dist(s, "e2e_ms"), f"{s['failure_rate']:.1%}", _f(s["cache_hit_pct"], 0),
        ])  # fmt: skip
    return rows


def _checks_rows(c: dict[str, Any]) -> list[list[str]]:
    rows = [["stage", "check", "outcome", "detail"]]
    for s in c["stages"]:
        for ch in s["checks"]:
            rows.append([s["stage"], ch["name"], ch["outcome"].upper() if ch["outcome"] == "fail" else ch["outcome"],
                         ch["detail"]])  # fmt: skip
    return rows


def _runtime_rows(point: dict[str, Any] | None) -> list[list[str]]:
    rows = [["source", "series", "max", "mean", "first", "last"]]
    if point is None:
        return rows
    for source, data in point["runtime_metrics"].items():
        for name, v in data["series"].items():
            rows.append([source, name, _f(v["max"], 2), _f(v["mean"], 2), _f(v["first"], 2), _f(v["last"], 2)])
    return rows


def _conditions_block(cond: dict[str, Any]) -> str:
    return json.dumps(cond, indent=1, sort_keys=True, default=str)


def blocks(doc: dict[str, Any], plots: list[str]) -> list[Block]:
    plan = doc["plan"]
    slo = plan["slo"]
    bounds = ", ".join(f"{k} <= {v:g}" for k, v in slo.items() if k.endswith("_ms") and v is not None)
    out: list[Block] = [
        ("h1", "Switchyard bake-off"),
        (
            "p",
            f"Workload: {doc['workload']['description']} ({doc['workload']['requests']} requests a probe, "
            f"tenants {', '.join(doc['workload']['tenants'])}, sha256 {doc['workload']['sha256'][:16]}); seed "
            f"{plan['seed']}; plan sha256 {doc['plan_sha256'][:16]}. SLO: {bounds}; failure rate <= "
            f"{slo['error_rate']:.1%}; target attainment {slo['attainment']:.0%} decided by a Wilson interval at "
            f"{slo['confidence']:.0%} confidence. Run took {doc['seconds']:.0f} s.",
        ),  # fmt: skip
        ("h2", "Decision"),
        ("p", paragraph(doc)),
        ("h2", "Failures and eliminations"),
    ]
    bad = []
    for c in doc["candidates"]:
        if c.get("error"):
            bad.append([c["name"], "start", "skip" if c["status"] == "skipped" else "error", c["error"][-300:]])
        for s in c["stages"]:
            for ch in s["checks"]:
                if ch["outcome"] == "fail":
                    bad.append([c["name"], s["stage"], ch["name"], ch["detail"]])
    out.append(("table", [["candidate", "stage", "check", "detail"], *bad]) if bad else ("p", "None."))
    out += [("h2", "Summary"), ("table", _summary_rows(doc))]
    for name in plots:
        out.append(("img", name))
    for c in doc["candidates"]:
        out += [("h2", f"Candidate {c['name']}"), ("p", f"Status: {c['status']}; standing: {standing(c)}.")]
        out += [("h3", "Checks"), ("table", _checks_rows(c))]
        gaps = missing(c.get("conditions"))
        if gaps and c["status"] == "measured":
            out.append(("p", f"**Numbers withheld: conditions missing ({', '.join(gaps)}).**"))
            continue
        knee = check(c, "measure", "knee")
        if knee and knee["evidence"].get("points"):
            out += [("h3", "Rate sweep (p50/p95/p99)"), ("table", sweep_rows(knee["evidence"]["points"]))]
        cw = check(c, "measure", "cold_warm")
        if cw and cw.get("evidence"):
            phases = [{"rate": v["rate"], "verdict": k, "good": v["summary"]["goodput"]["good"],
                       "judged": v["summary"]["requests"]["ok"] + v["summary"]["requests"]["failed"],
                       "interval": [0.0, 1.0], "why": "", "summary": v["summary"]}
                      for k, v in cw["evidence"].items()]  # fmt: skip
            out += [("h3", "Cold then warm caches (verdict column: the phase)"), ("table", sweep_rows(phases))]
        rate = knee_of(c)
        point = knee_point(c)
        if point is not None:
            out += [("h3", f"Runtime and gateway metrics at the knee ({rate:.3g}/s)"), ("table", _runtime_rows(point))]
        if c.get("conditions"):
            out += [("h3", "Conditions"), ("pre", _conditions_block(c["conditions"]))]
    out += [
        ("h2", "Definitions"),
        ("table", [["term", "definition"], *[[k, v] for k, v in doc["definitions"].items()]]),
    ]
    return out


def _summary_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = [["candidate", "runtime", "standing", "knee sessions/s", "goodput req/s at knee", "TTFT p99 at knee ms",
             "E2E p99 at knee ms", "failed checks"]]  # fmt: skip
    for c in doc["candidates"]:
        cond = c.get("conditions") or {}
        rt = cond.get("runtime", {})
        runtime = f"{rt.get('name') or '?'} {rt.get('version') or ''}".strip() if rt else "-"
        rate = knee_of(c)
        p = knee_point(c)
        s = p["summary"] if p else None
        nfail = sum(len(failed(c, st)) for st in ("eliminate", "comparable", "measure", "production"))
        rows.append([
            c["name"], runtime, standing(c), _f(rate, 2) if rate is not None else "-",
            _f(s["goodput"]["requests_per_s"], 2) if s else "-", _f(s["ttft_ms"]["p99"], 0) if s else "-",
            _f(s["e2e_ms"]["p99"], 0) if s else "-", str(nfail),
        ])  # fmt: skip
    return rows


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(bl: list[Block]) -> str:
    lines: list[str] = []
    for kind, content in bl:
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + content, ""]
        elif kind == "p":
            lines += [content, ""]
        elif kind == "table":
            head, *body = content
            lines.append("| " + " | ".join(map(_md_cell, head)) + " |")
            lines.append("|" + "---|" * len(head))
            lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in body]
            lines.append("")
        elif kind == "img":
            lines += [f"![{Path(content).stem}]({content})", ""]
        elif kind == "pre":
            lines += ["```json", content, "```", ""]
    return "\n".join(lines)


def html_page(bl: list[Block]) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Switchyard bake-off</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
             "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}pre{font-size:11px;background:#f6f6f6}"
             "</style></head><body>"]  # fmt: skip
    for kind, content in bl:
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{html.escape(content)}</{kind}>")
        elif kind == "p":
            text = html.escape(content)
            while "**" in text:
                text = text.replace("**", "<b>", 1).replace("**", "</b>", 1)
            parts.append(f"<p>{text}</p>")
        elif kind == "table":
            head, *body = content
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>" for r in body]
            parts.append("</table>")
        elif kind == "img":
            parts.append(f"<p><img src='{html.escape(content)}' style='max-width:100%'></p>")
        elif kind == "pre":
            parts.append(f"<pre>{html.escape(content)}</pre>")
    return "\n".join([*parts, "</body></html>"])


def write(doc: dict[str, Any], out_dir: Path, plots: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(doc, indent=1, sort_keys=False, default=str))
    names: list[str] = []
    if plots:
        from bakeoff.report_plots import write as write_plots

        names = [p.name for p in write_plots(doc, out_dir)]
    bl = blocks(doc, names)
    (out_dir / "report.md").write_text(markdown(bl))
    (out_dir / "report.html").write_text(html_page(bl))
    return [out_dir / n for n in ("report.json", "report.md", "report.html", *names)]
