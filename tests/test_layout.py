"""The tree's shape as docs/architecture.md states it: gateway/ in a handful of
subpackages, files small enough to read in one sitting, and no import circle."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "gateway",
    "adapters",
    "policies",
    "stores",
    "engine",
    "simulators",
    "conformance",
    "bench",
    "processes",
    "bakeoff",
)
MAX_GATEWAY_ENTRIES = 12
MAX_LINES = 450


def _cycles_module():
    spec = importlib.util.spec_from_file_location("check_import_cycles", ROOT / "scripts" / "check_import_cycles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gateway_has_a_handful_of_top_level_entries():
    entries = sorted(p.name for p in (ROOT / "gateway").iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_GATEWAY_ENTRIES, entries


def test_no_file_is_longer_than_one_sitting():
    long = []
    for package in (*PACKAGES, "tests", "scripts"):
        for path in (ROOT / package).rglob("*.py"):
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines}")
    assert long == []


def test_the_project_has_no_import_circle():
    assert _cycles_module().circles(grimp.build_graph(*PACKAGES)) == []


def test_the_circle_check_finds_a_circle_through_a_type_checking_import(tmp_path, monkeypatch):
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circled import c\n")
    (package / "c.py").write_text("def f():\n    from circled import a\n")
    (package / "d.py").write_text("from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = _cycles_module().circles(grimp.build_graph("circled"))
    sys.modules.pop("circled", None)
    assert found == [["circled.a", "circled.b", "circled.c"]]
