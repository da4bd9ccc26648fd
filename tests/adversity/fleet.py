"""Real processes for the adversity tests (issue 12): runtime simulators and the
fast OpenAI upstream behind one gateway process with two tenants, and the
clients' side (SSE read raw, so error events and `[DONE]` can be checked).
Built on tests/procs.py; nothing is mocked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from policies.auth import hash_key
from tests.procs import Process, scrape, start_gateway

TENANTS = ("victim", "attacker")
RUNTIMES = ("vllm", "sglang", "trtllm", "tgi")


def key_of(tenant: str) -> str:
    return f"sk-sy-{tenant}-adversity-key"


def auth(tenant: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key_of(tenant)}", **headers}


def sim_backend(name: str, kind: str, url: str, **extra: Any) -> dict[str, Any]:
    backend = {"name": name, "adapter": kind, "url": url, "served_model": "sim-model", **extra}
    if kind == "openai":
        backend["url"] = url + "/v1"
    return backend


def tenancy(tenants: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Auth by key for the tenants (default: victim and attacker, no limits)."""
    tenants = tenants if tenants is not None else {t: {} for t in TENANTS}
    return {
        "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(key_of(t)), "tenant": t} for t in tenants]},
        "tenants": tenants,
    }


def start_fleet_gateway(
    tmp: Path, models: dict[str, list[dict[str, Any]]], max_retries: int = 0, **config: Any
) -> Process:
    """A gateway serving `models` (model name -> its backends) to the two tenants."""
    cfg: dict[str, Any] = {
        "models": {name: {"backends": backends, "max_retries": max_retries} for name, backends in models.items()},
        **tenancy(),
        "access_log": False,
    }
    cfg.update(config)
    return start_gateway(tmp, cfg)


def sse_events(raw: bytes) -> list[Any]:
    """The `data:` payloads of an SSE body: parsed JSON, or the string "[DONE]"."""
    out: list[Any] = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: "):
            data = line[6:].strip()
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def backend_inflight(gateway: Process, backend: str) -> float:
    return scrape(gateway).get(f'switchyard_backend_inflight{{backend="{backend}"}}', 0.0)
