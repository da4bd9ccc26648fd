"""The backends that serve one model name and the routing state they share: the
profile, the rotating pickers' state, the approximate prefix index, the sessions,
the outlier detector and the retry budget, next to each backend's KV-event feed
(gateway/backends/kv_feeds.py). Both ways of ordering a pool's backends end in the
one pipeline, `policies.routing.route`."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field

import orjson

from adapters.base import GenerationRequest
from gateway.backends.backend import Backend
from gateway.backends.kv_feeds import KVFeed
from gateway.config.schema import ModelConfig
from gateway.openai.requests import estimate_prompt_tokens
from policies.admission import BackendLoad, model_capacity
from policies.ejection import OutlierDetector
from policies.pickers import RouteState
from policies.prefix_index import BLOCK_TOKENS, PrefixIndex, prompt_blocks
from policies.profiles import Profile, profile_of
from policies.retry_budget import RetryBudget
from policies.rollout_records import Track
from policies.routing import RouteResult, prefix_key, route
from policies.saturation import SaturationDetector
from policies.session import SessionTable, session_key
from policies.views import uncached_tokens

log = logging.getLogger("switchyard.backends")


@dataclass
class ModelPool:
    name: str
    config: ModelConfig
    backends: list[Backend]
    feeds: dict[str, KVFeed] = field(default_factory=dict)  # backend name -> its KV-event feed
    profile: Profile = field(init=False)
    state: RouteState = field(init=False, default_factory=RouteState)
    # A rollout's candidate track turns its own ring: sharing the stable one, requests of
    # the two tracks interleaving (or the mirror's copies) would skew stable's rotation.
    candidate_state: RouteState = field(init=False, default_factory=RouteState)
    prefixes: dict[str, PrefixIndex] = field(init=False)
    sessions: SessionTable = field(init=False)
    ejection: OutlierDetector = field(init=False)
    retry_budget: RetryBudget = field(init=False)
    # OpenAI's `system_fingerprint`: what the model's answers depend on (each backend's
    # runtime, address, model and options), so a changed backend configuration shows.
    fingerprint: str = field(init=False)
    # Its backends by name: a pool's backends never change (a reload builds a new pool).
    by_name: dict[str, Backend] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.by_name = {b.name: b for b in self.backends}
        served = [
            (b.config.adapter, b.config.url, b.config.served_model, b.config.model_path, b.config.options)
            for b in self.backends
        ]
        digest = hashlib.sha256(orjson.dumps(served, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()
        self.fingerprint = "fp_" + digest[:10]
        self.profile = profile_of(self.config.routing)
        self.prefixes = {b.name: PrefixIndex(self.config.prefix_index_blocks) for b in self.backends}
        self.sessions = SessionTable(self.config.session_affinity)
        # Fed by dispatch with the outcome of every attempt before its first byte (gateway/serving/dispatch.py).
        self.ejection = OutlierDetector([b.name for b in self.backends], self.config.ejection)
        self.retry_budget = RetryBudget(self.config.ejection)

    @property
    def detector(self) -> SaturationDetector:
        """When a backend counts as saturated, for routing and admission alike."""
        return self.config.saturation

    def route(self, req: GenerationRequest, track: Track | None = None) -> RouteResult:
        """The pool's backends in the order to try a generation on them (those of `track`
        when the model is under rollout, policies/filters.py `on_track`). The views carry
        what the profile's scorers read (prefix matches, the session's backend) and the
        prompt tokens each backend would compute, which dispatch adds to its backlog
        until the first event. The choice is remembered: the prompt's blocks in its
        prefix index, expected in its KV-event feed, the session on it."""
        tokens = estimate_prompt_tokens(req)
        profile, clock = self.profile, time.monotonic()
        choice = len(self.backends) > 1  # with one backend there is nothing to match prompts for
        blocks = prompt_blocks(req) if choice and profile.uses("prefix", "prefix_approx") else []
        session = session_key(req, self.config.session_affinity.sources) if choice and profile.uses("session") else None
        owner = self.sessions.owner(session, clock) if session else None
        precise = choice and profile.uses("prefix", "prefix_precise")
        hashed: dict[tuple, list[int] | None] = {}
        views = []
        for b in self.backends:
            name = b.config.name
            feed = self.feeds.get(name) if precise else None
            approx = self.prefixes[name].match(blocks) / len(blocks) if blocks else None
            exact = None if feed is None else feed.match(req, hashed)
            if feed is not None and exact is not None:  # what the runtime holds, where it can be named
                uncached = feed.uncached(req, hashed, tokens, exact)
            else:
                uncached = uncached_tokens(tokens, approx, len(blocks), BLOCK_TOKENS)
            views.append(b.view(not self.ejection.admits(name), approx, exact, name == owner, uncached))
        # The key only orders backends against each other: one backend needs none.
        key = session or (prefix_key(req.messages, req.prompt) if choice else "")
        state = self.candidate_state if track == "candidate" else self.state
        result = route(profile, views, req, key, self.detector, state, track=track)
        if log.isEnabledFor(logging.DEBUG):  # what each scorer saw, to check a profile against a workload
            log.debug(
                "route %s -> %s: %s",
                self.name,
                result.candidates[0].name if result.candidates else None,
                {
                    v.name: (v.inflight, v.backlog_tokens, v.prefix_approx, v.prefix_precise, result.scores.get(v.name))
                    for v in views
                },
            )
        if result.candidates:
            chosen = result.candidates[0].name
            if blocks:
                self.prefixes[chosen].record(blocks)
            if precise and (feed := self.feeds.get(chosen)) is not None:
                feed.expect(req, hashed)  # other requests of this prefix follow it before its prefill ends
            if session:
                self.sessions.record(session, chosen, clock)
        return result

    def order(self, req: GenerationRequest, among: list[Backend], track: Track | None = None) -> RouteResult:
        """`among` (backends of this pool) in the order to try a one-shot call on them:
        the same pipeline on what the pool knows of each backend alone (no prompt
        matched, no session read, nothing remembered but the pickers' turn: `track`'s,
        for the mirror's copies to the candidates)."""
        views = [b.view(not self.ejection.admits(b.name)) for b in among]
        state = self.candidate_state if track == "candidate" else self.state
        return route(self.profile, views, req, None, self.detector, state)

    def capacity(self) -> int | None:
        """Requests the pool can take now (None: unbounded): max_inflight per
        backend, but a runtime whose fresh load signals say it is saturated
        takes nothing new until it drains (policies/admission.py)."""
        return model_capacity(
            [BackendLoad(b.config.max_inflight, b.inflight, b.load) for b in self.backends], self.detector
        )
