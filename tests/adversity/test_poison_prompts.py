"""Issue 25, finding 5: one tenant's poison prompts must not eject healthy backends
for everyone, nor spend the retry budget every tenant shares.

Through a real gateway process in front of two real vLLM simulators: the attacker
sends 20 prompts each of which makes the runtime answer 500 for that request only
(`[[sim:status=500]]`), while the victim's requests run beside them. Before, the
attacker's burst ejected a healthy backend and spent the retry budget; now the
failure follows each poison request to the second backend, which makes it the
request's: it is answered after two attempts, and nothing is ejected or spent.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from simulators.testing import start_simulator
from tests.adversity.fleet import auth, scrape, sim_backend, start_fleet_gateway

BACKENDS = ("vllm-a", "vllm-b")


@pytest.fixture(scope="module")
def poisoned_pair(module_tmp):
    sims = [start_simulator("vllm", ttft_ms=5, itl_ms=1, output_tokens=2) for _ in BACKENDS]
    backends = [sim_backend(name, "vllm", sim.url) for name, sim in zip(BACKENDS, sims)]
    gw = start_fleet_gateway(module_tmp, {"m": backends}, max_retries=1)
    yield gw, sims
    gw.stop()
    for sim in sims:
        sim.stop()


def chat(content: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 2}


async def test_poison_prompts_eject_no_healthy_backend_and_spend_no_retries(poisoned_pair):
    gw, sims = poisoned_pair
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:

        async def attacker() -> list[int]:
            statuses = []
            for _ in range(20):
                r = await client.post(
                    "/v1/chat/completions", json=chat("[[sim:status=500]] poison"), headers=auth("attacker")
                )
                statuses.append(r.status_code)
            return statuses

        async def victim() -> list[int]:
            statuses = []
            for i in range(20):
                r = await client.post("/v1/chat/completions", json=chat(f"hello {i}"), headers=auth("victim"))
                statuses.append(r.status_code)
            return statuses

        poisoned, served = await asyncio.gather(attacker(), victim())
    assert all(s >= 500 for s in poisoned), poisoned
    assert served == [200] * 20
    metrics = scrape(gw)
    for name in BACKENDS:
        assert metrics.get(f'switchyard_backend_ejected{{backend="{name}",model="m"}}', 0.0) == 0.0, name
    assert not [k for k, v in metrics.items() if k.startswith("switchyard_backend_ejections_total") and v], metrics
    assert not [k for k, v in metrics.items() if k.startswith("switchyard_retry_budget_exhausted_total") and v]
    # Each poison request reached two backends and no more: 40 attempts, not 80.
    hits = [httpx.get(sim.url + "/_sim/stats").json() for sim in sims]
    assert sum(h["requests_total"] for h in hits) == 40 + 20, [h["statuses"] for h in hits]
