"""scripts/mutation_table.py stays runnable: every module it names exists and every test
glob of a module matches a test file (`make mutation` stops on one that matches none), and
its scope is what docs/mutation/report.md counts as unmeasured."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import mutation  # noqa: E402
from mutation_table import EXTRA_ARGS, MODULES, NOTES, TIMEOUTS  # noqa: E402


def test_every_module_exists_and_every_test_glob_matches_a_test_file() -> None:
    missing = [m for m in MODULES if not (ROOT / m).is_file()]
    stale = {m: p for m, patterns in MODULES.items() for p in patterns if not list(ROOT.glob(p))}
    assert missing == [] and stale == {}
    assert set(EXTRA_ARGS) | set(NOTES) | set(TIMEOUTS) <= set(MODULES)


def test_the_modules_in_the_table_are_in_scope_and_the_rest_are_reported_unmeasured() -> None:
    scope = mutation.in_scope()
    assert "gateway/http/limits.py" in scope and "stores/redis_connect.py" in scope and "engine/cli.py" not in scope
    assert [m for m in MODULES if m not in scope] == []
    report = mutation.render({})
    unlisted = [m for m in scope if m not in MODULES]
    if unlisted:
        assert f"Unmeasured: {len(unlisted)} modules" in report and all(f"`{m}`" in report for m in unlisted)
    else:  # every module of the scope has a list: the report has no such line
        assert "Unmeasured:" not in report


def test_results_are_one_file_per_module_and_reasons_come_from_every_survivors_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(mutation, "RESULTS", tmp_path / "results")
    (tmp_path / "survivors").mkdir()
    (tmp_path / "survivors.toml").write_text('[[survivor]]\nfile = "a.py"\nfunction = "f"\nreason = "one"\n')
    (tmp_path / "survivors" / "b.toml").write_text('[[survivor]]\nfile = "b.py"\nfunction = "g"\nreason = "two"\n')
    monkeypatch.setattr(mutation, "REASONS", [tmp_path / "survivors.toml", tmp_path / "survivors"])
    mutation.save_result("pkg/a.py", {"score": 1.0})
    mutation.save_result("pkg/b.py", {"score": 0.5})
    mutation.save_result("pkg/a.py", {"score": 0.9})  # a rerun replaces the module's file only
    assert mutation.load_results() == {
        "pkg/a.py": {"module": "pkg/a.py", "score": 0.9},
        "pkg/b.py": {"module": "pkg/b.py", "score": 0.5},
    }
    assert [r["reason"] for r in mutation.load_reasons()] == ["one", "two"]


def test_what_a_mutants_test_leaves_running_in_the_runs_session_is_ended(tmp_path) -> None:
    """A process left behind (here a grandchild that outlives its parent, as a mutant's forked
    worker paused for a signal can) holding the output would keep the run from ever ending."""
    left = tmp_path / "left"
    code = f"import os, time\nif os.fork() == 0:\n    open({str(left)!r}, 'w').write(str(os.getpid()))\n    time.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not (left.exists() and left.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    orphan = int(left.read_text())
    assert os.getsid(orphan) == proc.pid
    mutation.end_session(proc.pid)
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], 10)
    assert readable and proc.stdout.read() == b""  # EOF: nothing holds the pipe any more
    deadline = time.monotonic() + 30  # SIGKILL is delivered when the orphan is next scheduled
    while _alive(orphan):
        assert time.monotonic() < deadline, "the orphan outlived the run's end"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie left for init to reap counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
