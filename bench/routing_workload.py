"""The workload of `make bench-routing` (bench/routing_bench.py): multi-turn
conversations over a few shared system prompts drawn Zipf-distributed, sent open
loop (each conversation starts at its arrival time, its turns one after the other,
turn k+1 carrying the real answer of turn k)."""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

import numpy as np

from bench.client import Client, ClientConfig
from bench.records import RequestRecord
from bench.routing_config import RoutingBenchConfig


def zipf_weights(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def words(rng: np.random.Generator, n: int) -> str:
    vocab = ("route", "cache", "block", "token", "prefix", "engine", "backend", "queue", "model", "batch")
    return " ".join(vocab[i] for i in rng.integers(0, len(vocab), n))


def sessions(cfg: RoutingBenchConfig, tag: str, count: int, hot: bool = False) -> list[dict[str, Any]]:
    """`count` conversations: a system prompt (Zipf over `system_prompts`, or the one
    hot prompt) and `turns` user messages each.

    Every run of one size draws the same workload (the same words, the same prompt
    for the same session, the same turns), so the policies of a rate are compared on
    one workload, not each on a draw of its own: with a few sessions a run, which
    prompts arrive new and at the same moment decides most of the TTFT tail. `tag`
    only labels it, in the first block of each text and of equal length for every
    tag, so that no run finds a prefix another run cached."""
    rng = np.random.default_rng([cfg.seed, count, int(hot)])
    label = f"{zlib.crc32(tag.encode()):08x}"
    systems = [f"[{label} system {p}] {words(rng, cfg.system_words)}" for p in range(cfg.system_prompts)]
    choice = rng.choice(cfg.system_prompts, size=count, p=zipf_weights(cfg.system_prompts, cfg.zipf_s))
    return [
        {
            "system": systems[0 if hot else int(choice[i])],
            "turns": [f"user {label}-{i} turn {k}: {words(rng, 12)}" for k in range(cfg.turns)],
        }
        for i in range(count)
    ]


async def run_load(
    url: str, model: str, convs: list[dict[str, Any]], arrivals: list[float], max_tokens: int
) -> list[RequestRecord]:
    """Open loop: conversation i starts at `arrivals[i]`, its turns one after the other."""
    records: list[RequestRecord] = []
    async with Client(ClientConfig(base_url=url, model=model, timeout_s=120)) as client:
        t0 = time.perf_counter()

        async def converse(i: int, conv: dict[str, Any], at: float) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            messages: list[dict[str, Any]] = [{"role": "system", "content": conv["system"]}]
            for k, text in enumerate(conv["turns"]):
                messages.append({"role": "user", "content": text})
                rec = RequestRecord(len(records), "default", i, k, True, 0.0, at if k == 0 else None)
                rec.max_tokens = max_tokens
                records.append(rec)
                answer = await client.send(rec, messages, t0, keep_text=True)
                if rec.outcome != "ok":
                    return
                messages.append({"role": "assistant", "content": answer})

        await asyncio.gather(*(converse(i, c, a) for i, (c, a) in enumerate(zip(convs, arrivals))))
    return records
