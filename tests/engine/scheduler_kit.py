"""A scheduler over a small block pool, and a stand-in for the model runner that
marks what a step scheduled as computed (shared by the scheduler tests)."""

from __future__ import annotations

from engine.block_pool import BlockPool
from engine.kv_cache_manager import KVCacheManager
from engine.scheduler import Scheduler


def setup(num_blocks=64, block_size=4, budget=16, max_seqs=8):
    pool = BlockPool(num_blocks)
    kv = KVCacheManager(pool, block_size)
    return pool, kv, Scheduler(kv, max_num_seqs=max_seqs, max_num_batched_tokens=budget)


def complete(sched, out, token=1):
    """Every scheduled chunk computed; a sequence whose prompt is done gets `token`."""
    for chunk in out.scheduled:
        s = chunk.seq
        s.num_computed_tokens += chunk.num_tokens
        sched.kv.cache_full_blocks(s)
        if s.num_computed_tokens == s.num_tokens:
            s.token_ids.append(token)
