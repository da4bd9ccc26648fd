"""`response_store` in the config: which store a config builds, and that a reload may
not change it (the store is built at start)."""

from __future__ import annotations

import pytest

from gateway.config.response_store import workers_warning
from gateway.config.schema import ConfigError, parse_config
from gateway.lifecycle.reload import restart_only_changes
from gateway.openai.responses import MemoryResponseStore, RedisResponseStore
from gateway.openai.responses.routes import build_response_store


def store_of(data: dict):
    config = parse_config(data)
    return build_response_store(config.response_store, config.quota_store)


async def test_memory_by_default_with_its_bounds_and_ttl():
    store = store_of({"response_store": {"ttl_s": 60, "max_entries": 5}})
    assert isinstance(store, MemoryResponseStore)
    assert store.ttl_s == 60 and store.max_entries == 5


async def test_auto_follows_a_redis_quota_store_with_its_prefix():
    store = store_of({"quota_store": {"kind": "redis", "url": "redis://10.0.0.9:6379/2", "key_prefix": "acme"}})
    assert isinstance(store, RedisResponseStore)
    assert store.prefix == "acme" and store.redis.target.url == "redis://10.0.0.9:6379/2"
    await store.aclose()


async def test_an_explicit_store_overrides_the_quota_stores_choice():
    quota = {"kind": "redis", "url": "redis://10.0.0.9:6379/2"}
    assert isinstance(store_of({"quota_store": quota, "response_store": {"kind": "memory"}}), MemoryResponseStore)
    own = store_of({"response_store": {"kind": "redis", "url": "redis://10.0.0.7:6379/1", "key_prefix": "r"}})
    assert isinstance(own, RedisResponseStore) and own.redis.target.url == "redis://10.0.0.7:6379/1"
    assert own.prefix == "r"
    await own.aclose()


def test_bad_store_settings_are_refused():
    with pytest.raises(ConfigError, match="ttl_s"):
        parse_config({"response_store": {"ttl_s": 0}})
    with pytest.raises(ConfigError, match="response_store"):
        parse_config({"response_store": {"kind": "disk"}})


def test_a_reload_may_not_change_the_store():
    before = parse_config({})
    after = parse_config({"response_store": {"kind": "memory", "ttl_s": 5}})
    assert "response_store" in restart_only_changes(before, after)


def test_serve_warns_when_workers_would_each_keep_their_own_store():
    def warning(data: dict, workers: int) -> str | None:
        config = parse_config(data)
        return workers_warning(config.response_store, config.quota_store.kind, workers)

    said = warning({}, 4)
    assert said is not None and "4 workers" in said and "404" in said and "redis" in said
    assert warning({}, 1) is None  # one process: one store
    assert warning({"quota_store": {"kind": "redis", "url": "redis://10.0.0.9:6379"}}, 4) is None  # auto follows
    assert warning({"response_store": {"kind": "redis", "url": "redis://10.0.0.7:6379"}}, 4) is None
    redis_quota_memory_store = {
        "quota_store": {"kind": "redis", "url": "redis://h:6379"},
        "response_store": {"kind": "memory"},
    }
    assert warning(redis_quota_memory_store, 2) is not None
