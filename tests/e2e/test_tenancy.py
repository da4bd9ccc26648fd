"""Tenancy end to end: several real gateway processes sharing a real
redis-server in front of the fast OpenAI test upstream.

Quotas admitted exactly within the limits under a burst spread over three
replicas; a concurrency limit that holds across replicas as counted at the
upstream; a killed replica's leases expiring within the TTL; Redis stopped mid
run; and, for each cancellation phase, the upstream seeing the abort and every
counter back at zero.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from policies.auth import hash_key
from tests.procs import (
    Process,
    openai_backend_config,
    scrape,
    start_gateway,
    start_redis,
    start_upstream,
    stopped_after,
)

LEASE_TTL_S = 1.5
# One tenant per test, so tests sharing the fleet cannot eat each other's quota.
TENANTS = {
    "rpm": {"requests_per_minute": 60, "tokens_per_minute": 20_000},
    "tpm": {"requests_per_minute": 60, "tokens_per_minute": 20_000},
    "conc": {"max_concurrent": 8},
    "kill": {"max_concurrent": 2},
    "cancel": {"max_concurrent": 10, "tokens_per_minute": 1_000_000},
    "outage": {"requests_per_minute": 1000},
    "calm": {"requests_per_minute": 10_000, "max_concurrent": 100},
    "greedy": {"tier": 1},
    "modest": {"tier": 1},
}


def key_of(tenant: str) -> str:
    return f"sk-sy-{tenant}-tenant-key"


def fleet_config(upstream: Process, slow_lane: Process, redis: Process, store: dict | None = None) -> dict:
    """Model "m" on `upstream`; model "q" on `slow_lane` with room for one
    request at a time, so a second one queues."""
    cfg = openai_backend_config(upstream)
    cfg["models"]["q"] = openai_backend_config(slow_lane, "q", name="slow", max_inflight=1)["models"]["q"]
    cfg.update(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(key_of(t)), "tenant": t} for t in TENANTS]},
            # timeout_s: the store's calls judged by their answers, not by a loaded machine's
            # speed (the 1 s default timed out a 300-request burst's calls at load 10+, and
            # fail_open then admitted past the limit)
            "quota_store": {
                "kind": "redis",
                "url": redis.url,
                "lease_ttl_s": LEASE_TTL_S,
                "timeout_s": 10.0,
                **(store or {}),
            },
            "tenants": TENANTS,
            "access_log": False,
        }
    )
    return cfg


def body(max_tokens: int = 8, stream: bool = False, model: str = "m", **sim) -> dict:
    b = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens, "stream": stream}
    if sim:
        b["sim"] = sim
    return b


def auth(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key_of(tenant)}"}


def upstream_stats(upstream: Process) -> dict:
    return httpx.get(upstream.url + "/_sim/stats", timeout=5).json()


def redis_leases(redis: Process, tenant: str) -> int:
    import redis as redis_py

    client = redis_py.Redis.from_url(redis.url)
    try:
        now_ms = int(client.time()[0] * 1000)
        return client.zcount(f"{{switchyard:{tenant}}}:t:lease", now_ms, "+inf")
    finally:
        client.close()


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[Process] = []
        self.upstream = self._keep(start_upstream(tmp))
        self.slow_lane = self._keep(start_upstream(tmp))
        self.redis = self._keep(start_redis(tmp))
        self.config = fleet_config(self.upstream, self.slow_lane, self.redis)
        self.gateways = [self.gateway(self.config) for _ in range(3)]

    def _keep(self, p: Process) -> Process:
        self.started.append(p)
        return p

    def gateway(self, cfg: dict) -> Process:
        return self._keep(start_gateway(self.tmp, cfg))

    @property
    def urls(self) -> list[str]:
        return [g.url for g in self.gateways]

    def reset_upstreams(self) -> None:
        for up in (self.upstream, self.slow_lane):
            httpx.post(up.url + "/_sim/reset", timeout=5)

    def stop(self) -> None:
        for p in reversed(self.started):
            p.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One redis-server, two upstreams and three gateway replicas for the module."""
    yield from stopped_after(Fleet(tmp_path_factory.mktemp("tenancy")))


@pytest.fixture
def gw(fleet) -> Process:
    fleet.reset_upstreams()
    return fleet.gateways[0]


async def burst(urls: list[str], tenant: str, n: int, payload: dict) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(urls[i % len(urls)] + "/v1/chat/completions", json=payload, headers=auth(tenant))
                for i in range(n)
            )
        )


# ---- quotas across replicas ---------------------------------------------------


