"""engine/builtin.py with a stand-in builder (make_tiny itself is test_make_tiny.py's): where
the cache is, when a cached model is current, the build in a hidden sibling renamed into
place, a stale cache replaced, the races it tolerates, and each refusal's wording."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import engine.make_tiny
from engine import builtin
from engine.builtin import builtin_model_dir, cache_root, model_path_problem, resolve_model_path


@pytest.fixture
def builds(tmp_path, monkeypatch) -> list[Path]:
    """The cache under tmp_path/deep/cache, and make_tiny replaced by a builder that writes a
    config.json and records where it built."""
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path / "deep" / "cache"))
    seen: list[Path] = []

    def make_tiny(path: Path) -> None:
        seen.append(path)
        (path / "config.json").write_text("{}")

    monkeypatch.setattr(engine.make_tiny, "make_tiny", make_tiny)
    return seen


def _models(tmp_path: Path) -> Path:
    return tmp_path / "deep" / "cache" / "models"


# ---- the cache -----------------------------------------------------------------------------


def test_the_cache_root_is_the_variable_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", "~/sy")
    assert cache_root() == tmp_path / "sy"


@pytest.mark.parametrize("value", [None, ""])
def test_the_cache_root_defaults_under_home(monkeypatch, tmp_path, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    if value is None:
        monkeypatch.delenv("SWITCHYARD_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("SWITCHYARD_CACHE_DIR", value)
    assert cache_root() == tmp_path / ".cache" / "switchyard"


def test_a_model_is_built_once_in_a_hidden_sibling_and_stamped(tmp_path, builds):
    target = builtin_model_dir("tiny")
    assert target == _models(tmp_path) / "tiny"
    [built] = builds
    assert built.parent == target.parent and built.name.startswith(".tiny-build-")
    assert (target / ".switchyard-builtin").read_text(encoding="utf-8") == "1\n"
    assert (target / "config.json").is_file()
    assert builtin_model_dir("tiny") == target
    assert len(builds) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_a_cache_stamped_with_this_version_is_used_as_it_is(tmp_path, builds):
    target = _models(tmp_path) / "tiny"
    target.mkdir(parents=True)
    (target / ".switchyard-builtin").write_text(" 1 \n")
    assert builtin_model_dir("tiny") == target
    assert builds == []


@pytest.mark.parametrize("stamp", [None, "0\n", "", "dir"])
def test_a_stale_cache_is_replaced(tmp_path, builds, stamp):
    target = _models(tmp_path) / "tiny"
    target.mkdir(parents=True)
    (target / "old.bin").write_text("old")
    if stamp == "dir":
        (target / ".switchyard-builtin").mkdir()
    elif stamp is not None:
        (target / ".switchyard-builtin").write_text(stamp)
    assert builtin_model_dir("tiny") == target
    assert len(builds) == 1
    assert sorted(p.name for p in target.iterdir()) == [".switchyard-builtin", "config.json"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_a_stale_cache_moves_into_a_hidden_sibling_before_it_is_deleted(tmp_path, builds, monkeypatch):
    target = _models(tmp_path) / "tiny"
    target.mkdir(parents=True)
    moves = []
    replace = os.replace

    def spy(src, dst):
        moves.append((Path(src), Path(dst)))
        replace(src, dst)

    monkeypatch.setattr(builtin.os, "replace", spy)
    builtin_model_dir("tiny")
    [(src, dst)] = moves
    assert src == target and dst.name == "tiny"
    assert dst.parent.parent == target.parent and dst.parent.name.startswith(".tiny-stale-")


def test_a_stale_cache_that_cannot_be_deleted_does_not_fail_the_build(tmp_path, builds, monkeypatch):
    target = _models(tmp_path) / "tiny"
    target.mkdir(parents=True)
    rmtree = shutil.rmtree

    def stubborn(path, ignore_errors=False, **kwargs):  # what rmtree does when a file will not go
        if not ignore_errors:
            raise OSError("device busy")
        rmtree(path, ignore_errors=True, **kwargs)

    monkeypatch.setattr(builtin.shutil, "rmtree", stubborn)
    assert (builtin_model_dir("tiny") / ".switchyard-builtin").read_text() == "1\n"


def test_a_build_another_process_finished_meanwhile_is_kept(tmp_path, monkeypatch):
    """Another process may already serve from it: it is not swapped for ours."""
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    target = tmp_path / "models" / "tiny"

    def racing(path: Path) -> None:
        (path / "ours").write_text("")
        target.mkdir()
        (target / "theirs").write_text("")
        (target / ".switchyard-builtin").write_text("1\n")

    monkeypatch.setattr(engine.make_tiny, "make_tiny", racing)
    assert builtin_model_dir("tiny") == target
    assert sorted(p.name for p in target.iterdir()) == [".switchyard-builtin", "theirs"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_a_stale_cache_moved_away_by_another_process_meanwhile(tmp_path, builds, monkeypatch):
    target = _models(tmp_path) / "tiny"
    target.mkdir(parents=True)
    replace = os.replace

    def raced(src, dst):
        shutil.rmtree(src)  # the other process got there first
        replace(src, dst)

    monkeypatch.setattr(builtin.os, "replace", raced)
    assert builtin_model_dir("tiny") == target
    assert (target / ".switchyard-builtin").read_text() == "1\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_another_process_renaming_its_build_first_is_as_good(tmp_path, builds, monkeypatch):
    rename = os.rename

    def raced(src, dst):
        Path(dst).mkdir()
        (Path(dst) / ".switchyard-builtin").write_text("1\n")
        rename(src, dst)  # the target is now a non-empty directory: OSError

    monkeypatch.setattr(builtin.os, "rename", raced)
    target = builtin_model_dir("tiny")
    assert sorted(p.name for p in target.iterdir()) == [".switchyard-builtin"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]


def test_a_rename_that_fails_otherwise_is_raised_and_the_build_removed(tmp_path, builds, monkeypatch):
    def fails(src, dst):
        raise PermissionError("no")

    monkeypatch.setattr(builtin.os, "rename", fails)
    with pytest.raises(PermissionError):
        builtin_model_dir("tiny")
    assert list(_models(tmp_path).iterdir()) == []


def test_a_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))

    def broken(path: Path) -> None:
        (path / "half.bin").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(engine.make_tiny, "make_tiny", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        builtin_model_dir("tiny")
    assert list((tmp_path / "models").iterdir()) == []


def test_an_unknown_built_in_model_is_refused_listing_the_known(builds):
    with pytest.raises(ValueError) as err:
        builtin_model_dir("huge")
    assert str(err.value) == "unknown built-in model 'huge' (available: tiny)"
    assert builds == []


def test_the_known_models_are_listed_comma_separated(builds, monkeypatch):
    monkeypatch.setattr(builtin, "BUILTIN_MODELS", ("tiny", "small"))
    with pytest.raises(ValueError) as err:
        builtin_model_dir("huge")
    assert str(err.value) == "unknown built-in model 'huge' (available: tiny, small)"
    assert model_path_problem("builtin:huge") == "unknown built-in model 'huge' (available: tiny, small)"


# ---- model paths -----------------------------------------------------------------------------


def test_model_path_problems(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    (tmp_path / "odd" / "config.json").mkdir(parents=True)
    assert model_path_problem("builtin:tiny") is None
    assert model_path_problem("builtin:huge") == "unknown built-in model 'huge' (available: tiny)"
    assert model_path_problem("builtin:") == "unknown built-in model '' (available: tiny)"
    assert model_path_problem(str(tmp_path / "ok")) is None
    assert model_path_problem("~/ok") is None
    assert model_path_problem("~/odd") == f"{tmp_path / 'odd'} is not a model directory (no config.json)"
    assert model_path_problem("~/none") == f"{tmp_path / 'none'} is not a model directory (no config.json)"


def test_resolve_model_path(tmp_path, builds, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    assert resolve_model_path("~/ok") == tmp_path / "ok"
    assert resolve_model_path("builtin:tiny") == _models(tmp_path) / "tiny"
    with pytest.raises(FileNotFoundError) as err:
        resolve_model_path("~/none")
    assert str(err.value) == f"{tmp_path / 'none'} is not a model directory (no config.json)"
    with pytest.raises(ValueError):
        resolve_model_path("builtin:huge")
