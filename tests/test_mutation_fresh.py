"""scripts/mutation_fresh.py: a mutation score goes stale when its module's code changes,
never when only a docstring or a comment does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from mutation_fresh import code_digest, stale  # noqa: E402

CODE = '"""A module."""\n\n\ndef f(x):\n    """Doubles."""\n    return x * 2  # why\n'


def test_docstrings_comments_and_layout_leave_the_digest_alone() -> None:
    reworded = '"""Another story."""\ndef f(x):\n    """Twice x."""\n\n    return x*2\n'
    bare = "def f(x):\n    return x * 2\n"
    assert code_digest(CODE) == code_digest(reworded) == code_digest(bare)


def test_a_change_to_the_code_changes_the_digest() -> None:
    assert code_digest(CODE) != code_digest(CODE.replace("* 2", "* 3"))
    assert code_digest(CODE) != code_digest(CODE + "y = 1\n")
    assert code_digest(CODE) != code_digest(CODE.replace('"""Doubles."""', '"""Doubles."""\n    x = str(x)'))


def _commit(repo: Path, when: str, *paths: str) -> None:
    env = {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    for args in (["add", *paths], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", when]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def test_a_result_is_stale_once_its_module_changes(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(CODE)
    result = {"date": "2026-01-01 00:00 UTC", "code": code_digest(CODE)}
    assert not stale(tmp_path, "m.py", result, tmp_path / "r.json")
    (tmp_path / "m.py").write_text(CODE.replace("Doubles", "Twice"))
    assert not stale(tmp_path, "m.py", result, tmp_path / "r.json")
    (tmp_path / "m.py").write_text(CODE.replace("* 2", "* 3"))
    assert stale(tmp_path, "m.py", result, tmp_path / "r.json")
    assert stale(tmp_path, "gone.py", result, tmp_path / "r.json")


def test_a_result_without_a_digest_is_judged_by_git_history(tmp_path: Path) -> None:
    """Runs before the digest was recorded: the module as committed at the run's date, or as
    committed with the result when that commit is the module's first change since."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "m.py").write_text(CODE)
    _commit(tmp_path, "2026-01-01T00:00:00Z", "m.py")
    result, file = {"date": "2026-01-02 00:00 UTC"}, tmp_path / "r.json"
    file.write_text("{}")
    _commit(tmp_path, "2026-01-02T00:05:00Z", "r.json")
    assert not stale(tmp_path, "m.py", result, file)
    fixed = CODE.replace("* 2", "* 4")  # a fix made during the run, landed with its result
    (tmp_path / "m.py").write_text(fixed)
    file.write_text('{"again": 1}')
    _commit(tmp_path, "2026-01-02T00:10:00Z", "m.py", "r.json")
    assert not stale(tmp_path, "m.py", result, file)
    (tmp_path / "m.py").write_text(fixed.replace("* 4", "* 5"))
    _commit(tmp_path, "2026-01-03T00:00:00Z", "m.py")
    assert stale(tmp_path, "m.py", result, file)


def test_a_result_whose_module_changed_before_the_result_was_rewritten_is_stale(tmp_path: Path) -> None:
    """A later commit that rewrites every result file (a move, a split) does not make a score
    of older code fresh."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "m.py").write_text(CODE)
    file = tmp_path / "r.json"
    file.write_text("{}")
    _commit(tmp_path, "2026-01-01T00:00:00Z", "m.py", "r.json")
    (tmp_path / "m.py").write_text(CODE.replace("* 2", "* 3"))
    _commit(tmp_path, "2026-01-03T00:00:00Z", "m.py")
    file.write_text('{"moved": 1}')
    _commit(tmp_path, "2026-01-04T00:00:00Z", "r.json")
    assert stale(tmp_path, "m.py", {"date": "2026-01-02 00:00 UTC"}, file)
