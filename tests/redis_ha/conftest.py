"""A Redis Cluster and a Sentinel set for the tests of this directory
(tests/redis_ha/deployments.py), and the RedisTarget that reaches each."""

from __future__ import annotations

import pytest

from stores.redis_connect import RedisTarget, parse_address
from tests.procs import stopped_after
from tests.redis_ha.deployments import SERVICE, ClusterDeployment, SentinelDeployment


def cluster_target(cluster: ClusterDeployment) -> RedisTarget:
    return RedisTarget(mode="cluster", startup_nodes=tuple(parse_address(n, 0) for n in cluster.startup_nodes))


def sentinel_target(sentinel: SentinelDeployment) -> RedisTarget:
    return RedisTarget(
        mode="sentinel", sentinels=tuple(parse_address(n, 0) for n in sentinel.sentinels), service_name=SERVICE
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from stopped_after(ClusterDeployment(tmp_path_factory.mktemp("cluster")))


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    yield from stopped_after(SentinelDeployment(tmp_path_factory.mktemp("sentinel")))
