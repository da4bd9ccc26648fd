"""What the in-process Protection tests share: a config with two tenants, a
started Protection, a request, and reading one of its metrics."""

from __future__ import annotations

import asyncio
import uuid
import weakref

import pytest
from prometheus_client import CollectorRegistry

from adapters.base import GenerationRequest, SamplingParams
from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.protection.gate import Protection
from policies.auth import hash_key

KEY_A = "sk-sy-tenant-a-key"
KEY_B = "sk-sy-tenant-b-key"


def config(store: dict | None = None, **tenant_a) -> dict:
    return {
        "auth": {
            "mode": "keys",
            "api_keys": [
                {"sha256": hash_key(KEY_A), "tenant": "a", "name": "ka"},
                {"sha256": hash_key(KEY_B), "tenant": "b"},
            ],
        },
        "quota_store": store or {"kind": "memory"},
        "tenants": {"a": {"models": ["m*"], **tenant_a}, "b": {"models": ["*"], "requests_per_minute": 1000}},
        "admission": {"max_queue": 4, "max_queue_wait_s": 2},
    }


_registries: weakref.WeakKeyDictionary[Protection, CollectorRegistry] = weakref.WeakKeyDictionary()


async def make(cfg: dict, **kw) -> Protection:
    registry = CollectorRegistry()
    p = Protection(parse_config(cfg), registry, **kw)
    _registries[p] = registry
    await p.start()
    return p


def request(max_tokens: int | None = 100, n: int = 1) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(max_tokens=max_tokens, n=n),
    )


async def with_named_key(name: str, tenant_limits: dict, **key_limits):
    """A started Protection (`make`) whose tenant a, limited by `tenant_limits`, has one
    more key, `sk-sy-<name>-key`, named `name` and limited by `key_limits`; and that
    key's principal."""
    cfg = config(**tenant_limits)
    secret = f"sk-sy-{name}-key"
    cfg["auth"]["api_keys"].append({"sha256": hash_key(secret), "tenant": "a", "name": name, **key_limits})
    p = await make(cfg)
    return p, await p.authenticate({"api-key": secret})


async def never_gone() -> bool:
    return False


async def principal(p: Protection, key: str = KEY_A):
    return await p.authenticate({"authorization": f"Bearer {key}"})


async def refusal(p: Protection, who, model: str, req: GenerationRequest, prompt_tokens: int) -> GatewayError:
    """The error admission refuses `req` with (a client that stays); fails the test
    when it is admitted."""
    with pytest.raises(GatewayError) as exc:
        await p.admit(who, model, req, prompt_tokens, never_gone)
    return exc.value


def sample(p: Protection, name: str, labels: dict | None = None) -> float:
    """The value of one sample of the metrics of a Protection from `make` (0 when absent)."""
    for fam in _registries[p].collect():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                return s.value
    return 0.0


async def one_running(cfg: dict, prompt_tokens: int = 1):
    """A started Protection (`make`) with room for one request at a time, tenant a's
    principal, and the ticket of a request of `prompt_tokens` that took that room:
    the next request queues behind it."""
    p = await make(cfg)
    p.set_capacity_provider(lambda model: 1)
    who = await principal(p)
    return p, who, await p.admit(who, "m", request(), prompt_tokens, never_gone)


async def queued_until_gone(p: Protection, who, prompt_tokens: int):
    """Starts admitting a request of tenant `who` behind a full slot (see `one_running`)
    and returns once it waits in the queue: the task, and the event that, once set,
    tells admission its client has left."""
    gone = asyncio.Event()

    async def client_gone() -> bool:
        return gone.is_set()

    task = asyncio.create_task(p.admit(who, "m", request(), prompt_tokens, client_gone))
    await asyncio.sleep(0.1)
    return task, gone
