"""Candidates for the stages' tests, as a bake-off reaches them: a simulator (vLLM's by default; a
subprocess; broken ones by their flags, simulators/README.md "Broken runtimes") behind
a gateway of its own, started on a config file that the rollback check may rewrite,
with an admin key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from bakeoff.verdict import CandidateTarget
from policies.api_keys import hash_key
from processes import free_port
from simulators.testing import SimulatorHandle, start_simulator
from tests.procs import SWITCHYARD, Process

ADMIN_KEY = "sk-sy-admin-bakeoff-stages"
MODEL = "m"


def gateway_config(
    sim_url: str, port: int, kind: str = "vllm", model: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """`model`: more of the model's settings (routing, session_affinity); `extra`: more
    top-level sections (quota_store)."""
    backend = {"name": "sim", "adapter": kind, "url": sim_url, "served_model": "sim-model"}
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "admin": {"api_keys": [{"sha256": hash_key(ADMIN_KEY), "name": "bakeoff"}]},
        "models": {MODEL: {"backends": [backend], **(model or {})}},
        # the admin API is the only reload: with the file watcher on, it may put the edit in force first
        "reload": {"watch": False},
        **extra,
    }


@contextmanager
def candidate(
    tmp: Path, name: str, kind: str = "vllm", config: dict[str, Any] | None = None, **sim_options: Any
) -> Iterator[CandidateTarget]:
    """A `kind` simulator started with `sim_options` (its CLI flags) behind its own gateway."""
    with simulated(tmp, name, kind, config, **sim_options) as (target, _):
        yield target


@contextmanager
def simulated(
    tmp: Path, name: str, kind: str = "vllm", config: dict[str, Any] | None = None, **sim_options: Any
) -> Iterator[tuple[CandidateTarget, SimulatorHandle]]:
    """`candidate`, with the simulator's handle (its process, to pause it: a stalled machine);
    `config`: `gateway_config`'s keyword arguments. The target starts a second simulator of
    the same options as its replica (the production stage's `replicas` check)."""
    sim = start_simulator(kind, model_name="sim-model", **sim_options)
    gateway: Process | None = None
    try:
        port = free_port()
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(gateway_config(sim.url, port, kind, **(config or {}))))
        gateway = Process(
            [*SWITCHYARD, "serve", "--config", str(path)], f"http://127.0.0.1:{port}", tmp / f"{name}-gateway.log"
        ).wait_ready("/readyz")
        target = CandidateTarget(
            name=name,
            runtime=kind,
            gateway_url=gateway.url,
            model=MODEL,
            admin_key=ADMIN_KEY,
            config_path=str(path),
            runtime_url=sim.url,
            replica=partial(start_simulator, kind, wait=False, model_name="sim-model", **sim_options),
        )
        yield target, sim
    finally:
        if gateway is not None:
            gateway.stop()
        sim.stop()


def outcomes(result: Any) -> dict[str, str]:
    """A StageResult's checks as {name: outcome}."""
    return {c.name: c.outcome for c in result.checks}
