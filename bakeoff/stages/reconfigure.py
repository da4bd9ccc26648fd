"""What the production stage's config-changing checks share (rollback, replicas, quota):
the candidate's gateway config file rewritten at once, `POST /admin/reload` to put it in
force, steady client traffic whose answers are tallied, and the gateway's own counters
read from its /metrics."""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bakeoff.stages import Probe, user

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def write(path: Path, text: str) -> None:
    """Replace the file's content at once (a reader never sees half of it); a symlinked
    file (a Kubernetes ConfigMap) keeps its links."""
    real = path.resolve()
    tmp = real.with_name(f".{real.name}.bakeoff-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, real)


async def reload(probe: Probe) -> tuple[int, dict[str, Any]]:
    """`POST /admin/reload`: its status and JSON answer."""
    resp = await probe.client.post("/admin/reload", headers=probe.admin_headers)
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, {"body": resp.text[:200]}


def applied(answer: tuple[int, dict[str, Any]]) -> bool:
    status, body = answer
    return status == 200 and body.get("result") == "applied"


def missing_admin(probe: Probe) -> str | None:
    """Why the candidate's config cannot be changed (None: it can)."""
    missing = [n for n in ("admin_key", "config_path") if not getattr(probe.target, n)]
    return f"the candidate has no {' and '.join(missing)}: no reload to judge" if missing else None


async def traffic(probe: Probe, stop: asyncio.Event, tally: Counter[str], **fields: Any) -> None:
    """Short chats one after another until `stop`, each answer tallied (`ok` or what failed)."""
    while not stop.is_set():
        try:
            resp = await probe.chat(user("Say hello."), max_tokens=8, **fields)
            tally["ok" if resp.status_code == 200 else f"{resp.status_code}"] += 1
        except httpx.HTTPError as exc:
            tally[f"connection: {type(exc).__name__}"] += 1


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of `name` in Prometheus text, with its labels."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


async def by_label(probe: Probe, name: str, label: str, **where: str) -> dict[str, float]:
    """The gateway's `name` summed by `label`, over the samples whose labels match `where`."""
    resp = await probe.client.get("/metrics")
    out: Counter[str] = Counter()
    if resp.status_code == 200:
        for labels, value in samples(resp.text, name):
            if all(labels.get(k) == v for k, v in where.items()):
                out[labels.get(label, "")] += value  # type: ignore[assignment]
    return dict(out)
