"""One child process: its own session, its output in a log file, a readiness wait
that fails early, and a stop that reaches everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from processes.probes import Probe


class ChildFailed(RuntimeError):
    """The child did not become ready. It has been stopped; `log_tail` is the end
    of its log, also in the message."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(f"{message}; log tail:\n{log_tail}")
        self.log_tail = log_tail


class ChildExited(ChildFailed):
    """The child exited before it was ready."""

    def __init__(self, message: str, log_tail: str, returncode: int) -> None:
        super().__init__(message, log_tail)
        self.returncode = returncode


class NotReady(ChildFailed, TimeoutError):
    """The probe did not pass within the timeout."""


class Child:
    """A child process, started by the constructor in a session of its own, with
    stdout and stderr written to `log_path` (stdin is /dev/null).

    `env` adds to (and overrides) this process's environment. `stop()` may be
    called any number of times; leaving a `with` block calls it.
    """

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        log_path: Path,
        *,
        name: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.name = name or Path(self.argv[0]).name
        self.log_path = Path(log_path)
        self.stop_timeout_s = stop_timeout_s
        self._stopped = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The child keeps its own descriptor of the log; ours is closed at once.
        with self.log_path.open("wb") as log:
            self._popen = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env={**os.environ, **env} if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        """The exit status, or None while the child runs."""
        return self._popen.poll()

    def wait_ready(self, probe: Probe, timeout_s: float = 60.0, interval_s: float = 0.05) -> Self:
        """Poll `probe` until it passes. If the child exits first, or the probe
        does not pass within `timeout_s`, or the probe raises, the child is
        stopped before the error is raised (`ChildExited`, `NotReady`): a caller
        whose start-up helper raised has no handle to stop it with."""
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                returncode = self.poll()
                if returncode is not None:
                    raise ChildExited(
                        f"{self.name} exited with {returncode} before it was ready", self.log_tail(), returncode
                    )
                if probe():
                    return self
                if time.monotonic() >= deadline:
                    raise NotReady(f"{self.name} not ready after {timeout_s:g} s", self.log_tail())
                time.sleep(interval_s)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log()[-chars:]

    def terminate(self) -> None:
        """SIGTERM to the child's group without waiting: to shut several children
        down in parallel, terminate them all, then `stop()` each."""
        if self.poll() is None:
            self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the group at once: a crash, no clean-up (what a killed replica looks like)."""
        if self.poll() is None:
            self._signal_group(signal.SIGKILL)
            self._popen.wait()

    def stop(self) -> int:
        """SIGTERM to the group, SIGKILL after `stop_timeout_s`; returns the exit status.
        Whatever the child started and left behind is killed too."""
        if not self._stopped:
            if self.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self._popen.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self._popen.wait()
            # Members of the group that outlived the child (ignored SIGTERM, or orphaned).
            self._signal_group(signal.SIGKILL)
            self._stopped = True
        return self._popen.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._popen.pid, sig)
        except ProcessLookupError:
            pass  # the group is empty: nothing left to signal

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Child({self.name!r}, pid={self.pid}, returncode={self._popen.returncode})"
