"""Write one run as JSON (the machine-readable record `diff` reads), Markdown
(for a PR or a ticket) and one HTML page (no scripts, no external assets) that
links `report.css`, the one stylesheet every page of a report tree shares: it is
written once at the top of the tree (a matrix's per-target pages link `../report.css`).

Both human formats put what needs attention first: every failure, error and
skip, MUST before SHOULD, each with its rule (the check's description) and its
evidence (the request, the offending chunk or field, expected versus seen).
The full table of checks comes after.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.result import CheckResult, Level, Status, Verdict
from conformance.runner import RunReport

STATUS_MARK = {
    Status.PASS: "✅ pass",
    Status.FAIL: "❌ FAIL",
    Status.SKIP: "⏭ skip",
    Status.ERROR: "⚠ ERROR",
    Status.NA: "➖ n/a",
}
# Order of the "needs attention" list: what blocks first.
ATTENTION = (Status.FAIL, Status.ERROR, Status.SKIP)

STYLESHEET = "report.css"
# The one stylesheet, a file beside this module: the committed reports under
# docs/conformance link it (their report.css is a symbolic link to it, not a copy).
CSS = Path(__file__).with_name(STYLESHEET).read_text(encoding="utf-8")

VERDICT_MEANING = {
    Verdict.PASS: "every MUST check that applies to this target ran and passed",
    Verdict.FAIL: "a MUST check failed or could not reach a verdict",
    Verdict.INCOMPLETE: "no MUST check failed, but not every MUST check that applies ran: this is not a pass",
}


def _json_text(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def write_json(report: RunReport, path: Path) -> None:
    path.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def summary_line(report: RunReport) -> str:
    c = report.counts()

    def level(lv: str) -> str:
        return (
            f"{lv}: {c[lv]['pass']} pass, {c[lv]['fail']} fail, {c[lv]['error']} error, "
            f"{c[lv]['skip']} skip, {c[lv]['na']} n/a"
        )

    return f"{level('MUST')} · {level('SHOULD')}"


def needing_attention(report: RunReport) -> list[CheckResult]:
    """Failures, errors and skips: MUST before SHOULD, then fail, error, skip, then report order."""
    chosen = [r for r in report.results if r.status in ATTENTION]
    return sorted(chosen, key=lambda r: (r.level is not Level.MUST, ATTENTION.index(r.status)))


def declared(target: dict[str, Any]) -> str:
    caps = target.get("capabilities")
    features = "all assumed (none declared)" if caps is None else (", ".join(caps) or "none")
    return f"simulator (fault markers): {'yes' if target.get('sim_faults') else 'no'}; optional features: {features}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: RunReport, title: str = "Conformance report") -> str:
    t = report.target
    verdict = report.verdict
    lines = [
        f"# {title}",
        "",
        f"- Target: `{t.get('name')}` — base URL `{t.get('base_url')}`, model `{t.get('model')}`",
        f"- Server: {report.server.label()} (as it reports itself)",
        f"- Declared: {declared(t)}",
        f"- Profiles: {', '.join(report.profiles) or 'all'} · started {report.started} · {report.duration_s:.1f} s",
        f"- Verdict: **{verdict}**: {VERDICT_MEANING[verdict]} ({summary_line(report)})",
        "",
        "A skip is not a pass: the check applied here but could not run (its reason says what it needs). "
        "n/a: the check does not apply to what the target is declared to be.",
        "",
    ]
    attention = needing_attention(report)
    if attention:
        lines += [f"## Needs attention ({len(attention)})", ""]
        for r in attention:
            lines += [f"### {STATUS_MARK[r.status]} {r.level} `{r.id}`", "", f"- rule: {r.description}"]
            lines += [f"- verdict: {_md_cell(r.message)}", ""]
            for e in r.evidence:
                lines += _md_evidence(e)
    lines += [
        "## All checks",
        "",
        "| Status | Level | Check | Description | Message |",
        "|---|---|---|---|---|",
    ]
    for r in report.results:
        lines.append(
            f"| {STATUS_MARK[r.status]} | {r.level} | `{r.id}` | {_md_cell(r.description)} | {_md_cell(r.message)} |"
        )
    return "\n".join(lines) + "\n"


def _evidence_fields(e: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """What a report shows of one piece of evidence, in order, as (name, kind,
    value): where (when known), expected, seen, then the offending value and the
    request when present. Each format renders a kind its own way."""
    fields: list[tuple[str, str, Any]] = [("where", "code", e["where"])] if e.get("where") else []
    fields += [("expected", "text", e.get("expected", "")), ("seen", "excerpt", e.get("seen", ""))]
    if e.get("offending") is not None:
        fields.append(("offending", "json", e["offending"]))
    if e.get("request"):
        fields.append(("request", "json", e["request"]))
    return fields


_MD_KINDS: dict[str, Callable[[str, Any], list[str]]] = {
    "code": lambda name, v: [f"- {name}: `{_md_cell(str(v))}`"],
    "text": lambda name, v: [f"- {name}: {_md_cell(str(v))}"],
    "excerpt": lambda name, v: [f"- {name}: {_md_cell(_json_text(v, 600))}"],
    "json": lambda name, v: [f"- {name}:", "", "```json", _json_text(v, 1500), "```"],
}
_HTML_KINDS: dict[str, Callable[[str, Any], str]] = {
    "code": lambda name, v: f"<div><b>{name}</b> <code>{html.escape(str(v))}</code></div>",
    "text": lambda name, v: f"<div><b>{name}</b> {html.escape(str(v))}</div>",
    "excerpt": lambda name, v: f"<div><b>{name}</b> <pre>{html.escape(_json_text(v, 1200))}</pre></div>",
    "json": lambda name, v: f"<div><b>{name}</b><pre>{html.escape(_json_text(v))}</pre></div>",
}


def _md_evidence(e: dict[str, Any]) -> list[str]:
    return [line for name, kind, value in _evidence_fields(e) for line in _MD_KINDS[kind](name, value)] + [""]


def _html_evidence(e: dict[str, Any]) -> str:
    return "".join(_HTML_KINDS[kind](name, value) for name, kind, value in _evidence_fields(e))


def _anchor(r: CheckResult) -> str:
    return "c-" + "".join(ch if ch.isalnum() else "-" for ch in r.id)


def _html_attention(r: CheckResult) -> str:
    evidence = "".join(
        f"<details open><summary>evidence {i + 1}</summary>{_html_evidence(e)}</details>"
        for i, e in enumerate(r.evidence)
    )
    return (
        f'<div class="attention {r.status}" id="{_anchor(r)}"><h3>{html.escape(STATUS_MARK[r.status])} '
        f'<span class="{r.level}">{r.level}</span> <code>{html.escape(r.id)}</code></h3>'
        f"<div><b>rule</b> {html.escape(r.description)}</div>"
        f"<div><b>verdict</b> {html.escape(r.message)}</div>{evidence}</div>"
    )


def _html_row(r: CheckResult) -> str:
    message = html.escape(r.message)
    if r.status in ATTENTION:
        message += f' <a href="#{_anchor(r)}">(evidence above)</a>'
    return (
        f'<tr class="{r.status}"><td>{html.escape(STATUS_MARK[r.status])}</td>'
        f'<td class="{r.level}">{r.level}</td><td><code>{html.escape(r.id)}</code></td>'
        f"<td>{html.escape(r.area)}</td><td>{html.escape(r.description)}</td>"
        f"<td>{message}</td></tr>"
    )


def page(title: str, body: str, stylesheet: str = STYLESHEET) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<link rel="stylesheet" href="{html.escape(stylesheet)}"></head><body>{body}</body></html>\n'
    )


def write_stylesheet(directory: Path) -> Path:
    path = directory / STYLESHEET
    path.write_text(CSS, encoding="utf-8")
    return path


def render_html(report: RunReport, title: str = "Conformance report", stylesheet: str = STYLESHEET) -> str:
    t = report.target
    c = report.counts()
    verdict = report.verdict
    summary = "".join(
        f"<tr><th>{lv}</th>" + "".join(f'<td class="{s}">{c[str(lv)][str(s)]}</td>' for s in Status) + "</tr>"
        for lv in Level
    )
    attention = needing_attention(report)
    attention_html = (
        f"<h2>Needs attention ({len(attention)})</h2>" + "".join(_html_attention(r) for r in attention)
        if attention
        else ""
    )
    body = (
        f"<h1>{html.escape(title)}: {verdict}</h1>"
        f"<p><b>{verdict}</b>: {html.escape(VERDICT_MEANING[verdict])}.</p>"
        f"<p>Target <code>{html.escape(str(t.get('name')))}</code> — <code>{html.escape(str(t.get('base_url')))}</code>, "
        f"model <code>{html.escape(str(t.get('model')))}</code>; server {html.escape(report.server.label())}; "
        f"declared: {html.escape(declared(t))}; "
        f"profiles {html.escape(', '.join(report.profiles) or 'all')}; "
        f"started {html.escape(report.started)}; {report.duration_s:.1f} s.</p>"
        f'<table class="summary"><tr><th></th>' + "".join(f"<th>{s}</th>" for s in Status) + f"</tr>{summary}</table>"
        "<p>A skip is not a pass: the check applied here but could not run, and its message says what it needs. "
        "n/a: the check does not apply to what the target is declared to be.</p>"
        f"{attention_html}"
        "<h2>All checks</h2><table><tr><th>Status</th><th>Level</th><th>Check</th><th>Area</th><th>Description</th>"
        "<th>Message</th></tr>" + "".join(_html_row(r) for r in report.results) + "</table>"
    )
    return page(title, body, stylesheet)


def write_reports(
    report: RunReport, directory: Path, title: str = "Conformance report", stylesheet: str | None = None
) -> dict[str, Path]:
    """Write the three reports into `directory`; without `stylesheet` (the href of
    a stylesheet written elsewhere, e.g. by the matrix above) `report.css` goes beside them."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / "report.json", "md": directory / "report.md", "html": directory / "report.html"}
    if stylesheet is None:
        paths["css"] = write_stylesheet(directory)
    write_json(report, paths["json"])
    paths["md"].write_text(render_markdown(report, title), encoding="utf-8")
    paths["html"].write_text(render_html(report, title, stylesheet or STYLESHEET), encoding="utf-8")
    return paths
