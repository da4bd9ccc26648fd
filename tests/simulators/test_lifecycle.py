"""Startup phases, abort recording, the CLI, and a printed throughput figure."""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

import httpx
import pytest

from simulators.cli import SIMULATE_SUBPARSERS, register
from simulators.loadcheck import run as load_run
from simulators.options import options_from_args
from simulators.testing import start_simulator
from tests.simulators.conftest import chat


@pytest.fixture(scope="module")
def plain_vllm(make_sim):
    """One default vLLM simulator shared by the tests below; each resets it first."""
    return make_sim("vllm")


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _disconnect_mid_stream(url: str, path: str = "/v1/chat/completions", **body: object) -> None:
    payload = chat("x [[sim:itl_ms=20]]", stream=True, max_tokens=60, ignore_eos=True, **body)
    with httpx.Client(base_url=url, timeout=10) as c:
        with c.stream("POST", path, json=payload) as r:
            for line in r.iter_lines():
                if '"content"' in line and '"content":""' not in line:
                    break


@pytest.mark.parametrize(
    "kind,opts",
    [
        ("vllm", {}),
        ("tgi", {}),
        ("sglang", {"disconnect_abort_delay": 0.4}),
        ("trtllm", {"disconnect_abort_delay": 0.4}),
    ],
)
def test_disconnect_mid_stream_is_recorded_as_abort(make_sim, plain_vllm, kind: str, opts: dict) -> None:
    sim = plain_vllm if kind == "vllm" else make_sim(kind, **opts)
    sim.reset()
    sent = time.time()  # before the request: its abort cannot come earlier than the delay after this
    _disconnect_mid_stream(sim.url)
    closed = time.monotonic()
    while sim.stats()["aborted"] == 0 and time.monotonic() - closed < 5:
        time.sleep(0.02)
    stats = sim.stats()
    assert stats["aborted"] == 1 and stats["aborts"][0]["how"] == "disconnect"
    if opts:
        # These runtimes notice a disconnect late. Read from the simulator's own record
        # (its clock, not this test's polling): an abort on the spot would be tens of
        # milliseconds after sending.
        assert stats["aborts"][0]["at"] - sent >= opts["disconnect_abort_delay"]
    assert stats["in_flight"] == 0 and stats["completed"] == 0
    assert stats["last_requests"][-1]["body"]["stream"] is True


def test_non_stream_disconnect_is_recorded(plain_vllm) -> None:
    sim = plain_vllm
    sim.reset()
    with pytest.raises(httpx.TimeoutException):
        httpx.post(sim.url + "/v1/chat/completions", json=chat("x [[sim:ttft_ms=2000]]"), timeout=0.3)
    deadline = time.monotonic() + 3
    while sim.stats()["aborted"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sim.stats()["aborts"][0]["how"] == "disconnect"


def test_stats_count_concurrency_and_reset(plain_vllm) -> None:
    sim = plain_vllm
    sim.reset()

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as c:
            await asyncio.gather(
                *(c.post("/v1/chat/completions", json=chat("x [[sim:ttft_ms=150]]")) for _ in range(5))
            )

    asyncio.run(burst())
    stats = sim.stats()
    assert stats["completed"] == 5 and stats["max_in_flight"] == 5 and stats["in_flight"] == 0
    assert stats["statuses"] == {"200": 5}
    sim.reset()
    assert sim.stats()["completed"] == 0 and sim.stats()["last_requests"] == []


def test_vllm_refuses_connections_while_loading() -> None:
    with start_simulator("vllm", startup_delay=1.5, wait=False) as sim:
        time.sleep(0.5)
        assert _refused(sim.port)
        sim.wait_ready(10)
        r = httpx.get(sim.url + "/health")
        assert r.status_code == 200 and r.content == b""


def test_sglang_health_is_503_during_warmup() -> None:
    # 2 s of warm-up from the bind: room for this process to ask twice on a loaded
    # machine; then the end of the warm-up is waited for as state.
    with start_simulator("sglang", warmup_delay=2.0, health_latency=0.1) as sim:
        assert httpx.get(sim.url + "/health").status_code == 503
        assert httpx.get(sim.url + "/ready").status_code == 503
        deadline = time.monotonic() + 10
        while httpx.get(sim.url + "/health").status_code != 200:
            assert time.monotonic() < deadline, "still warming up 10 s later"
            time.sleep(0.05)
        assert httpx.get(sim.url + "/ready").status_code == 200


def test_cli_registers_the_four_runtimes() -> None:
    assert set(SIMULATE_SUBPARSERS) >= {"vllm", "sglang", "trtllm", "tgi"}
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["simulate", "tgi", "--port", "9", "--tgi-version", "3.1", "--ttft-ms", "5", "--fault", "no_done"]
    )
    opts = options_from_args(args.sim_kind, args)
    assert (opts.kind, opts.port, opts.tgi_version, opts.ttft_ms, opts.fault) == ("tgi", 9, "3.1", 5.0, "no_done")
    args = parser.parse_args(["simulate", "trtllm", "--tool_parser", "qwen3", "--return_perf_metrics"])
    assert args.tool_call_parser == "qwen3" and args.return_perf_metrics
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "vllm", "--tgi-version", "3.1"])


