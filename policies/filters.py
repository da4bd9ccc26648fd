"""The routing pipeline's filters, the same for every profile, in this order:
capability (a runtime lacking what the request needs is dropped, and why is kept),
the request's track (a model under rollout only), health and ejection, stale load
forgotten, saturation marked; and the one partition after the picker, saturated last."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from adapters.base import Capabilities, GenerationRequest
from policies.rollout_records import Track
from policies.saturation import SaturationDetector
from policies.views import BackendView


@dataclass(frozen=True, slots=True)
class CapabilityGap:
    """One backend that cannot serve the request, and the feature it lacks."""

    backend: str
    adapter: str
    feature: str

    def __str__(self) -> str:
        return f"{self.backend} ({self.adapter}) does not support {self.feature}"


def missing_capability(caps: Capabilities, req: GenerationRequest) -> str | None:
    """The feature `req` needs that `caps` lacks (n > 1 is emulated, not needed)."""
    if req.kind == "completion" and not caps.completions:
        return "legacy completions (/v1/completions)"
    if req.tools and req.tool_choice != "none" and not caps.tools:
        return "tool calls"
    if req.sampling.logprobs and not caps.logprobs:
        return "logprobs"
    if req.response_format and not caps.structured_output:
        return "structured output (response_format)"
    return None


def capable(backends: list[BackendView], req: GenerationRequest) -> list[BackendView]:
    return [b for b in backends if missing_capability(b.capabilities, req) is None]


def capability_gaps(backends: list[BackendView], req: GenerationRequest) -> list[CapabilityGap]:
    gaps = []
    for b in backends:
        lack = missing_capability(b.capabilities, req)
        if lack is not None:
            gaps.append(CapabilityGap(b.name, b.adapter, lack))
    return gaps


def on_track(backends: list[BackendView], track: Track) -> tuple[list[BackendView], bool]:
    """The backends of `track`, and False; when none of them is serving (healthy and
    not ejected) but one of the other track is, the other track's, and True (the
    request falls back: a rollout must never turn a down candidate into an outage)."""
    mine = [b for b in backends if b.track == track]
    if any(b.healthy and not b.ejected for b in mine):
        return mine, False
    other = [b for b in backends if b.track != track]
    if any(b.healthy and not b.ejected for b in other):
        return other, True
    return (mine or other), not mine and bool(other)


def healthy(backends: list[BackendView]) -> list[BackendView]:
    """Healthy backends that are not ejected; failing that the healthy ones; when
    none is, all of them (a stale health view must not turn a blip into an outage:
    the request will fail over anyway)."""
    ok = [b for b in backends if b.healthy and not b.ejected]
    return ok or [b for b in backends if b.healthy] or list(backends)


def forget_stale_load(
    backends: list[BackendView], detector: SaturationDetector, now: float | None = None
) -> list[BackendView]:
    """Views without a load reading too old to trust, so that no later step reads it."""
    return [
        dataclasses.replace(b, load=None) if b.load is not None and detector.fresh(b.load, now) is None else b
        for b in backends
    ]


def mark_saturation(
    backends: list[BackendView], detector: SaturationDetector, now: float | None = None
) -> list[BackendView]:
    """Each view marked by the model's detector (pickers may read the mark, never compute it)."""
    marked = []
    for b in backends:
        saturated = detector.check(b.inflight, b.max_inflight, b.load, now).saturated
        marked.append(b if b.saturated == saturated else dataclasses.replace(b, saturated=saturated))
    return marked


def saturated_last(backends: list[BackendView]) -> list[BackendView]:
    """A stable partition, applied once after the picker."""
    return [b for b in backends if not b.saturated] + [b for b in backends if b.saturated]
