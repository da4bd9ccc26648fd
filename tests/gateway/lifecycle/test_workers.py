"""The workers' supervisor (gateway/lifecycle/workers.py) in process: its workers are forks of
the test running a small function instead of a gateway. What a worker is told (its slot),
what it finds in its fork (the supervisor's sockets closed, its signals), its exit code as the
supervisor reads it, a restart after RESPAWN_AFTER_S (at, below and above it, on a clock the
test sets), the signals passed on, and the sockets bound before any worker starts."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway.lifecycle import workers
from gateway.lifecycle.workers import FORWARDED, Supervisor, WorkerSlot, listening_socket, reuse_port_socket

LOCAL = ("127.0.0.1", 0)


@pytest.fixture(autouse=True)
def own_signals():
    """The supervisor takes the process's signals: given back after each test."""
    kept = {sig: signal.getsignal(sig) for sig in FORWARDED}
    yield
    for sig, handler in kept.items():
        signal.signal(sig, handler)


def test_a_slot_names_its_siblings_sockets_and_describes_itself():
    slot = WorkerSlot(index=1, count=3, supervisor_pid=7, run_dir="/run/x", port=8080)
    assert slot.metrics_socket(2) == "/run/x/worker-2.sock" and slot.ops_port is None
    assert slot.describe() == {"index": 1, "count": 3}


def test_a_reuse_port_socket_is_bound_not_listening_and_shares_its_port():
    first = reuse_port_socket(*LOCAL)
    try:
        port = first.getsockname()[1]
        assert first.family == socket.AF_INET and first.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
        assert first.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        assert first.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        second = listening_socket("127.0.0.1", port)  # the same port: a worker's
        try:
            assert second.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1 and second.get_inheritable()
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        finally:
            second.close()
    finally:
        first.close()
    v6 = reuse_port_socket("::1", 0)
    assert v6.family == socket.AF_INET6
    v6.close()


def test_a_port_held_without_reuse_is_refused_and_the_socket_closed(monkeypatch):
    held = socket.socket()
    held.bind(LOCAL)
    made = []
    real = socket.socket

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(workers.socket, "socket", recording)
    try:
        with pytest.raises(OSError):
            reuse_port_socket("127.0.0.1", held.getsockname()[1])
        assert made[0].fileno() == -1
    finally:
        held.close()


def pause() -> None:
    """A worker waits for a signal; a broken supervisor that never sends it leaves no fork behind for long."""
    signal.alarm(30)
    signal.pause()


def wait_for(folder: Path, files: int) -> None:
    deadline = time.monotonic() + 30
    while len(list(folder.iterdir())) < files and time.monotonic() < deadline:
        time.sleep(0.01)


def supervised(count, worker, ops=None, stop=None):
    """Run a supervisor of `count` forks of `worker(slot, supervisor) -> exit code`. `stop`: (a signal, a
    condition): the signal is sent to the supervisor once its workers are all known and the condition holds
    (sent from a thread of the test, which a signal at any time cannot be: one that comes between a fork and
    the supervisor's noting its pid is not passed to that worker)."""
    # A worker run in the supervisor's own process (the fork's two sides swapped) ends it with 1: the test
    # process itself then exits as a failed run would (it is the fork that carries on).
    sup = Supervisor(count, lambda slot: 1 if os.getpid() == slot.supervisor_pid else worker(slot, sup), LOCAL, ops)
    run_dir = sup.run_dir
    assert os.path.isdir(run_dir) and os.path.basename(run_dir).startswith("switchyard-workers-")
    if stop is not None:
        sig, ready = stop

        def send() -> None:
            while not (ready() and len(sup.children) == count):
                if ended.wait(0.01):
                    return  # the supervisor ended without it
            os.kill(os.getpid(), sig)

        ended = threading.Event()
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
    try:
        sup.code = sup.run()
    finally:
        if stop is not None:
            ended.set()
            sender.join()
    assert not os.path.exists(run_dir) and all(s.fileno() == -1 for s in sup.held)
    return sup


