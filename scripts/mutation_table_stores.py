"""The mutation table's part for stores/ (merged into scripts/mutation_table.py's MODULES,
NOTES, EXTRA_ARGS and TIMEOUTS): each store module and the fast in-process tests that judge
it. The Redis stores' tests run against a real redis-server each test starts (never a mock);
the Cluster and Sentinel runs of tests/redis_ha/ start several servers per test and are left out."""

from __future__ import annotations

# the rollout stores' shared semantics (one test body, both stores) and the controller over the memory store
ROLLOUT_STORE_TESTS = [
    "tests/stores/test_rollout_stores*.py",
    "tests/gateway/lifecycle/test_rollout_controller.py",
    "tests/gateway/observe/test_admin_rollouts.py",
]

STORES_MODULES: dict[str, list[str]] = {
    "stores/rollout_memory.py": ROLLOUT_STORE_TESTS,
    "stores/rollout_store.py": ROLLOUT_STORE_TESTS,
    "stores/rollout_redis.py": ["tests/stores/test_rollout_stores*.py"],
    # the quota stores' shared semantics (test_quota_carry.py waits out windows in real time, 4 s a test)
    "stores/quota_redis.py": [
        "tests/stores/test_quota_redis*.py",
        "tests/policies/test_quota.py",
        "tests/policies/test_quota_carry.py",
        "tests/chaos/test_redis_errors.py",
        "tests/adversity/test_units.py",
        "tests/redis_ha/test_single_server.py",
    ],
    # one server's shape: its errors (each Redis answer made real), its pool wait, a store over it;
    # the Cluster and Sentinel shapes are judged by tests/redis_ha/ (make test-redis-ha), not run here,
    # and the other stores' tests (test_quota.py, the response store's, tests/chaos/test_redis_errors.py's
    # real-time waits: half the list's time for every mutant of a call) add only time per mutant
    "stores/redis_connect.py": [
        "tests/stores/test_redis_*.py",
        "tests/stores/test_rollout_stores.py",
        "tests/redis_ha/test_single_server.py",
        "tests/gateway/config/test_redis_mutants.py",
    ],
}

STORES_NOTES: dict[str, str] = {
    "stores/quota_redis.py": "Its Lua scripts are module constants, which mutmut does not mutate: their arithmetic is "
    "judged through the shared semantics of tests/policies/test_quota*.py (both stores). 180/223 on a first run, "
    "before tests/stores/test_quota_redis_mutants.py; the survivors left are explained (survivors/mE.toml).",
    "stores/redis_connect.py": "Measured whole on 2026-12-03 (209 s): a first run with tests/chaos/test_redis_errors.py in "
    "its list reached 145 of 306 mutants in 1500 s at load 9 to 11; without it, all 306 in 1147 s (40.8%). "
    "tests/stores/test_redis_connect_shapes.py reads what each shape's client is built with (no server needed) and "
    "drives the sentinel watch's start and a cluster's slot wait against refusing ports. The Sentinel and Cluster "
    "runtime paths (_watch_master, get_master_address, _cluster_serves, the cluster probe) are judged by "
    "tests/redis_ha/ (make test-redis-ha) and explained as such in survivors/mp.toml.",
}
STORES_EXTRA_ARGS: dict[str, list[str]] = {}
STORES_TIMEOUTS: dict[str, tuple[float, float]] = {}
