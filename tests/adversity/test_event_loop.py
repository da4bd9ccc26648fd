"""Issue 25, finding 1: one tenant's largest inputs do not stop the gateway for another.

Through a real gateway process serving the native engine (model `tiny`) and the fast
OpenAI upstream (model `m`): the victim sends small chats to `m` one after another;
the attacker sends what the native routes take at their largest: a 3.5 MB prompt to
`/tokenize` (the body limit's largest) once a second, and, without pause, texts just
under the context's byte bound to `/tokenize`, chat and embeddings. Before, one such
`/tokenize` held the event loop for seconds (12-15 s for 4 MB) and the victim was
served almost nothing meanwhile (1 request against 287 calm). The bound: the victim
is served at least a tenth as many requests during the attack as in a calm window of
the same length. Generous on purpose: three attack streams' own work (tokenizing,
reading megabytes) share two CPUs with the victim, which measured 0.17 of calm on a
loaded machine; a frozen loop serves almost none.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.adversity.fleet import auth, sim_backend, start_fleet_gateway

WINDOW_S = 6.0
HUGE = "x" * (3_500_000)  # under the 4 MB body limit: it reaches the route
# Just under 4,096 tokens x 16 bytes (the tiny tokenizer's longest token): legal by the
# byte bound, so it is tokenized (and then found too long, where the route checks).
LARGEST = "hello world " * (65_000 // 12)


def test_the_largest_inputs_to_every_native_route_leave_another_tenant_served(module_tmp, upstream, tiny_model_dir):
    native = {"name": "local", "adapter": "native", "model_path": str(tiny_model_dir)}
    gw = start_fleet_gateway(module_tmp, {"tiny": [native], "m": [sim_backend("up", "openai", upstream.url)]})
    try:
        asyncio.run(_measure(gw.url))
    finally:
        gw.stop()


async def _measure(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        victim_body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

        async def victim(seconds: float) -> int:
            served, end = 0, time.monotonic() + seconds
            while time.monotonic() < end:
                r = await client.post("/v1/chat/completions", json=victim_body, headers=auth("victim"))
                served += r.status_code == 200
            return served

        attacks = [
            ("/tokenize", {"model": "tiny", "prompt": HUGE}, 1.0),
            ("/tokenize", {"model": "tiny", "prompt": LARGEST}, 0.0),
            ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": LARGEST}]}, 0.0),
            ("/v1/embeddings", {"model": "tiny", "input": LARGEST}, 0.0),
        ]
        statuses: list[int] = []

        async def attacker(path: str, body: dict, pause: float, until: float) -> None:
            while time.monotonic() < until:
                r = await client.post(path, json=body, headers=auth("attacker"))
                statuses.append(r.status_code)
                await asyncio.sleep(pause)

        await victim(1.0)  # warm: connections, the first request's one-time costs
        calm = await victim(WINDOW_S)
        until = time.monotonic() + WINDOW_S
        attackers = [asyncio.ensure_future(attacker(path, body, pause, until)) for path, body, pause in attacks]
        await asyncio.sleep(0.2)  # the attack is under way
        under_attack = await victim(WINDOW_S - 0.2)
        await asyncio.gather(*attackers)
    assert statuses and all(s < 500 for s in statuses), statuses
    assert 400 in statuses  # the 3.5 MB prompt, refused by its bytes
    assert under_attack >= calm / 10, (calm, under_attack)