async def test_300_concurrent_over_3_replicas_admit_exactly_60_rpm_and_calm_tenant_is_unaffected(fleet, gw):
    # 60 reservations of ~(prompt + 300) tokens fit in 20,000: the request limit binds.
    flood, calm = await asyncio.gather(
        burst(fleet.urls, "rpm", 300, body(max_tokens=300)), burst(fleet.urls, "calm", 30, body())
    )
    ok = [r for r in flood if r.status_code == 200]
    refused = [r for r in flood if r.status_code == 429]
    assert len(ok) == 60, [r.status_code for r in flood if r.status_code not in (200, 429)]
    assert len(refused) == 240
    assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in refused)
    assert all(1 <= int(r.headers["retry-after"]) <= 60 for r in refused)
    assert all(r.headers["x-ratelimit-remaining-requests"] == "0" for r in refused)
    assert sorted(int(r.headers["x-ratelimit-remaining-requests"]) for r in ok) == list(range(60))
    assert all(r.status_code == 200 for r in calm)
    assert upstream_stats(fleet.upstream)["total"] == 60 + 30
    for g in fleet.gateways:  # the shared store answered every check: no local fallback
        assert scrape(g).get('switchyard_quota_store_unavailable_total{policy="fail_open"}', 0) == 0


async def test_300_concurrent_over_3_replicas_reserve_tokens_exactly_up_to_20000_tpm(fleet, gw):
    # Each answer uses all of its max_tokens, so reconciliation gives back only
    # the few tokens the prompt estimate overshot: the token limit binds.
    flood = await burst(fleet.urls, "tpm", 300, body(max_tokens=1000, chunks=1000))
    ok = [r for r in flood if r.status_code == 200]
    refused = [r for r in flood if r.status_code == 429]
    assert len(ok) + len(refused) == 300
    remaining = [int(r.headers["x-ratelimit-remaining-tokens"]) for r in ok]
    reserved = 20_000 - max(remaining)  # the first admission's reservation
    assert 1000 < reserved < 1100  # max_tokens plus a small prompt estimate
    assert min(remaining) >= 0  # no admission ever took the window past the limit
    given_back = sum(reserved - r.json()["usage"]["total_tokens"] for r in ok)
    assert 0 <= given_back < reserved - 20_000 % reserved  # too little to fit one more
    assert len(ok) == 20_000 // reserved  # as many as fit, not one more
    assert upstream_stats(fleet.upstream)["total"] == len(ok)


async def test_concurrency_limit_of_8_holds_across_3_replicas_at_the_upstream(fleet, gw):
    statuses: list[int] = []

    async def client(i: int) -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                r = await c.post(
                    fleet.urls[i % 3] + "/v1/chat/completions", json=body(ttft_ms=150), headers=auth("conc")
                )
                statuses.append(r.status_code)
                if r.status_code == 429:
                    assert r.json()["error"]["code"] == "concurrency_limit_exceeded"
                    await asyncio.sleep(0.02)

    await asyncio.gather(*(client(i) for i in range(24)))
    stats = upstream_stats(fleet.upstream)
    assert stats["max_inflight"] == 8  # reached, never exceeded
    assert statuses.count(200) == stats["completed"] > 8
    assert set(statuses) == {200, 429}
    assert redis_leases(fleet.redis, "conc") == 0


async def test_a_killed_replica_leases_expire_within_the_ttl(fleet, gw):
    doomed = fleet.gateway(fleet.config)
    async with httpx.AsyncClient(timeout=30) as c:
        streams = []
        for _ in range(2):
            req = c.build_request(
                "POST",
                doomed.url + "/v1/chat/completions",
                json=body(max_tokens=1000, stream=True, chunks=1000, itl_ms=50),
                headers=auth("kill"),
            )
            resp = await c.send(req, stream=True)
            assert resp.status_code == 200
            chunks = resp.aiter_bytes()
            await chunks.__anext__()  # mid-stream; keep the iterator, or its finalizer closes the stream
            streams.append((resp, chunks))
        assert redis_leases(fleet.redis, "kill") == 2
        r = await c.post(gw.url + "/v1/chat/completions", json=body(), headers=auth("kill"))
        assert r.status_code == 429
        doomed.kill()  # SIGKILL: no release, no goodbye
        killed_at = time.monotonic()
        while True:
            r = await c.post(gw.url + "/v1/chat/completions", json=body(), headers=auth("kill"))
            if r.status_code == 200:
                break
            assert r.status_code == 429
            # Redis expires the lease by its own clock at most LEASE_TTL_S after the last
            # heartbeat; the margin is for this loop's requests on a loaded machine. A lease
            # that never expired would keep this at 429 until the bound.
            assert time.monotonic() - killed_at < LEASE_TTL_S + 5.0, "leases outlived their TTL"
            await asyncio.sleep(0.05)
        for resp, _ in streams:
            await resp.aclose()
    # the dead replica's other lease (same heartbeat schedule) and the survivor's finished request
    await wait_until(lambda: redis_leases(fleet.redis, "kill") == 0, timeout=5.0)


