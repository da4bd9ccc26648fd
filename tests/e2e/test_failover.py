"""Failover before the first byte: a dead backend is skipped, a fallback model serves."""

from __future__ import annotations

import time

import httpx
import pytest

from processes import free_port
from tests.procs import start_gateway

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def failover_gateway(module_tmp, upstream):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config = {
        "models": {
            "m": {
                "routing": "round_robin",
                "backends": [
                    {"name": "dead", "adapter": "openai", "url": dead},
                    {"name": "live", "adapter": "openai", "url": upstream.url + "/v1", "served_model": "m"},
                ],
            },
            "only-dead": {
                "fallback": ["m"],
                "max_retries": 0,
                "backends": [{"name": "dead2", "adapter": "openai", "url": dead}],
            },
            "all-dead": {"max_retries": 1, "backends": [{"name": "dead3", "adapter": "openai", "url": dead}]},
            "slow-retry": {
                "max_retries": 2,
                "retry_backoff_s": 5,
                "backends": [{"name": "dead4", "adapter": "openai", "url": dead}],
            },
        }
    }
    p = start_gateway(module_tmp, config)
    yield p
    p.stop()


def test_dead_backend_is_skipped(failover_gateway):
    for _ in range(4):  # round robin would pick the dead one half of the time
        r = httpx.post(
            failover_gateway.url + "/v1/chat/completions", json={"model": "m", "messages": MSG, "max_tokens": 2}
        )
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "m"


def test_fallback_model_serves_and_keeps_requested_name(failover_gateway):
    r = httpx.post(
        failover_gateway.url + "/v1/chat/completions",
        json={"model": "only-dead", "messages": MSG, "max_tokens": 2, "stream": True},
    )
    assert r.status_code == 200
    assert '"model":"only-dead"' in r.text and r.text.rstrip().endswith("data: [DONE]")


def test_all_dead_is_503_with_error_envelope(failover_gateway):
    r = httpx.post(failover_gateway.url + "/v1/chat/completions", json={"model": "all-dead", "messages": MSG})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "backend_unavailable"


def test_readyz_reports_unhealthy_model_and_the_process_stays_ready(failover_gateway):
    r = httpx.get(failover_gateway.url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert r.json()["models"]["all-dead"]["ready"] is False and r.json()["models"]["m"]["ready"] is True
    dead = httpx.get(failover_gateway.url + "/readyz", params={"model": "all-dead"})
    assert dead.status_code == 503
    assert dead.json()["status"] == "not_ready"
    assert httpx.get(failover_gateway.url + "/readyz", params={"model": "m"}).status_code == 200


def test_client_leaving_during_retry_backoff_is_counted_in_that_phase(failover_gateway):
    def cancelled() -> float:
        text = httpx.get(failover_gateway.url + "/metrics").text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("switchyard_client_cancellations_total{") and 'phase="retry_backoff"' in line
        )

    before = cancelled()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            failover_gateway.url + "/v1/chat/completions", json={"model": "slow-retry", "messages": MSG}, timeout=0.5
        )
    for _ in range(60):
        if cancelled() == before + 1:
            break
        time.sleep(0.05)
    assert cancelled() == before + 1
