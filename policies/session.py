"""Session affinity: a conversation the client names (`GenerationRequest.session_keys`,
per tenant, `sources` in order) stays on one backend. The table keeps a fixed-size
digest of the name (`session_key`), never the name, for `ttl_s`, bounded by keys and
bytes; the `session` scorer prefers that backend, the pipeline decides whether it may
keep the conversation (docs/architecture.md, "Routing").
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from adapters.base import GenerationRequest
from policies.settings import Settings

SessionSource = Literal["x-session-id", "prompt_cache_key", "user"]
SESSION_SOURCES: tuple[SessionSource, ...] = ("x-session-id", "prompt_cache_key", "user")


class SessionAffinity(Settings):
    """`models.<name>.session_affinity`."""

    sources: list[SessionSource] = Field(default_factory=lambda: list(SESSION_SOURCES))
    ttl_s: float = Field(1800.0, gt=0)  # a conversation idle this long is forgotten
    max_sessions: int = Field(100_000, ge=1)
    max_table_bytes: int = Field(32 << 20, ge=1024)  # the table's own accounting (SessionTable.bytes_used)


# What one entry costs beyond its key and backend name: the ordered dict's node and
# slot, the (backend, last seen) tuple and its float (CPython 3.11, 64-bit, rounded up).
ENTRY_OVERHEAD_BYTES = 200


def session_key(req: GenerationRequest, sources: Sequence[str]) -> str | None:
    """The request's session key from the first of `sources` it carries, or None:
    32 hex characters (16 bytes of SHA-256 over the tenant and the value), whatever
    the value's length."""
    for source in sources:
        value = req.session_keys.get(source)
        if value:
            named = f"{req.tenant or ''}\x00{value}".encode("utf-8", "surrogatepass")
            return hashlib.sha256(named).digest()[:16].hex()
    return None


class SessionTable:
    def __init__(self, settings: SessionAffinity | None = None) -> None:
        self.settings = settings or SessionAffinity()
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (backend, last seen)
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._owners)

    @property
    def bytes_used(self) -> int:
        """What the entries take by the table's accounting (the module docstring)."""
        return self._bytes

    def owner(self, key: str, now: float) -> str | None:
        """The backend holding the session, unless it has been idle past the ttl."""
        entry = self._owners.get(key)
        if entry is None:
            return None
        if now - entry[1] > self.settings.ttl_s:
            self._drop(key)
            return None
        return entry[0]

    def record(self, key: str, backend: str, now: float) -> None:
        self._drop(key)
        self._owners[key] = (backend, now)
        self._bytes += _entry_bytes(key, backend)
        settings = self.settings
        while len(self._owners) > settings.max_sessions or (
            self._bytes > settings.max_table_bytes and len(self._owners) > 1
        ):
            self._drop(next(iter(self._owners)))

    def _drop(self, key: str) -> None:
        entry = self._owners.pop(key, None)
        if entry is not None:
            self._bytes -= _entry_bytes(key, entry[0])


def _entry_bytes(key: str, backend: str) -> int:
    return len(key) + len(backend) + ENTRY_OVERHEAD_BYTES
