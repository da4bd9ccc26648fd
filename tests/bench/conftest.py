"""Fixtures for the harness's tests: real upstream processes on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up within {timeout} s")


def start_upstream(*extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "simulators.openai_upstream", "--port", str(port), *extra], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/health")
    except RuntimeError:
        proc.kill()
        raise
    return proc, base


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """A fast OpenAI-compatible upstream: 8 chunks, 1 ms apart."""
    proc, base = start_upstream("--chunks", "8", "--itl-ms", "1")
    yield base
    stop(proc)


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[str]:
    """Takes 1 s before its first token: the open-loop drift test's server."""
    proc, base = start_upstream("--chunks", "2", "--ttft-ms", "1000")
    yield base
    stop(proc)
