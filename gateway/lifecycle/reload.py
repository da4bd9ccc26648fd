"""Live reconfiguration: SIGHUP, the file watcher or `POST /admin/reload` reads the file
again and validates it as `switchyard config check` does (`ConfigSource.load`). Invalid,
unchanged, or changing a setting fixed at start (`RESTART_ONLY`): refused as a whole;
else applied (`Gateway.apply_config`) unless a backend it adds fails its preflight
(`ConfigNotApplied`). Every attempt counts in `switchyard_config_reloads_total{result}`;
the version in force is on every access-log line and in `switchyard_config_info`.
docs/architecture.md, "Lifecycle".
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import reduce

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.config.schema import ConfigError, GatewayConfig, load_config, with_listen

log = logging.getLogger("switchyard.reload")

# Settings a running process cannot take from a reload (dotted paths into the config).
RESTART_ONLY = (
    "listen",
    "ops.listen",
    "workers",
    "quota_store",
    "response_store",
    "log_level",
    "limits.max_head_bytes",
    "limits.max_headers",
    "limits.head_timeout_s",
    "limits.keepalive_timeout_s",
    "limits.max_pipelined",
)


class ReloadResult(StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    INVALID = "invalid"  # the file does not validate
    REFUSED = "refused"  # valid, but it changes a setting fixed at start
    FAILED = "failed"  # valid, but not put in force: an adapter could not be built, or a new backend is down


@dataclass(frozen=True, slots=True)
class ConfigVersion:
    counter: int  # 1 for the config the process started with, +1 per applied reload
    digest: str  # the first 12 hex characters of the SHA-256 of the validated config
    loaded_at: float  # Unix time

    @property
    def id(self) -> str:
        return f"{self.counter}-{self.digest}"

    def to_dict(self) -> dict:
        return {"id": self.id, "counter": self.counter, "digest": self.digest, "loaded_at": round(self.loaded_at, 3)}


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    result: ReloadResult
    message: str
    version: ConfigVersion  # the version in force after the attempt


def config_digest(config: GatewayConfig) -> str:
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


def restart_only_changes(active: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The settings fixed at start that `new` changes."""

    def get(config: GatewayConfig, path: str):
        return reduce(getattr, path.split("."), config)

    return [path for path in RESTART_ONLY if get(active, path) != get(new, path)]


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """Where the config comes from: its file and what the command line overrides."""

    path: str | None
    host: str | None = None
    port: int | None = None
    workers: int | None = None

    def load(self) -> GatewayConfig:
        """The file validated as `serve` and `config check` validate it. Raises ConfigError."""
        if self.path is None:
            raise ConfigError("the gateway was started without a config file: there is nothing to reload")
        return with_listen(load_config(self.path), self.host, self.port, self.workers)


class FileWatch:
    """Whether a file changed since it was last seen: its identity (device, inode,
    size, modification time) first, then, when that moved, its content's hash. A
    Kubernetes ConfigMap update (the `..data` symlink swapped atomically) gives
    the path another inode; a touch that leaves the content alone is no change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity: tuple[int, int, int, int] | None = None
        self._digest: str | None = None
        self.changed()

    def changed(self) -> bool:
        try:
            st = os.stat(self.path)
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if identity == self._identity:
                return False
            with open(self.path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return False  # mid-swap or being rewritten: the next look sees it whole
        self._identity = identity
        if digest == self._digest:
            return False
        self._digest = digest
        return True


class ConfigNotApplied(Exception):
    """The apply function declined a valid config for a reason a person can act on
    (the message says it; no traceback is logged): nothing was changed."""


def preflight_refusal(down: list, mode: str, waited_s: float) -> str:
    """Why a reload's new backends kept it from being put in force (`down`: Backend-likes)."""
    named = ", ".join(f"{b.name} ({b.health.detail or 'unhealthy'})" for b in down)
    after = f"within {waited_s:g} s" if mode == "wait" else "at once"
    return f"new backend(s) did not answer their health check {after} (reload.preflight: {mode}): {named}"


# Puts a validated config in force under a version; returns what changed, in words.
ApplyFn = Callable[[GatewayConfig, ConfigVersion], Awaitable[str]]


class ConfigReloader:
    """The config in force, its version, and the one way to change them."""

    def __init__(
        self, source: ConfigSource, active: GatewayConfig, apply: ApplyFn, registry: CollectorRegistry
    ) -> None:
        self.source = source
        self.active = active
        self.version = ConfigVersion(1, config_digest(active), time.time())
        self._apply = apply
        self._lock = asyncio.Lock()
        self.watch = FileWatch(source.path) if source.path else None
        self.reloads = Counter(
            "switchyard_config_reloads",
            "Config reloads by result: applied, unchanged, invalid (does not validate), refused (changes a "
            "setting fixed at start), failed (could not be put in force).",
            ["result"],
            registry=registry,
        )
        for result in ReloadResult:
            self.reloads.labels(result.value)
        self.info = Gauge(
            "switchyard_config_info",
            "1 for the config version in force in this process: version (1 at start, +1 per applied reload) "
            "and digest (the validated config's content hash, the same on replicas serving the same file).",
            ["version", "digest"],
            registry=registry,
        )
        self._show(self.version)

    async def reload(self, trigger: str) -> ReloadOutcome:
        """Load the config file again and put it in force, or say why not. One at a time."""
        async with self._lock:
            if self.watch is not None:
                self.watch.changed()  # what is read now is seen: the watcher does not reload it again
            outcome = await self._reload()
        self.reloads.labels(outcome.result.value).inc()
        level = logging.INFO if outcome.result in (ReloadResult.APPLIED, ReloadResult.UNCHANGED) else logging.ERROR
        log.log(level, "config reload (%s): %s: %s", trigger, outcome.result.value, outcome.message)
        return outcome

    async def _reload(self) -> ReloadOutcome:
        try:
            new = self.source.load()
        except ConfigError as exc:
            return self._outcome(ReloadResult.INVALID, f"{exc}; version {self.version.id} stays in force")
        digest = config_digest(new)
        if digest == self.version.digest:
            return self._outcome(ReloadResult.UNCHANGED, f"the file holds version {self.version.id}, in force")
        fixed = restart_only_changes(self.active, new)
        if fixed:
            return self._outcome(
                ReloadResult.REFUSED,
                f"{', '.join(fixed)} cannot change while the gateway runs (restart it to change them); nothing "
                f"was changed, version {self.version.id} stays in force",
            )
        version = ConfigVersion(self.version.counter + 1, digest, time.time())
        try:
            summary = await self._apply(new, version)
        except ConfigNotApplied as exc:
            return self._outcome(ReloadResult.FAILED, f"{exc}; version {self.version.id} stays in force")
        except Exception as exc:
            log.exception("putting config version %s in force failed", version.id)
            return self._outcome(
                ReloadResult.FAILED, f"{type(exc).__name__}: {exc}; version {self.version.id} stays in force"
            )
        self.active, self.version = new, version
        self._show(version)
        return self._outcome(ReloadResult.APPLIED, f"version {version.id} in force ({summary})")

    def _show(self, version: ConfigVersion) -> None:
        """`switchyard_config_info` names `version` alone: the one in force."""
        self.info.clear()
        self.info.labels(str(version.counter), version.digest).set(1)

    def _outcome(self, result: ReloadResult, message: str) -> ReloadOutcome:
        return ReloadOutcome(result, message, self.version)

    def file_changed(self) -> bool:
        return self.watch is not None and self.watch.changed()
