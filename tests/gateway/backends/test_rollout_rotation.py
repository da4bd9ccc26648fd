"""A pool under rollout keeps each track's round robin apart (gateway/backends/pool.py):
stable's rotation over its own backends stays even however the candidate's requests and
the mirror's copies interleave with it."""

from __future__ import annotations

from collections import Counter

from adapters.base import GenerationRequest
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config


def vllm(name: str, track: str = "stable") -> dict:
    return {"name": name, "adapter": "vllm", "url": "http://127.0.0.1:9", "track": track}


async def test_stables_rotation_stays_even_while_the_candidates_requests_interleave():
    config = {"models": {"m": {"backends": [vllm("s0"), vllm("s1"), vllm("c0", "candidate")], "rollout": {}}}}
    bs = BackendSet(parse_config(config))
    try:
        pool = bs.pools["m"]
        req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
        firsts: Counter[str] = Counter()
        for i in range(100):  # a stable request, then a candidate's request or a mirror copy's order
            firsts[pool.route(req, "stable").candidates[0].name] += 1
            if i % 2:
                assert pool.route(req, "candidate").candidates[0].name == "c0"
            else:
                assert [v.name for v in pool.order(req, pool.backends[2:], "candidate").candidates] == ["c0"]
        assert firsts == {"s0": 50, "s1": 50}
    finally:
        await bs.aclose()
