"""Every backend and model pool a config needs: adapters built from it (`build_adapter`),
brought in by `plan` then `apply` on a reload, and health and load refreshed in the
background. One backend: gateway/backends/backend.py; one model's pool and its
routing: gateway/backends/pool.py."""

from __future__ import annotations

import asyncio
import importlib
import logging
from dataclasses import dataclass

from adapters.base import Adapter, Health
from adapters.http_adapter import HTTPAdapter
from gateway.backends.backend import Backend
from gateway.backends.kv_feeds import KVFeed, build_feed
from gateway.backends.pool import ModelPool
from gateway.config.schema import BackendConfig, GatewayConfig
from policies.profiles import profile_of
from processes.install import install_hint

log = logging.getLogger("switchyard.backends")

# adapter kind -> (module, class): the runtime's dialect for HTTPAdapter, or the native adapter.
ADAPTER_CLASSES = {
    "openai": ("adapters.openai", "OpenAIDialect"),
    "vllm": ("adapters.vllm", "VLLMDialect"),
    "sglang": ("adapters.sglang", "SGLangDialect"),
    "trtllm": ("adapters.trtllm", "TRTLLMDialect"),
    "tgi": ("adapters.tgi", "TGIDialect"),
    "llamacpp": ("adapters.llamacpp", "LlamaCppDialect"),
    "native": ("adapters.native", "NativeAdapter"),
}


def build_adapter(cfg: BackendConfig, registry=None, shared: dict | None = None) -> Adapter:
    """One adapter per backend (HTTPAdapter and a dialect); native engines with one model path share one engine."""
    module_name, class_name = ADAPTER_CLASSES[cfg.adapter]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except ModuleNotFoundError as exc:
        hint = f" (the native engine: {install_hint('engine')})" if cfg.adapter == "native" else ""
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
            wants_precise = profile_of(mcfg.routing).uses("prefix", "prefix_precise")
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
            feeds = {b.name: plan.feeds[b.name] for b in members if b.name in plan.feeds}
            plan.pools[model_name] = ModelPool(model_name, mcfg, members, feeds)

    async def preflight(self, plan: BackendPlan, timeout_s: float, interval_s: float) -> list[Backend]:
        """The backends built for `plan` that still fail their health check after
        `timeout_s` (0: the check `plan` made is the answer), checked again every
        `interval_s` meanwhile. Nothing in force changes while it waits."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            down = [b for b in plan.built if not b.health.ok]
            left = deadline - loop.time()
            if not down or left <= 0:
                return down
            await asyncio.sleep(min(interval_s, left))
            await self.check(down)

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
                async with asyncio.timeout(5):
                    b.load = await b.adapter.load()
            except Exception:
                b.load = None

        await asyncio.gather(*(probe(b) for b in self.backends.values()))
        for feed in self.feeds.values():
            feed.drain()  # in-process events pile up while no request is routed

    async def check(self, backends: list[Backend]) -> None:
        """Probe these backends' health now (new backends, before they take traffic)."""
        await asyncio.gather(*(_probe_health(b) for b in backends))

    def serves_in_process(self, name: str) -> bool:
        """Whether backend `name` (in force) runs in this process: the native engine."""
        backend = self.backends.get(name)
        return backend is not None and backend.config.adapter == "native"

    def ready(self) -> dict[str, bool]:
        return {name: any(b.health.ok for b in pool.backends) for name, pool in self.pools.items()}


async def _probe_health(b: Backend) -> None:
    try:
        async with asyncio.timeout(10):
            b.health = await b.adapter.health()
    except Exception as exc:
        b.health = Health(False, f"health check failed: {exc!r}")


def _first_config(config: GatewayConfig, name: str) -> BackendConfig | None:
    """The config of backend `name` in `config` (its first mention: a backend may serve several models)."""
    for mcfg in config.models.values():
        for bcfg in mcfg.backends:
            if bcfg.name == name:
                return bcfg
    return None
