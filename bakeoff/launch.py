"""Starting and stopping what one candidate needs: its runtime (when the plan gives a
launch recipe) and its own gateway, on free loopback ports (processes/), every child
registered on an `ExitStack` so it is stopped whatever happens (bakeoff/run.py also turns
SIGTERM into that unwinding).

The gateway's config is written by the command: the plan's model served by this
candidate's backend only, the plan's `admission` queue when it gives one, an admin key (so a stage can `POST /admin/reload`), and one API
key per tenant of the workload (so the gateway sees the tenants the workload has).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from bakeoff.plan import Candidate, Plan
from bakeoff.verdict import CandidateTarget
from processes import (
    LLAMA_SERVER,
    VLLM_CPU_ENV,
    VLLM_PYTHON,
    Child,
    free_port,
    http_probe,
    llamacpp_server_argv,
    vllm_server_argv,
    write_gguf,
)
from simulators.testing import start_simulator

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = "builtin:"


class LaunchError(RuntimeError):
    """A runtime or gateway that would not start; the message says which and why."""


class NotInstalled(LaunchError):
    """A runtime this machine does not have (vLLM's CPU build, llama.cpp's server): the
    candidate is skipped with the reason, not failed (bakeoff/run.py)."""


@dataclass
class Launched:
    target: CandidateTarget
    backend: dict[str, Any]
    model_dir: Path | None
    api_keys: dict[str, str]  # tenant -> key


def digest(key: str) -> str:
    """A key as the gateway's config names it: its SHA-256 hex digest (README, Configuration)."""
    return hashlib.sha256(key.encode()).hexdigest()


def model_dir(model: str) -> Path:
    """A directory of weights; `builtin:tiny` is built into the cache first (by the engine,
    in a child process: bakeoff never imports the engine)."""
    if not model.startswith(BUILTIN):
        return Path(model)
    code = f"from engine.builtin import builtin_model_dir; print(builtin_model_dir({model[len(BUILTIN) :]!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise LaunchError(f"could not build {model}: {out.stderr.strip()[-500:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class _Running:
    """A started runtime instance (bakeoff/verdict.py `Instance`)."""

    url: str
    stop_fn: Callable[[], object]
    stopped: bool = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.stop_fn()


def _runtime(c: Candidate, plan: Plan, work: Path, stack: ExitStack) -> tuple[str | None, Path | None]:
    """Start the candidate's runtime; its url (None for native) and weights directory."""
    launch = c.launch
    if launch is None:
        return None, None
    if launch.kind == "native":
        return None, model_dir(launch.model)
    instance, weights = start_instance(c, plan, work, "runtime")
    stack.callback(instance.stop)
    return instance.url, weights


def start_instance(c: Candidate, plan: Plan, work: Path, label: str, wait: bool = True) -> tuple[_Running, Path | None]:
    """One instance of the candidate's launched runtime on a port of its own, ready (the
    first), or only started (`wait` False: the production stage's second one,
    `CandidateTarget.replica`, whose check waits for its /health and can stop it early)."""
    launch = c.launch
    assert launch is not None and launch.kind != "native"
    opts = dict(launch.options)
    if launch.kind == "simulator":
        assert launch.simulator is not None
        opts.setdefault("model_name", c.backend.get("served_model") or plan.model)
        try:
            sim = start_simulator(launch.simulator, wait=wait, timeout=launch.ready_timeout_s, **opts)
        except Exception as exc:
            raise LaunchError(f"{c.name}: the {launch.simulator} simulator did not start: {exc}") from exc
        weights = Path(opts["model_dir"]) if opts.get("model_dir") else None
        return _Running(sim.url, sim.stop), weights
    weights = model_dir(launch.model)
    port = free_port()
    served = c.backend.get("served_model") or plan.model
    if launch.kind == "vllm_cpu":
        if not VLLM_PYTHON.exists():
            raise NotInstalled(f"{c.name}: vLLM's CPU build is not installed ({VLLM_PYTHON}; scripts/install-vllm.sh)")
        extra = [str(x) for x in opts.pop("args", [])]
        argv = vllm_server_argv(weights, port, int(opts.pop("max_model_len", 2048)), served_name=served, extra=extra)
        env = {**VLLM_CPU_ENV, "OMP_NUM_THREADS": "1"}
        ready = f"http://127.0.0.1:{port}/health"
    else:
        if not LLAMA_SERVER.exists():
            raise NotInstalled(
                f"{c.name}: llama.cpp's server is not built ({LLAMA_SERVER}; scripts/install-llamacpp.sh)"
            )
        gguf = work / f"{c.name}.gguf"
        if not gguf.exists():
            write_gguf(weights, gguf)
        argv = llamacpp_server_argv(
            gguf,
            port,
            int(opts.pop("ctx", 4096)),
            parallel=int(opts.pop("parallel", 4)),
            alias=served,
            extra=[str(x) for x in opts.pop("args", [])],
        )
        env = {}
        ready = f"http://127.0.0.1:{port}/health"
    child = Child(argv, work / f"{c.name}-{label}.log", name=f"{c.name} {label}", cwd=ROOT, env=env)
    try:
        if wait:
            child.wait_ready(http_probe(ready), timeout_s=launch.ready_timeout_s, interval_s=0.2)
    except BaseException:
        child.stop()
        raise
    return _Running(f"http://127.0.0.1:{port}", child.stop), weights


def _replica(c: Candidate, plan: Plan, work: Path, stack: ExitStack) -> _Running:
    """A second instance for the production stage, started (its check waits for it) and
    stopped with the candidate at the latest."""
    instance, _ = start_instance(c, plan, work, "replica", wait=False)
    stack.callback(instance.stop)
    return instance


def gateway_config(plan: Plan, backend: dict[str, Any], port: int, admin_key: str, keys: dict[str, str]) -> dict:
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "api_keys": [{"sha256": digest(k), "tenant": t} for t, k in keys.items()]},
        "admin": {"api_keys": [{"sha256": digest(admin_key), "name": "bakeoff"}]},
        "models": {plan.model: {"backends": [backend]}},
        "log_level": "warning",
        # the production stage's admin reload is the only one, so its answer says what it did
        "reload": {"watch": False},
    }
    if plan.admission is not None:
        config["admission"] = plan.admission.model_dump()
    return config


