"""Fixtures for adapter tests: the byte-exact replay server as a real process."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from processes import free_port
from tests.procs import Process


class ReplayServer:
    def __init__(self, process: Process) -> None:
        self.process = process
        self.url = process.url

    def script(self, routes: dict[str, list[dict[str, Any]]]) -> None:
        httpx.post(self.url + "/_replay/script", json={"routes": routes}, timeout=5).raise_for_status()

    def reply(self, *responses: dict[str, Any], route: str = "POST /v1/chat/completions") -> None:
        """Script one route's answers, one per request in order (`streamed(...)`,
        `json_response(...)` from wire_samples)."""
        self.script({route: list(responses)})

    def recorded(self) -> dict[str, Any]:
        return httpx.get(self.url + "/_replay/requests", timeout=5).json()

    def bodies(self, path: str) -> list[Any]:
        return [r["body"] for r in self.recorded()["requests"] if r["path"].split("?")[0] == path]


@pytest.fixture(scope="session")
def replay(tmp_path_factory) -> ReplayServer:
    port = free_port()
    tmp = tmp_path_factory.mktemp("replay")
    p = Process(
        [sys.executable, str(Path(__file__).with_name("replay_server.py")), "--port", str(port)],
        f"http://127.0.0.1:{port}",
        tmp / "replay.log",
    )
    p.wait_ready("/_replay/requests", timeout=20)
    yield ReplayServer(p)
    p.stop()


@pytest.fixture
async def loop_errors():
    """A test using it fails if the event loop reported an error from a callback (a
    timer or protocol method of the client that raised)."""
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    await asyncio.sleep(0)
    loop.set_exception_handler(old)
    assert errors == []
