"""engine/sequence.py: a new sequence's state, what its counts read, the order of
sort_key and its repr (what the engine's logs show)."""

from __future__ import annotations

import torch

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus


def test_a_new_sequence_starts_waiting_with_nothing_computed():
    params = SamplingParams()
    prompt = [3, 4, 5]
    seq = Sequence("req", 2, prompt, params, priority=-1)
    prompt.append(6)  # the sequence keeps its own copy
    assert (seq.request_id, seq.index, seq.params, seq.priority) == ("req", 2, params, -1)
    assert seq.token_ids == [3, 4, 5] and seq.num_prompt_tokens == 3
    assert (seq.num_computed_tokens, seq.num_cached_tokens, seq.num_published_blocks) == (0, 0, 0)
    assert (seq.num_new_output_tokens, seq.num_preemptions) == (0, 0)
    assert seq.admitted is False
    assert seq.status is SequenceStatus.WAITING and not seq.is_finished
    assert seq.blocks == [] and seq.block_ids == [] and seq.block_hashes == []
    assert seq.generator is None and seq.finish_reason is None
    assert seq.pending_logprobs is None


def test_defaults_and_a_generator():
    generator = torch.Generator()
    seq = Sequence("r", 0, [1], SamplingParams(logprobs=0), generator=generator)
    assert seq.priority == 0
    assert seq.generator is generator
    assert seq.pending_logprobs == []


def test_counts_split_prompt_and_output():
    seq = Sequence("r", 0, [1, 2], SamplingParams())
    assert (seq.num_tokens, seq.num_output_tokens, seq.output_token_ids) == (2, 0, [])
    seq.token_ids += [7, 8, 9]
    assert (seq.num_tokens, seq.num_output_tokens, seq.output_token_ids) == (5, 3, [7, 8, 9])


def test_finished_only_when_finished():
    seq = Sequence("r", 0, [1], SamplingParams())
    for status, finished in [(SequenceStatus.RUNNING, False), (SequenceStatus.FINISHED, True)]:
        seq.status = status
        assert seq.is_finished is finished


def test_status_words():
    assert [s.value for s in SequenceStatus] == ["waiting", "running", "finished"]


def test_sort_key_puts_higher_priority_then_earlier_arrival_first():
    early_low = Sequence("a", 0, [1], SamplingParams(), priority=1)
    late_high = Sequence("b", 0, [1], SamplingParams(), priority=0)
    later_high = Sequence("c", 0, [1], SamplingParams(), priority=0)
    assert later_high.arrival == late_high.arrival + 1 == early_low.arrival + 2
    ordered = sorted([early_low, later_high, late_high], key=Sequence.sort_key)
    assert [s.request_id for s in ordered] == ["b", "c", "a"]
    assert late_high.sort_key() == (0, late_high.arrival)


def test_repr():
    seq = Sequence("req", 1, [1, 2, 3], SamplingParams())
    seq.num_computed_tokens = 2
    seq.status = SequenceStatus.RUNNING
    assert repr(seq) == "Sequence(req#1, tokens=3, computed=2, running)"
