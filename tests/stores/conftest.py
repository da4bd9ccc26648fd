"""The rollout stores' fixtures: a settable clock, and one store of each kind (the same
test body runs on both; Redis a real server the test starts)."""

from __future__ import annotations

import pytest

from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "redis"])
async def store(request):
    if request.param == "memory":
        yield MemoryRolloutStore()
        return
    redis = request.getfixturevalue("redis_server")
    s = RedisRolloutStore(redis.url, key_prefix="t")
    yield s
    await s.aclose()
