"""Block pool and prefix-cache bookkeeping: exact LRU order, collisions, invariants."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.block_pool import BlockPool
from engine.kv_cache_manager import BlockCopy, ForkResult, KVCacheManager
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from tests.engine.kv_kit import computed, left_in_cache, manager, published, seq


def test_allocate_free_lru_order():
    pool = BlockPool(6)
    blocks = [pool.allocate() for _ in range(4)]
    assert [b.block_id for b in blocks] == [0, 1, 2, 3]
    pool.cache(blocks[0], 100, (1,))
    pool.cache(blocks[1], 101, (2,))
    for b in reversed(blocks):  # a request frees tail first
        pool.free(b)
    # unhashed blocks are reused first, then cached blocks, least recently freed first
    order = [pool.allocate().block_id for _ in range(6)]
    assert order[:4] == [2, 3, 4, 5]
    assert order[4:] == [1, 0]
    assert pool.num_cached_blocks == 0  # reallocation evicted both cached blocks
    pool.check_integrity()


def test_touch_revives_cached_free_block_in_o1():
    pool = BlockPool(3)
    b = published(pool, 7, (1, 2))
    pool.free(b)
    assert pool.num_free_blocks == 3
    hits = pool.cached_prefix([(7, (1, 2))])
    assert len(hits) == 1 and hits[0] is b
    pool.touch(b)
    assert pool.num_free_blocks == 2 and b.ref_count == 1
    pool.check_integrity()


def test_hash_collision_is_a_miss():
    pool = BlockPool(2)
    b = published(pool, 42, (1, 2, 3))
    assert pool.cached_prefix([(42, (9, 9, 9))]) == []
    hits = pool.cached_prefix([(42, (1, 2, 3))])
    assert len(hits) == 1 and hits[0] is b


def test_integrity_check_catches_a_leak():
    pool = BlockPool(2)
    b = pool.allocate()
    b.ref_count = 0  # a buggy free that forgot the free list
    try:
        pool.check_integrity()
    except AssertionError:
        return
    raise AssertionError("check_integrity missed a leaked block")


def test_prefix_hit_never_covers_whole_prompt():
    pool, kv = manager(8, 4)
    left_in_cache(kv, range(8))
    b = seq(range(8), "b")
    hit = kv.lookup_prefix(b)
    assert len(hit.blocks) == 1 and hit.num_tokens == 4  # 8 tokens = 2 full blocks, but the last must be computed
    c = seq(range(9), "c")
    assert len(kv.lookup_prefix(c).blocks) == 2


def test_fork_shares_full_blocks_and_copies_partial():
    pool, kv = manager(8, 4)
    parent = computed(kv, range(10))
    child = seq(range(10), "p")
    fork = kv.fork(parent, child)
    assert child.block_ids[:2] == parent.block_ids[:2]
    assert fork == ForkResult(forked=True, copies=(BlockCopy(parent.block_ids[2], child.block_ids[2]),))
    assert [b.ref_count for b in parent.blocks] == [2, 2, 1]
    kv.free(parent)
    kv.free(child)
    pool.check_integrity()
    assert pool.num_free_blocks == 8


def test_fork_of_full_blocks_copies_nothing():
    pool, kv = manager(4, 4)
    parent = computed(kv, range(8))
    child = seq(range(8), "p")
    assert kv.fork(parent, child) == ForkResult(forked=True)
    assert child.block_ids == parent.block_ids and child.num_computed_tokens == 8
    pool.check_integrity()


def test_fork_without_a_block_for_the_copy_changes_nothing():
    pool, kv = manager(3, 4)
    parent = computed(kv, range(10))  # three blocks, the last one partly filled
    child = seq(range(10), "p")
    assert kv.fork(parent, child) == ForkResult(forked=False)
    assert child.blocks == [] and child.num_computed_tokens == 0
    assert [b.ref_count for b in parent.blocks] == [1, 1, 1]
    pool.check_integrity()


def test_cached_prefix_stops_reading_at_the_first_miss():
    pool = BlockPool(4)
    first, third = pool.allocate(), pool.allocate()
    pool.cache(first, 1, (1,))
    pool.cache(third, 3, (3,))
    read = []

    def keys():
        for key in [(1, (1,)), (2, (2,)), (3, (3,))]:
            read.append(key[0])
            yield key

    hits = pool.cached_prefix(keys())
    assert len(hits) == 1 and hits[0] is first
    assert read == [1, 2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "step", "abort"]), st.integers(0, 50), st.integers(1, 12)),
        min_size=1,
        max_size=60,
    ),
    num_blocks=st.integers(4, 24),
    block_size=st.sampled_from([1, 2, 4]),
    budget=st.integers(1, 32),
)
def test_scheduler_random_workload_keeps_invariants(ops, num_blocks, block_size, budget):
    """Drive the scheduler and KV manager without a model: every step 'computes' what was
    scheduled and appends a token to finished prefills. Invariants hold after every op and
    nothing leaks at the end."""
    pool = BlockPool(num_blocks)
    kv = KVCacheManager(pool, block_size)
    sched = Scheduler(kv, max_num_seqs=4, max_num_batched_tokens=budget)
    live: dict[str, Sequence] = {}
    max_tokens_per_seq = num_blocks * block_size
    counter = 0

    def check():
        pool.check_integrity()
        held = {}
        for s in sched.running:
            for bid in s.block_ids:
                held[bid] = held.get(bid, 0) + 1
        for b in pool.blocks:
            assert b.ref_count == held.get(b.block_id, 0)
        for s in sched.waiting:
            assert not s.blocks and s.num_computed_tokens == 0

    def step():
        out = sched.schedule()
        for chunk in out.scheduled:
            seq = chunk.seq
            seq.num_computed_tokens += chunk.num_tokens
            kv.cache_full_blocks(seq)
            if seq.num_computed_tokens == seq.num_tokens:
                seq.token_ids.append(seq.token_ids[-1] % 7)
                if seq.num_tokens >= min(seq.num_prompt_tokens + 4, max_tokens_per_seq):
                    sched.remove(seq)
                    live.pop(seq.request_id, None)

    for op, a, b in ops:
        if op == "add":
            length = min(1 + a % 20, max_tokens_per_seq - 4)
            if length < 1:
                continue
            tokens = [(a + i) % 5 for i in range(length)]  # small alphabet: many cache hits
            seq = Sequence(f"s{counter}", 0, tokens, SamplingParams(), priority=b % 3)
            counter += 1
            live[seq.request_id] = seq
            sched.add(seq)
        elif op == "step":
            for _ in range(b):
                step()
        elif live:
            rid = sorted(live)[a % len(live)]
            sched.remove(live.pop(rid))
        check()
    for _ in range(10_000):
        if not sched.has_unfinished():
            break
        step()
        check()
    assert not sched.has_unfinished()
    assert all(s.status is SequenceStatus.FINISHED for s in live.values()) or not live
    assert pool.num_free_blocks == num_blocks


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "add", "step", "abort"]), st.integers(0, 1000)), min_size=1, max_size=25
    )
)
def test_engine_random_adds_steps_aborts_leak_nothing(llama_dir, ops):
    """The real engine (model included) under random arrivals, n > 1, aborts and a pool
    small enough to preempt: integrity after every operation, every block back at the end."""
    from engine.llm_engine import LLMEngine

    engine = LLMEngine(llama_dir[0], block_size=4, num_blocks=20, max_num_batched_tokens=24, max_num_seqs=4)
    live: list[str] = []
    for i, (op, x) in enumerate(ops):
        if op == "add":
            prompt = [(x + j) % 7 + 3 for j in range(1 + x % 30)]  # small alphabet: shared prefixes
            params = SamplingParams(
                max_tokens=1 + x % 12, n=1 + x % 3, temperature=(x % 2) * 0.8, seed=x, ignore_eos=True
            )
            engine.add_request(f"r{i}", prompt, params, priority=x % 2)
            live.append(f"r{i}")
        elif op == "step":
            for _ in range(1 + x % 4):
                engine.step()
        elif live:
            engine.abort_request(live.pop(x % len(live)))
        engine.check_integrity()
    while engine.has_unfinished_requests():
        engine.step()
        engine.check_integrity()
    assert engine.pool.num_free_blocks == engine.pool.num_blocks
    assert not engine.scheduler.running and not engine.scheduler.waiting
