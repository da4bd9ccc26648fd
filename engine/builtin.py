"""Built-in models, built on first use into a cache directory.

`builtin:tiny` (what `switchyard serve` runs with no config) is the make-tiny
model with its default shape and seed, built once into
`$SWITCHYARD_CACHE_DIR/models/tiny` (default `~/.cache/switchyard/models/tiny`).
The build happens in a temporary sibling directory that is renamed into place,
so two processes starting together never see or leave a half-written model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# Bump when make_tiny's output changes, so old caches are rebuilt.
TINY_VERSION = "1"
_STAMP = ".switchyard-builtin"
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny",)


def cache_root() -> Path:
    root = os.environ.get("SWITCHYARD_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "switchyard"


def _is_current(path: Path, version: str) -> bool:
    stamp = path / _STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == version


def builtin_model_dir(name: str) -> Path:
    """The directory of built-in model `name`, building it first if needed."""
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown built-in model {name!r} (available: {', '.join(BUILTIN_MODELS)})")
    target = cache_root() / "models" / name
    if _is_current(target, TINY_VERSION):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from engine.make_tiny import make_tiny  # torch is only needed when building

    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=target.parent))
    try:
        make_tiny(tmp)
        (tmp / _STAMP).write_text(TINY_VERSION + "\n", encoding="utf-8")
        if target.exists() and not _is_current(target, TINY_VERSION):
            # An older build: move it aside atomically, then delete it.
            stale = Path(tempfile.mkdtemp(prefix=f".{name}-stale-", dir=target.parent))
            try:
                os.replace(target, stale / name)
            except FileNotFoundError:
                pass  # another process already moved it
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process renamed its build into place first; theirs is as good.
            if not _is_current(target, TINY_VERSION):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def model_path_problem(model_path: str) -> str | None:
    """What is wrong with `model_path` as `resolve_model_path` would read it, without
    building anything (None: nothing). Config validation asks this before serving."""
    if model_path.startswith(BUILTIN_PREFIX):
        name = model_path[len(BUILTIN_PREFIX) :]
        if name not in BUILTIN_MODELS:
            return f"unknown built-in model {name!r} (available: {', '.join(BUILTIN_MODELS)})"
        return None
    path = Path(model_path).expanduser()
    if not (path / "config.json").is_file():
        return f"{path} is not a model directory (no config.json)"
    return None


def resolve_model_path(model_path: str) -> Path:
    """A model directory for `model_path`: a directory, or `builtin:NAME`."""
    if model_path.startswith(BUILTIN_PREFIX):
        return builtin_model_dir(model_path[len(BUILTIN_PREFIX) :])
    problem = model_path_problem(model_path)
    if problem is not None:
        raise FileNotFoundError(problem)
    return Path(model_path).expanduser()
