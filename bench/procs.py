"""Starting the servers a benchmark measures: real processes on free loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(map(str, proc.args))} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answers: up (a 503 readiness still means the socket is served)
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:g} s")


class Server:
    """A child process, stopped (terminate, then kill) when the `with` ends."""

    def __init__(
        self, name: str, argv: Sequence[str], ready_url: str, log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.ready_url = ready_url
        self.log_path = log_dir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        """scheme://host:port of `ready_url`."""
        scheme, _, rest = self.ready_url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}"

    def __enter__(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(self.env or {})}
        )
        log.close()
        try:
            wait_ready(self.ready_url, self.proc)
        except RuntimeError as exc:
            self.__exit__()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name}: {exc}\n--- {self.log_path} ---\n{tail}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
