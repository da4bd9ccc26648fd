"""Real processes on loopback for end-to-end tests: the test upstream, simulators,
gateways and redis-server, each on a free port, built on `processes`. The
fixtures that start and stop them are in tests/conftest.py; nothing is mocked."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
import yaml

from policies.auth import hash_key
from processes import Child, free_port, http_probe, redis_ping, redis_server_argv


class _HasStop(Protocol):
    def stop(self) -> None: ...


Stoppable = TypeVar("Stoppable", bound=_HasStop)
T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
SWITCHYARD = [sys.executable, "-m", "gateway.cli"]


class Process:
    """A child process (run from the repository root) serving at `url`. `stop()`
    ends it and is idempotent; `kill()` crashes it."""

    def __init__(self, args: list[str], url: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.url = url
        self.child = Child(args, log_path, cwd=ROOT, env=env)

    def wait_ready(self, path: str = "/healthz", timeout: float = 60.0) -> Process:
        """Until `url + path` answers below 500; stopped, with the log in the error, if it never does."""
        self.child.wait_ready(http_probe(self.url + path), timeout_s=timeout)
        return self

    def log(self) -> str:
        return self.child.log_tail()

    def kill(self) -> None:
        self.child.kill()

    def stop(self) -> None:
        self.child.stop()


def stopped_after(thing: Stoppable) -> Iterator[Stoppable]:
    """A fixture's body for anything with `stop()` (a process, a fleet, a deployment):
    `yield from stopped_after(start_x(...))` hands it to the tests, then stops it."""
    try:
        yield thing
    finally:
        thing.stop()


def eventually(predicate: Callable[[], T], timeout_s: float = 5.0, interval_s: float = 0.05) -> T:
    """Poll `predicate` until it gives something truthy or `timeout_s` passes; its
    last answer (falsy when it never held), for the test to assert on."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    return predicate()


def metric_samples(text: str) -> dict[str, float]:
    """Prometheus text as {'name{labels}': value} (comments dropped)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def sample_value(registry, name: str, labels: dict[str, str]) -> float:
    """The sum of `name`'s samples in a prometheus_client registry whose labels include
    `labels` (a label the test does not name, such as a rollout's `track`, any value)."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def scrape(gateway: Process) -> dict[str, float]:
    """The gateway's /metrics as `metric_samples`."""
    return metric_samples(httpx.get(gateway.url + "/metrics", timeout=5).text)


def start_upstream(tmp: Path, *extra: str) -> Process:
    port = free_port()
    p = Process(
        [*SWITCHYARD, "simulate", "openai", "--port", str(port), *extra],
        f"http://127.0.0.1:{port}",
        tmp / f"upstream-{port}.log",
    )
    return p.wait_ready("/health")


def start_gateway(tmp: Path, config: dict, env: dict[str, str] | None = None) -> Process:
    port = free_port()
    config = {**config, "listen": {"host": "127.0.0.1", "port": port}}
    path = Path(tempfile.mkstemp(prefix="gw-", suffix=".yaml", dir=tmp)[1])
    path.write_text(yaml.safe_dump(config))
    p = Process(
        [*SWITCHYARD, "serve", "--config", str(path)], f"http://127.0.0.1:{port}", tmp / f"gateway-{port}.log", env=env
    )
    return p.wait_ready("/healthz")


def start_redis(tmp: Path, port: int | None = None) -> Process:
    """A real redis-server; `port` to bring one back where a stopped one was."""
    port = port or free_port()
    p = Process(redis_server_argv(port, tmp), f"redis://127.0.0.1:{port}/0", tmp / f"redis-{port}.log")
    p.child.wait_ready(redis_ping(port), timeout_s=10)
    return p


def native_backend_config(model_dir: Path, model: str = "tiny", **options) -> dict:
    """One model served by the native engine on `model_dir` (engine `options`)."""
    backend = {"name": "local", "adapter": "native", "model_path": str(model_dir), "options": options}
    return {"models": {model: {"backends": [backend]}}}


def start_native_gateway(tmp: Path, config: dict) -> Process:
    """A gateway whose engine runs in it: on one intra-op thread, many times faster for
    a tiny model on a shared 2-core machine."""
    return start_gateway(tmp, config, env={"OMP_NUM_THREADS": "1"})


def openai_backend_config(upstream: Process, model: str = "m", **backend) -> dict:
    return {
        "models": {
            model: {
                "backends": [
                    {"name": "up", "adapter": "openai", "url": upstream.url + "/v1", "served_model": "m", **backend}
                ]
            }
        }
    }


def keys_auth_config(tenant_by_key: dict[str, str]) -> dict:
    """A gateway config's `auth` section that knows each key (by its digest) as its tenant's."""
    return {
        "mode": "keys",
        "api_keys": [{"sha256": hash_key(key), "tenant": tenant} for key, tenant in tenant_by_key.items()],
    }
