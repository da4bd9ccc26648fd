"""What gateway/lifecycle/rollout.py makes of a config: the shared store (the quota store's
Redis deployment, or memory), the warning to several workers with the state in memory, and
each rollout's plan and id (what changes it and what does not)."""

from __future__ import annotations

from gateway.config.schema import parse_config
from gateway.lifecycle.rollout import plans_of, rollout_store, workers_warning
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore

VLLM = {"adapter": "vllm", "url": "http://127.0.0.1:8000"}


def model(candidate_options=None, stable_options=None, rollout=True) -> dict:
    backends = [
        {"name": "old", **VLLM, "options": stable_options or {}},
        {"name": "new", **VLLM, "track": "candidate", "options": candidate_options or {}},
    ]
    if not rollout:
        return {"backends": backends[:1]}
    return {"backends": backends, "rollout": {"steps": [0.1, 1.0]}}


async def test_the_store_is_the_quota_stores_redis_or_memory():
    redis = parse_config(
        {"quota_store": {"kind": "redis", "url": "redis://127.0.0.1:1/0", "key_prefix": "gw", "timeout_s": 0.3}}
    )
    store = rollout_store(redis)
    try:
        assert isinstance(store, RedisRolloutStore) and store.prefix == "gw"
        assert store.redis.target.url == "redis://127.0.0.1:1/0" and store.redis.pool_wait_s == 0.3
    finally:
        await store.aclose()
    assert isinstance(rollout_store(parse_config({})), MemoryRolloutStore)


def test_the_workers_warning_names_every_model_under_rollout():
    config = parse_config({"workers": 2, "models": {"b": model(), "a": model(), "plain": model(rollout=False)}})
    warning = workers_warning(config)
    assert warning is not None and "each worker runs its own rollout of a, b (its own" in warning


def test_each_model_with_a_rollout_block_has_a_plan_after_one_without():
    plans = plans_of(parse_config({"models": {"plain": model(rollout=False), "m": model()}}))
    assert list(plans) == ["m"] and plans["m"].steps == (0.1, 1.0)
    assert len(plans["m"].rollout_id) == 12 and int(plans["m"].rollout_id, 16) >= 0


def rollout_id(**kwargs) -> str:
    return plans_of(parse_config({"models": {"m": model(**kwargs)}}))["m"].rollout_id


def test_the_rollout_id_follows_the_candidate_and_not_the_stable_backend_or_key_order():
    base = rollout_id(candidate_options={"a": 1, "b": 2})
    assert rollout_id(candidate_options={"b": 2, "a": 1}) == base  # the same settings, written in another order
    assert rollout_id(candidate_options={"a": 1, "b": 2}, stable_options={"x": 1}) == base
    assert rollout_id(candidate_options={"a": 1, "b": 3}) != base
