"""Run the suite against every model a gateway config serves (through the
gateway) and, with `direct`, against each runtime's own URL, into one matrix
of checks x targets. The config is read as plain YAML: the suite judges the
gateway from outside and never imports it.

What each model's targets are (a simulator or not, which optional features it
has) is declared in a separate targets file (`--targets`, format in
conformance/README.md), since the gateway's own config refuses unknown keys."""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.capabilities import UnknownCapability, parse_features
from conformance.check import Check
from conformance.report import ATTENTION, STATUS_MARK, STYLESHEET, page, write_reports, write_stylesheet
from conformance.result import CheckResult, Level, Status, Verdict
from conformance.runner import RunReport, run_checks
from conformance.target import Target

# Adapters whose backends have an HTTP URL that speaks (a dialect of) OpenAI.
DIRECT_ADAPTERS = ("openai", "vllm", "sglang", "trtllm", "tgi", "llamacpp")
DECLARATION_KEYS = ("simulator", "capabilities")


class ConfigError(ValueError):
    """A gateway config or targets file the matrix cannot use; the message names the file."""


@dataclass(frozen=True, slots=True)
class Declaration:
    """What one configured model's targets (its gateway column and its direct
    columns) are declared to be."""

    simulator: bool = False  # its backend understands the simulators' [[sim:...]] fault markers
    capabilities: frozenset[str] | None = None  # None: not declared, every optional feature assumed


def _read_yaml(path: Path, what: str) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {str(exc).splitlines()[0]}") from None


def load_config(path: Path) -> dict[str, Any]:
    data = _read_yaml(path, "gateway config") or {}
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise ConfigError(f"{path}: no `models:` mapping to run")
    return data


def load_declarations(path: Path, config: dict[str, Any]) -> dict[str, Declaration]:
    """A targets file: `models: {NAME: {simulator: bool, capabilities: [feature, ...]}}`,
    every NAME a model of the gateway config."""
    data = _read_yaml(path, "targets file") or {}
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict) or set(data) != {"models"}:
        raise ConfigError(f"{path}: expected one `models:` mapping of model name to declaration")
    out: dict[str, Declaration] = {}
    for name, entry in models.items():
        where = f"{path}: models.{name}"
        if name not in config["models"]:
            raise ConfigError(f"{where}: not a model of the gateway config ({', '.join(config['models'])})")
        if not isinstance(entry, dict) or not set(entry) <= set(DECLARATION_KEYS):
            raise ConfigError(f"{where}: expected a mapping with keys from {', '.join(DECLARATION_KEYS)}")
        simulator = entry.get("simulator", False)
        if not isinstance(simulator, bool):
            raise ConfigError(f"{where}.simulator: expected true or false")
        caps = entry.get("capabilities")
        if caps is not None and not isinstance(caps, list):
            raise ConfigError(f"{where}.capabilities: expected a list")
        try:
            out[name] = Declaration(simulator, parse_features(caps) if caps is not None else None)
        except UnknownCapability as exc:
            raise ConfigError(f"{where}.capabilities: {exc}") from None
    return out


