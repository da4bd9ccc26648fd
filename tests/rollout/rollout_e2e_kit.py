"""What the rollout end-to-end tests share: a stable and a candidate vLLM simulator told
apart by their answers' length, a gateway process (or several) on one real Redis with a
model rolled out over them, steady traffic from the official client, and the admin API
read while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from policies.api_keys import hash_key
from simulators.testing import start_simulator
from tests.procs import Process, metric_samples, start_gateway

STABLE_TOKENS, CANDIDATE_TOKENS = 3, 5  # each simulator's answer length: which track answered
ADMIN_KEY = "rollout-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
SIM_TOOLS = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
TTFT_MS = 20  # both tracks' time to first token unless a test sets it


@contextlib.contextmanager
def simulators(stable_ttft_ms: float = TTFT_MS, **candidate: Any) -> Iterator[tuple[Any, Any]]:
    """A stable and a candidate simulator; `candidate`: the candidate's flags (a fault)."""
    stable_opts = {"output_tokens": STABLE_TOKENS, "ttft_ms": stable_ttft_ms, **SIM_TOOLS}
    cand_opts = {"output_tokens": CANDIDATE_TOKENS, "ttft_ms": TTFT_MS, "seed": 1, **SIM_TOOLS, **candidate}
    with start_simulator("vllm", **stable_opts) as stable, start_simulator("vllm", **cand_opts) as cand:
        yield stable, cand


def rollout_config(stable_url: str, candidate_url: str, redis_url: str, **rollout: Any) -> dict:
    """Model `m` on one stable and one candidate backend under `rollout` (the block's fields,
    over short windows), its state in `redis_url`, the admin API on."""
    gates = {
        "ttft_p95_ratio_max": 1.6,
        "itl_p95_ratio_max": 4.0,
        "error_rate_max_delta": 0.0,
        **rollout.pop("gates", {}),
    }
    block = {"steps": [0.25, 1.0], "window_s": 2.5, "min_samples": 10, "gates": gates, **rollout}

    def backend(name: str, url: str, track: str) -> dict:
        return {"name": name, "adapter": "vllm", "url": url, "served_model": "sim-model", "track": track}

    return {
        "access_log": False,
        "quota_store": {"kind": "redis", "url": redis_url},
        "admin": {"api_keys": [{"sha256": hash_key(ADMIN_KEY), "name": "ops"}]},
        "models": {
            "m": {
                "backends": [backend("stable", stable_url, "stable"), backend("cand", candidate_url, "candidate")],
                "max_retries": 0,
                "rollout": block,
            }
        },
    }


def gateway(tmp: Path, config: dict) -> Process:
    return start_gateway(tmp, config)


def status(gw: Process, model: str = "m") -> dict:
    r = httpx.get(f"{gw.url}/admin/rollouts/{model}", headers=ADMIN, timeout=10)
    r.raise_for_status()
    return r.json()


def serves(gw: Process, model: str = "m") -> dict:
    """What this replica serves now: its last read of the state (`GET /admin/rollouts`)."""
    r = httpx.get(f"{gw.url}/admin/rollouts", headers=ADMIN, timeout=10)
    r.raise_for_status()
    return next(row for row in r.json()["data"] if row["model"] == model)


def by_track(gw: Process) -> dict[str, float]:
    """Requests the gateway served per track, from its /metrics."""
    samples = metric_samples(httpx.get(gw.url + "/metrics", timeout=10).text)
    out = {"stable": 0.0, "candidate": 0.0}
    for key, value in samples.items():
        if key.startswith("switchyard_requests_total{") and 'model="m"' in key:
            for track in out:
                if f'track="{track}"' in key:
                    out[track] += value
    return out


@dataclass
class Traffic:
    """Steady traffic from `workers` clients over `sessions` sticky sessions."""

    urls: list[str]
    workers: int = 6
    sessions: int = 400
    stream: bool = True
    tools: bool = False
    sent: int = 0
    failed: list[str] = field(default_factory=list)
    candidate_answers: int = 0
    stable_answers: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        clients = [openai.AsyncOpenAI(base_url=u + "/v1", api_key="x", max_retries=0, timeout=60) for u in self.urls]
        rng = random.Random(7)

        async def worker(w: int) -> None:
            while not stop.is_set():
                api = clients[(self.sent + w) % len(clients)]
                session = f"s{rng.randrange(self.sessions)}"
                self.sent += 1
                try:
                    tokens = await self._one(api, session)
                except openai.APIError as exc:
                    self.failed.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                if tokens == CANDIDATE_TOKENS:
                    self.candidate_answers += 1
                else:
                    self.stable_answers += 1

        await asyncio.gather(*(worker(w) for w in range(self.workers)))
        for c in clients:
            await c.close()

    async def _one(self, api: openai.AsyncOpenAI, session: str) -> int | None:
        extra: dict[str, Any] = {"extra_headers": {"x-session-id": session}}
        if self.tools:
            extra.update(tools=TOOLS, tool_choice="required")
        messages = [{"role": "user", "content": f"what is the weather {session}"}]
        if not self.stream:
            answer = await api.chat.completions.create(model="m", messages=messages, **extra)
            return answer.usage.completion_tokens if answer.usage else None
        stream = await api.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}, **extra
        )
        tokens = None
        async for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return tokens


@contextlib.asynccontextmanager
async def running(traffic: Traffic) -> AsyncIterator[Traffic]:
    stop = asyncio.Event()
    task = asyncio.create_task(traffic.run(stop))
    try:
        yield traffic
    finally:
        stop.set()
        await task


async def until(gw: Process, done, timeout_s: float = 60.0, every_s: float = 0.2) -> tuple[dict, list[tuple]]:
    """Poll the rollout's status until `done(status)`; the status and every (phase, step)
    seen on the way, in order."""
    seen: list[tuple] = []
    deadline = time.monotonic() + timeout_s
    while True:
        now = await asyncio.to_thread(status, gw)
        mark = (now["state"]["phase"], now["state"]["step"])
        if not seen or seen[-1] != mark:
            seen.append(mark)
        if done(now) or time.monotonic() > deadline:
            return now, seen
        await asyncio.sleep(every_s)
