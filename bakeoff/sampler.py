"""The runtime's own metrics, sampled beside the gateway's while a probe runs.

Each runtime names its load differently (docs/runtimes.md); `SERIES` keeps the ones a
bake-off compares: requests running and waiting, KV-cache use, preemptions, prefix-cache
hits. A name is summed over its label sets (one runtime, several models or engines).
The simulators export the same names as their runtimes, so one list serves both.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

SERIES = (
    # vLLM
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    # SGLang
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    # llama.cpp
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:kv_cache_usage_ratio",
    # the gateway (and the native engine in it)
    "switchyard_inflight_requests",
    "switchyard_backend_inflight",
    "switchyard_engine_prefix_cache_hits_total",
    "switchyard_engine_prefix_cache_queries_total",
)


def parse(text: str) -> dict[str, float]:
    """The kept series of a Prometheus text page, each summed over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        if name in SERIES:
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return out


class Sampler:
    """Polls `urls` (name -> /metrics URL) every `interval_s` until stopped."""

    def __init__(self, urls: dict[str, str], interval_s: float, headers: dict[str, str] | None = None) -> None:
        self.urls = urls
        self.interval_s = interval_s
        self.headers = headers or {}
        self.samples: dict[str, list[tuple[float, dict[str, float]]]] = {k: [] for k in urls}
        self.errors: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=5.0, headers=self.headers) as http:
            while True:
                for name, url in self.urls.items():
                    try:
                        r = await http.get(url)
                        if r.status_code == 200:
                            self.samples[name].append((time.perf_counter() - t0, parse(r.text)))
                        else:
                            self.errors[name] = f"HTTP {r.status_code}"
                    except httpx.HTTPError as exc:
                        self.errors[name] = type(exc).__name__
                await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Per source and series: max, mean, first and last value (a counter's rise is last - first)."""
        out: dict[str, Any] = {}
        for source, samples in self.samples.items():
            names = sorted({n for _, s in samples for n in s})
            series = {}
            for n in names:
                vals = [s[n] for _, s in samples if n in s]
                series[n] = {"max": max(vals), "mean": sum(vals) / len(vals), "first": vals[0], "last": vals[-1]}
            out[source] = {"samples": len(samples), "series": series, "error": self.errors.get(source)}
        return out
