"""Just enough PromQL reading to list the metric and label names a query uses,
and the queries a Grafana dashboard and a PrometheusRule hold."""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")
_LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Grafana's label_values(metric{...}, label) in variable queries.
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")


@dataclass(frozen=True)
class Query:
    where: str  # e.g. "panel 'Queue depth'" or "alert SwitchyardQueueBacklog"
    expr: str
    legend: str = ""
    row: str = ""


def metric_names(expr: str) -> set[str]:
    """Names of the series a query selects (not functions, keywords or labels)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        if text[match.end() :].lstrip().startswith("(") or match.group(0) in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def label_names(query: Query) -> set[str]:
    """Labels a query matches on, groups by, or shows in its legend."""
    text = _STRING.sub('""', query.expr)
    labels = set()
    for body in _MATCHERS.findall(text):
        labels |= {part.split("=")[0].split("!")[0].strip() for part in body.split(",") if part.strip()}
    for _, body in _GROUPING.findall(text):
        labels |= {name.strip() for name in body.split(",") if name.strip()}
    labels |= set(_LEGEND_LABEL.findall(query.legend))
    return labels


def dashboard_queries(dashboard: dict) -> list[Query]:
    """Every PromQL query of a dashboard: panel targets (with the row they sit
    under) and query variables."""
    queries = []
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            panels = panel.get("panels", [])
        else:
            panels = [panel]
        for p in panels:
            for target in p.get("targets", []):
                queries.append(Query(f"panel {p['title']!r}", target["expr"], target.get("legendFormat", ""), row))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["definition"])
            assert match, f"variable {variable['name']}: not a label_values() query"
            expr, label = match.groups()
            queries.append(Query(f"variable {variable['name']!r}", f"{expr} by ({label})"))
    return queries


def rule_queries(prometheus_rule: dict) -> list[Query]:
    return [
        Query(f"alert {rule.get('alert') or rule.get('record')}", rule["expr"])
        for group in prometheus_rule["spec"]["groups"]
        for rule in group["rules"]
    ]
