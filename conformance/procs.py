"""Start and stop the servers a matrix run needs (gateway, simulators) as
real child processes on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

SWITCHYARD = [sys.executable, "-m", "gateway.cli"]
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ManagedProcess:
    def __init__(self, name: str, args: list[str], url: str, log_path: Path) -> None:
        self.name = name
        self.args = args
        self.url = url
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        # Own session, so stop() can end the process and any children it spawned.
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, path: str, timeout_s: float = 120.0) -> ManagedProcess:
        """Poll `path` until 200. On failure the process is stopped before the
        error is raised: the caller never got a handle to stop it with."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log tail:\n{tail}")
            try:
                if httpx.get(self.url + path, timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"{self.name} not ready after {timeout_s:.0f} s; log tail:\n{tail}")

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self._log.closed:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def start_gateway(config_path: Path, port: int, log_dir: Path) -> ManagedProcess:
    p = ManagedProcess(
        "gateway",
        [*SWITCHYARD, "serve", "--config", str(config_path), "--port", str(port)],
        f"http://127.0.0.1:{port}",
        log_dir / "gateway.log",
    )
    return p.wait_ready("/healthz")
