"""The scheduler's bookkeeping beside its policy (tests/engine/test_scheduler.py):
removing a sequence from either queue, a forked choice joining the running set,
the budget running out among decodes, a preemption giving back the budget its
victim held and stopping admission for the step, and the prefix-cache counters."""

from __future__ import annotations

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus
from tests.engine.scheduler_kit import complete, setup


def seq(rid, n, priority=0, start=0) -> Sequence:
    return Sequence(rid, 0, list(range(start, start + n)), SamplingParams(), priority=priority)


def plan(out) -> list[tuple[str, int]]:
    return [(c.seq.request_id, c.num_tokens) for c in out.scheduled]


def test_removing_sequences_from_either_queue_frees_them():
    pool, _, sched = setup(budget=8)
    a, b, c = seq("a", 8), seq("b", 4), seq("c", 4)
    for s in (a, b, c):
        sched.add(s)
    sched.schedule()  # a runs with the whole budget; b and c wait
    assert sched.running == [a] and sched.waiting == [b, c]
    sched.remove(c)
    sched.remove(a)
    assert sched.running == [] and sched.waiting == [b]
    assert a.status is SequenceStatus.FINISHED and c.status is SequenceStatus.FINISHED
    assert pool.num_free_blocks == 64 and a.blocks == []
    assert sched.has_unfinished()
    sched.remove(b)
    assert not sched.has_unfinished() and sched.waiting == []


def test_removing_a_waiting_sequence_whose_order_changed_still_finds_it():
    _, _, sched = setup()
    a, b = seq("a", 4), seq("b", 4)
    sched.add(a)
    sched.add(b)
    b.priority = -5  # its sort key moved after it was queued
    sched.remove(b)
    assert sched.waiting == [a]
    c = seq("c", 4)
    sched.add(c)
    a.priority = 99  # the head now sorts past the end of the queue
    sched.remove(a)
    assert sched.waiting == [c]


def test_a_forked_choice_joins_the_running_set_and_decodes_with_it():
    _, kv, sched = setup()
    parent = seq("p", 4)
    sched.add(parent)
    complete(sched, sched.schedule())
    child = seq("c", 4)
    assert kv.fork(parent, child).forked
    child.token_ids.append(1)
    sched.add_running(child)
    assert child.status is SequenceStatus.RUNNING and sched.running == [parent, child]
    assert plan(sched.schedule()) == [("p", 1), ("c", 1)]


def test_the_budget_can_run_out_among_the_decodes():
    _, _, sched = setup(budget=4, max_seqs=8)
    seqs = [seq(f"s{i}", 1, start=10 * i) for i in range(4)]
    for s in seqs:
        sched.add(s)
    complete(sched, sched.schedule())
    sched.add(seq("late", 3, start=100))
    sched.max_num_batched_tokens = 3
    out = sched.schedule()
    assert plan(out) == [("s0", 1), ("s1", 1), ("s2", 1)]
    assert out.num_batched_tokens == 3 and out.num_preempted == 0


def test_a_preemption_returns_its_victims_budget_and_admits_nobody_that_step():
    # 4 blocks of 2 tokens: "old" and "new" each hold two blocks after their prefills.
    pool, _, sched = setup(num_blocks=4, block_size=2, budget=8)
    old, new = seq("old", 4), seq("new", 3, start=50)
    sched.add(old)
    sched.add(new)
    out = sched.schedule()
    assert plan(out) == [("old", 4), ("new", 3)] and pool.num_free_blocks == 0
    complete(sched, out)
    sched.add(seq("waiting", 1, start=90))
    # "new" decodes into its own partly filled block (scheduled first: it is a decode
    # too, but "old" needs a new block and finds none). "new" is the victim; the
    # budget it took is given back, and the waiting sequence is not admitted.
    out = sched.schedule()
    assert out.num_preempted == 1 and sched.num_preemptions == 1 and new.num_preemptions == 1
    assert plan(out) == [("old", 1)] and out.num_batched_tokens == 1
    assert [s.request_id for s in sched.waiting] == ["new", "waiting"]
    assert new.status is SequenceStatus.WAITING and new.blocks == []


def test_a_sequence_that_is_its_own_victim_is_not_scheduled():
    pool, _, sched = setup(num_blocks=2, block_size=2, budget=8)
    only = seq("only", 4)
    sched.add(only)
    complete(sched, sched.schedule())
    assert pool.num_free_blocks == 0
    out = sched.schedule()  # its decode needs a third block: it preempts itself
    assert plan(out) == [] and out.num_preempted == 1 and out.num_batched_tokens == 0
    assert sched.running == [] and sched.waiting == [only]


def test_prefix_counters_count_every_admission_and_cached_tokens_only_the_first():
    _, _, sched = setup(block_size=2, budget=32)
    first = seq("first", 5)
    sched.add(first)
    complete(sched, sched.schedule())
    sched.remove(first)
    again = seq("again", 5)
    sched.add(again)
    out = sched.schedule()
    assert plan(out) == [("again", 1)]  # four of its five tokens came from the cache
    assert again.num_cached_tokens == 4 and again.admitted
    assert sched.prefix_query_tokens == 10 and sched.prefix_hit_tokens == 4
    complete(sched, out)
    sched._preempt(again)  # the step's own preemption path, taken by hand
    sched.kv.pool.reset_prefix_cache()  # its re-admission finds nothing cached
    sched.schedule()
    assert sched.prefix_query_tokens == 10 + 6 and sched.prefix_hit_tokens == 4
    assert again.num_cached_tokens == 4  # the first admission's figure is kept


def test_a_victim_scheduled_earlier_in_the_step_gives_its_tokens_back():
    # "low" (priority 5) decodes; "high" (priority 0) is still prefilling and needs
    # a block the pool no longer has. "low" was already given a token this step;
    # preempting it returns that token to the budget before "high" takes its chunk.
    pool, _, sched = setup(num_blocks=4, block_size=2, budget=4)
    low = seq("low", 2, priority=5)
    sched.add(low)
    complete(sched, sched.schedule())  # low: prefill of 2, then a decode token
    high = seq("high", 10, priority=0, start=100)
    sched.add(high)
    out = sched.schedule()
    assert plan(out) == [("low", 1), ("high", 3)]
    complete(sched, out)
    assert pool.num_free_blocks == 0
    out = sched.schedule()
    assert plan(out) == [("high", 3)] and out.num_preempted == 1
    assert out.num_batched_tokens == 3  # low's token was handed back
    assert sched.waiting == [low] and low.num_preemptions == 1


def test_preemptions_are_counted_per_sequence_and_in_total():
    _, _, sched = setup()
    a, b = seq("a", 4), seq("b", 4, start=50)
    sched.add(a)
    sched.add(b)
    sched.schedule()
    for _ in range(2):  # the step's preemption path, taken by hand, then re-admission
        sched._preempt(a)
        sched.schedule()
    sched._preempt(b)
    assert (a.num_preemptions, b.num_preemptions, sched.num_preemptions) == (2, 1, 3)


def test_a_single_token_of_budget_still_admits():
    _, _, sched = setup(budget=1)
    a = seq("a", 3)
    sched.add(a)
    assert plan(sched.schedule()) == [("a", 1)]
