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
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any

from processes import Child, free_port
from simulators.server import READY_LINE

REPO_ROOT = Path(__file__).resolve().parent.parent


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

    async def settled(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """The stats once nothing is in flight (TimeoutError after `timeout_s`: a leak)."""
        async with asyncio.timeout(timeout_s):
            while True:
                stats = await asyncio.to_thread(self.stats)
                if stats["in_flight"] == 0:
                    return stats
                await asyncio.sleep(0.02)

    def reset(self) -> None:
        self._call("POST", "/_sim/reset")

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class SimulatorHandle(_Handle):
    """A simulator subprocess. `process` is its `processes.Child` (`pid`, `poll()`,
    `terminate()` to signal several before stopping each); its output goes to a
    temporary log file, removed by `stop()`."""

    def __init__(self, kind: str, port: int, process: Child) -> None:
        self.kind = kind
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process = process

    @property
    def output(self) -> list[str]:
        """The simulator's stdout and stderr so far, line by line."""
        return self.process.log().splitlines(keepends=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the simulator prints its ready line (the port is bound); raises
        `processes.ChildExited` or `processes.NotReady`, with the output's tail."""
        self.process.wait_ready(lambda: READY_LINE in self.process.log(), timeout_s=timeout, interval_s=0.02)

    def stop(self) -> None:
        self.process.stop()
        self.process.log_path.unlink(missing_ok=True)


def start_simulator(
    kind: str, *, wait: bool = True, timeout: float = 30.0, port: int | None = None, **opts: Any
) -> SimulatorHandle:
    port = port or free_port()
    cmd = [sys.executable, "-m", "simulators", kind, "--port", str(port), *_flags(opts)]
    env = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    fd, log = tempfile.mkstemp(prefix=f"sim-{kind}-{port}-", suffix=".log")
    os.close(fd)
    handle = SimulatorHandle(
        kind, port, Child(cmd, Path(log), name=f"{kind} simulator", cwd=REPO_ROOT, env=env, stop_timeout_s=5)
    )
    if wait:
        handle.wait_ready(timeout)
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