async def test_redis_stopped_mid_run_fail_open_keeps_serving_and_fail_closed_answers_503(fleet, tmp_path):
    redis = start_redis(tmp_path)  # its own, to stop without breaking the fleet
    open_gw = closed_gw = None
    try:
        open_gw = start_gateway(
            tmp_path, fleet_config(fleet.upstream, fleet.slow_lane, redis, {"on_unavailable": "fail_open"})
        )
        closed_gw = start_gateway(
            tmp_path, fleet_config(fleet.upstream, fleet.slow_lane, redis, {"on_unavailable": "fail_closed"})
        )
        async with httpx.AsyncClient(timeout=30) as c:
            for g in (open_gw, closed_gw):
                r = await c.post(g.url + "/v1/chat/completions", json=body(), headers=auth("outage"))
                assert r.status_code == 200
            redis.stop()
            r_open = await c.post(open_gw.url + "/v1/chat/completions", json=body(), headers=auth("outage"))
            r_closed = await c.post(closed_gw.url + "/v1/chat/completions", json=body(), headers=auth("outage"))
        assert r_open.status_code == 200
        assert r_closed.status_code == 503
        assert r_closed.json()["error"]["code"] == "quota_store_unavailable"
        assert "retry-after" in r_closed.headers
        # Each gateway is this test's own, and each answered one request after the stop.
        assert scrape(open_gw)['switchyard_quota_store_unavailable_total{policy="fail_open"}'] == 1
        assert scrape(closed_gw)['switchyard_quota_store_unavailable_total{policy="fail_closed"}'] == 1
    finally:
        for p in (open_gw, closed_gw, redis):
            if p is not None:
                p.stop()


# ---- fairness in the admission queue ---------------------------------------------


async def test_a_flooding_tenant_does_not_starve_a_modest_one(fleet, gw):
    """Model "q" takes one request at a time, 300 ms each. The greedy tenant keeps
    30 requests queued; the modest one still gets each request served after at
    most about one greedy turn, where a FIFO would make it wait for all 30.

    Counted at the upstream, in greedy requests it received between the moment the
    modest one was sent and the modest one itself, not in seconds nor in answers the
    client has read: a loaded machine stretches every answer alike and makes the
    client read late, the upstream's order stays."""
    answer_s = 0.3
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as c:
        stop = asyncio.Event()
        greedy_served = 0

        async def greedy_client() -> None:
            nonlocal greedy_served
            while not stop.is_set():
                r = await c.post(
                    gw.url + "/v1/chat/completions",
                    json=body(model="q", ttft_ms=answer_s * 1000),
                    headers=auth("greedy"),
                )
                greedy_served += r.status_code == 200

        flood = [asyncio.create_task(greedy_client()) for _ in range(30)]
        try:
            await wait_until(lambda: scrape(gw).get('switchyard_admission_queue_depth{model="q"}', 0) >= 25, timeout=10)
            overtaken = []
            for i in range(4):
                before = upstream_stats(fleet.slow_lane)["total"]  # requests the upstream received so far
                modest = body(model="q", ttft_ms=answer_s * 1000)
                modest["messages"][0]["content"] = f"modest {i}"
                r = await c.post(gw.url + "/v1/chat/completions", json=modest, headers=auth("modest"))
                assert r.status_code == 200
                stats = upstream_stats(fleet.slow_lane)
                bodies = [b["messages"][0]["content"] for b in stats["bodies"]]
                arrived = stats["total"] - len(bodies) + bodies.index(f"modest {i}") + 1  # its place, from 1
                overtaken.append(arrived - before - 1)
                assert bodies.count("hello") > 0 and greedy_served > 0  # the flood was on
        finally:
            stop.set()
            for t in flood:  # the greedy clients hang up; their queued requests are dropped
                t.cancel()
            await asyncio.gather(*flood, return_exceptions=True)
    # At most one greedy turn before its own, and one greedy request dispatched while the
    # modest one was on its way to the gateway's queue. FIFO would be about 25 (the greedy
    # queue depth waited for above).
    assert max(overtaken) <= 3, overtaken
    await wait_until(lambda: idle(gw), timeout=10)
    # nothing left in flight to leak into the next test's upstream counters
    await wait_until(lambda: upstream_stats(fleet.slow_lane)["inflight"] == 0)


