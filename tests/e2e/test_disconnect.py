"""A client that leaves frees everything, upstream included, in every phase."""

from __future__ import annotations

import re
import threading

import httpx
import pytest

from tests.procs import eventually

MSG = [{"role": "user", "content": "hi"}]


def stats(upstream) -> dict:
    return httpx.get(upstream.url + "/_sim/stats").json()


def metric(gateway, name: str, **labels) -> float:
    text = httpx.get(gateway.url + "/metrics").text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


PHASES = ("queued", "upstream_headers", "retry_backoff", "mid_stream", "non_streaming")


def cancellations(gateway) -> dict[str, float]:
    return {p: metric(gateway, "switchyard_client_cancellations_total", phase=p) for p in PHASES}


def counted_in(gateway, before: dict[str, float], phase: str) -> bool:
    """The one cancellation since `before` was counted in `phase`, and in no other
    (the module's gateway is shared, so counts are compared, not read absolutely)."""
    after = cancellations(gateway)
    return after == {**before, phase: before[phase] + 1}


@pytest.fixture(autouse=True)
def reset(upstream):
    httpx.post(upstream.url + "/_sim/reset")


def test_disconnect_mid_stream_aborts_upstream(gateway, upstream):
    before = cancellations(gateway)
    body = {"model": "m", "messages": MSG, "stream": True, "sim": {"chunks": 200, "itl_ms": 20}}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=10) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(3)]
        assert any(line.startswith("data: ") for line in got)
    # the client closed the connection: the upstream must see its request end early
    s = eventually(lambda: (st := stats(upstream))["aborted"] == 1 and st["inflight"] == 0 and st)
    assert s and s["completed"] == 0
    assert eventually(lambda: counted_in(gateway, before, "mid_stream")), cancellations(gateway)
    assert eventually(lambda: metric(gateway, "switchyard_inflight_requests", model="m") == 0)
    assert metric(gateway, "switchyard_backend_inflight", backend="up") == 0


def test_disconnect_while_waiting_for_first_byte(gateway, upstream):
    before = cancellations(gateway)
    body = {"model": "m", "messages": MSG, "stream": True, "sim": {"ttft_ms": 3000}}
    backlog_seen: list[float] = []

    def while_waiting() -> None:  # the prompt is on the backend's prefill backlog until its first event
        backlog_seen.append(metric(gateway, "switchyard_backend_prefill_backlog_tokens", backend="up"))

    with pytest.raises(httpx.ReadTimeout):
        timer = threading.Timer(0.25, while_waiting)
        timer.start()
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=0.5) as r:
            r.read()
    timer.join()
    s = eventually(lambda: (st := stats(upstream))["aborted"] == 1 and st)
    assert s and s["completed"] == 0
    assert eventually(lambda: counted_in(gateway, before, "upstream_headers")), cancellations(gateway)
    assert backlog_seen and backlog_seen[0] > 0
    assert eventually(lambda: metric(gateway, "switchyard_backend_prefill_backlog_tokens", backend="up") == 0)


def test_disconnect_mid_request_non_streaming(gateway, upstream):
    before = cancellations(gateway)
    body = {"model": "m", "messages": MSG, "sim": {"ttft_ms": 3000}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=0.5)
    # Aborted, not completed: the upstream saw the request end before its answer (no
    # wall-clock bound needed; an answer delivered would count as completed).
    s = eventually(lambda: (st := stats(upstream))["aborted"] == 1 and st)
    assert s and s["completed"] == 0
    assert eventually(lambda: counted_in(gateway, before, "non_streaming")), cancellations(gateway)
    assert eventually(lambda: metric(gateway, "switchyard_inflight_requests", model="m") == 0)


def test_access_log_is_json_with_request_fields(gateway):
    httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "max_tokens": 2},
        headers={"x-request-id": "log-me-1"},
    )
    import json

    def find():
        for line in gateway.log().splitlines():
            if "log-me-1" in line and line.startswith("{"):
                return json.loads(line)
        return None

    rec = eventually(find)
    assert rec["request_id"] == "log-me-1" and rec["model"] == "m" and rec["backend"] == "up"
    assert rec["status"] == 200 and rec["completion_tokens"] == 2 and rec["latency_ms"] > 0
    assert re.match(r"^\d+\.\d+$", str(rec["ts"]))
