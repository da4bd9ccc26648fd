"""One backend as the gateway holds it: its config, its adapter, and the live state
that routing and admission read (in flight, prefill backlog, health, load)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapters.base import Adapter, Health, LoadSnapshot
from gateway.config.schema import BackendConfig
from policies.views import BackendView


@dataclass
class Backend:
    config: BackendConfig
    adapter: Adapter
    inflight: int = 0
    # Uncached prompt tokens of the requests sent here whose first event is not back (gateway/serving/dispatch.py).
    backlog: int = 0
    health: Health = field(default_factory=lambda: Health(True, "not checked yet"))
    load: LoadSnapshot | None = None
    # The config's name, an attribute (read several times per request); a backend's
    # config is never replaced (a reload builds a new backend for a changed one).
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.name = self.config.name

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
            track=cfg.track,
            prefix_approx=prefix_approx,
            prefix_precise=prefix_precise,
            session_owner=session_owner,
            backlog_tokens=self.backlog,
            prefill_tokens=prefill_tokens,
        )
