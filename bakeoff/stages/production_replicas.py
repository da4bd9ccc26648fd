"""The production stage's `replicas` check: the candidate's model served by a pool of two
instances of its runtime, as a deployment with replicas is.

A second instance is started by the candidate's own recipe (`CandidateTarget.replica`)
and added to the model's backends in the gateway config (the model's own routing and
session affinity kept), put in force by `POST /admin/reload`. Then:

- spread: `replica_requests` requests, each of its own session (the body's `user`, a
  session key the gateway reads), reach both instances;
- affinity: `session_requests` requests of one session all reach one instance;
- failover: while clients send traffic, the second instance is stopped; no request may
  fail (the gateway fails over before the first byte) and the stopped instance must be
  out of rotation by the end of `failover_hold_s`: ejected or unhealthy in the gateway's
  gauges, or no longer tried (no failed attempt on it in the hold's second half: a
  router whose scores steer around a backend after a failure or two need not eject it).

Which instance served what is read from the gateway's `switchyard_requests_total` by
backend. The original config is written back and reloaded afterwards.
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from bakeoff.stages import Probe, user
from bakeoff.stages.production_settings import Settings
from bakeoff.stages.reconfigure import applied, by_label, missing_admin, reload, traffic, write
from bakeoff.verdict import Check, Instance

REQUESTS = "switchyard_requests_total"
SESSION_ROUTING = "blended"  # policies/profiles.py: its session scorer outweighs the others


def with_replica(config_text: str, model: str, url: str) -> tuple[str, str, str] | None:
    """The config with a copy of `model`'s first backend named `<name>-replica` at `url`
    added: (config, first backend's name, the replica's name); None when the model has no
    such backend. A model that names no `routing` gets `blended` (SESSION_ROUTING), one
    that keeps sessions: a pool of replicas is deployed with one, and the gateway's default
    (round robin) would route a session's requests by turns."""
    try:
        config = yaml.safe_load(config_text)
        backends = config["models"][model]["backends"]
        first = backends[0]
        name = first["name"]
    except (yaml.YAMLError, KeyError, TypeError, IndexError):
        return None
    second = {**copy.deepcopy(first), "name": f"{name}-replica", "url": url}
    config["models"][model]["backends"] = [first, second]
    config["models"][model].setdefault("routing", SESSION_ROUTING)
    return yaml.safe_dump(config, sort_keys=False), name, second["name"]


async def _served(probe: Probe) -> Counter[str]:
    return Counter(await by_label(probe, REQUESTS, "backend", model=probe.target.model))


async def _session(probe: Probe, session: str, n: int) -> tuple[Counter[str], Counter[str]]:
    """`n` requests of `session`, one after another: (answers, requests per backend)."""
    before = await _served(probe)
    answers: Counter[str] = Counter()
    for _ in range(n):
        resp = await probe.chat(user("Say hello."), max_tokens=4, user=session)
        answers["ok" if resp.status_code == 200 else f"{resp.status_code}"] += 1
    return answers, (await _served(probe)) - before


async def _spread(probe: Probe, n: int) -> tuple[Counter[str], Counter[str]]:
    before = await _served(probe)
    answers: Counter[str] = Counter()
    for i in range(n):
        resp = await probe.chat(user("Say hello."), max_tokens=4, user=f"bakeoff-spread-{i}")
        answers["ok" if resp.status_code == 200 else f"{resp.status_code}"] += 1
    return answers, (await _served(probe)) - before


async def _attempts(probe: Probe, backend: str) -> float:
    """The gateway's count of failed attempts on `backend` (each a request failed over)."""
    failures = await by_label(probe, "switchyard_backend_failures_total", "backend")  # labels: backend, code
    return failures.get(backend, 0.0)


async def _out_of_rotation(probe: Probe, backend: str, failed_at_half: float) -> dict[str, float]:
    """The stopped instance's state at the end of the hold: ejected, healthy, and the
    attempts on it in the hold's second half (none: the router no longer tries it)."""
    ejected = await by_label(probe, "switchyard_backend_ejected", "backend", model=probe.target.model)
    healthy = await by_label(probe, "switchyard_backend_healthy", "backend")  # labelled by backend only
    late = await _attempts(probe, backend) - failed_at_half
    return {"ejected": ejected.get(backend, 0.0), "healthy": healthy.get(backend, 1.0), "late_attempts": late}


