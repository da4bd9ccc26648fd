"""Fixtures for the policy tests: one real redis-server for the whole session
(each test isolates itself with its own key prefix), and a private one for
tests that stop it."""

from __future__ import annotations

import pytest

from tests.procs import start_redis, stopped_after


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory):
    yield from stopped_after(start_redis(tmp_path_factory.mktemp("redis")))


@pytest.fixture
def private_redis(tmp_path):
    yield from stopped_after(start_redis(tmp_path))
