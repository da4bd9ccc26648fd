"""Session affinity: a conversation the client names stays on one backend.

The name is an explicit key (the `x-session-id` header, the body's
`prompt_cache_key` or `user`, in `GenerationRequest.session_keys`), per tenant;
`sources` says which count, first present wins. The table remembers each key's
last backend for `ttl_s`, for at most `max_sessions` keys (least recently used
go first). The `session` scorer prefers that backend; whether it may keep the
conversation (healthy, not ejected, not saturated) is the pipeline's call.
"""

from __future__ import annotations

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


def session_key(req: GenerationRequest, sources: Sequence[str]) -> str | None:
    """The request's session key from the first of `sources` it carries, or None."""
    for source in sources:
        value = req.session_keys.get(source)
        if value:
            return f"{req.tenant or ''}\x00{value}"
    return None


class SessionTable:
    def __init__(self, settings: SessionAffinity | None = None) -> None:
        self.settings = settings or SessionAffinity()
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (backend, last seen)

    def __len__(self) -> int:
        return len(self._owners)

    def owner(self, key: str, now: float) -> str | None:
        """The backend holding the session, unless it has been idle past the ttl."""
        entry = self._owners.get(key)
        if entry is None:
            return None
        if now - entry[1] > self.settings.ttl_s:
            del self._owners[key]
            return None
        return entry[0]

    def record(self, key: str, backend: str, now: float) -> None:
        self._owners[key] = (backend, now)
        self._owners.move_to_end(key)
        while len(self._owners) > self.settings.max_sessions:
            self._owners.popitem(last=False)
