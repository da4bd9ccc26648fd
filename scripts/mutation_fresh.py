"""Whether a module's mutation score is still about its code.

A score is *stale* when the module's code changed after its run: the mutants it counted
are of older code. Docstrings are left out of the comparison (mutmut does not mutate
them), so a reworded docstring keeps a score fresh. A run records the digest of the code
it mutated; a result without one (runs before it was recorded) is compared with the
module as committed at the run's date, or with its result where they landed together.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from pathlib import Path


def code_digest(source: str) -> str:
    """A digest of the module's syntax tree without docstrings, comments or layout."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False).stdout.strip()


def _digest_at(root: Path, rev: str, module: str) -> str | None:
    if not rev:
        return None
    shown = subprocess.run(["git", "show", f"{rev}:{module}"], cwd=root, capture_output=True, text=True, check=False)
    return code_digest(shown.stdout) if shown.returncode == 0 else None


def committed_digests(root: Path, module: str, date: str, result_file: Path) -> set[str | None]:
    """What the module's code may have been at its run: as committed at the run's date, or as
    committed with the result where that commit is the module's first change since (a run's
    code fix and its result land together)."""
    when = date.replace(" UTC", "").replace(" ", "T") + ":59Z"
    found = {_digest_at(root, _git(root, "rev-list", "-1", f"--before={when}", "HEAD", "--", module), module)}
    since = _git(root, "log", "--reverse", "--format=%H", f"--since={when}", "--", module).split()
    path = str(result_file.relative_to(root))
    blob = _git(root, "hash-object", path)
    written = [
        r
        for r in _git(root, "log", "--format=%H", "--", path).split()
        if _git(root, "rev-parse", f"{r}:{path}") == blob
    ]
    if since and written and since[0] == written[-1]:
        found.add(_digest_at(root, since[0], module))
    return found


def stale(root: Path, module: str, result: dict, result_file: Path) -> bool:
    """True when the module's code now differs from the code its result was measured on
    (or that code cannot be told: no digest recorded and none in git at its date)."""
    path = root / module
    if not path.exists():
        return True
    now = code_digest(path.read_text())
    if "code" in result:
        return result["code"] != now
    return now not in committed_digests(root, module, result["date"], result_file)
