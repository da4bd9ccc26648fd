"""Real processes on loopback for end-to-end tests: the test upstream, simulators,
gateways and redis-server. Each starts on a free port and is stopped by its
fixture; nothing is mocked."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
SWITCHYARD = [sys.executable, "-m", "gateway.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A child process with a base URL; `stop()` terminates it (and is idempotent)."""

    def __init__(self, args: list[str], url: str, log_path: Path, env: dict | None = None) -> None:
        self.args = args
        self.url = url
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def wait_ready(self, path: str = "/healthz", timeout: float = 60.0) -> Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + path, timeout=1.0).status_code < 500:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.args} not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL: a crash, no cleanup (what a killed replica looks like)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def start_upstream(tmp: Path, *extra: str) -> Process:
    port = free_port()
    p = Process(
        [*SWITCHYARD, "simulate", "openai", "--port", str(port), *extra],
        f"http://127.0.0.1:{port}",
        tmp / f"upstream-{port}.log",
    )
    return p.wait_ready("/health")


def start_gateway(tmp: Path, config: dict, env: dict | None = None) -> Process:
    port = free_port()
    config = {**config, "listen": {"host": "127.0.0.1", "port": port}}
    path = Path(tempfile.mkstemp(prefix="gw-", suffix=".yaml", dir=tmp)[1])
    path.write_text(yaml.safe_dump(config))
    p = Process(
        [*SWITCHYARD, "serve", "--config", str(path)], f"http://127.0.0.1:{port}", tmp / f"gateway-{port}.log", env=env
    )
    return p.wait_ready("/healthz")


def start_redis(tmp: Path) -> Process:
    port = free_port()
    p = Process(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp),
        ],
        f"redis://127.0.0.1:{port}/0",
        tmp / f"redis-{port}.log",
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return p
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("redis-server did not start:\n" + p.log())


def openai_backend_config(upstream: Process, model: str = "m", **backend) -> dict:
    return {
        "models": {
            model: {
                "backends": [
                    {"name": "up", "adapter": "openai", "url": upstream.url + "/v1", "served_model": "m", **backend}
                ]
            }
        }
    }
