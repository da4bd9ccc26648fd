"""A failure that follows the request is the request's (issue 25, finding 5), in
process on scripted adapters: a prompt that makes every runtime answer 500 is tried
on a second backend and no further, neither backend is charged with it, and the
retry it spent is given back, so one tenant cannot eject healthy backends or spend
the failovers every tenant shares."""

from __future__ import annotations

import pytest

from adapters.base import Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import GatewayError
from gateway.serving.dispatch import Dispatcher
from policies.ejection import CircuitState
from tests.gateway.scripted import ScriptedAdapter, backend_set


def chat(content: str, tenant: str, request_id: str) -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        model="m",
        messages=[{"role": "user", "content": content}],
        sampling=SamplingParams(),
        stream=True,
        tenant=tenant,
    )


def runtime(req: GenerationRequest):
    if "poison" in req.messages[0]["content"]:
        return [GatewayError(502, "The vllm backend serving this model failed: boom", code="upstream_error")]
    return [TextDelta(0, "ok"), Finish(0, "stop"), Usage(5, 1)]


async def serve(dispatcher: Dispatcher, req: GenerationRequest) -> None:
    dispatched = await dispatcher.open("m", [req])
    async for _ in dispatched.events:
        pass
    await dispatched.aclose()


@pytest.mark.parametrize("victim_traffic", [True, False])
async def test_poison_prompts_eject_nothing_and_spend_no_retries(victim_traffic):
    b1, b2 = ScriptedAdapter("b1", runtime), ScriptedAdapter("b2", runtime)
    model = {"backends": ["b1", "b2"], "routing": "round_robin", "max_retries": 2, "retry_backoff_s": 0.001}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": b1, "b2": b2}))
    pool = dispatcher.pool("m")
    for i in range(20):
        with pytest.raises(GatewayError):
            await serve(dispatcher, chat("poison", "attacker", f"a{i}"))
        if victim_traffic:
            await serve(dispatcher, chat("hello", "victim", f"v{i}"))
    assert [pool.ejection.state(b) for b in ("b1", "b2")] == [CircuitState.CLOSED] * 2
    assert pool.retry_budget.totals()[1] == 0 and pool.retry_budget.refused == 0
    # Each poison request was tried on two backends, never a third time.
    poisoned = [r for a in (b1, b2) for r in a.requests if "poison" in r.messages[0]["content"]]
    assert len(poisoned) == 40


async def test_a_backend_that_fails_what_another_serves_is_still_ejected():
    broken = ScriptedAdapter("b1", lambda r: [GatewayError(502, "boom", code="upstream_error")])
    healthy = ScriptedAdapter("b2", runtime)
    model = {"backends": ["b1", "b2"], "routing": "round_robin", "ejection": {"consecutive_failures": 3}}
    dispatcher = Dispatcher(backend_set({"m": model}, {"b1": broken, "b2": healthy}))
    for i in range(8):
        await serve(dispatcher, chat("hello", "victim", f"v{i}"))
    assert dispatcher.pool("m").ejection.state("b1") is CircuitState.OPEN
