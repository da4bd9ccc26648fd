"""Fixtures for the simulator tests: real simulator subprocesses on free ports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from simulators.testing import SimulatorHandle, start_simulator

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]


def sse_frames(raw: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order (the raw strings, `[DONE]` included)."""
    frames = []
    for block in raw.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                frames.append(line[len("data: ") :])
    return frames


def sse_json(raw: str) -> list[dict[str, Any]]:
    return [json.loads(f) for f in sse_frames(raw) if f.strip() != "[DONE]"]


def chat(content: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": content}], **extra}


@pytest.fixture(scope="module")
def make_sim() -> Iterator[Any]:
    started: list[SimulatorHandle] = []

    def make(kind: str, **opts: Any) -> SimulatorHandle:
        handle = start_simulator(kind, **opts)
        started.append(handle)
        return handle

    yield make
    for handle in started:  # signal all first, then wait: they shut down in parallel
        if handle.process.poll() is None:
            handle.process.terminate()
    for handle in started:
        handle.stop()


def client(sim: SimulatorHandle) -> httpx.Client:
    return httpx.Client(base_url=sim.url, timeout=10)
