"""One choice of one request: its tokens, progress and KV blocks."""

from __future__ import annotations

import enum
import itertools
from typing import TYPE_CHECKING

from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from engine.block_pool import Block


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


_arrival_counter = itertools.count()


class Sequence:
    """`token_ids` is prompt + output. `num_computed_tokens` counts tokens whose KV is in
    the cache (prefix hits included); a sequence is sampled after a step that brings
    `num_computed_tokens` up to `len(token_ids)`."""

    def __init__(
        self,
        request_id: str,
        index: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
        priority: int = 0,
        generator: torch.Generator | None = None,
    ) -> None:
        self.request_id = request_id
        self.index = index
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache (first admission)
        self.admitted = False
        self.status = SequenceStatus.WAITING
        self.params = params
        self.priority = priority
        self.arrival = next(_arrival_counter)
        self.blocks: list[Block] = []
        self.block_ids: list[int] = []
        self.block_hashes: list[int] = []  # chain hashes of this sequence's full blocks, in order
        self.num_published_blocks = 0  # leading blocks already offered to the prefix cache
        self.generator = generator
        self.finish_reason: str | None = None
        self.num_new_output_tokens = 0  # tokens sampled since the last TokenOutput
        self.pending_logprobs: list | None = [] if params.logprobs is not None else None
        self.num_preemptions = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def sort_key(self) -> tuple[int, int]:
        """Lower sorts first: higher priority (smaller number), then earlier arrival."""
        return (self.priority, self.arrival)

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id}#{self.index}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, {self.status.value})"
        )