def test_each_worker_gets_its_slot_in_a_fork_with_the_supervisors_sockets_closed(tmp_path):
    def worker(slot, sup):
        fine = (
            all(s.fileno() == -1 for s in sup.held)
            and slot.supervisor_pid == os.getppid()
            and (slot.count, slot.port, slot.ops_port, slot.run_dir) == (2, sup.ports[0], sup.ports[1], sup.run_dir)
            and signal.getsignal(signal.SIGTERM) is workers._exit_now
            and signal.getsignal(signal.SIGINT) is workers._exit_now
            and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
            and not signal.pthread_sigmask(signal.SIG_BLOCK, []) & set(FORWARDED)  # none held back
        )
        (tmp_path / f"w{slot.index}").write_text("ok" if fine else "wrong")
        (tmp_path / "said" / str(slot.index)).touch()
        wait_for(tmp_path / "said", 2)  # the first to end stops the other: each has said its part first
        return 0

    (tmp_path / "said").mkdir()

    sup = supervised(2, worker, ops=LOCAL)
    assert sup.code == 0 and sup.exit_codes == [0, 0] and sup.ports[0] != 0 and sup.ports[1] != 0
    assert sorted(p.read_text() for p in tmp_path.glob("w*")) == ["ok", "ok"]
    no_ops = supervised(1, lambda slot, sup: 0 if slot.ops_port is None else 9)
    assert no_ops.exit_codes == [0] and len(no_ops.ports) == 1


@pytest.mark.parametrize(
    ("ends", "code", "said"),
    [
        (lambda: 3, 3, ""),
        (lambda: sys.exit(4), 4, ""),
        (lambda: sys.exit("bye"), 1, ""),
        (lambda: 1 / 0, 1, "ZeroDivisionError: division by zero"),
    ],
)
def test_a_workers_exit_code_is_read_and_any_failure_fails_the_gateway(ends, code, said, capfd):
    sup = supervised(1, lambda slot, sup: ends())
    assert sup.exit_codes == [code] and sup.code == 1
    assert said in capfd.readouterr().err


def test_what_a_worker_printed_last_is_not_lost(capfd):
    supervised(1, lambda slot, sup: print("last words", end="") or 0)
    assert capfd.readouterr().out.endswith("last words")


def clock_at(*times: float):
    """A monotonic clock that reads `times`, then far later."""
    values = itertools.chain(times, itertools.count(10_000.0))
    return SimpleNamespace(monotonic=lambda: next(values))


@pytest.mark.parametrize(("lived", "restarted"), [(9.99, False), (10.0, True), (10.01, True)])
def test_a_worker_that_dies_after_the_respawn_time_is_started_again(lived, restarted, monkeypatch, tmp_path):
    monkeypatch.setattr(workers, "RESPAWN_AFTER_S", 10.0)
    monkeypatch.setattr(workers, "time", clock_at(100.0, 100.0 + lived))

    def worker(slot, sup):
        runs = len(list(tmp_path.iterdir()))
        (tmp_path / str(runs)).touch()
        if runs == 0:
            return 5  # the first one dies
        pause()  # the second runs until the gateway is stopped
        return 9

    sup = supervised(1, worker, stop=(signal.SIGTERM, lambda: len(list(tmp_path.iterdir())) == 2))
    assert len(list(tmp_path.iterdir())) == (2 if restarted else 1)
    assert sup.exit_codes == ([0] if restarted else [5]) and sup.code == (0 if restarted else 1)


def test_an_early_death_stops_the_other_workers(tmp_path):
    def worker(slot, sup):
        (tmp_path / str(slot.index)).touch()
        if slot.index == 0:
            wait_for(tmp_path, 2)  # the other one runs (its own signal handlers set)
            return 6
        pause()  # until the supervisor passes its stop on
        return 9

    sup = supervised(2, worker)
    assert sorted(sup.exit_codes) == [0, 6]


