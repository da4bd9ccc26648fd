"""Run the suite against every model a gateway config serves (through the
gateway) and, with `direct`, against each runtime's own URL, into one matrix
of checks x targets. The config is read as plain YAML: the suite judges the
gateway from outside and never imports it."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.check import Check
from conformance.report import STATUS_MARK, page, write_reports
from conformance.result import CheckResult, Status
from conformance.runner import RunReport, run_checks
from conformance.target import Target

# Adapters whose backends have an HTTP URL that speaks (a dialect of) OpenAI.
DIRECT_ADAPTERS = ("openai", "vllm", "sglang", "trtllm", "tgi")


def load_config(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise ValueError(f"{path}: no `models:` mapping to run")
    return data


def gateway_url_of(config: dict[str, Any]) -> str:
    listen = config.get("listen") or {}
    host = listen.get("host", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{host}:{listen.get('port', 8080)}"


def targets_from_config(
    config: dict[str, Any],
    gateway_url: str,
    *,
    direct: bool,
    api_key: str | None = None,
    models: list[str] | None = None,
    **gateway_options: Any,
) -> list[Target]:
    """One gateway target per configured model, then (with `direct`) one per
    distinct runtime URL. Gateway-only options go to the gateway targets."""
    targets: list[Target] = []
    chosen = [m for m in config["models"] if models is None or m in models]
    for name in chosen:
        targets.append(
            Target(base_url=gateway_url, model=name, name=f"gateway/{name}", api_key=api_key, **gateway_options)
        )
    if direct:
        seen: set[tuple[str, str]] = set()
        for name in chosen:
            for backend in config["models"][name].get("backends") or []:
                if backend.get("adapter") not in DIRECT_ADAPTERS or not backend.get("url"):
                    continue
                served = backend.get("served_model") or name
                key = (backend["url"], served)
                if key in seen:
                    continue
                seen.add(key)
                root = backend["url"].rstrip("/").removesuffix("/v1")
                targets.append(
                    Target(
                        base_url=backend["url"],
                        model=served,
                        metrics_url=root + "/metrics",
                        runtime=backend["adapter"],
                        name=f"{backend.get('name', backend['adapter'])} (direct {backend['adapter']})",
                    )
                )
    return targets


@dataclass(slots=True)
class MatrixReport:
    runs: list[tuple[Target, RunReport]] = field(default_factory=list)
    expected_direct_deviations: bool = True  # direct runs show runtime quirks; they never fail the matrix

    @property
    def names(self) -> list[str]:
        return [t.name for t, _ in self.runs]

    def rows(self) -> list[dict[str, Any]]:
        order: list[str] = []
        meta: dict[str, CheckResult] = {}
        cells: dict[str, dict[str, CheckResult]] = {}
        for target, run in self.runs:
            for r in run.results:
                if r.id not in meta:
                    order.append(r.id)
                    meta[r.id] = r
                cells.setdefault(r.id, {})[target.name] = r
        return [
            {
                "id": cid,
                "area": meta[cid].area,
                "level": str(meta[cid].level),
                "description": meta[cid].description,
                "cells": {name: str(c.status) for name, c in cells[cid].items()},
                "messages": {name: c.message for name, c in cells[cid].items() if c.message},
            }
            for cid in order
        ]

    def gateway_must_failures(self) -> list[tuple[str, CheckResult]]:
        return [(t.name, r) for t, run in self.runs if t.name.startswith("gateway/") for r in run.must_failures]

    def to_dict(self) -> dict[str, Any]:
        return {
            "targets": [t.describe() | {"name": t.name} for t, _ in self.runs],
            "summaries": {t.name: run.counts() for t, run in self.runs},
            "matrix": self.rows(),
        }


def _cell(status: str) -> str:
    return STATUS_MARK[Status(status)] if status else ""


def render_matrix_markdown(m: MatrixReport, title: str = "Conformance matrix") -> str:
    names = m.names
    lines = [
        f"# {title}",
        "",
        "Columns named `gateway/…` are served through the gateway; `(direct …)` columns call the runtime itself, "
        "and their failures are the runtime's own deviations (expected, shown so the gateway's normalization is visible).",
        "",
        "| Check | Level | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for row in m.rows():
        lines.append(
            f"| `{row['id']}` | {row['level']} | " + " | ".join(_cell(row["cells"].get(n, "")) for n in names) + " |"
        )
    lines += ["", "## Failures", ""]
    for row in m.rows():
        for name, msg in row["messages"].items():
            if row["cells"].get(name) in ("fail", "error"):
                lines.append(f"- `{row['id']}` on **{name}**: {msg}")
    return "\n".join(lines) + "\n"


def render_matrix_html(m: MatrixReport, title: str = "Conformance matrix") -> str:
    names = m.names
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    rows = []
    for row in m.rows():
        tds = []
        for n in names:
            st = row["cells"].get(n, "")
            tip = html.escape(row["messages"].get(n, ""), quote=True)
            tds.append(f'<td class="{st}" title="{tip}">{html.escape(_cell(st))}</td>')
        rows.append(
            f"<tr><td><code>{html.escape(row['id'])}</code><br><small>{html.escape(row['description'])}</small></td>"
            f'<td class="{row["level"]}">{row["level"]}</td>{"".join(tds)}</tr>'
        )
    body = (
        f"<h1>{html.escape(title)}</h1><p>Columns <code>gateway/…</code> go through the gateway; "
        "<code>(direct …)</code> columns call the runtime itself: their failures are the runtime's own deviations, "
        "listed as expected. Hover a cell for its message; each target's full report with evidence is in its folder.</p>"
        f"<table><tr><th>Check</th><th>Level</th>{head}</tr>{''.join(rows)}</table>"
    )
    return page(title, body)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("_")


def write_matrix(m: MatrixReport, directory: Path, title: str = "Conformance matrix") -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    for target, run in m.runs:
        write_reports(run, directory / _slug(target.name), f"Conformance report: {target.name}")
    paths = {"json": directory / "matrix.json", "md": directory / "matrix.md", "html": directory / "matrix.html"}
    paths["json"].write_text(json.dumps(m.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["md"].write_text(render_matrix_markdown(m, title), encoding="utf-8")
    paths["html"].write_text(render_matrix_html(m, title), encoding="utf-8")
    return paths


async def run_matrix(
    targets: list[Target],
    checks: list[Check],
    profiles: list[str],
    progress: Callable[[Target, CheckResult], None] | None = None,
) -> MatrixReport:
    m = MatrixReport()
    for target in targets:
        run = await run_checks(
            target, checks, profiles, progress=(lambda r, t=target: progress(t, r)) if progress else None
        )
        m.runs.append((target, run))
    return m
