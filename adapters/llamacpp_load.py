"""What a llama.cpp server says about itself: its load (`/metrics` `llamacpp:*` with
`--metrics`, and `/slots`) and its conditions (`/props`).

Every scrape of `/metrics` resets llama.cpp's throughput averages (the window since the
previous scrape), so the gateway reads each server once per interval for every adapter
in this process and shares the snapshot; the operator's Prometheus keeps its windows.
`/slots` gives the KV in use (and the busy slots without `--metrics`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from adapters import prometheus_text as prom
from adapters.base import LoadSnapshot
from adapters.dialect import Reader, SharedLoad, shared_load

_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)


@dataclass(frozen=True, slots=True)
class Props:
    """`GET /props`: what the gateway depends on, recorded once per adapter."""

    n_ctx: int  # per slot
    slots: int
    build: str
    tools: bool  # the chat template renders tools (its `chat_template_caps`)
    hermes_calls: bool = False  # its calls are `<tool_call>` blocks (adapters/llamacpp.py)

    def describe(self) -> str:
        tools = "renders tools" if self.tools else "has no tools"
        return f"build {self.build}: {self.slots} slots of {self.n_ctx} positions; its chat template {tools}"


def parse_props(payload: Any) -> Props | None:
    if not isinstance(payload, dict):
        return None
    settings = payload.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    caps = payload.get("chat_template_caps")
    return Props(
        n_ctx=n_ctx if isinstance(n_ctx, int) else 0,
        slots=int(payload.get("total_slots") or 0),
        build=str(payload.get("build_info") or "unknown"),
        tools=bool(caps.get("supports_tools")) if isinstance(caps, dict) else False,
        hermes_calls="<tool_call>" in str(payload.get("chat_template") or ""),
    )


async def read_props(http: Reader) -> Props | None:
    try:
        status, raw = await http.get("/props")
        return parse_props(orjson.loads(raw)) if status == 200 else None
    except (*_ERRORS, orjson.JSONDecodeError):
        return None


def parse_slots(payload: Any) -> tuple[int | None, float | None]:
    """(busy slots, KV in use over the slots' context) from `/slots`: a busy slot holds
    its prompt and what it generated so far (`next_token` is a list in code, an
    object in the README)."""
    if not isinstance(payload, list):
        return None, None
    busy = used = capacity = 0
    for slot in payload:
        if not isinstance(slot, dict):
            continue
        n_ctx = slot.get("n_ctx")
        capacity += n_ctx if isinstance(n_ctx, int) else 0
        if not slot.get("is_processing"):
            continue
        busy += 1
        nxt = slot.get("next_token")
        nxt = nxt[0] if isinstance(nxt, list) and nxt else nxt
        decoded = nxt.get("n_decoded") if isinstance(nxt, dict) else 0
        prompt = slot.get("n_prompt_tokens")
        used += (prompt if isinstance(prompt, int) else 0) + (decoded if isinstance(decoded, int) else 0)
    return busy, (min(used / capacity, 1.0) if capacity else None)


@dataclass
class _Reader(SharedLoad):
    counters: tuple[float, float] | None = None  # (cached, processed) prompt tokens at the last read


async def load(http: Reader, min_interval_s: float) -> LoadSnapshot:
    """The server's load, read once per `min_interval_s` for every adapter (`shared_load`)."""
    return await shared_load(http, min_interval_s, _Reader, _read)


async def _read(http: Reader, reader: _Reader) -> LoadSnapshot:
    reader.last = await _snapshot(http, reader)
    reader.read_at = reader.last.read_at
    return reader.last


async def _snapshot(http: Reader, reader: _Reader) -> LoadSnapshot:
    samples, read_at = await prom.scrape(http, "/metrics")
    try:
        status, raw = await http.get("/slots")
        busy, kv = parse_slots(orjson.loads(raw)) if status == 200 else (None, None)
    except (*_ERRORS, orjson.JSONDecodeError):
        busy, kv = None, None
    if samples is None:  # no --metrics (501): the busy slots, and no queue
        return LoadSnapshot(running=busy, kv_usage=kv, read_at=read_at or time.time())
    snapshot = prom.gauge_snapshot(
        samples, read_at, "llamacpp:requests_processing", "llamacpp:requests_deferred", kv, None
    )
    snapshot.prefix_hit_rate = _hit_rate(samples, reader)
    return snapshot


def _hit_rate(samples: list[prom.Sample], reader: _Reader) -> float | None:
    """Prompt tokens reused from the cache over all prompt tokens since the previous
    read (so it follows current traffic); else since start. llama.cpp counts the two
    apart: `prompt_tokens_total` excludes the cached ones."""
    cached = prom.total(samples, "llamacpp:prompt_tokens_cached_total")
    processed = prom.total(samples, "llamacpp:prompt_tokens_total")
    if cached is None or processed is None:
        return None
    previous, reader.counters = reader.counters, (cached, processed)
    if previous is not None and cached >= previous[0] and processed >= previous[1]:
        seen = (cached - previous[0]) + (processed - previous[1])
        if seen > 0:
            return (cached - previous[0]) / seen
    return cached / (cached + processed) if cached + processed > 0 else None