def start(c: Candidate, plan: Plan, tenants: list[str], work: Path, stack: ExitStack) -> Launched:
    """The candidate's runtime and gateway, both ready; stopped when `stack` closes."""
    work.mkdir(parents=True, exist_ok=True)
    runtime_url, weights = _runtime(c, plan, work, stack)
    if c.launch is not None and c.launch.kind == "native":
        backend = c.backend_config(model_path=str(weights))
    else:
        backend = c.backend_config(url=runtime_url)
    keys = {t: "sk-bakeoff-" + secrets.token_urlsafe(16) for t in tenants}
    admin_key = "sk-admin-" + secrets.token_urlsafe(16)
    port = free_port()
    config_path = work / f"{c.name}-gateway.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(plan, backend, port, admin_key, keys), sort_keys=False))
    gateway = Child(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config_path)],
        work / f"{c.name}-gateway.log",
        name=f"{c.name} gateway",
        cwd=ROOT,
        env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    stack.callback(gateway.stop)
    url = f"http://127.0.0.1:{port}"
    gateway.wait_ready(http_probe(url + "/readyz"), timeout_s=c.launch.ready_timeout_s if c.launch else 120.0)
    target = CandidateTarget(
        name=c.name,
        runtime=backend["adapter"],
        gateway_url=url,
        model=plan.model,
        api_key=next(iter(keys.values())),
        admin_key=admin_key,
        config_path=str(config_path),
        runtime_url=runtime_url,
        replica=None if c.launch is None or c.launch.kind == "native" else partial(_replica, c, plan, work, stack),
    )
    return Launched(target, backend, weights, keys)
