"""charts/switchyard/README.md documents every value in values.yaml."""

from __future__ import annotations

import re

import yaml

from tests.charts.helm import CHART

# Values that hold Kubernetes objects or free-form maps: documented as one row.
WHOLE = {
    "config",
    "runtimes",
    "resources",
    "podSecurityContext",
    "securityContext",
    "labels",
    "annotations",
    "behavior",
    "timeouts",
    "podAnnotations",
    "podLabels",
    "nodeSelector",
    "affinity",
}
RUNTIME_GROUPS = ("runtimeCommon", "runtimeDefaults")


def value_paths(values: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in WHOLE and path not in RUNTIME_GROUPS:
            paths |= value_paths(value, path + ".")
        else:
            paths.add(path)
    return paths


def documented(table_heading: str) -> set[str]:
    readme = (CHART / "README.md").read_text()
    section = readme.split(table_heading, 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def test_every_value_has_a_row_in_the_readme():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = value_paths(values) - documented("## Values")
    assert not missing, f"values.yaml entries missing from README.md's Values table: {sorted(missing)}"


def test_every_runtime_field_has_a_row_in_the_readme():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    fields = set(values["runtimeCommon"]) | {"enabled", "kind", "model"}
    for defaults in values["runtimeDefaults"].values():
        fields |= set(defaults)
    missing = fields - documented("### Runtime fields")
    assert not missing, f"runtime fields missing from README.md's Runtime fields table: {sorted(missing)}"


def test_documented_values_exist():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    stale = documented("## Values") - value_paths(values)
    assert not stale, f"README.md documents values that values.yaml lacks: {sorted(stale)}"
