"""A reload's pre-flight on real processes (`reload.preflight`, docs/operations.md):
a valid config that points model "m" at a port where nothing listens fails no
request. With `refuse` it fails at once; with `wait` the old runtime keeps serving
until the new one answers its health check, and the reload is put in force then
(or fails after `preflight_timeout_s`). 8 streaming clients (the official SDK, no
retries) run through it all."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from processes import free_port
from simulators.testing import start_simulator
from tests.e2e.lifecycle_kit import ADMIN, ConfigFile, StreamLoad, admin_config, sim_config, start_on_file, wait_for

CLIENTS = 8


@pytest.fixture(scope="module")
def vllm():
    sim = start_simulator("vllm", itl_ms=10, output_tokens=12, seed=1)
    yield sim
    sim.stop()


def moved(sim, port: int, top: dict, **preflight) -> dict:
    """Model "m" on an SGLang runtime at `port`, under these pre-flight settings."""
    config = sim_config(sim, "sglang", **{**top, "reload": {"watch": False, **preflight}})
    config["models"]["m"]["backends"][0]["url"] = f"http://127.0.0.1:{port}"
    return config


def admin_reload(gw) -> httpx.Response:
    return httpx.post(gw.url + "/admin/reload", headers=ADMIN, timeout=60)


@pytest.mark.parametrize("mode", ["refuse", "wait"])
async def test_a_reload_to_a_dead_port_fails_no_request(tmp_path, vllm, mode):
    vllm.reset()
    port = free_port()
    top = {"listen": {"host": "127.0.0.1", "port": port}, "reload": {"watch": False}}
    config_file = ConfigFile(tmp_path / "configmap", sim_config(vllm, "vllm", **top))
    gw = start_on_file(tmp_path, config_file, port)
    load = StreamLoad(gw.url, CLIENTS)
    try:
        load.start()
        await load.until(CLIENTS, since=0.0, timeout_s=60)
        dead = free_port()
        config_file.swap(moved(vllm, dead, top, preflight=mode, preflight_timeout_s=2, preflight_interval_s=0.2))
        r = await asyncio.to_thread(admin_reload, gw)
        assert r.status_code == 500 and r.json()["error"]["code"] == "config_not_applied", r.text
        assert f"127.0.0.1:{dead}" in r.json()["error"]["message"] or "sglang-backend" in r.json()["error"]["message"]
        after = time.monotonic()
        await load.until(CLIENTS, since=after, timeout_s=60)
        answers = await load.stop()
        assert admin_config(gw)["version"]["counter"] == 1
        metrics = httpx.get(gw.url + "/metrics", timeout=10).text
        assert 'switchyard_config_reloads_total{result="failed"} 1.0' in metrics
    finally:
        gw.stop()
    failed = [a.error for a in answers if a.error or a.finish != "stop"]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed: {failed[:3]}"
    assert vllm.stats()["requests_total"] == len(answers)


async def test_wait_swaps_once_the_new_runtime_answers_and_fails_no_request(tmp_path, vllm):
    vllm.reset()
    port = free_port()
    top = {"listen": {"host": "127.0.0.1", "port": port}, "reload": {"watch": False}}
    config_file = ConfigFile(tmp_path / "configmap", sim_config(vllm, "vllm", **top))
    gw = start_on_file(tmp_path, config_file, port)
    load = StreamLoad(gw.url, CLIENTS)
    sglang = None
    try:
        load.start()
        await load.until(CLIENTS, since=0.0, timeout_s=60)
        later = free_port()
        config_file.swap(moved(vllm, later, top, preflight="wait", preflight_timeout_s=120, preflight_interval_s=0.2))
        reload = asyncio.create_task(asyncio.to_thread(admin_reload, gw))
        # Requests keep being served by vLLM while the reload waits for SGLang.
        await load.until(CLIENTS, since=time.monotonic(), timeout_s=60)
        assert not reload.done() and admin_config(gw)["version"]["counter"] == 1
        sglang = await asyncio.to_thread(start_simulator, "sglang", port=later, itl_ms=10, output_tokens=12, seed=2)
        r = await reload
        assert r.status_code == 200 and r.json()["result"] == "applied", r.text
        in_force = time.monotonic()
        await load.until(CLIENTS, since=in_force, timeout_s=60)
        answers = await load.stop()
        await asyncio.to_thread(wait_for, lambda: sglang.stats()["completed"] > 0, 10, "SGLang served")
    finally:
        gw.stop()
        if sglang is not None:
            sglang.stop()
    failed = [a.error for a in answers if a.error or a.finish != "stop"]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed: {failed[:3]}"
