"""The production stage's `quota` check: a tenant over its quota is refused with 429 and
Retry-After while another tenant is served.

The candidate's gateway config gets two tenants of the check's own, each with an API key
(`auth.mode` gains `keys` where it lacks it): one limited to `quota_rpm` requests a
minute, one without limits. Each sends `quota_requests`, taking turns; the original
config is written back and reloaded afterwards. Quotas are the gateway's (its quota
store), so this judges the gateway config a candidate is deployed with, e.g. a store
that fails open when it cannot be reached lets the limited tenant through.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from bakeoff.stages import Probe, user
from bakeoff.stages.production_settings import Settings
from bakeoff.stages.reconfigure import applied, missing_admin, reload, write
from bakeoff.verdict import Check

LIMITED, OTHER = "bakeoff-quota-limited", "bakeoff-quota-other"
MODES = {"none": "keys", "jwt": "keys+jwt", "keys": "keys", "keys+jwt": "keys+jwt"}


def with_tenants(config_text: str, keys: dict[str, str], rpm: int) -> str | None:
    """The config with the two tenants and their keys added (None: not a config this check
    can extend)."""
    try:
        config = yaml.safe_load(config_text)
        auth = config.setdefault("auth", {}) or {}
        tenants = config.setdefault("tenants", {}) or {}
    except (yaml.YAMLError, AttributeError):
        return None
    mode = auth.get("mode", "none")
    if mode not in MODES:
        return None
    auth["mode"] = MODES[mode]
    entries = [{"sha256": hashlib.sha256(k.encode()).hexdigest(), "tenant": t} for t, k in keys.items()]
    auth["api_keys"] = [*(auth.get("api_keys") or []), *entries]
    # Once a config has a tenants section, every key's tenant must be in it: the tenants
    # its keys name already are added without limits, as they were without the section.
    for entry in auth["api_keys"]:
        if isinstance(entry, dict) and entry.get("tenant"):
            tenants.setdefault(entry["tenant"], {})
    tenants[LIMITED] = {"requests_per_minute": rpm}
    tenants[OTHER] = {}
    config["auth"], config["tenants"] = auth, tenants
    return yaml.safe_dump(config, sort_keys=False)


async def _ask(probe: Probe, key: str) -> str:
    try:
        resp = await probe.client.post(
            "/v1/chat/completions",
            json={"model": probe.target.model, "messages": user("Say hello."), "max_tokens": 4},
            headers={"Authorization": f"Bearer {key}"},
        )
    except httpx.HTTPError as exc:
        return f"connection: {type(exc).__name__}"
    if resp.status_code == 200:
        return "answered"
    if resp.status_code == 429 and resp.headers.get("retry-after"):
        return "429 with Retry-After"
    return f"{resp.status_code}"


async def judge(probe: Probe, settings: Settings) -> Check:
    if (why := missing_admin(probe)) is not None:
        return Check("quota", "skip", why)
    if settings.quota_requests <= settings.quota_rpm:
        return Check("quota", "skip", "quota_requests does not exceed quota_rpm: no request would be over the quota")
    assert probe.target.config_path is not None
    path = Path(probe.target.config_path)
    original = path.read_text(encoding="utf-8")
    keys = {t: f"sk-bakeoff-quota-{secrets.token_urlsafe(12)}" for t in (LIMITED, OTHER)}
    changed = with_tenants(original, keys, settings.quota_rpm)
    if changed is None:
        return Check("quota", "skip", "the config's auth section could not be given two tenants")
    seen: dict[str, Counter[str]] = {LIMITED: Counter(), OTHER: Counter()}
    try:
        write(path, changed)
        answer = await reload(probe)
        if not applied(answer):
            return Check("quota", "fail", f"the config with two tenants was not put in force: {answer}")
        for _ in range(settings.quota_requests):
            for tenant in (LIMITED, OTHER):
                seen[tenant][await _ask(probe, keys[tenant])] += 1
    finally:
        write(path, original)  # the candidate is left as it was found
        await reload(probe)
    return verdict(settings, {t: dict(c) for t, c in seen.items()})


def verdict(settings: Settings, seen: dict[str, dict[str, int]]) -> Check:
    limited, other = Counter(seen[LIMITED]), Counter(seen[OTHER])
    evidence: dict[str, Any] = {"quota_rpm": settings.quota_rpm, "limited": dict(limited), "other": dict(other)}
    n = settings.quota_requests
    if other["answered"] != n:
        return Check("quota", "fail", f"the tenant within its quota was not served: {dict(other)}", evidence)
    wrong = {k: v for k, v in limited.items() if k not in ("answered", "429 with Retry-After")}
    if wrong:
        return Check("quota", "fail", f"the tenant over its quota got {wrong} (not 429 with Retry-After)", evidence)
    if limited["answered"] > settings.quota_rpm:
        why = f"a tenant limited to {settings.quota_rpm} requests a minute was served {limited['answered']} of {n}"
        return Check("quota", "fail", why, evidence)
    detail = (
        f"a tenant limited to {settings.quota_rpm} requests a minute: {limited['answered']} of {n} answered, "
        f"{limited['429 with Retry-After']} refused 429 with Retry-After; the other tenant: all {n} answered"
    )
    return Check("quota", "pass", detail, evidence)