def test_a_reload_signal_is_passed_on_without_stopping(tmp_path, caplog):
    def worker(slot, sup):
        got = []
        signal.signal(signal.SIGHUP, lambda *_: got.append(1))
        (tmp_path / "ready").touch()
        while not got:
            pause()
        return 0

    with caplog.at_level("ERROR", "switchyard.workers"):
        sup = supervised(1, worker, stop=(signal.SIGHUP, (tmp_path / "ready").exists))
    # not stopping: the worker's exit right after is an early death, said as such
    assert sup.exit_codes == [0] and "stopping" in caplog.text


def test_the_childs_part_in_this_process(capfd):
    """What a fork runs before its worker (its signals, the supervisor's sockets closed) and the exit
    code it makes of the worker's end, run here: a fork's calls are out of reach of the test's tracing."""
    sup = Supervisor(1, lambda slot: 0, LOCAL, LOCAL)
    slot = WorkerSlot(0, 1, os.getpid(), sup.run_dir, sup.ports[0], sup.ports[1])
    seen = {}

    def worker(got):
        seen["slot"] = got
        seen["closed"] = [s.fileno() for s in sup.held]
        seen["signals"] = [signal.getsignal(sig) for sig in (*FORWARDED, signal.SIGCHLD)]
        seen["wakeup"] = signal.set_wakeup_fd(-1)
        print("said", end="")
        return 3

    try:
        for run, code in [
            (worker, 3),
            (lambda _: sys.exit(4), 4),
            (lambda _: sys.exit("bye"), 1),
            (lambda _: 1 / 0, 1),
            (lambda _: workers._exit_now(signal.SIGTERM, None), 0),
        ]:
            sup.run_worker = run
            sup.wake = os.pipe()
            os.set_blocking(sup.wake[1], False)
            signal.set_wakeup_fd(sup.wake[1])
            assert sup._child(slot) == code
            assert not any(is_open(fd) for fd in sup.wake)  # the supervisor's wakeup pipe is not the fork's
        assert seen == {
            "slot": slot,
            "closed": [-1, -1],
            "signals": [workers._exit_now, workers._exit_now, signal.SIG_DFL, signal.SIG_DFL],
            "wakeup": -1,
        }
        said = capfd.readouterr()
        assert said.out == "said" and "ZeroDivisionError: division by zero" in said.err
    finally:
        shutil.rmtree(sup.run_dir)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def started(folder: Path, slot: WorkerSlot) -> int:
    """Notes a worker's start in `folder`: how many times its index started before."""
    before = len(list(folder.glob(f"{slot.index}-*")))
    (folder / f"{slot.index}-{before}").touch()
    return before


def test_a_stop_ends_every_worker_and_restarts_none(monkeypatch, tmp_path):
    monkeypatch.setattr(workers, "time", clock_at(100.0, 100.0, 200.0, 200.0))  # each lived long enough

    def worker(slot, sup):
        if started(tmp_path, slot):
            return 8  # a restart (there should be none)
        pause()
        return 9

    sup = supervised(2, worker, stop=(signal.SIGTERM, lambda: len(list(tmp_path.iterdir())) == 2))
    assert sup.exit_codes == [0, 0] and sorted(p.name for p in tmp_path.iterdir()) == ["0-0", "1-0"]


def test_a_worker_started_again_keeps_its_index_and_a_run_dir_gone_is_no_error(monkeypatch, tmp_path):
    monkeypatch.setattr(workers, "time", clock_at(100.0, 100.0, 200.0))  # worker 1 lived long enough

    def worker(slot, sup):
        if not started(tmp_path, slot):
            if slot.index == 1:
                return 5  # dies late: started again
            pause()
            return 9
        shutil.rmtree(slot.run_dir)  # the restarted one takes the run dir with it, and dies early
        return 7

    sup = supervised(2, worker)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-0", "1-0", "1-1"]
    assert sorted(sup.exit_codes) == [0, 7]


