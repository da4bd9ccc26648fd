"""`serve --workers N`: N worker processes on one port under one supervisor, each a whole
gateway forked after the config was validated, on its own SO_REUSEPORT socket. The
supervisor binds the address first (to fail early, and to hold a port 0 chose), passes
SIGTERM, SIGINT and SIGHUP on, restarts a worker that dies after `RESPAWN_AFTER_S` and
stops the gateway when one dies sooner (docs/operations.md, "Workers").
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("switchyard.workers")

RESPAWN_AFTER_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Who a worker is among its siblings, and where it listens."""

    index: int
    count: int
    supervisor_pid: int
    run_dir: str  # the workers' metrics sockets
    port: int  # the main listener's port (the one port 0 chose, if so)
    ops_port: int | None = None

    def metrics_socket(self, index: int) -> str:
        return os.path.join(self.run_dir, f"worker-{index}.sock")

    def describe(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT, not listening yet."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    sock = reuse_port_socket(host, port)
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Starts the workers, passes signals on, starts again a worker that died."""

    def __init__(
        self, count: int, run_worker: Callable[[WorkerSlot], int], listen: tuple[str, int], ops: tuple[str, int] | None
    ) -> None:
        self.count = count
        self.run_worker = run_worker
        self.run_dir = tempfile.mkdtemp(prefix="switchyard-workers-")
        # Bound, never listening: the address is ours, and a port 0 is chosen once for every worker.
        self.held = [reuse_port_socket(*listen)]
        if ops is not None:
            self.held.append(reuse_port_socket(*ops))
        self.ports = [s.getsockname()[1] for s in self.held]
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
        self.stopping = False
        self.passed_on: list[signal.Signals] = []  # every signal passed on to the workers
        self.exit_codes: list[int] = []
        self.wake: tuple[int, int]  # the wakeup pipe's (read, write) ends, set by run()

    def run(self) -> int:
        # A handler runs in the main thread, but a signal another thread takes does not interrupt the
        # main thread's wait: the wait reads a pipe every signal (a worker's exit too) writes a byte to.
        self.wake = os.pipe()
        os.set_blocking(self.wake[1], False)
        woke_before = signal.set_wakeup_fd(self.wake[1])
        chld_before = signal.signal(signal.SIGCHLD, _ignore)
        for sig in FORWARDED:
            signal.signal(sig, self._on_signal)
        try:
            for index in range(self.count):
                self._spawn(index)
            log.info("serving on port %d with %d workers", self.ports[0], self.count)
            while self.children:
                os.read(self.wake[0], 512)
                for pid in list(self.children):
                    exited, status = os.waitpid(pid, os.WNOHANG)
                    if exited:
                        self._reap(pid, status)
        finally:
            signal.set_wakeup_fd(woke_before)
            signal.signal(signal.SIGCHLD, chld_before)
            for fd in self.wake:
                os.close(fd)
            for sock in self.held:
                sock.close()
            shutil.rmtree(self.run_dir, ignore_errors=True)
        return 0 if all(code == 0 for code in self.exit_codes) else 1

    def _reap(self, pid: int, status: int) -> None:
        index, started = self.children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        self.exit_codes.append(code)
        if self.stopping:
            return
        lived = time.monotonic() - started
        if lived < RESPAWN_AFTER_S:
            log.error("worker %d exited with %d %.1f s after its start; stopping", index, code, lived)
            self._signal_all(signal.SIGTERM)
            return
        log.error("worker %d (pid %d) exited with %d; starting it again", index, pid, code)
        self.exit_codes.pop()
        self._spawn(index)

    def _on_signal(self, sig: int, frame) -> None:
        self._signal_all(signal.Signals(sig))

    def _signal_all(self, sig: signal.Signals) -> None:
        if sig != signal.SIGHUP:
            self.stopping = True
        self.passed_on.append(sig)
        for pid in list(self.children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # it exited; the wait collects it

    def _spawn(self, index: int) -> None:
        slot = WorkerSlot(
            index, self.count, os.getpid(), self.run_dir, self.ports[0], self.ports[1] if len(self.ports) > 1 else None
        )
        sys.stdout.flush()
        sys.stderr.flush()
        # A signal between the fork and the pid's noting would be passed on to every worker but
        # this one, and in the fork it would run the supervisor's handler: held until both are set.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            seen = len(self.passed_on)
            pid = os.fork()
            if pid == 0:
                os._exit(self._child(slot))
            self.children[pid] = (index, time.monotonic())
            # The mask holds this thread's signals only: one another thread took ran the handler
            # before the pid was noted, so it is passed on to this worker now.
            for sig in self.passed_on[seen:]:
                os.kill(pid, sig)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    def _child(self, slot: WorkerSlot) -> int:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for fd in self.wake:
                os.close(fd)
            for sig in (*FORWARDED, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            # Until its server handles signals itself, a stop ends the worker before it serves.
            signal.signal(signal.SIGTERM, _exit_now)
            signal.signal(signal.SIGINT, _exit_now)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # blocked by _spawn around the fork
            for sock in self.held:
                sock.close()
            code = self.run_worker(slot)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return code


def _ignore(sig: int, frame) -> None:
    """SIGCHLD's handler: its byte on the wakeup pipe is what wakes the wait."""


def _exit_now(sig: int, frame) -> None:
    raise SystemExit(0)
