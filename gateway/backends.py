"""Backends as the gateway holds them: adapters built from config, with the
health, load and in-flight state that routing and admission read, refreshed in
the background."""

from __future__ import annotations

import asyncio
import importlib
import logging
from dataclasses import dataclass, field

from adapters.base import Adapter, GenerationRequest, Health, LoadSnapshot
from gateway.config import BackendConfig, GatewayConfig, ModelConfig
from policies.admission import BackendLoad, model_capacity
from policies.routing import BackendView, RouteResult, RoutingPolicy, make_policy, route
from policies.saturation import SaturationDetector

log = logging.getLogger("switchyard.backends")

# adapter kind -> (module, class). An import, not a registry: each line is one runtime.
ADAPTER_CLASSES = {
    "openai": ("adapters.openai", "OpenAIAdapter"),
    "vllm": ("adapters.vllm", "VLLMAdapter"),
    "sglang": ("adapters.sglang", "SGLangAdapter"),
    "trtllm": ("adapters.trtllm", "TRTLLMAdapter"),
    "tgi": ("adapters.tgi", "TGIAdapter"),
    "native": ("adapters.native", "NativeAdapter"),
}


def build_adapter(cfg: BackendConfig, registry=None, shared: dict | None = None) -> Adapter:
    """One adapter per backend; native engines with the same model path share one engine."""
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
    return cls(
        cfg.name,
        cfg.url,
        cfg.served_model,
        timeout_s=cfg.timeout_s,
        connect_timeout_s=cfg.connect_timeout_s,
        first_byte_timeout_s=cfg.first_byte_timeout_s,
        stream_idle_timeout_s=cfg.stream_idle_timeout_s,
        pool_wait_s=cfg.pool_wait_s,
        max_connections=cfg.max_connections,
        options=cfg.options,
    )


@dataclass
class Backend:
    config: BackendConfig
    adapter: Adapter
    inflight: int = 0
    health: Health = field(default_factory=lambda: Health(True, "not checked yet"))
    load: LoadSnapshot | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def view(self) -> BackendView:
        return BackendView(
            name=self.name,
            weight=self.config.weight,
            inflight=self.inflight,
            max_inflight=self.config.max_inflight,
            healthy=self.health.ok,
            load=self.load,
            capabilities=self.adapter.capabilities,
            adapter=self.config.adapter,
        )


def saturation_detector(cfg: ModelConfig) -> SaturationDetector:
    s = cfg.saturation
    return SaturationDetector(
        queue_depth=s.queue_depth, kv_cache_utilization=s.kv_cache_utilization, max_load_age_s=s.max_load_age_s
    )


@dataclass
class ModelPool:
    """The backends that serve one model name, how to choose among them, and
    when one of them counts as saturated (for routing and admission alike)."""

    name: str
    config: ModelConfig
    backends: list[Backend]
    policy: RoutingPolicy
    detector: SaturationDetector = field(default_factory=SaturationDetector)

    def route(self, req: GenerationRequest) -> RouteResult:
        """The pool's backends in the order to try them (policies/routing.py)."""
        return route(self.policy, [b.view() for b in self.backends], req, self.detector)

    def capacity(self) -> int | None:
        """Requests the pool can take now (None: unbounded): max_inflight per
        backend, but a runtime whose fresh load signals say it is saturated
        takes nothing new until it drains (policies/admission.py)."""
        return model_capacity(
            [BackendLoad(b.config.max_inflight, b.inflight, b.load) for b in self.backends], self.detector
        )


class BackendSet:
    """Every model pool, and the background loop that keeps health and load fresh."""

    def __init__(
        self, config: GatewayConfig, registry=None, health_interval_s: float = 5.0, load_interval_s: float = 2.0
    ) -> None:
        shared: dict = {}
        self.backends: dict[str, Backend] = {}
        self.pools: dict[str, ModelPool] = {}
        for model_name, mcfg in config.models.items():
            members = []
            for bcfg in mcfg.backends:
                backend = self.backends.get(bcfg.name)
                if backend is None:
                    backend = self.backends[bcfg.name] = Backend(bcfg, build_adapter(bcfg, registry, shared))
                members.append(backend)
            self.pools[model_name] = ModelPool(
                model_name, mcfg, members, make_policy(mcfg.routing), saturation_detector(mcfg)
            )
        self.health_interval_s = health_interval_s
        self.load_interval_s = load_interval_s
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        await self.refresh_health()
        self._tasks.append(asyncio.create_task(self._loop(self.refresh_health, self.health_interval_s)))
        self._tasks.append(asyncio.create_task(self._loop(self.refresh_load, self.load_interval_s)))

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
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
        async def probe(b: Backend) -> None:
            try:
                b.health = await asyncio.wait_for(b.adapter.health(), timeout=10)
            except Exception as exc:
                b.health = Health(False, f"health check failed: {exc!r}")

        await asyncio.gather(*(probe(b) for b in self.backends.values()))

    async def refresh_load(self) -> None:
        async def probe(b: Backend) -> None:
            try:
                b.load = await asyncio.wait_for(b.adapter.load(), timeout=5)
            except Exception:
                b.load = None

        await asyncio.gather(*(probe(b) for b in self.backends.values()))

    def ready(self) -> dict[str, bool]:
        return {name: any(b.health.ok for b in pool.backends) for name, pool in self.pools.items()}