# ---- cancellation in every phase ------------------------------------------------


async def open_and_leave(url: str, payload: dict, *, wait_for: bytes | None = None, after_s: float = 0.0) -> bytes:
    """Send a request on a raw socket, optionally read until `wait_for`, wait,
    then close the socket: a client that goes away."""
    import orjson

    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = orjson.dumps(payload)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {key_of('cancel')}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    seen = b""
    if wait_for is not None:
        while wait_for not in seen:
            chunk = await asyncio.wait_for(reader.read(4096), 10)
            assert chunk, f"connection closed before {wait_for!r}: {seen[-300:]!r}"
            seen += chunk
    await asyncio.sleep(after_s)
    writer.close()
    return seen


async def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def idle(gateway: Process) -> bool:
    m = scrape(gateway)
    return m.get("switchyard_live_tickets", -1) == 0 and all(
        v == 0
        for k, v in m.items()
        if k.startswith(
            (
                "switchyard_admission_inflight",
                "switchyard_admission_queue_depth",
                "switchyard_inflight_requests",
                "switchyard_backend_inflight",
            )
        )
    )


def cancelled(gw: Process, phase: str) -> float:
    return scrape(gw).get(f'switchyard_client_cancellations_total{{phase="{phase}"}}', 0.0)


async def test_cancel_mid_stream_aborts_upstream_and_frees_everything(fleet, gw):
    before = cancelled(gw, "mid_stream")
    await open_and_leave(
        gw.url, body(max_tokens=500, stream=True, model="q", chunks=500, itl_ms=20), wait_for=b"data:", after_s=0.1
    )
    await wait_until(lambda: upstream_stats(fleet.slow_lane)["aborted"] == 1)
    await wait_until(lambda: cancelled(gw, "mid_stream") == before + 1)
    await wait_until(lambda: idle(gw))
    assert redis_leases(fleet.redis, "cancel") == 0


async def test_cancel_non_streaming_aborts_upstream_and_frees_everything(fleet, gw):
    # A client leaving a non-streamed request is counted in `non_streaming`, whether
    # or not the upstream had started answering (gateway/serving/generation.py), and in no other.
    phases = ("non_streaming", "upstream_headers", "mid_stream")
    before = {p: cancelled(gw, p) for p in phases}
    await open_and_leave(gw.url, body(max_tokens=50, model="q", chunks=50, itl_ms=40), after_s=0.5)
    await wait_until(lambda: upstream_stats(fleet.slow_lane)["aborted"] == 1)
    await wait_until(
        lambda: {p: cancelled(gw, p) for p in phases} == {**before, "non_streaming": before["non_streaming"] + 1}
    )
    await wait_until(lambda: idle(gw))
    assert redis_leases(fleet.redis, "cancel") == 0


async def test_cancel_while_waiting_for_upstream_headers(fleet, gw):
    before = cancelled(gw, "upstream_headers")
    # The upstream sends nothing, not even headers, for 3 s.
    await open_and_leave(gw.url, body(stream=True, model="q", ttft_ms=3000), after_s=0.5)
    await wait_until(lambda: upstream_stats(fleet.slow_lane)["aborted"] == 1)
    await wait_until(lambda: cancelled(gw, "upstream_headers") == before + 1)
    await wait_until(lambda: idle(gw))
    assert redis_leases(fleet.redis, "cancel") == 0


async def test_cancel_while_queued_never_reaches_upstream(fleet, gw):
    before = cancelled(gw, "queued")
    async with httpx.AsyncClient(timeout=30) as c:
        holder = asyncio.create_task(
            c.post(gw.url + "/v1/chat/completions", json=body(model="q", ttft_ms=5000), headers=auth("cancel"))
        )
        await wait_until(lambda: upstream_stats(fleet.slow_lane)["inflight"] == 1)
        await open_and_leave(gw.url, body(model="q"), after_s=0.3)  # queued behind the holder, then gone
        # dropped while the holder still runs, not when its turn would have come
        await wait_until(lambda: cancelled(gw, "queued") == before + 1, timeout=3.0)
        assert not holder.done()
        assert scrape(gw)['switchyard_admission_queue_depth{model="q"}'] == 0
        assert (await holder).status_code == 200
    assert upstream_stats(fleet.slow_lane)["total"] == 1  # the queued request never reached it
    await wait_until(lambda: idle(gw))
    assert redis_leases(fleet.redis, "cancel") == 0
