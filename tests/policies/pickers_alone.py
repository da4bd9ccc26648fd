"""A plain profile's picker alone, outside the pipeline, for the picker tests."""

from __future__ import annotations

from collections.abc import Callable

from policies.pickers import PICKERS, Decision, RouteState
from policies.profiles import PROFILES
from policies.views import BackendView


def picker(profile: str) -> Callable[..., list[BackendView]]:
    """The picker of the profile `profile`, with a state of its own: call it with (views, key)."""
    state = RouteState()

    def order(bs: list[BackendView], key: str = "") -> list[BackendView]:
        return PICKERS[PROFILES[profile].picker](bs, [0.0] * len(bs), Decision(key, PROFILES[profile], state))

    return order