def test_cli_fault_flag_applies_to_every_request(make_sim) -> None:
    sim = make_sim("vllm", fault="no_done")
    raw = httpx.post(sim.url + "/v1/chat/completions", json=chat(stream=True, max_tokens=2)).text
    assert "[DONE]" not in raw and '"finish_reason":"length"' in raw


def test_synthetic_throughput_is_printed(plain_vllm) -> None:
    """Throughput depends on the machine: it is printed, never asserted."""
    sim = plain_vllm
    for stream in (False, True):
        result = asyncio.run(load_run(sim.url, 400, 32, stream, 16))
        assert result["statuses"] == {200: 400}
        print(
            f"\nvllm simulator, synthetic source, stream={stream}: {result['rps']} req/s "
            f"(client and server on the same machine)"
        )


def test_max_num_seqs_queues_requests_and_reports_them_waiting(make_sim) -> None:
    sim = make_sim("vllm", max_num_seqs=1)

    async def go() -> tuple[str, list[float]]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as c:
            started = time.monotonic()

            async def one() -> float:
                await c.post("/v1/chat/completions", json=chat(f"x [[sim:ttft_ms={TTFT_MS}]]", max_tokens=1))
                return time.monotonic() - started

            def gauge(metrics: str, name: str) -> str:
                return next(line for line in metrics.splitlines() if line.startswith(f"vllm:{name}{{"))

            tasks = [asyncio.create_task(one()) for _ in range(3)]
            # Until all three arrived (state, not a fixed sleep); the first runs for
            # TTFT_MS, long beside the polling, so this is seen before it ends.
            while True:
                metrics = (await c.get("/metrics")).text
                if gauge(metrics, "num_requests_waiting").endswith(" 2.0"):
                    break
                assert time.monotonic() - started < 5, metrics
                await asyncio.sleep(0.01)
            return gauge(metrics, "num_requests_running"), sorted(await asyncio.gather(*tasks))

    TTFT_MS = 600
    running, done_at = asyncio.run(go())
    assert running.endswith(" 1.0")
    assert done_at[-1] >= 3 * TTFT_MS / 1000 * 0.95  # three requests, one at a time


@pytest.mark.parametrize(
    "kind,status,body",
    [("vllm", 401, b'{"error":"Unauthorized"}'), ("sglang", 401, b'{"error":"Unauthorized"}'), ("tgi", 401, b"")],
)
def test_api_key_rejections_have_each_runtime_shape(make_sim, kind: str, status: int, body: bytes) -> None:
    sim = make_sim(kind, api_key="k1")
    r = httpx.post(sim.url + "/v1/chat/completions", json=chat(max_tokens=1))
    assert (r.status_code, r.content) == (status, body)
    ok = httpx.post(sim.url + "/v1/chat/completions", json=chat(max_tokens=1), headers={"Authorization": "Bearer k1"})
    assert ok.status_code == 200
    assert httpx.get(sim.url + "/_sim/stats").status_code == 200


def test_in_process_simulator_serves_and_records() -> None:
    from simulators.testing import start_in_process

    with start_in_process("tgi", tgi_version="3.1") as sim:
        body = httpx.post(sim.url + "/v1/chat/completions", json=chat(max_tokens=2)).json()
        assert body["system_fingerprint"] == "3.1.1-native"
        assert sim.stats()["completed"] == 1
        assert sim.simulator.recorder.completed == 1  # the live Python object, not a copy
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url + "/health")


def test_reused_request_ids_keep_the_books_straight(plain_vllm) -> None:
    sim = plain_vllm
    sim.reset()

    async def go() -> None:
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as c:
            slow = asyncio.create_task(
                c.post("/v1/chat/completions", json=chat("x [[sim:ttft_ms=300]]"), headers={"X-Request-Id": "same"})
            )
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.TimeoutException):
                await c.post(
                    "/v1/chat/completions",
                    json=chat("x [[sim:ttft_ms=2000]]"),
                    headers={"X-Request-Id": "same"},
                    timeout=0.2,
                )
            assert (await slow).status_code == 200  # the other request with that id was not aborted

    asyncio.run(go())
    deadline = time.monotonic() + 3
    while sim.stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = sim.stats()
    assert (stats["completed"], stats["aborted"], stats["in_flight"]) == (1, 1, 0)
