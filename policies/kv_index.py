"""One backend's prefix cache as its runtime's own KV-cache events describe it: block
hashes with when each was last stored; a request's leading blocks match as far as the
first one missing (device blocks only). Lost events must not make it lie for long: a
gap is replayed (`missing`) else the index starts over, an entry unannounced for
`max_age_s` stops matching, memory is bounded, and a routed request's blocks are
`expect`ed at once until confirmed (docs/architecture.md, "Routing").
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from pydantic import Field

from adapters.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from policies.settings import Settings

DEVICE_MEDIA = (None, "GPU")
# Fewer leading blocks than this match nothing: every chat shares its template's head (a block
# or two), which says where no prompt's own prefix is, and 64 tokens are no prefill worth a
# choice (a one-block match sent every new prompt to one backend: docs/bench/routing/).
MIN_MATCH_BLOCKS = 4


def match_fraction(matched: int, blocks: int, min_blocks: int = MIN_MATCH_BLOCKS) -> float:
    """The prefix score of `matched` leading blocks of a prompt of `blocks`: their
    fraction, or 0 below `min_blocks` (or the whole prompt, if it is shorter)."""
    if blocks <= 0:
        return 0.0
    return matched / blocks if matched >= min(min_blocks, blocks) else 0.0


class SeqVerdict(Enum):
    NEXT = "next"  # the expected number (or the first one seen)
    GAP = "gap"  # numbers were skipped: events lost
    RESTART = "restart"  # not above the last one: the publisher started again


@dataclass(frozen=True, slots=True)
class IndexStats:
    blocks: int
    last_seq: int | None
    gaps: int
    restarts: int
    reconnects: int
    block_size: int | None
    expected: int = 0  # blocks expected from routed requests, not yet confirmed


class KVIndexSettings(Settings):
    """One backend's index (the gateway's `kv_events` of a backend adds where its runtime publishes)."""

    block_size: int | None = Field(None, ge=1)  # else learned from the events
    max_blocks: int = Field(131072, ge=1)  # the index's memory bound, and the expected blocks'
    max_age_s: float | None = Field(1800.0, gt=0)  # an entry not announced again for this long stops matching
    # A routed request's blocks match at once, until announced or this long passes; 0 expects nothing.
    expect_ttl_s: float = Field(5.0, ge=0)


class KVBlockIndex:
    def __init__(self, settings: KVIndexSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings = settings or KVIndexSettings()
        # The runtime's block size: configured, or learned from its BlockStored events.
        self.block_size = settings.block_size
        self.clock = clock
        self._blocks: OrderedDict[int, float] = OrderedDict()  # block hash -> when last stored
        # Block hash -> until when it matches unconfirmed; one TTL for all, so the order is the deadlines'.
        self._expected: OrderedDict[int, float] = OrderedDict()
        self.last_seq: int | None = None
        self.gaps = 0
        self.restarts = 0
        self.reconnects = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        """Forget everything, stored and expected alike (the runtime's cache is new or unknown)."""
        self._blocks.clear()
        self._expected.clear()

    # ---- events ----------------------------------------------------------------------

    def apply(self, batch: KVEventBatch) -> None:
        """Apply one batch's events in order (no sequence number: in-process events)."""
        now = self.clock()
        blocks, expected = self._blocks, self._expected
        for event in batch.events:
            if isinstance(event, BlockStored):
                if event.medium not in DEVICE_MEDIA:
                    continue
                if event.block_size and self.settings.block_size is None:
                    self.block_size = max(self.block_size or 0, event.block_size)
                for h in event.block_hashes:
                    expected.pop(h, None)  # confirmed: a stored block from now on
                    blocks[h] = now
                    blocks.move_to_end(h)
            elif isinstance(event, BlockRemoved):
                if event.medium not in DEVICE_MEDIA:
                    continue
                for h in event.block_hashes:
                    blocks.pop(h, None)
                    expected.pop(h, None)
            elif isinstance(event, AllBlocksCleared):
                self.clear()
        while len(blocks) > self.settings.max_blocks:
            blocks.popitem(last=False)

    def verdict(self, seq: int) -> SeqVerdict:
        if self.last_seq is None or seq == self.last_seq + 1:
            return SeqVerdict.NEXT
        return SeqVerdict.GAP if seq > self.last_seq + 1 else SeqVerdict.RESTART

    def missing(self, seq: int) -> range:
        """The sequence numbers lost before `seq` (empty when none is): what to ask a
        replay for. Before the first batch, everything from 0, so a replay can
        teach the index what the runtime cached before we subscribed."""
        first = 0 if self.last_seq is None else self.last_seq + 1
        return range(first, seq) if seq > first else range(0)

    def reconnected(self) -> None:
        """The publisher's connection was lost and made again: what it sent meanwhile, and
        whether it is the same process, is unknown. Start over, numbering included."""
        self.reconnects += 1
        self.clear()
        self.last_seq = None

    def receive(self, seq: int, batch: KVEventBatch) -> SeqVerdict:
        """Apply a numbered batch; after a gap or a restart, start again from empty."""
        verdict = self.verdict(seq)
        if verdict is SeqVerdict.GAP:
            self.gaps += 1
            self.clear()
        elif verdict is SeqVerdict.RESTART:
            self.restarts += 1
            self.clear()
        self.last_seq = seq
        self.apply(batch)
        return verdict

    def expect(self, block_hashes: Sequence[int]) -> None:
        """A request with these leading blocks was routed here: match them until the
        runtime confirms, removes or clears them, or `expect_ttl_s` passes."""
        if self.settings.expect_ttl_s <= 0:
            return
        now = self.clock()
        blocks, expected = self._blocks, self._expected
        while expected and next(iter(expected.values())) <= now:  # the expired ones, oldest first
            expected.popitem(last=False)
        deadline = now + self.settings.expect_ttl_s
        for h in block_hashes:
            if h in blocks:
                continue  # held already: its own entry says so, and ages as the runtime renews it
            expected[h] = deadline
            expected.move_to_end(h)
        while len(expected) > self.settings.max_blocks:
            expected.popitem(last=False)

    # ---- lookups ---------------------------------------------------------------------

    def match(self, block_hashes: Sequence[int]) -> int:
        """How many of the leading `block_hashes` the runtime holds (and recently
        announced) or is expected to hold soon."""
        blocks, expected = self._blocks, self._expected
        now = self.clock()
        oldest = None if self.settings.max_age_s is None else now - self.settings.max_age_s
        n = 0
        for h in block_hashes:
            stored = blocks.get(h)
            if stored is None or (oldest is not None and stored < oldest):
                deadline = expected.get(h)
                if deadline is None or deadline <= now:
                    break
            n += 1
        return n

    def stats(self) -> IndexStats:
        return IndexStats(
            len(self._blocks),
            self.last_seq,
            self.gaps,
            self.restarts,
            self.reconnects,
            self.block_size,
            len(self._expected),
        )
