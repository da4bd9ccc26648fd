"""Continuous batching with one token budget per step.

Each step first gives the running sequences their tokens (decodes before chunks of
prefills that are still in progress), then admits waiting sequences while the budget,
the running-sequence cap and the KV pool allow, chunking the last admitted prompt to the
remaining budget. When the pool runs dry for a running sequence, the lowest-priority
(newest, for equal priority) running sequence is preempted by recompute: its blocks are
freed with their hashes intact, so on resumption it is served mostly from the prefix cache.
No sequence is admitted in a step that preempted (it would only be preempted again).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from engine.kv_cache_manager import KVCacheManager
from engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True, slots=True)
class ScheduledChunk:
    """`num_tokens` of `seq` computed this step: a prefill chunk, or one decode token."""

    seq: Sequence
    num_tokens: int


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledChunk] = field(default_factory=list)
    num_batched_tokens: int = 0
    num_preempted: int = 0


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []  # kept sorted by Sequence.sort_key
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=Sequence.sort_key)

    def add_running(self, seq: Sequence) -> None:
        """A forked choice that already holds its blocks."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Drop a finished or aborted sequence and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            idx = bisect.bisect_left(self.waiting, seq.sort_key(), key=Sequence.sort_key)
            if idx < len(self.waiting) and self.waiting[idx] is seq:
                del self.waiting[idx]
            else:
                self.waiting.remove(seq)
        self.kv.free(seq)
        seq.status = SequenceStatus.FINISHED

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.free(seq)
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)

    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        num_preempted = 0
        # Decodes (one new token) first, then prefills that are still in progress.
        decodes = [s for s in self.running if s.num_tokens - s.num_computed_tokens == 1]
        if len(decodes) != len(self.running):
            ordered = decodes + [s for s in self.running if s.num_tokens - s.num_computed_tokens != 1]
        else:
            ordered = decodes
        for seq in ordered:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while not self.kv.allocate_slots(seq, num_new):
                victim = max(self.running, key=Sequence.sort_key)
                num_preempted += 1
                self._preempt(victim)
                if victim is seq:
                    break
                budget += scheduled.pop(victim, 0)
            else:
                scheduled[seq] = num_new
                budget -= num_new
        if num_preempted == 0:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                seq = self.waiting[0]
                hit = self.kv.lookup_prefix(seq)
                num_new = min(seq.num_tokens - hit.num_tokens, budget)
                if not self.kv.allocate_slots(seq, num_new, hit):
                    break
                del self.waiting[0]
                seq.status = SequenceStatus.RUNNING
                self.running.append(seq)
                if not seq.admitted:
                    seq.admitted = True
                    seq.num_cached_tokens = hit.num_tokens
                self.prefix_query_tokens += seq.num_tokens
                self.prefix_hit_tokens += hit.num_tokens
                scheduled[seq] = num_new
                budget -= num_new
        return SchedulerOutput(
            scheduled=[ScheduledChunk(seq, n) for seq, n in scheduled.items()],
            num_batched_tokens=self.max_num_batched_tokens - budget,
            num_preempted=num_preempted,
        )
