"""Read a Dockerfile into instructions, and find what the images install: the
distributions a `pip install` line brings in (with everything they require), and
the top-level modules of every other distribution in this environment."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from processes.install import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]
GATEWAY_DOCKERFILE = ROOT / "docker" / "gateway.Dockerfile"
ENGINE_DOCKERFILE = ROOT / "docker" / "engine.Dockerfile"


@dataclass(frozen=True)
class Instruction:
    stage: int  # 0 for the first FROM's stage
    keyword: str  # upper case: RUN, COPY, USER, ...
    value: str


def instructions(path: Path) -> list[Instruction]:
    """Instructions in order, line continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    found: list[Instruction] = []
    stage = -1
    for text in logical:
        keyword, _, value = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        found.append(Instruction(stage, keyword, value.strip()))
    return found


def final_stage(path: Path) -> list[Instruction]:
    found = instructions(path)
    last = max(i.stage for i in found)
    return [i for i in found if i.stage == last]


def pip_install_args(path: Path) -> list[list[str]]:
    """The arguments of each `pip install` in RUN instructions, options dropped."""
    installs = []
    for ins in instructions(path):
        if ins.keyword != "RUN":
            continue
        for command in re.split(r"&&|;", ins.value):
            words = shlex.split(command)
            if words and Path(words[0]).name in ("pip", "pip3") and words[1:2] == ["install"]:
                args, skip = [], False
                for word in words[2:]:
                    if skip:
                        skip = False
                    elif word in ("--index-url", "--extra-index-url", "-i"):
                        skip = True
                    elif not word.startswith("-"):
                        args.append(word)
                installs.append(args)
    return installs


def installed_closure(requirements: list[str]) -> set[str]:
    """Canonical names of the distributions `pip install <requirements>` brings in,
    `.` meaning this project, resolved against what this environment has installed."""
    todo = [Requirement(DISTRIBUTION + r[1:]) if r.startswith(".") else Requirement(r) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for spec in metadata.requires(req.name) or []:
            dep = Requirement(spec)
            wanted = dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in {"", *extras})
            if wanted:
                todo.append(dep)
    return {name for name, _ in seen}


def modules_outside(closure: set[str]) -> set[str]:
    """Top-level modules that only distributions outside `closure` provide."""
    blocked = set()
    for module, dists in metadata.packages_distributions().items():
        if not {canonicalize_name(d) for d in dists} & closure:
            blocked.add(module)
    return blocked