def test_a_stop_that_comes_as_a_worker_is_forked_reaches_it(monkeypatch):
    """A stop between the fork and the supervisor's noting the new worker's pid: held until the
    worker is known (and, in the fork, until the worker's own handlers are set), then passed on."""
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            os.kill(os.getpid(), signal.SIGTERM)  # the stop comes now
        return pid

    monkeypatch.setattr(workers.os, "fork", fork)

    def worker(slot, sup):
        signal.alarm(5)  # a stop that never reaches it: SIGALRM ends it after 5 s
        signal.pause()
        return 9

    assert supervised(1, worker).exit_codes == [0]


def test_a_stop_another_thread_takes_as_a_worker_is_forked_reaches_it(monkeypatch):
    """The fork's mask holds the forking thread's signals only: with another thread running, the
    stop is taken there and its handler runs before the new pid is noted; it is passed on after."""
    real_fork = os.fork
    ran_early: list[bool] = []

    def fork():
        pid = real_fork()
        if pid:
            os.kill(os.getpid(), signal.SIGTERM)  # the other thread, which blocks nothing, takes it
            time.sleep(0.05)  # the handler runs (in this thread, at its next check) before the pid is noted
            ran_early.append(sup_ref[0].stopping)
        return pid

    monkeypatch.setattr(workers.os, "fork", fork)
    sup_ref: list = []
    original_init = workers.Supervisor.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        sup_ref.append(self)

    monkeypatch.setattr(workers.Supervisor, "__init__", init)
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)
    other.start()

    def worker(slot, sup):
        signal.alarm(5)  # a stop that never reaches it: SIGALRM ends it after 5 s
        signal.pause()
        return 9

    try:
        assert supervised(1, worker).exit_codes == [0]
    finally:
        idle.set()
        other.join()
    assert ran_early == [True]


def test_a_worker_started_again_is_not_sent_the_signals_passed_on_before_it(monkeypatch, tmp_path):
    """A reload passed on to the first worker is not passed again to the one that replaces it
    (one with SIGHUP's default action would die of it)."""
    monkeypatch.setattr(workers, "time", clock_at(100.0, 200.0))  # the first lived long: started again

    def worker(slot, sup):
        runs = len(list(tmp_path.glob("run-*")))
        (tmp_path / f"run-{runs}").touch()
        if runs == 0:
            got: list[int] = []
            signal.signal(signal.SIGHUP, lambda *_: got.append(1))
            (tmp_path / "ready").touch()
            while not got:
                pause()
            return 5  # dies after the reload
        time.sleep(0.5)  # the replacement: time for a stale signal to land, then a clean exit
        return 0

    sup = supervised(1, worker, stop=(signal.SIGHUP, (tmp_path / "ready").exists))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready", "run-0", "run-1"]
    assert sup.exit_codes == [0]


def test_a_stop_another_thread_takes_while_the_supervisor_waits_reaches_the_workers(tmp_path):
    """A signal a thread of the supervisor's process other than the main one takes (any thread a library
    started) runs its handler in the main thread only when that thread wakes: the wait for the workers
    must wake for it, not only when a worker exits."""
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)
    other.start()

    def worker(slot, sup):
        (tmp_path / "ready").touch()
        signal.alarm(5)  # a stop that never reaches it: SIGALRM ends it after 5 s
        signal.pause()
        return 9

    def send_to_other() -> None:
        wait_for(tmp_path, 1)
        time.sleep(0.2)  # the supervisor is in its wait by now
        signal.pthread_kill(other.ident, signal.SIGTERM)

    sender = threading.Thread(target=send_to_other, daemon=True)
    sender.start()
    ours = os.pipe()  # a wakeup fd and a SIGCHLD handler the supervisor's process had before: given back
    os.set_blocking(ours[1], False)
    before = signal.set_wakeup_fd(ours[1])
    signal.signal(signal.SIGCHLD, handler := lambda *_: None)
    started = time.monotonic()
    try:
        assert supervised(1, worker).exit_codes == [0]
        assert time.monotonic() - started < 4
        assert signal.set_wakeup_fd(before) == ours[1] and signal.getsignal(signal.SIGCHLD) is handler
    finally:
        signal.set_wakeup_fd(before)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in ours:
            os.close(fd)
        idle.set()
        other.join()
        sender.join()
