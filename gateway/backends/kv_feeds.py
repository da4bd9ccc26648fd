"""Precise prefix matching for one backend: the index its runtime's KV-cache events
fill (policies/kv_index.py), what fills it, and how the runtime names a request's
prompt blocks (adapters/kv_events.py). vLLM and SGLang: a ZMQ subscriber (their hashes
are over token ids, so a text prompt is left to the approximate index: `match` says
None). Native: the engine's events in process (`sink`, called from the engine's thread,
queued and applied on the event loop); backends sharing one engine share its feed.
docs/architecture.md, "Routing".
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from adapters.base import Adapter, GenerationRequest
from adapters.kv_events import AllBlocksCleared, KVEvent, KVEventBatch, sglang_block_hashes, vllm_block_hashes
from gateway.config.schema import BackendConfig, KVEventsConfig
from policies.kv_index import KVBlockIndex, match_fraction
from policies.prefix_index import BLOCK_TOKENS
from policies.views import uncached_tokens
from processes.install import install_hint

if TYPE_CHECKING:
    from adapters.kv_events_zmq import KVEventSubscriber

# (request, the runtime's block size) -> the request's block hashes, or None when they cannot be named.
RequestHasher = Callable[[GenerationRequest, int], "list[int] | None"]
MAX_PENDING = 100_000  # in-process events not yet applied; past this the index starts over
# A prompt's head decides: hashing costs a few microseconds a block (vLLM pickles each).
MAX_HASHED_BLOCKS = 256


def prompt_token_ids(req: GenerationRequest, block_size: int) -> list[int] | None:
    """The head of a prompt sent as token ids (None for text)."""
    if req.kind == "completion" and isinstance(req.prompt, list):
        return req.prompt[: MAX_HASHED_BLOCKS * block_size]
    return None


@dataclass(eq=False)
class KVFeed:
    index: KVBlockIndex
    hasher: RequestHasher
    scheme: tuple  # feeds with equal schemes name a request's blocks alike: hashed once per decision
    pending: deque[KVEvent] = field(default_factory=deque)
    overflowed: bool = False
    subscriber: KVEventSubscriber | None = None  # for a runtime publishing over ZMQ
    # The native engine names a request's blocks itself (its own block size): an index
    # that has seen no event yet is an empty cache, which matches nothing (0, not None).
    # A runtime over ZMQ needs the block size from its events first.
    names_own_blocks: bool = False

    def sink(self, event: KVEvent) -> None:
        """Take one in-process event (any thread: deque appends are atomic)."""
        if len(self.pending) >= MAX_PENDING:
            self.overflowed = True
            self.pending.clear()
        self.pending.append(event)

    def drain(self) -> None:
        events: list[KVEvent] = [AllBlocksCleared()] if self.overflowed else []
        self.overflowed = False
        pending = self.pending
        while pending:
            events.append(pending.popleft())
        if events:
            self.index.apply(KVEventBatch(time.time(), tuple(events)))

    def hashes(self, req: GenerationRequest, hashed: dict[tuple, list[int] | None]) -> list[int] | None:
        """The request's block names as this runtime names them, or None when they cannot be
        named (yet). `hashed` carries the names across the feeds of one decision."""
        block_size = self.index.block_size
        if block_size is None and not self.names_own_blocks:
            return None
        key = (self.scheme, None if self.names_own_blocks else block_size)  # a native scheme holds its size
        if key not in hashed:
            hashed[key] = self.hasher(req, block_size or 0)  # 0: only where the feed names its own blocks
        return hashed[key]

    def match(self, req: GenerationRequest, hashed: dict[tuple, list[int] | None]) -> float | None:
        """The fraction of the request's leading blocks the runtime holds (or is expected
        to, see `expect`), or None when the request's blocks cannot be named (yet)."""
        self.drain()
        hashes = self.hashes(req, hashed)
        if not hashes:
            return None
        return match_fraction(self.index.match(hashes), len(hashes))

    def uncached(
        self, req: GenerationRequest, hashed: dict[tuple, list[int] | None], prompt_tokens: int, matched: float
    ) -> int:
        """The request's prompt tokens this runtime would compute, `matched` being what
        `match` said: the fraction is of the blocks named (a long prompt's head only)."""
        named = len(self.hashes(req, hashed) or ())
        return uncached_tokens(prompt_tokens, matched, named, self.index.block_size or BLOCK_TOKENS)

    def expect(self, req: GenerationRequest, hashed: dict[tuple, list[int] | None]) -> None:
        """The request was routed to this runtime: its prompt blocks match here from now
        on, before the runtime has computed and announced them (policies/kv_index.py)."""
        hashes = self.hashes(req, hashed)
        if hashes:
            self.index.expect(hashes)


def build_feed(bcfg: BackendConfig, adapter: Adapter) -> KVFeed:
    """The feed for a backend whose runtime publishes KV events (checked by the config)."""
    cfg = bcfg.kv_events or KVEventsConfig.model_validate({})
    index = KVBlockIndex(cfg)
    if bcfg.adapter == "native":
        hasher: RequestHasher = lambda req, _: adapter.kv_block_hashes(req)  # type: ignore[attr-defined]  # noqa: E731
        # Engines of one model and block size in one process name blocks alike (one tokenizer,
        # one chain hash): a decision over several tokenizes its prompt once, not once each.
        native_scheme = ("native", bcfg.model_path, bcfg.options.get("block_size"))
        feed = KVFeed(index, hasher, native_scheme, names_own_blocks=True)
        adapter.subscribe_kv_events(feed.sink)  # type: ignore[attr-defined]
        return feed
    if bcfg.adapter == "vllm":

        def hasher(req: GenerationRequest, block_size: int) -> list[int] | None:
            ids = prompt_token_ids(req, block_size)
            return None if ids is None else vllm_block_hashes(ids, block_size, cfg.hash, cfg.hash_seed)

        scheme: tuple = ("vllm", cfg.hash, cfg.hash_seed)
    else:

        def hasher(req: GenerationRequest, block_size: int) -> list[int] | None:
            ids = prompt_token_ids(req, block_size)
            return None if ids is None else sglang_block_hashes(ids, block_size)

        scheme = ("sglang",)
    try:
        from adapters.kv_events_zmq import KVEventSubscriber
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"backend {bcfg.name}: kv_events needs pyzmq and msgpack ({install_hint('kv-events')}): {exc}"
        ) from exc
    assert cfg.endpoint is not None  # the config requires it for vLLM and SGLang
    feed = KVFeed(index, hasher, scheme)
    feed.subscriber = KVEventSubscriber(
        bcfg.name, cfg.endpoint, index, replay_endpoint=cfg.replay_endpoint, topic=cfg.topic
    )
    return feed
