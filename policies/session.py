"""Session affinity: a conversation the client names stays on one backend.

The name is an explicit key the client sends: the `x-session-id` header, the
body's `prompt_cache_key` or its `user` (gateway/openai/requests.py and gateway/app.py
put them in `GenerationRequest.session_keys`). Each model says which of them
count and in what order (`models.<name>.session_affinity`); the first present
wins. Keys are per tenant: two tenants sending the same `user` are two sessions.

The table remembers, per key, the backend the conversation was last routed to,
for `ttl_s` after its last request and for at most `capacity` keys (the least
recently used go first). The `session` scorer (policies/scorers.py) then prefers
that backend; whether it may keep the conversation (healthy, not ejected, not
saturated) is the routing pipeline's call, not the table's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from adapters.base import GenerationRequest

SessionSource = Literal["x-session-id", "prompt_cache_key", "user"]
SESSION_SOURCES: tuple[SessionSource, ...] = ("x-session-id", "prompt_cache_key", "user")


def session_key(req: GenerationRequest, sources: Sequence[str]) -> str | None:
    """The request's session key from the first of `sources` it carries, or None."""
    for source in sources:
        value = req.session_keys.get(source)
        if value:
            return f"{req.tenant or ''}\x00{value}"
    return None


class SessionTable:
    def __init__(self, ttl_s: float = 1800.0, capacity: int = 100_000) -> None:
        if capacity < 1 or ttl_s <= 0:
            raise ValueError("a session table needs room for one key and a positive ttl")
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (backend, last seen)

    def __len__(self) -> int:
        return len(self._owners)

    def owner(self, key: str, now: float) -> str | None:
        """The backend holding the session, unless it has been idle past the ttl."""
        entry = self._owners.get(key)
        if entry is None:
            return None
        if now - entry[1] > self.ttl_s:
            del self._owners[key]
            return None
        return entry[0]

    def record(self, key: str, backend: str, now: float) -> None:
        self._owners[key] = (backend, now)
        self._owners.move_to_end(key)
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)
