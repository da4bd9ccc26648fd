"""Scheduler policy: token budget, decode-first, chunking, priority, preemption."""

from __future__ import annotations

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from tests.engine.scheduler_kit import complete, setup


def test_budget_chunks_prefill_and_decodes_go_first():
    _, _, sched = setup(budget=16)
    a = Sequence("a", 0, list(range(10)), SamplingParams())
    b = Sequence("b", 0, list(range(100, 130)), SamplingParams())
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert [(c.seq.request_id, c.num_tokens) for c in out.scheduled] == [("a", 10), ("b", 6)]
    complete(sched, out)
    out = sched.schedule()
    # a decodes first (1 token), b's prefill continues with the rest of the budget
    assert [(c.seq.request_id, c.num_tokens) for c in out.scheduled] == [("a", 1), ("b", 15)]
    assert out.num_batched_tokens == 16


def test_max_num_seqs_caps_running():
    _, _, sched = setup(budget=100, max_seqs=2)
    for i in range(4):
        sched.add(Sequence(f"s{i}", 0, [i] * 3, SamplingParams()))
    out = sched.schedule()
    assert len(out.scheduled) == 2 and len(sched.waiting) == 2


def test_priority_orders_admission_and_picks_the_victim():
    _, _, sched = setup(num_blocks=6, block_size=4, budget=64)
    low = Sequence("low", 0, list(range(8)), SamplingParams(), priority=5)
    high = Sequence("high", 0, list(range(20, 28)), SamplingParams(), priority=0)
    sched.add(low)
    sched.add(high)
    assert sched.waiting[0] is high  # smaller number = more urgent
    out = sched.schedule()
    assert [c.seq.request_id for c in out.scheduled] == ["high", "low"]
    complete(sched, out)
    # both need a third block; only 2 blocks are left for 2 sequences... fill them up
    for _ in range(8):
        out = sched.schedule()
        complete(sched, out)
    assert sched.num_preemptions >= 1
    assert high in sched.running  # the low-priority one was preempted
    assert low in sched.waiting and not low.blocks and low.num_computed_tokens == 0


def test_preempted_sequence_resumes_from_prefix_cache():
    pool, kv, sched = setup(num_blocks=5, block_size=4, budget=64)
    a = Sequence("a", 0, list(range(8)), SamplingParams())
    b = Sequence("b", 0, list(range(50, 58)), SamplingParams())
    sched.add(a)
    sched.add(b)
    for _ in range(4):
        complete(sched, sched.schedule())
    assert b.num_preemptions >= 1 or a.num_preemptions >= 1
    victim = a if a.num_preemptions else b
    sched.remove(a if victim is b else b)  # make room
    out = sched.schedule()
    assert victim in [c.seq for c in out.scheduled]
    assert victim.num_computed_tokens >= 8  # its full prompt blocks were hits
    pool.check_integrity()
