"""Every declared check, in report order. Adding an area is adding an import."""

from __future__ import annotations

from conformance.check import Check
from conformance.checks import (
    cancellation,
    chat_shape,
    embeddings,
    errors,
    faults,
    gateway,
    logprobs,
    max_tokens,
    models,
    n_choices,
    responses,
    sampling,
    stop,
    streaming,
    structured,
    tools,
    usage,
)

ALL_CHECKS: list[Check] = [
    *models.CHECKS,
    *chat_shape.CHECKS,
    *usage.CHECKS,
    *streaming.CHECKS,
    *tools.CHECKS,
    *structured.CHECKS,
    *sampling.CHECKS,
    *n_choices.CHECKS,
    *stop.CHECKS,
    *max_tokens.CHECKS,
    *logprobs.CHECKS,
    *errors.CHECKS,
    *cancellation.CHECKS,
    *gateway.CHECKS,
    *faults.CHECKS,
    *responses.ALL,
    *embeddings.CHECKS,
]


def select(profiles: list[str] | None = None, only: list[str] | None = None) -> list[Check]:
    """Checks in the given profiles (all when None), optionally narrowed to ids
    or id prefixes in `only`."""
    chosen = [c for c in ALL_CHECKS if profiles is None or c.profile in profiles]
    if only:
        chosen = [c for c in chosen if any(c.id == o or c.id.startswith(o.rstrip("*")) for o in only)]
    return chosen
