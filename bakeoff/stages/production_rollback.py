"""The production stage's `rollback` check: while clients send traffic, the candidate's
config file is rewritten to `rollback_config` and `POST /admin/reload` puts it in force,
then the original is written back and reloaded; no request may fail meanwhile. Without
`rollback_config` the model's backends are renamed (`<name>-rollback`): the same
runtime, but new backends built, swapped in and the old ones retired, as a rollback does.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bakeoff.stages import Probe, error_text
from bakeoff.stages.production_settings import Settings
from bakeoff.stages.reconfigure import missing_admin, reload, traffic, write
from bakeoff.verdict import Check


def renamed_backends(config_text: str, model: str) -> str | None:
    """The config with `model`'s backends renamed `<name>-rollback` (None: no such backends,
    or a native one: renaming it would load a second engine, and the model, in the gateway)."""
    try:
        config = yaml.safe_load(config_text)
        backends = config["models"][model]["backends"]
    except (yaml.YAMLError, KeyError, TypeError):
        return None
    if not isinstance(backends, list) or not all(isinstance(b, dict) and "name" in b for b in backends):
        return None
    if any(b.get("adapter") == "native" for b in backends):
        return None
    for backend in backends:
        backend["name"] = f"{backend['name']}-rollback"
    return yaml.safe_dump(config, sort_keys=False)


async def judge(probe: Probe, settings: Settings) -> Check:
    target = probe.target
    if (why := missing_admin(probe)) is not None:
        return Check("rollback", "skip", why)
    assert target.config_path is not None
    path = Path(target.config_path)
    original = path.read_text(encoding="utf-8")
    if settings.rollback_config:
        rollback = Path(settings.rollback_config).read_text(encoding="utf-8")
    else:
        rollback = renamed_backends(original, target.model) or original
    shown = await probe.client.get("/admin/config", headers=probe.admin_headers)
    if shown.status_code != 200:
        return Check("rollback", "fail", f"the admin API refused the admin key: {error_text(shown)}")
    before = shown.json()["version"]["counter"]
    tally: Counter[str] = Counter()
    stop = asyncio.Event()
    clients = [asyncio.ensure_future(traffic(probe, stop, tally)) for _ in range(settings.rollback_clients)]
    reloads: list[tuple[int, dict[str, Any]]] = []
    try:
        await asyncio.sleep(settings.rollback_hold_s / 2)
        write(path, rollback)
        reloads.append(await reload(probe))
        await asyncio.sleep(settings.rollback_hold_s)
    finally:
        if rollback != original:
            write(path, original)  # the candidate is left as it was found
            reloads.append(await reload(probe))
        await asyncio.sleep(settings.rollback_hold_s / 2)
        stop.set()
        await asyncio.gather(*clients)
    return verdict(settings, rollback != original, before, reloads, tally)


def verdict(
    settings: Settings, changed: bool, before: int, reloads: list[tuple[int, dict[str, Any]]], tally: Counter[str]
) -> Check:
    evidence = {"traffic": dict(tally), "reloads": [{"status": s, **b} for s, b in reloads], "version_before": before}
    status, body = reloads[0]
    if status != 200 or body.get("result") not in ("applied", "unchanged"):
        return Check("rollback", "fail", f"the reload answered {status}: {body.get('error') or body}", evidence)
    if changed and int(body.get("version", {}).get("counter", before)) <= before:
        return Check(
            "rollback", "fail", "the rollback config was not put in force (the version did not move)", evidence
        )
    failed = {k: n for k, n in tally.items() if k != "ok"}
    if failed:
        return Check("rollback", "fail", f"requests failed during the reload: {failed}", evidence)
    if not tally["ok"]:
        return Check("rollback", "skip", "no request completed while the reload ran", evidence)
    if not changed:
        what = "the same config reloaded (no rollback_config, and no backend of the model to rename)"
    elif settings.rollback_config:
        what = "rolled back to rollback_config and restored"
    else:
        what = "its backends swapped for renamed ones (no rollback_config) and restored"
    return Check("rollback", "pass", f"{what}; {tally['ok']} requests served, none failed", evidence)
