"""processes.Child with real child processes: ready, early exit, a child that
ignores SIGTERM, a crash, and the group reaching grandchildren."""

from __future__ import annotations

import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from processes import Child, ChildExited, ChildFailed, NotReady, free_port, http_probe, tcp_probe
from tests.procs import eventually

PY = sys.executable
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
)


def process_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for an init that never reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_http_server_becomes_ready_and_stops(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    child = Child([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"], tmp_path / "http.log", cwd=tmp_path)
    assert child.wait_ready(http_probe(url), timeout_s=30) is child
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
    assert tcp_probe(port)()
    assert child.stop() == -signal.SIGTERM
    assert child.poll() == -signal.SIGTERM
    assert not tcp_probe(port)()
    assert child.stop() == -signal.SIGTERM  # idempotent
    assert "GET / HTTP" in child.log()  # the server's access log went to the file


def test_context_manager_stops_the_child(tmp_path: Path) -> None:
    with Child([PY, "-c", "import time; time.sleep(60)"], tmp_path / "sleep.log") as child:
        assert child.poll() is None
    assert child.poll() == -signal.SIGTERM


def test_a_child_that_exits_early_fails_fast_with_its_log(tmp_path: Path) -> None:
    child = Child([PY, "-c", "import sys; print('no config file'); sys.exit(3)"], tmp_path / "early.log", name="early")
    started = time.monotonic()
    with pytest.raises(ChildExited) as exc:
        child.wait_ready(lambda: False, timeout_s=60)
    assert time.monotonic() - started < 30  # not the 60 s timeout
    assert exc.value.returncode == 3
    assert "no config file" in exc.value.log_tail and "no config file" in str(exc.value)
    assert "early exited with 3" in str(exc.value)
    assert isinstance(exc.value, ChildFailed) and isinstance(exc.value, RuntimeError)


def test_not_ready_in_time_stops_the_child(tmp_path: Path) -> None:
    child = Child([PY, "-c", "print('starting', flush=True); import time; time.sleep(60)"], tmp_path / "slow.log")
    with pytest.raises(NotReady) as exc:
        child.wait_ready(lambda: False, timeout_s=0.5)
    assert isinstance(exc.value, TimeoutError)
    assert child.poll() is not None
    assert eventually(lambda: "starting" in child.log())


def test_a_probe_that_raises_stops_the_child(tmp_path: Path) -> None:
    child = Child([PY, "-c", "import time; time.sleep(60)"], tmp_path / "c.log")

    def broken() -> bool:
        raise ValueError("probe bug")

    with pytest.raises(ValueError, match="probe bug"):
        child.wait_ready(broken)
    assert child.poll() is not None


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    child = Child([PY, "-c", IGNORES_SIGTERM], tmp_path / "stubborn.log", stop_timeout_s=0.5)
    child.wait_ready(lambda: "up" in child.log(), timeout_s=30)
    started = time.monotonic()
    assert child.stop() == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 10


def test_kill_is_immediate_and_stop_after_it_is_a_no_op(tmp_path: Path) -> None:
    child = Child([PY, "-c", IGNORES_SIGTERM], tmp_path / "crash.log", stop_timeout_s=30)
    child.wait_ready(lambda: "up" in child.log(), timeout_s=30)
    started = time.monotonic()
    child.kill()
    assert child.poll() == -signal.SIGKILL
    assert child.stop() == -signal.SIGKILL
    assert time.monotonic() - started < 10  # never waited out the 30 s stop timeout


def test_stop_reaches_grandchildren(tmp_path: Path) -> None:
    spawner = "import os; pid = os.spawnlp(os.P_NOWAIT, 'sleep', 'sleep', '60'); print('grandchild', pid, flush=True); os.waitpid(pid, 0)"
    child = Child([PY, "-c", spawner], tmp_path / "spawner.log")
    child.wait_ready(lambda: "grandchild" in child.log(), timeout_s=30)
    grandchild = int(child.log().split()[-1])
    assert not process_gone(grandchild)
    child.stop()
    assert eventually(lambda: process_gone(grandchild))


def test_stop_kills_what_an_exited_child_left_behind(tmp_path: Path) -> None:
    orphaner = "import os; print('orphan', os.spawnlp(os.P_NOWAIT, 'sleep', 'sleep', '60'), flush=True)"
    child = Child([PY, "-c", orphaner], tmp_path / "orphaner.log")
    assert eventually(lambda: child.poll() is not None, timeout_s=30)
    orphan = int(child.log().split()[-1])
    assert not process_gone(orphan)
    assert child.stop() == 0
    assert eventually(lambda: process_gone(orphan))


def test_terminate_signals_without_waiting(tmp_path: Path) -> None:
    children = [Child([PY, "-c", "import time; time.sleep(60)"], tmp_path / f"t{i}.log") for i in range(2)]
    for child in children:
        child.terminate()
    assert eventually(lambda: all(c.poll() is not None for c in children), timeout_s=10)
    assert [c.stop() for c in children] == [-signal.SIGTERM, -signal.SIGTERM]


def test_env_adds_to_the_environment_and_cwd_is_used(tmp_path: Path) -> None:
    code = "import os; print(os.environ['SY_TEST_VALUE'], 'PATH' in os.environ, os.getcwd())"
    child = Child([PY, "-c", code], tmp_path / "logs" / "env.log", cwd=tmp_path, env={"SY_TEST_VALUE": "forty-two"})
    assert eventually(lambda: child.poll() is not None, timeout_s=30)
    assert child.stop() == 0
    assert child.log().split() == ["forty-two", "True", str(tmp_path)]