async def _ready(url: str) -> None:
    """Poll the instance's /health until it answers 200 (the stage's budget bounds the
    wait: cut, the check's `finally` stops the instance)."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            try:
                if (await client.get(url.rstrip("/") + "/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)


async def judge(probe: Probe, settings: Settings) -> Check:
    if (why := missing_admin(probe)) is not None:
        return Check("replicas", "skip", why)
    if probe.target.replica is None:
        why = "no second instance of this runtime can be started (an engine in the gateway, or a runtime at a URL)"
        return Check("replicas", "skip", why)
    assert probe.target.config_path is not None
    path = Path(probe.target.config_path)
    original = path.read_text(encoding="utf-8")
    try:  # started, not yet ready: the wait below is cancellable, and stops it
        instance: Instance = await asyncio.to_thread(probe.target.replica)
    except Exception as exc:
        return Check("replicas", "skip", f"a second instance did not start: {type(exc).__name__}: {exc}"[:400])
    try:
        await _ready(instance.url)
        made = with_replica(original, probe.target.model, instance.url)
        if made is None:
            return Check("replicas", "skip", f"the config has no backend of {probe.target.model} to copy")
        changed, first, second = made
        write(path, changed)
        answer = await reload(probe)
        if not applied(answer):
            return Check("replicas", "fail", f"the pool of two was not put in force: {answer}")
        routing = yaml.safe_load(changed)["models"][probe.target.model]["routing"]
        evidence: dict[str, Any] = {"backends": [first, second], "routing": routing}
        answers, spread = await _spread(probe, settings.replica_requests)
        evidence["spread"] = {"answers": dict(answers), "by_backend": dict(spread)}
        answers, kept = await _session(probe, "bakeoff-session", settings.session_requests)
        evidence["session"] = {"answers": dict(answers), "by_backend": dict(kept)}
        tally: Counter[str] = Counter()
        stop = asyncio.Event()
        clients = [asyncio.ensure_future(traffic(probe, stop, tally)) for _ in range(settings.rollback_clients)]
        try:
            await asyncio.sleep(0.5)
            await asyncio.to_thread(instance.stop)
            await asyncio.sleep(settings.failover_hold_s / 2)
            half = await _attempts(probe, second)
            await asyncio.sleep(settings.failover_hold_s / 2)
            stopped = await _out_of_rotation(probe, second, half)
        finally:
            stop.set()
            await asyncio.gather(*clients)
        evidence["failover"] = {"traffic": dict(tally), "stopped": stopped}
        return verdict(settings, first, second, evidence)
    finally:
        await asyncio.to_thread(instance.stop)
        write(path, original)  # the candidate is left as it was found
        await reload(probe)


def verdict(settings: Settings, first: str, second: str, evidence: dict[str, Any]) -> Check:
    spread, session, failover = evidence["spread"], evidence["session"], evidence["failover"]
    failed = {k: n for part in (spread, session) for k, n in part["answers"].items() if k != "ok"}
    if failed:
        return Check("replicas", "fail", f"requests failed on the pool of two: {failed}", evidence)
    idle = [b for b in (first, second) if not spread["by_backend"].get(b)]
    if idle:
        why = f"{settings.replica_requests} sessions were not spread: none reached {', '.join(idle)}"
        return Check("replicas", "fail", why, evidence)
    used = {b: n for b, n in session["by_backend"].items() if n}
    if len(used) != 1:
        why = f"one session's requests did not keep one instance (routing {evidence['routing']}): {used}"
        return Check("replicas", "fail", why, evidence)
    lost = {k: n for k, n in failover["traffic"].items() if k != "ok"}
    if lost:
        return Check("replicas", "fail", f"requests failed when an instance stopped: {lost}", evidence)
    if not failover["traffic"].get("ok"):
        return Check("replicas", "fail", "no request was served after an instance stopped", evidence)
    stopped = failover["stopped"]
    if not stopped["ejected"] and stopped["healthy"] and stopped["late_attempts"]:
        why = (
            f"the stopped instance ({second}) was still tried {stopped['late_attempts']:g} times in the last "
            f"{settings.failover_hold_s / 2:g} s (neither ejected nor unhealthy)"
        )
        return Check("replicas", "fail", why, evidence)
    detail = (
        f"routing {evidence['routing']}: {settings.replica_requests} sessions spread {dict(spread['by_backend'])}; "
        f"one session kept one instance "
        f"({settings.session_requests} requests); an instance stopped under traffic: "
        f"{failover['traffic']['ok']} requests served, none failed, the stopped one out of rotation"
    )
    return Check("replicas", "pass", detail, evidence)
