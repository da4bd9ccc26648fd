"""Issue 25, finding 14: an embeddings call is charged by its size in the tenant's
concurrency (one unit per 64 inputs, up to the tenant's own limit), not as one unit
whatever it holds (in process: the real parser and Protection)."""

from __future__ import annotations

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.openai.embeddings import parse_embeddings
from tests.gateway.protection_kit import config, make, never_gone, principal, request


async def admit_embeddings(p, who, inputs: int):
    parsed = parse_embeddings({"model": "m", "input": ["hi"] * inputs}, "e")
    return await p.admit(
        who, "m", parsed.requests[0], parsed.prompt_estimate, never_gone, choices=1, size_units=parsed.size_units
    )


async def test_a_large_embeddings_call_holds_the_concurrency_its_size_takes():
    p = await make(config(max_concurrent=40))
    who = await principal(p)
    big = await admit_embeddings(p, who, 2048)
    assert await p.leases.store.concurrent("a", "t") == 32  # 2,048 / 64
    small = await admit_embeddings(p, who, 10)
    assert await p.leases.store.concurrent("a", "t") == 33
    await small.release(Usage(10, 0))
    await big.release(Usage(2048, 0))
    assert await p.leases.store.concurrent("a", "t") == 0
    await p.aclose()


async def test_it_takes_at_most_the_tenants_limit_and_is_never_refused_for_its_size():
    p = await make(config(max_concurrent=8))
    who = await principal(p)
    big = await admit_embeddings(p, who, 2048)
    assert await p.leases.store.concurrent("a", "t") == 8
    # While it runs the tenant has no concurrency left: its size is its own to carry.
    try:
        await p.admit(who, "m", request(), 1, never_gone)
    except GatewayError as err:
        assert err.status == 429 and err.code == "concurrency_limit_exceeded"
    else:
        raise AssertionError("admitted beside a call holding the whole limit")
    await big.release(Usage(2048, 0))
    await p.aclose()
