"""Backends as the gateway holds them: adapters built from config, with the
health, load and in-flight state that routing and admission read, refreshed in
the background; and per model, the routing state a scoring profile reads (the
approximate prefix index, the session table, the outlier detector and the retry
budget) next to each backend's KV-event feed (gateway/backends/kv_feeds.py)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from dataclasses import dataclass, field

from adapters.base import Adapter, GenerationRequest, Health, LoadSnapshot
from adapters.http_adapter import HTTPAdapter
from gateway.backends.kv_feeds import KVFeed, build_feed
from gateway.config.schema import BackendConfig, GatewayConfig, ModelConfig
from gateway.openai.requests import estimate_prompt_tokens
from policies.admission import BackendLoad, model_capacity
from policies.ejection import EjectionConfig, OutlierDetector
from policies.prefix_index import BLOCK_TOKENS, PrefixIndex, prompt_blocks
from policies.retry_budget import RetryBudget
from policies.routing import (
    BackendView,
    RouteResult,
    RoutingPolicy,
    make_policy,
    prefix_key,
    route,
    uncached_tokens,
)
from policies.saturation import SaturationDetector
from policies.scorers import BLENDED, PRECISE, PRECISE_LOAD_FACTOR, PRECISE_LOAD_FLOOR
from policies.scoring import ScoringProfile, route_scored
from policies.session import SessionTable, session_key

log = logging.getLogger("switchyard.backends")

# adapter kind -> (module, class): the runtime's dialect for HTTPAdapter, or the native adapter.
ADAPTER_CLASSES = {
    "openai": ("adapters.openai", "OpenAIDialect"),
    "vllm": ("adapters.vllm", "VLLMDialect"),
    "sglang": ("adapters.sglang", "SGLangDialect"),
    "trtllm": ("adapters.trtllm", "TRTLLMDialect"),
    "tgi": ("adapters.tgi", "TGIDialect"),
    "native": ("adapters.native", "NativeAdapter"),
}


def build_adapter(cfg: BackendConfig, registry=None, shared: dict | None = None) -> Adapter:
    """One adapter per backend (HTTPAdapter and a dialect); native engines with one model path share one engine."""
    module_name, class_name = ADAPTER_CLASSES[cfg.adapter]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except ModuleNotFoundError as exc:
        hint = " (install switchyard[engine] for the native engine)" if cfg.adapter == "native" else ""
        raise RuntimeError(f"backend {cfg.name}: adapter {cfg.adapter!r} is unavailable: {exc}{hint}") from exc
    if cfg.adapter == "native":
        key = ("native", cfg.model_path, cfg.served_model)
        if shared is not None and key in shared:
            return shared[key]
        adapter = cls(
            cfg.name, cfg.model_path, served_name=cfg.served_model, engine_options=cfg.options, registry=registry
        )
        if shared is not None:
            shared[key] = adapter
        return adapter
    assert cfg.url is not None  # BackendConfig requires one for every adapter but native
    return HTTPAdapter(
        cls,
        cfg.name,
        cfg.url,
        cfg.served_model,
        options=cfg.options,
        timeout_s=cfg.timeout_s,
        connect_timeout_s=cfg.connect_timeout_s,
        first_byte_timeout_s=cfg.first_byte_timeout_s,
        stream_idle_timeout_s=cfg.stream_idle_timeout_s,
        pool_wait_s=cfg.pool_wait_s,
        max_connections=cfg.max_connections,
    )


@dataclass
class Backend:
    config: BackendConfig
    adapter: Adapter
    inflight: int = 0
    # Uncached prompt tokens of the requests sent here whose first event is not back (gateway/serving/dispatch.py).
    backlog: int = 0
    health: Health = field(default_factory=lambda: Health(True, "not checked yet"))
    load: LoadSnapshot | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def view(
        self,
        ejected: bool = False,
        prefix_approx: float | None = None,
        prefix_precise: float | None = None,
        session_owner: bool = False,
        prefill_tokens: int | None = None,
    ) -> BackendView:
        """What routing reads; the arguments are what the pool knows about this
        request on this backend (what a profile's scorers read)."""
        cfg = self.config
        return BackendView(
            name=cfg.name,
            weight=cfg.weight,
            inflight=self.inflight,
            max_inflight=cfg.max_inflight,
            healthy=self.health.ok,
            load=self.load,
            capabilities=self.adapter.capabilities,
            adapter=cfg.adapter,
            ejected=ejected,
            prefix_approx=prefix_approx,
            prefix_precise=prefix_precise,
            session_owner=session_owner,
            backlog_tokens=self.backlog,
            prefill_tokens=prefill_tokens,
        )


def saturation_detector(cfg: ModelConfig) -> SaturationDetector:
    s = cfg.saturation
    return SaturationDetector(
        queue_depth=s.queue_depth, kv_cache_utilization=s.kv_cache_utilization, max_load_age_s=s.max_load_age_s
    )


def scoring_profile(cfg: ModelConfig) -> ScoringProfile | None:
    """The model's scoring profile, or None when it names a plain policy."""
    if cfg.routing == "blended":
        return ScoringProfile(dict(BLENDED))
    if cfg.routing == "precise":
        return ScoringProfile(dict(PRECISE), PRECISE_LOAD_FACTOR, PRECISE_LOAD_FLOOR)
    if isinstance(cfg.routing, str):
        return None
    return ScoringProfile(dict(cfg.routing.scorers), cfg.routing.load_factor, cfg.routing.load_floor)


@dataclass
class ModelPool:
    """The backends that serve one model name, how to choose among them, and
    when one of them counts as saturated (for routing and admission alike)."""

    name: str
    config: ModelConfig
    backends: list[Backend]
    policy: RoutingPolicy | None  # a plain policy, or None with a scoring profile
    detector: SaturationDetector = field(default_factory=SaturationDetector)
    profile: ScoringProfile | None = None
    feeds: dict[str, KVFeed] = field(default_factory=dict)  # backend name -> its KV-event feed
    prefixes: dict[str, PrefixIndex] = field(init=False)
    sessions: SessionTable = field(init=False)
    ejection: OutlierDetector = field(init=False)
    retry_budget: RetryBudget = field(init=False)

    def __post_init__(self) -> None:
        self.prefixes = {b.name: PrefixIndex(self.config.prefix_index_blocks) for b in self.backends}
        s = self.config.session_affinity
        self.sessions = SessionTable(s.ttl_s, s.max_sessions)
        # Fed by dispatch with the outcome of every attempt before its first byte (gateway/serving/dispatch.py).
        e = self.config.ejection
        self.ejection = OutlierDetector([b.name for b in self.backends], EjectionConfig(**e.model_dump()))
        self.retry_budget = RetryBudget(e.retry_ratio, e.min_retries, e.window_s)

    def route(self, req: GenerationRequest) -> RouteResult:
        """The pool's backends in the order to try them (policies/routing.py,
        policies/scoring.py). A profile's choice is remembered: the prompt's
        blocks in the chosen backend's prefix index, the session on it. Each
        view says the prompt tokens the request would have its backend compute
        (all of them, less what the backend's index matched), which dispatch
        adds to that backend's backlog while it waits for the first event."""
        tokens = estimate_prompt_tokens(req)
        if self.profile is None:
            assert self.policy is not None
            return route(
                self.policy,
                [b.view(not self.ejection.admits(b.config.name), prefill_tokens=tokens) for b in self.backends],
                req,
                self.detector,
            )
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
        result = route_scored(profile, views, req, session or prefix_key(req.messages, req.prompt), self.detector)
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

    def capacity(self) -> int | None:
        """Requests the pool can take now (None: unbounded): max_inflight per
        backend, but a runtime whose fresh load signals say it is saturated
        takes nothing new until it drains (policies/admission.py)."""
        return model_capacity(
            [BackendLoad(b.config.max_inflight, b.inflight, b.load) for b in self.backends], self.detector
        )


@dataclass
class BackendPlan:
    """The backends, pools and feeds a config needs, built and not yet in force
    (`BackendSet.plan`); `built` are the backends made for it, the rest are kept."""

    backends: dict[str, Backend]
    pools: dict[str, ModelPool]
    feeds: dict[str, KVFeed]
    built: list[Backend]


@dataclass
class Retired:
    """What a reconfiguration took out of service. Requests already under way keep
    using it; `aclose` ends it once none is left (gateway/lifecycle/process.py decides when)."""

    backends: list[Backend]
    adapters: list[Adapter]
    feeds: list[KVFeed]

    async def aclose(self) -> None:
        for feed in self.feeds:
            if feed.subscriber is not None:
                await feed.subscriber.aclose()
        for adapter in self.adapters:
            try:
                await adapter.aclose()
            except Exception:  # one adapter's failure must not keep the others open
                log.exception("closing a retired backend's adapter failed")


class BackendSet:
    """Every model pool, and the background loop that keeps health and load fresh.
    A new config is brought in with `plan` then `apply`: backends whose config is
    unchanged are kept (their adapter, connections, in-flight count and health),
    pools whose model and backends are unchanged keep their routing state."""

    def __init__(
        self, config: GatewayConfig, registry=None, health_interval_s: float = 5.0, load_interval_s: float = 2.0
    ) -> None:
        self.registry = registry
        self.backends: dict[str, Backend] = {}
        self.pools: dict[str, ModelPool] = {}
        self.feeds: dict[str, KVFeed] = {}  # backend name -> its KV-event feed
        self.health_interval_s = health_interval_s
        self.load_interval_s = load_interval_s
        self._tasks: list[asyncio.Task] = []
        plan = BackendPlan({}, {}, {}, [])
        self._build(config, plan)
        self.apply(plan)

    async def plan(self, config: GatewayConfig) -> BackendPlan:
        """Build what `config` needs beside what is in force, and probe the new
        backends' health. Raises when an adapter cannot be built, after closing
        what was built for the plan."""
        plan = BackendPlan({}, {}, {}, [])
        try:
            self._build(config, plan)
        except BaseException:
            await self.discard(plan)
            raise
        await self.check(plan.built)
        return plan

    def _build(self, config: GatewayConfig, plan: BackendPlan) -> None:
        kept = {n: b for n, b in self.backends.items() if _first_config(config, n) == b.config}
        # Native engines are shared by model path; a kept one serves new backends of the same path.
        shared: dict = {
            ("native", b.config.model_path, b.config.served_model): b.adapter
            for b in kept.values()
            if b.config.adapter == "native"
        }
        plan.feeds.update({n: f for n, f in self.feeds.items() if n in kept})
        feeds_by_adapter = {id(kept[n].adapter): f for n, f in plan.feeds.items()}
        for model_name, mcfg in config.models.items():
            members = []
            for bcfg in mcfg.backends:
                backend = plan.backends.get(bcfg.name) or kept.get(bcfg.name)
                if backend is None:
                    backend = Backend(bcfg, build_adapter(bcfg, self.registry, shared))
                    plan.built.append(backend)
                plan.backends[bcfg.name] = backend
                members.append(backend)
            profile = scoring_profile(mcfg)
            wants_precise = profile is not None and profile.uses("prefix", "prefix_precise")
            for b in members:
                if b.name not in plan.feeds and (
                    b.config.kv_events or (wants_precise and b.config.adapter == "native")
                ):
                    feed = feeds_by_adapter.get(id(b.adapter)) or build_feed(b.config, b.adapter)
                    plan.feeds[b.name] = feeds_by_adapter[id(b.adapter)] = feed
            old = self.pools.get(model_name)
            if old is not None and old.config == mcfg and all(x is y for x, y in zip(old.backends, members)):
                plan.pools[model_name] = old  # its routing state (prefixes, sessions, ejections) carries on
                continue
            plan.pools[model_name] = ModelPool(
                model_name,
                mcfg,
                members,
                None if profile else make_policy(mcfg.routing),  # type: ignore[arg-type]
                saturation_detector(mcfg),
                profile,
                {b.name: plan.feeds[b.name] for b in members if b.name in plan.feeds},
            )

    async def discard(self, plan: BackendPlan) -> None:
        """A plan that will not be applied: close what was built for it."""
        feeds = {plan.feeds[b.name] for b in plan.built if b.name in plan.feeds}
        await self._unused(plan.built, feeds).aclose()

    def apply(self, plan: BackendPlan) -> Retired:
        """Put `plan` in force at once (no await: no request sees half of it). What it
        leaves out is returned, still open, for the requests that already hold it."""
        before = list(self.backends.values())
        before_feeds = set(self.feeds.values())
        self.backends.clear()
        self.backends.update(plan.backends)
        self.pools.clear()
        self.pools.update(plan.pools)
        self.feeds.clear()
        self.feeds.update(plan.feeds)
        if self._tasks:  # started: the new feeds' subscribers start now
            for feed in set(plan.feeds.values()) - before_feeds:
                if feed.subscriber is not None:
                    feed.subscriber.start()
        return self._unused(before, before_feeds)

    def _unused(self, candidates: list[Backend], feeds: set[KVFeed]) -> Retired:
        """Those of `candidates` and `feeds` the set in force does not use."""
        in_force = list(self.backends.values())
        gone = [b for b in candidates if all(b is not c for c in in_force)]
        adapters_in_force = {id(b.adapter) for b in in_force}
        adapters = {id(b.adapter): b.adapter for b in gone if id(b.adapter) not in adapters_in_force}
        feeds_in_force = set(self.feeds.values())
        return Retired(gone, list(adapters.values()), [f for f in feeds if f not in feeds_in_force])

    async def start(self) -> None:
        for feed in self.feeds.values():
            if feed.subscriber is not None:
                feed.subscriber.start()
        await self.refresh_health()
        self._tasks.append(asyncio.create_task(self._loop(self.refresh_health, self.health_interval_s)))
        self._tasks.append(asyncio.create_task(self._loop(self.refresh_load, self.load_interval_s)))

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for feed in self.feeds.values():
            if feed.subscriber is not None:
                await feed.subscriber.aclose()
        closed = set()
        for b in self.backends.values():
            if id(b.adapter) not in closed:
                closed.add(id(b.adapter))
                await b.adapter.aclose()

    async def _loop(self, fn, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except Exception:  # a probe failure must never stop the loop
                log.exception("backend refresh failed")

    async def refresh_health(self) -> None:
        await self.check(list(self.backends.values()))

    async def refresh_load(self) -> None:
        async def probe(b: Backend) -> None:
            try:
                b.load = await asyncio.wait_for(b.adapter.load(), timeout=5)
            except Exception:
                b.load = None

        await asyncio.gather(*(probe(b) for b in self.backends.values()))
        for feed in self.feeds.values():
            feed.drain()  # in-process events pile up while no request is routed

    async def check(self, backends: list[Backend]) -> None:
        """Probe these backends' health now (new backends, before they take traffic)."""
        await asyncio.gather(*(_probe_health(b) for b in backends))

    def ready(self) -> dict[str, bool]:
        return {name: any(b.health.ok for b in pool.backends) for name, pool in self.pools.items()}


async def _probe_health(b: Backend) -> None:
    try:
        b.health = await asyncio.wait_for(b.adapter.health(), timeout=10)
    except Exception as exc:
        b.health = Health(False, f"health check failed: {exc!r}")


def _first_config(config: GatewayConfig, name: str) -> BackendConfig | None:
    """The config of backend `name` in `config` (its first mention: a backend may serve several models)."""
    for mcfg in config.models.values():
        for bcfg in mcfg.backends:
            if bcfg.name == name:
                return bcfg
    return None