def gateway_url_of(config: dict[str, Any]) -> str:
    listen = config.get("listen") or {}
    host = listen.get("host", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{host}:{listen.get('port', 8080)}"


def select_models(config: dict[str, Any], models: list[str] | None) -> list[str]:
    """The configured models to run (all when `models` is None), in config order."""
    unknown = [m for m in models or [] if m not in config["models"]]
    if unknown:
        raise ConfigError(f"--models: {', '.join(unknown)} not in the config ({', '.join(config['models'])})")
    return [m for m in config["models"] if models is None or m in models]


def targets_from_config(
    config: dict[str, Any],
    gateway_url: str,
    *,
    direct: bool,
    api_key: str | None = None,
    models: list[str] | None = None,
    declarations: dict[str, Declaration] | None = None,
    **gateway_options: Any,
) -> list[Target]:
    """One gateway target per configured model, then (with `direct`) one per
    distinct runtime URL. Gateway-only options go to the gateway targets; a
    model's declaration goes to its gateway target and its direct ones."""
    declared = declarations or {}
    targets: list[Target] = []
    chosen = select_models(config, models)
    for name in chosen:
        decl = declared.get(name, Declaration())
        targets.append(
            Target(
                base_url=gateway_url,
                model=name,
                name=f"gateway/{name}",
                api_key=api_key,
                sim_faults=decl.simulator,
                capabilities=decl.capabilities,
                **gateway_options,
            )
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
                        sim_faults=declared.get(name, Declaration()).simulator,
                        capabilities=declared.get(name, Declaration()).capabilities,
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

    def gateway_runs(self) -> list[tuple[Target, RunReport]]:
        """The columns that judge the gateway; direct columns never decide the verdict."""
        return [(t, run) for t, run in self.runs if t.name.startswith("gateway/")]

    def gateway_must_failures(self) -> list[tuple[str, CheckResult]]:
        return [(t.name, r) for t, run in self.gateway_runs() for r in run.must_failures]

    def incomplete_gateway_columns(self) -> list[tuple[str, RunReport]]:
        return [(t.name, run) for t, run in self.gateway_runs() if run.verdict is Verdict.INCOMPLETE]

    @property
    def verdict(self) -> Verdict:
        if self.gateway_must_failures():
            return Verdict.FAIL
        if self.incomplete_gateway_columns() or not self.gateway_runs():
            return Verdict.INCOMPLETE
        return Verdict.PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": str(self.verdict),
            "targets": [t.describe() | {"name": t.name} for t, _ in self.runs],
            "verdicts": {t.name: str(run.verdict) for t, run in self.runs},
            "summaries": {t.name: run.counts() for t, run in self.runs},
            "servers": {t.name: run.server.to_dict() for t, run in self.runs},  # as each server reports itself
            "matrix": self.rows(),
        }


def _cell(status: str) -> str:
    return STATUS_MARK[Status(status)] if status else ""


def attention_lines(m: MatrixReport) -> tuple[list[str], list[str]]:
    """(gateway columns' failures, errors and skips, MUST first; direct columns'
    failures and errors): one plain-text line each, what the reports list first."""
    gateway: list[tuple[bool, int, str]] = []
    direct: list[str] = []
    for target, run in m.runs:
        for r in run.results:
            if r.status not in ATTENTION:
                continue
            line = f"{STATUS_MARK[r.status]} {r.level} {r.id} on {target.name}: {r.message}"
            if target.name.startswith("gateway/"):
                gateway.append((r.level is not Level.MUST, ATTENTION.index(r.status), line))
            elif r.status is not Status.SKIP:
                direct.append(line)
    return [line for *_, line in sorted(gateway, key=lambda g: g[:2])], direct


def _verdict_lines(m: MatrixReport) -> list[str]:
    return [f"{name}: {run.verdict}" for name, run in ((t.name, run) for t, run in m.gateway_runs())]


def render_matrix_markdown(m: MatrixReport, title: str = "Conformance matrix") -> str:
    names = m.names
    gateway, direct = attention_lines(m)
    lines = [
        f"# {title}",
        "",
        f"Verdict (gateway columns): **{m.verdict}** — " + "; ".join(_verdict_lines(m)),
        "",
        "Columns named `gateway/…` are served through the gateway; `(direct …)` columns call the runtime itself, "
        "and their failures are the runtime's own deviations (expected, shown so the gateway's normalization is visible). "
        "Each column's own report (in its folder) has the evidence of every entry below.",
        "",
    ]
    if gateway:
        lines += [f"## Needs attention through the gateway ({len(gateway)})", ""]
        lines += [f"- {_md(line)}" for line in gateway] + [""]
    if direct:
        lines += [f"## Runtime deviations (direct columns, {len(direct)})", ""]
        lines += [f"- {_md(line)}" for line in direct] + [""]
    lines += [
        "## All checks",
        "",
        "| Check | Level | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for row in m.rows():
        lines.append(
            f"| `{row['id']}` | {row['level']} | " + " | ".join(_cell(row["cells"].get(n, "")) for n in names) + " |"
        )
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("\n", " ")


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
    gateway, direct = attention_lines(m)

    def listing(heading: str, items: list[str]) -> str:
        if not items:
            return ""
        return (
            f"<h2>{html.escape(heading)} ({len(items)})</h2><ul>"
            + "".join(f"<li>{html.escape(i)}</li>" for i in items)
            + "</ul>"
        )

    body = (
        f"<h1>{html.escape(title)}: {m.verdict}</h1>"
        f"<p>Verdict per gateway column: {html.escape('; '.join(_verdict_lines(m)))}.</p>"
        "<p>Columns <code>gateway/…</code> go through the gateway; "
        "<code>(direct …)</code> columns call the runtime itself: their failures are the runtime's own deviations, "
        "listed as expected. Each target's full report with evidence is in its folder.</p>"
        + listing("Needs attention through the gateway", gateway)
        + listing("Runtime deviations (direct columns)", direct)
        + f"<h2>All checks</h2><table><tr><th>Check</th><th>Level</th>{head}</tr>{''.join(rows)}</table>"
    )
    return page(title, body)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("_")


def write_matrix(m: MatrixReport, directory: Path, title: str = "Conformance matrix") -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    css = write_stylesheet(directory)  # one stylesheet for the matrix and every target's page
    for target, run in m.runs:
        write_reports(run, directory / _slug(target.name), f"Conformance report: {target.name}", f"../{STYLESHEET}")
    paths = {"json": directory / "matrix.json", "md": directory / "matrix.md", "html": directory / "matrix.html"}
    paths["css"] = css
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


LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:\d+")


def hide_loopback_ports(m: MatrixReport) -> None:
    """Reports name their targets but not the temporary ports, so reruns diff cleanly
    (in the checks' messages too, e.g. a skip naming the metrics URL it tried)."""
    for target, run_report in m.runs:
        for key in ("base_url", "metrics_url"):
            run_report.target[key] = "<loopback>"
        target.base_url = target.metrics_url = "<loopback>"
        for result in run_report.results:
            result.message = LOOPBACK_URL.sub("<loopback>", result.message)


def print_gateway_verdict(m: MatrixReport) -> None:
    """What a real-runtime run says of its gateway column: MUST failures and INCOMPLETE
    columns on stderr, then the verdict."""
    for name, r in m.gateway_must_failures():
        print(f"MUST failure through the gateway: {name}: {r.id}: {r.message[:160]}", file=sys.stderr)
    for name, run_report in m.incomplete_gateway_columns():
        skipped = ", ".join(r.id for r in run_report.must_skips) or "no MUST check ran"
        print(f"INCOMPLETE through the gateway: {name}: {skipped}", file=sys.stderr)
    print(f"verdict (gateway column): {m.verdict}")
