"""API keys: stored only as SHA-256 digests, from the config and from an optional
mounted file that is re-read when it changes (secret rotation without a restart)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

log = logging.getLogger("switchyard.auth")

KEY_PREFIX = "sk-sy-"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    sha256: str
    tenant: str
    name: str | None = None
    models: list[str] | None = None
    tier: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None

    @property
    def key_id(self) -> str:
        return self.name or self.sha256[:12]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ApiKeyTable:
    """Digest -> key record, from the config and an optional mounted file that
    is re-read when it changes (secret rotation without a restart)."""

    def __init__(
        self, entries: list[KeyRecord], file: str | None, known_tenants: set[str] | None, recheck_s: float = 1.0
    ) -> None:
        self._static = {e.sha256: e for e in entries}
        self._file = file
        self._known_tenants = known_tenants
        self._recheck_s = recheck_s
        self._file_entries: dict[str, KeyRecord] = {}
        self._file_mtime: float | None = None
        self._checked_at = 0.0
        self._failed_version: str | None = None  # the unusable version last reported
        self.reload_errors = 0

    def load_file(self) -> None:
        """Re-read the file when it changed. A version that cannot be used (unreadable,
        not YAML, a bad entry) changes nothing: the last good key set stays in force,
        the error is logged once for that version and counted in `reload_errors`."""
        if not self._file:
            return
        try:
            mtime = os.stat(self._file).st_mtime
        except OSError as exc:
            self._reject("unreadable", f"unreadable: {exc}")
            return
        if self._failed_version == "unreadable":
            self._failed_version = None
        if mtime == self._file_mtime:
            return
        try:
            entries = self._read_entries()
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            why = f"not used, the previous keys stay in force: {type(exc).__name__}: {exc}"
            self._reject(f"mtime {mtime}", why)
            return
        self._file_entries = entries
        self._file_mtime = mtime
        self._failed_version = None

    def _read_entries(self) -> dict[str, KeyRecord]:
        with open(self._file or "") as f:
            data = yaml.safe_load(f) or []
        if isinstance(data, dict):
            data = data.get("api_keys", [])
        if not isinstance(data, list):
            raise TypeError(f"expected a list of key entries, not {type(data).__name__}")
        entries: dict[str, KeyRecord] = {}
        for raw in data:
            if not isinstance(raw, Mapping):
                raise TypeError(f"expected a key entry (a mapping), not {type(raw).__name__}")
            record = key_record(raw)
            if self._known_tenants is not None and record.tenant not in self._known_tenants:
                log.error(
                    "api_keys_file %s: key %s names unknown tenant %r; ignored",
                    self._file,
                    record.key_id,
                    record.tenant,
                )
                continue
            entries[record.sha256] = record
        return entries

    def _reject(self, version: str, why: str) -> None:
        """Log and count a file version that cannot be used, once per version."""
        if version == self._failed_version:
            return
        self._failed_version = version
        self.reload_errors += 1
        log.error("api_keys_file %s %s", self._file, why)

    def lookup(self, key: str) -> KeyRecord | None:
        now = time.monotonic()
        if self._file and now - self._checked_at >= self._recheck_s:
            self._checked_at = now
            self.load_file()
        digest = hash_key(key)
        # The lookup is by digest, so timing can only reveal digest bytes, which
        # say nothing usable about the key; the final compare is constant time anyway.
        record = self._static.get(digest) or self._file_entries.get(digest)
        if record is None or not hmac.compare_digest(record.sha256, digest):
            return None
        return record


def key_record(raw: Any) -> KeyRecord:
    """Build a record from a config entry (pydantic model) or a file's mapping;
    ValueError names what is wrong with an entry (a file is not validated by pydantic)."""
    data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    digest = str(data["sha256"]).lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError("sha256 must be a 64-character hex digest")
    models = data.get("models")
    if models is not None and not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
        raise ValueError(f"key {digest[:12]}: models must be a list of model names")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"key {digest[:12]}: name must be a string")
    for field_name in ("tier", "requests_per_minute", "tokens_per_minute", "max_concurrent"):
        value = data.get(field_name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"key {digest[:12]}: {field_name} must be a non-negative integer")
    return KeyRecord(
        sha256=digest,
        tenant=str(data["tenant"]),
        name=name,
        models=models,
        tier=data.get("tier"),
        requests_per_minute=data.get("requests_per_minute"),
        tokens_per_minute=data.get("tokens_per_minute"),
        max_concurrent=data.get("max_concurrent"),
    )
