"""Install names: PyPI's `switchyard` is an unrelated package, so the distribution
has its own free name and every install hint (the CLI's, the config's refusals,
the docs) says `pip install '.[extra]'` for the source checkout, never a name pip
would fetch from PyPI."""

from __future__ import annotations

import re
import subprocess
import tomllib

from processes.install import DISTRIBUTION, install_hint
from tests.procs import ROOT

THIS_FILE = "tests/test_install_names.py"
# `switchyard[otel]`, `pip install switchyard`, with or without quotes: the PyPI name.
PYPI_NAME = re.compile(r"(?<![\w./-])switchyard\[|pip install ['\"]?switchyard(?![\w-])")


def test_the_distribution_is_not_pypis_switchyard():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION != "switchyard"
    for extra in project["optional-dependencies"].get("dev", []):
        assert not extra.startswith("switchyard["), extra


def test_every_hint_names_the_source_install():
    assert install_hint("otel").startswith("pip install '.[otel]'")


def test_no_file_tells_pip_to_fetch_the_pypi_name():
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if name == THIS_FILE or not path.is_file() or path.suffix not in (".py", ".md", ".toml", ".txt", ".yaml", ""):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PYPI_NAME.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
