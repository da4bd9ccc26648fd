"""Start a simulator as a real subprocess for tests.

    with start_simulator("vllm", enable_auto_tool_choice=True, tool_call_parser="hermes") as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x")
        ...
        assert sim.stats()["aborted"] == 1

Keyword options are the CLI flags with underscores (`ttft_ms=50` -> `--ttft-ms 50`,
`enable_metrics=True` -> `--enable-metrics`). With `wait=False` the call returns
before the port is bound (to test startup behaviour); `wait_ready()` waits later.

`start_in_process(kind, **opts)` runs the same server on a thread of the calling
process instead (no interpreter start-up; same handle interface), for tests that
start many simulators or want to look at a simulator's Python state.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flags(opts: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args


class _Handle:
    """What every handle offers: the URL and the `/_sim/*` calls."""

    url: str

    def _call(self, method: str, path: str) -> Any:
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/stats")

    def reset(self) -> None:
        self._call("POST", "/_sim/reset")

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class SimulatorHandle(_Handle):
    def __init__(self, kind: str, port: int, process: subprocess.Popen[str]) -> None:
        self.kind = kind
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process = process
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("SIMULATOR READY" in line for line in self.output):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} simulator exited: {''.join(self.output)[-2000:]}")
            time.sleep(0.02)
        raise TimeoutError(f"{self.kind} simulator not ready after {timeout}s: {''.join(self.output)[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_simulator(
    kind: str, *, wait: bool = True, timeout: float = 30.0, port: int | None = None, **opts: Any
) -> SimulatorHandle:
    port = port or free_port()
    cmd = [sys.executable, "-m", "simulators", kind, "--port", str(port), *_flags(opts)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    process = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    handle = SimulatorHandle(kind, port, process)
    if wait:
        try:
            handle.wait_ready(timeout)
        except Exception:
            handle.stop()
            raise
    return handle


class InProcessSimulator(_Handle):
    """A simulator served by an event loop on a background thread of this process."""

    def __init__(self, kind: str, timeout: float, **opts: Any) -> None:
        from simulators.cli import build_simulator
        from simulators.options import SimOptions

        self.kind = kind
        self.simulator = build_simulator(kind, SimOptions(kind=kind, port=0, **opts))
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"sim-{kind}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"in-process {kind} simulator not ready after {timeout}s")
        if self._error is not None:
            raise RuntimeError(f"in-process {kind} simulator failed") from self._error

    def _run(self) -> None:
        from simulators.server import serve

        def bound(port: int) -> None:
            self.port = port
            self.url = f"http://127.0.0.1:{port}"
            self._ready.set()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.simulator, stop=self._stop, on_ready=bound)

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced by __init__ when start-up fails
            self._error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)


def start_in_process(kind: str, *, timeout: float = 30.0, **opts: Any) -> InProcessSimulator:
    """Start a simulator on a thread of this process, on a free port (option names as in
    `SimOptions`, e.g. `ttft_ms=5`, `tool_call_parser="hermes"`)."""
    return InProcessSimulator(kind, timeout, **opts)
