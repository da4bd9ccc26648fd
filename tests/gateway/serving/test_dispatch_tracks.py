"""gateway/serving/dispatch.py under a rollout and per tenant: a request is routed on
the track it was assigned (every prompt of it), a fallback model under rollout serves
from its stable track, and each attempt's outcome reaches the outlier detector as its
tenant's, so one tenant's failures while another is served eject nothing."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import Finish, GenerationRequest, TextDelta, Usage
from adapters.errors import GatewayError, upstream_failed, upstream_unavailable
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.serving.dispatch import Dispatcher
from policies.ejection import CircuitState
from tests.gateway.scripted import ScriptedAdapter, always
from tests.gateway.serving.rollout_kit import Controller

ANSWER = [TextDelta(0, "ok"), Finish(0, "stop"), Usage(1, 1)]


def backend(name: str, track: str = "stable") -> dict[str, Any]:
    return {"name": name, "adapter": "openai", "url": "http://127.0.0.1:9/v1", "track": track}


def dispatcher(models: dict[str, Any], scripts: dict[str, Any], controller: Controller | None = None) -> Dispatcher:
    backends = BackendSet(parse_config({"models": models}))
    for name, script in scripts.items():
        backends.backends[name].adapter = ScriptedAdapter(name, script)
    return Dispatcher(backends, rollouts=controller)


def chat(rid: str, model: str = "m", tenant: str = "t") -> GenerationRequest:
    return GenerationRequest(rid, model, messages=[{"role": "user", "content": "hi"}], stream=True, tenant=tenant)


async def served_by(d: Dispatcher, model: str, requests: list[GenerationRequest]) -> tuple[str, ...]:
    dispatched = await d.open(model, requests, rollout=d.assign(model, requests))
    async for _ in dispatched.events:
        pass
    await dispatched.aclose()
    return dispatched.backends


@pytest.mark.parametrize(("share", "track"), [(1.0, "c"), (0.0, "s")])
async def test_a_rolled_out_request_is_routed_on_its_track_every_prompt_of_it(share, track):
    model = {"backends": [backend("s"), backend("c", "candidate")], "routing": "round_robin", "rollout": {}}
    d = dispatcher({"m": model}, {"s": always(*ANSWER), "c": always(*ANSWER)}, Controller(candidate=share))
    for i in range(4):
        assert await served_by(d, "m", [chat(f"r{i}")]) == (track,)
        prompts = [chat(f"p{i}-0"), chat(f"p{i}-1")]
        assert await served_by(d, "m", prompts) == (track,)


async def test_a_fallback_model_under_rollout_serves_from_its_stable_track():
    broken = always(upstream_failed("b", "boom", 503))
    models = {
        "m": {"backends": [backend("b")], "fallback": ["f"], "max_retries": 0},
        "f": {"backends": [backend("fs"), backend("fc", "candidate")], "routing": "round_robin", "rollout": {}},
    }
    d = dispatcher(models, {"b": broken, "fs": always(*ANSWER), "fc": always(*ANSWER)}, Controller(candidate=1.0))
    for i in range(4):
        assert await served_by(d, "m", [chat(f"r{i}")]) == ("fs",)


@pytest.mark.parametrize("failure", ["server_error", "connect"])
async def test_one_tenants_failures_while_another_is_served_are_not_the_backends(failure):
    error = upstream_failed("b1", "boom") if failure == "server_error" else None

    def runtime(req: GenerationRequest) -> list[Any]:
        if req.tenant != "attacker":
            return ANSWER
        return [error or GatewayError(503, "refused", code="backend_unavailable")]

    model = {"backends": [backend("b1")], "max_retries": 0, "ejection": {"consecutive_failures": 3}}
    d = dispatcher({"m": model}, {"b1": runtime})
    await served_by(d, "m", [chat("v0", tenant="victim")])
    for i in range(5):
        with pytest.raises(GatewayError):
            await served_by(d, "m", [chat(f"a{i}", tenant="attacker")])
    state = d.pool("m").ejection.state("b1")  # type: ignore[union-attr]
    # a failure a request can cause is its tenant's; a refused connection is the backend's whoever sent it
    assert state is (CircuitState.CLOSED if failure == "server_error" else CircuitState.OPEN)


def tenants_runtime(req: GenerationRequest) -> list[Any]:
    return ANSWER if req.tenant == "victim" else [upstream_failed("b1", "boom")]


async def test_failures_of_two_tenants_or_of_the_one_tenant_served_eject():
    model = {"backends": [backend("b1")], "max_retries": 0, "ejection": {"consecutive_failures": 3}}
    two = dispatcher({"m": model}, {"b1": tenants_runtime})
    await served_by(two, "m", [chat("v0", tenant="victim")])
    for i, tenant in enumerate(("a", "b", "a")):
        with pytest.raises(GatewayError):
            await served_by(two, "m", [chat(f"r{i}", tenant=tenant)])
    assert two.pool("m").ejection.state("b1") is CircuitState.OPEN  # type: ignore[union-attr]
    # one tenant, served here before and failing now: no other tenant vouches for the backend
    alone = dispatcher({"m": model}, {"b1": lambda r: ANSWER if r.request_id == "ok" else tenants_runtime(r)})
    await served_by(alone, "m", [chat("ok", tenant="a")])
    for i in range(3):
        with pytest.raises(GatewayError):
            await served_by(alone, "m", [chat(f"r{i}", tenant="a")])
    assert alone.pool("m").ejection.state("b1") is CircuitState.OPEN  # type: ignore[union-attr]


async def test_a_retry_on_the_same_backend_is_that_backends_failure_again():
    model = {"backends": [backend("b1")], "max_retries": 2, "retry_backoff_s": 0.001}
    d = dispatcher({"m": {**model, "ejection": {"consecutive_failures": 3}}}, {"b1": tenants_runtime})
    with pytest.raises(GatewayError):
        await served_by(d, "m", [chat("r", tenant="a")])
    adapter = d.pool("m").by_name["b1"].adapter  # type: ignore[union-attr]
    assert len(adapter.requests) == 3  # every round tried it: a failure on one backend alone is not the request's
    assert d.pool("m").ejection.state("b1") is CircuitState.OPEN  # type: ignore[union-attr]


async def test_the_served_track_is_the_backends_and_not_a_fallback_models():
    broken = always(upstream_failed("b", "boom", 503))
    models = {
        "m": {"backends": [backend("s"), backend("c", "candidate")], "rollout": {}, "fallback": ["f"]},
        "f": {"backends": [backend("fb")]},
    }
    controller = Controller(candidate=1.0)
    d = dispatcher({**models, "m": {**models["m"], "max_retries": 0}}, {"s": broken, "c": always(*ANSWER)}, controller)
    rollout = d.assign("m", [chat("r1")])
    dispatched = await d.open("m", [chat("r1")], rollout=rollout)
    await dispatched.aclose()
    assert rollout is not None and (dispatched.backends, rollout.served) == (("c",), "candidate")
    d = dispatcher(
        {**models, "m": {**models["m"], "max_retries": 0}},
        {"c": broken, "s": broken, "fb": always(*ANSWER)},
        controller,
    )
    rollout = d.assign("m", [chat("r2")])
    dispatched = await d.open("m", [chat("r2")], rollout=rollout)
    await dispatched.aclose()
    assert rollout is not None and (dispatched.backends, rollout.served) == (("fb",), "candidate")


async def test_every_prompt_of_a_request_tells_the_listener_of_its_backoff():
    tried: set[str] = set()

    def flaky(req: GenerationRequest) -> list[Any]:
        prompt = req.request_id.split(".")[0]  # a retry's id is the prompt's and its attempt
        first = prompt not in tried
        tried.add(prompt)
        return [upstream_unavailable("b1", "refused")] if first else ANSWER

    d = dispatcher({"m": {"backends": [backend("b1")], "retry_backoff_s": 0.001}}, {"b1": flaky})
    backoff: list[bool] = []
    dispatched = await d.open("m", [chat("p-0"), chat("p-1")], backoff.append)
    await dispatched.aclose()
    assert backoff == [True, True, False, False]  # each prompt's wait, begun and ended
