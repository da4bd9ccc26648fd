"""The token-id workload of `make bench-routing` (bench/routing_bench.py), for the
modelled simulators: `/v1/completions` with `prompt` a list of token ids, so that
the gateway can name a prompt's blocks as vLLM does (vLLM hashes token ids; the
gateway matches only prompts sent as ids, gateway/backends/kv_feeds.py `prompt_token_ids`).

The same shape as the text workload (bench/routing_workload.py): a few shared
system prompts, seeded id sequences drawn Zipf; multi-turn sessions where turn k's
prompt is the system ids, every earlier turn's user ids and its (deterministic,
seeded) answer of the turn's output length, then this turn's user ids. The answer
is not the simulator's: it is fixed in advance, so every policy of a rate sends
byte-identical prompts.

The label that keeps runs apart is a leading block of `LABEL_TOKENS` distinct ids
per run (seeded by the run's tag): every block hash of a run then differs from
every other run's (vLLM chains each block's hash to the one before), so no run
finds a cache another warmed, and every run's prompts cost the same. Chosen over
resetting the simulators' caches between runs: it needs nothing of the simulator,
and the blocks of earlier runs are the oldest and so the first an LRU cache evicts."""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any, cast

import numpy as np

from bench.client import Client, ClientConfig
from bench.records import RequestRecord
from bench.routing_config import RoutingBenchConfig
from bench.routing_workload import zipf_weights

LABEL_TOKENS = 16  # one vLLM block (block size 16)
ID_LOW, ID_HIGH = 100, 32000  # ordinary vocabulary ids, clear of special tokens


def label_ids(tag: str) -> list[int]:
    rng = np.random.default_rng(zlib.crc32(tag.encode()))
    return [int(x) for x in rng.integers(ID_LOW, ID_HIGH, LABEL_TOKENS)]


def token_sessions(cfg: RoutingBenchConfig, tag: str, count: int, hot: bool = False) -> list[dict[str, Any]]:
    """`count` conversations of token ids: `system` (Zipf over `system_prompts`, or the
    one hot prompt; `label` + the prompt's ids), `system_index`, and per turn `user`
    and `answer` ids. Every run of one size draws the same ids; `tag` only picks the
    label."""
    rng = np.random.default_rng([cfg.seed, count, int(hot), 1])

    def ids(n: int) -> list[int]:
        return [int(x) for x in rng.integers(ID_LOW, ID_HIGH, n)]

    label = label_ids(tag)
    systems = [ids(cfg.system_tokens) for _ in range(cfg.system_prompts)]
    choice = rng.choice(cfg.system_prompts, size=count, p=zipf_weights(cfg.system_prompts, cfg.zipf_s))
    convs = []
    for i in range(count):
        p = 0 if hot else int(choice[i])
        turns = [{"user": ids(cfg.user_tokens), "answer": ids(cfg.max_tokens)} for _ in range(cfg.turns)]
        convs.append({"system": label + systems[p], "system_index": p, "turns": turns})
    return convs


def prompts(conv: dict[str, Any]) -> list[list[int]]:
    """Turn k's prompt: the system ids, every earlier turn's user ids and answer, this turn's user ids."""
    out, history = [], list(conv["system"])
    for turn in conv["turns"]:
        out.append(history + turn["user"])
        history = out[-1] + turn["answer"]
    return out


async def run_token_load(
    url: str, model: str, convs: list[dict[str, Any]], arrivals: list[float], max_tokens: int
) -> list[RequestRecord]:
    """Open loop: conversation i starts at `arrivals[i]`, its turns one after the other
    (turn k+1 once turn k has ended), each a streamed completion of `max_tokens`."""
    records: list[RequestRecord] = []
    config = ClientConfig(base_url=url, model=model, timeout_s=120, endpoint="completions", ignore_eos=True)
    async with Client(config) as client:
        t0 = time.perf_counter()

        async def converse(i: int, conv: dict[str, Any], at: float) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            for k, prompt in enumerate(prompts(conv)):
                rec = RequestRecord(len(records), "default", i, k, True, 0.0, at if k == 0 else None)
                rec.max_tokens = max_tokens
                records.append(rec)
                # The client sends its second argument as `prompt` on /v1/completions: here token ids.
                await client.send(rec, cast(list[dict[str, Any]], prompt), t0)
                if rec.outcome != "ok":
                    return

        await asyncio.gather(*(converse(i, c, a) for i, (c, a) in enumerate(zip(convs, arrivals))))
    return records
