"""`serve --workers 2` on real processes: with Redis a tenant's 60 requests a minute
are exactly 60 across both workers; with the memory store each worker enforces
its share (30 of 60, 5 of 10); one scrape of /metrics shows both workers' series;
a reload (SIGHUP to the supervisor, or `POST /admin/reload` to whichever worker
answers) reaches both; SIGTERM to the supervisor drains both and it exits 0."""

from __future__ import annotations

import os
import re
import signal
import threading
from functools import partial

import httpx
import pytest

from processes import free_port
from simulators.testing import start_simulator
from tests.e2e.lifecycle_kit import ADMIN, ConfigFile, admin_config, sim_config, start_on_file, wait_for

WORKERS = 2


@pytest.fixture(scope="module")
def vllm():
    sim = start_simulator("vllm", itl_ms=10, output_tokens=1000)
    yield sim
    sim.stop()


def start_workers(tmp_path, sim, **top):
    port = free_port()
    config = sim_config(sim, "vllm", listen={"host": "127.0.0.1", "port": port}, **top)
    config_file = ConfigFile(tmp_path / "config", config)
    return config_file, config, start_on_file(tmp_path, config_file, port, "--workers", str(WORKERS))


def one_request(gw) -> int:
    """On a new connection each time, so that the kernel spreads them over the workers."""
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "count me"}]}
    return httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=30).status_code


def requests_by_worker(gw) -> dict[tuple[str, str], float]:
    """(worker, status) -> requests, from one scrape of /metrics."""
    out: dict[tuple[str, str], float] = {}
    for line in httpx.get(gw.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("switchyard_requests_total{"):
            worker = re.search(r'worker="(\d+)"', line).group(1)
            status = re.search(r'status="(\d+)"', line).group(1)
            out[(worker, status)] = out.get((worker, status), 0) + float(line.rpartition(" ")[2])
    return out


def versions_by_worker(gw) -> dict[int, int]:
    seen: dict[int, int] = {}
    for _ in range(40):
        shown = admin_config(gw)
        seen[shown["worker"]["index"]] = shown["version"]["counter"]
        if len(seen) == WORKERS:
            break
    return seen


def test_with_redis_a_tenants_limit_is_exact_across_the_workers(tmp_path, vllm, redis_server):
    _, _, gw = start_workers(
        tmp_path,
        vllm,
        quota_store={"kind": "redis", "url": redis_server.url},
        tenants={"anonymous": {"requests_per_minute": 60}},
    )
    try:
        statuses = [one_request(gw) for _ in range(75)]
        counted = requests_by_worker(gw)
    finally:
        gw.stop()
    assert "Responses API's store is in memory" not in gw.child.log()  # it follows the quota store to Redis
    assert statuses.count(200) == 60 and statuses.count(429) == 15
    served = {w: n for (w, status), n in counted.items() if status == "200"}
    assert set(served) == {"0", "1"} and sum(served.values()) == 60, counted


def test_with_the_memory_store_each_worker_enforces_its_share(tmp_path, vllm):
    _, _, gw = start_workers(tmp_path, vllm, tenants={"anonymous": {"requests_per_minute": 10}})
    try:
        statuses = [one_request(gw) for _ in range(40)]
        counted = requests_by_worker(gw)
    finally:
        gw.stop()
    # Said at start: a stored response lives in one worker.
    assert "2 workers, and the Responses API's store is in memory" in gw.child.log()
    for worker in ("0", "1"):
        reached = counted.get((worker, "200"), 0) + counted.get((worker, "429"), 0)
        assert reached >= 5, f"worker {worker} got {reached} of 40 requests: too few to judge its share"
        assert counted[(worker, "200")] == 5, counted  # 10 // 2
    assert statuses.count(200) == 10


def test_reload_and_drain_reach_both_workers(tmp_path, vllm):
    # No file watcher: only the signal and the admin call can bring a new version in.
    config_file, config, gw = start_workers(tmp_path, vllm, drain={"timeout_s": 30}, reload={"watch": False})
    try:
        assert versions_by_worker(gw) == {0: 1, 1: 1}
        config["tenants"] = {"anonymous": {"requests_per_minute": 1000}}
        config_file.swap(config)
        os.kill(gw.child.pid, signal.SIGHUP)
        wait_for(lambda: versions_by_worker(gw) == {0: 2, 1: 2}, 30, "both workers on version 2")

        config["tenants"] = {"anonymous": {"requests_per_minute": 2000}}
        config_file.swap(config)
        r = httpx.post(gw.url + "/admin/reload", headers=ADMIN, timeout=30)
        assert r.status_code == 200 and r.json()["result"] == "applied"
        wait_for(lambda: versions_by_worker(gw) == {0: 3, 1: 3}, 30, "the admin reload reached the other worker")

        # Streams open on both workers, then SIGTERM to the supervisor alone.
        bodies: list[str] = []
        opened: list[threading.Thread] = []
        # The kernel spreads connections over the SO_REUSEPORT sockets by a hash: streams are
        # opened 8 at a time until both workers hold some (8 landing on one worker happens).
        while len(opened) < 32:
            batch = [threading.Thread(target=stream, args=(gw.url, bodies)) for _ in range(8)]
            for t in batch:
                t.start()
            opened += batch
            # Every stream under way before the signal (the drain's grace is 0: one still
            # connecting would be refused, which is the drain working, not this test's case).
            by_worker = wait_for(partial(all_open, gw, len(opened)), 60, f"all {len(opened)} streams open")
            if set(by_worker) == {"0", "1"}:
                break
        assert set(by_worker) == {"0", "1"}, by_worker
        os.kill(gw.child.pid, signal.SIGTERM)
        for t in opened:
            t.join(60)
        wait_for(lambda: gw.child.poll() is not None, 30, "the supervisor exited")
        assert gw.child.poll() == 0
    finally:
        gw.stop()
    assert len(bodies) == len(opened) and all(
        '"finish_reason":"length"' in b and b.endswith("data: [DONE]\n\n") for b in bodies
    )
    log = gw.child.log()
    assert "[worker 0]: draining" in log and "[worker 1]: draining" in log


def stream(url: str, bodies: list[str]) -> None:
    body = {"model": "m", "stream": True, "max_tokens": 900, "messages": [{"role": "user", "content": "long"}]}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        bodies.append(r.read().decode())


def all_open(gw, count: int) -> dict[str, int] | None:
    """The open streams per worker once `count` streams are open in all, else None."""
    by_worker = open_streams_by_worker(gw)
    return by_worker if sum(by_worker.values()) == count else None


def open_streams_by_worker(gw) -> dict[str, int]:
    """Streams in flight per worker, from the merged /metrics."""
    open_: dict[str, int] = {}
    for line in httpx.get(gw.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("switchyard_inflight_requests{") and float(line.rpartition(" ")[2]) > 0:
            worker = re.search(r'worker="(\d+)"', line).group(1)
            open_[worker] = open_.get(worker, 0) + int(float(line.rpartition(" ")[2]))
    return open_
