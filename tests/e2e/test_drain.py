"""SIGTERM with 20 streams open, on real processes (a gateway, the vLLM simulator, a
real redis-server holding the tenant's concurrency leases): `/readyz` answers 503
at once while new requests are still served for the accept grace, then they are
refused with 503 and Retry-After; the short streams complete, the long ones end
with an error event and `data: [DONE]` when the drain's time is up (none is cut
silently); no lease is left in Redis; the process exits 0."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest
import redis

from processes import free_port
from simulators.testing import start_simulator
from tests.e2e.lifecycle_kit import ConfigFile, sim_config, start_on_file, wait_for

GRACE_S = 3.0
TIMEOUT_S = 4.0
STREAMS = 20
DONE = "data: [DONE]\n\n"


@pytest.fixture()
def vllm():
    sim = start_simulator("vllm", itl_ms=50, output_tokens=5000)
    yield sim
    sim.stop()


def lease_members(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(client.zcard(key) for key in client.scan_iter("*lease*"))
    finally:
        client.close()


class OpenStream:
    """A streamed chat request read to its end on a thread of its own, raw (SSE text)."""

    def __init__(self, url: str, max_tokens: int) -> None:
        self.body = ""
        self.status: int | None = None
        self.first_chunk = threading.Event()
        body = {"model": "m", "stream": True, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "go"}]}
        self.thread = threading.Thread(target=self._read, args=(url, body))
        self.thread.start()

    def _read(self, url: str, body: dict) -> None:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
            self.status = r.status_code
            for text in r.iter_text():
                self.body += text
                self.first_chunk.set()

    @property
    def completed(self) -> bool:
        return '"finish_reason":"length"' in self.body and '"error"' not in self.body

    @property
    def ended_with_error(self) -> bool:
        return '"code":"gateway_shutting_down"' in self.body and 'finish_reason":"length' not in self.body


def test_sigterm_drains_open_streams_releases_every_lease_and_exits_0(tmp_path, vllm, redis_server):
    port = free_port()
    top = {
        "listen": {"host": "127.0.0.1", "port": port},
        "quota_store": {"kind": "redis", "url": redis_server.url},
        "tenants": {"anonymous": {"max_concurrent": 100}},
        "drain": {"accept_grace_s": GRACE_S, "timeout_s": TIMEOUT_S},
    }
    gw = start_on_file(tmp_path, ConfigFile(tmp_path / "config", sim_config(vllm, "vllm", **top)), port)
    try:
        # Half finish within the drain's time (8 tokens, 0.4 s), half cannot (5,000 tokens, 250 s).
        streams = [OpenStream(gw.url, 8 if i % 2 else 5000) for i in range(STREAMS)]
        for s in streams:
            assert s.first_chunk.wait(30), "every stream is open before the stop"
        assert lease_members(redis_server.url) >= STREAMS // 2

        os.kill(gw.child.pid, signal.SIGTERM)
        ready = httpx.get(gw.url + "/readyz", timeout=5)
        assert ready.status_code == 503
        # Still served within the grace: the load balancer has not noticed yet.
        served = httpx.post(gw.url + "/v1/chat/completions", json=short_request(), timeout=30)
        assert served.status_code == 200, served.text

        def refused():
            r = httpx.post(gw.url + "/v1/chat/completions", json=short_request(), timeout=30)
            return r if r.status_code == 503 else None

        refusal = wait_for(refused, GRACE_S + 10, "new requests refused after the grace")
        assert refusal.headers["retry-after"] == "1" and refusal.headers["connection"] == "close"
        assert refusal.json()["error"]["code"] == "gateway_shutting_down"

        for s in streams:
            s.thread.join(60)
        assert wait_for(lambda: gw.child.poll() is not None, 30, "the process exited") and gw.child.poll() == 0
    finally:
        gw.stop()
    assert all(s.status == 200 and s.body.endswith(DONE) for s in streams)
    assert sum(s.completed for s in streams) == STREAMS // 2
    assert sum(s.ended_with_error for s in streams) == STREAMS // 2
    assert lease_members(redis_server.url) == 0
    # The upstream generations of the streams that were ended were aborted, not left running.
    wait_for(lambda: vllm.stats()["in_flight"] == 0, 10, "the runtime's cut requests aborted")


def short_request() -> dict:
    return {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "one more"}]}
