"""Swapping a runtime under load, on real processes: 40 streaming clients (the
official SDK, no retries) on model "m", served by the vLLM simulator; the config
is changed to the SGLang simulator and reloaded mid-run (by `POST /admin/reload`,
by SIGHUP, or by the file watcher seeing a ConfigMap-style symlink swap). No
request fails or is cut; every request sent after the reload took effect is
answered by SGLang (each simulator writes its own text, and its `/_sim/stats`
count the same); vLLM's connections from the gateway close once its last request
is over. An invalid config is refused the same ways, and nothing changes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import pytest

from processes import free_port
from simulators.testing import start_simulator
from tests.e2e.lifecycle_kit import (
    ADMIN,
    ConfigFile,
    StreamLoad,
    admin_config,
    established_to,
    runtime_texts,
    sim_config,
    start_on_file,
    wait_for,
)

CLIENTS = 40


@pytest.fixture(scope="module")
def sims():
    vllm = start_simulator("vllm", itl_ms=10, output_tokens=12, seed=1)
    sglang = start_simulator("sglang", itl_ms=10, output_tokens=12, seed=2)
    yield {"vllm": vllm, "sglang": sglang}
    vllm.stop()
    sglang.stop()


@pytest.fixture(scope="module")
def texts(sims):
    return runtime_texts(sims)


@pytest.fixture()
def fresh(sims):
    for sim in sims.values():
        sim.reset()
    return sims


def gateway_on(tmp_path, sims, kind: str, watch: bool):
    port = free_port()
    top = {"listen": {"host": "127.0.0.1", "port": port}, "reload": {"watch": watch, "poll_interval_s": 0.2}}
    config_file = ConfigFile(tmp_path / "configmap", sim_config(sims[kind], kind, **top))
    return config_file, start_on_file(tmp_path, config_file, port), top


def access_log(gw) -> list[dict]:
    return [json.loads(line) for line in gw.child.log().splitlines() if line.startswith('{"ts"')]


def version_counter(gw) -> int:
    return admin_config(gw)["version"]["counter"]


def reload_by(how: str, gw) -> None:
    """Ask for a reload; the file was already rewritten (the watcher needs nothing)."""
    if how == "admin":
        r = httpx.post(gw.url + "/admin/reload", headers=ADMIN, timeout=30)
        assert r.status_code == 200 and r.json()["result"] == "applied", r.text
    elif how == "sighup":
        os.kill(gw.child.pid, signal.SIGHUP)


@pytest.mark.parametrize("how", ["admin", "sighup", "watch"])
async def test_a_runtime_is_swapped_under_load_without_a_failed_or_cut_request(tmp_path, fresh, texts, how):
    vllm, sglang = fresh["vllm"], fresh["sglang"]
    config_file, gw, top = gateway_on(tmp_path, fresh, "vllm", watch=how == "watch")
    load = StreamLoad(gw.url, CLIENTS)
    try:
        load.start()
        await load.until(CLIENTS, since=0.0, timeout_s=60)
        assert established_to(vllm.port) > 0  # what must close once vLLM is out

        config_file.swap(sim_config(sglang, "sglang", **top))
        await asyncio.to_thread(reload_by, how, gw)
        await asyncio.to_thread(wait_for, lambda: version_counter(gw) == 2, 30, "the new version in force")
        in_force = time.monotonic()
        await load.until(CLIENTS, since=in_force, timeout_s=60)
        answers = await load.stop()

        shown = admin_config(gw)
        backend = shown["config"]["models"]["m"]["backends"][0]
        assert backend["adapter"] == "sglang" and backend["url"] == sglang.url
        # vLLM's connections close once its last request is over.
        await asyncio.to_thread(wait_for, lambda: established_to(vllm.port) == 0, 20, "vLLM's connections closed")
    finally:
        gw.stop()
    # The access log names the version each request started under, and what served it.
    served = {(r["config_version"].split("-")[0], r["backend"]) for r in access_log(gw)}
    assert {("1", "vllm-backend"), ("2", "sglang-backend")} <= served and ("2", "vllm-backend") not in served

    failed = [a.error for a in answers if a.error or a.finish != "stop"]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed or were cut: {failed[:3]}"
    by = {kind: [a for a in answers if a.text == text] for kind, text in texts.items()}
    assert len(by["vllm"]) + len(by["sglang"]) == len(answers)
    assert all(a.started < in_force for a in by["vllm"])
    assert sum(a.started > in_force for a in by["sglang"]) >= CLIENTS
    assert by["vllm"], "the load started before the swap"
    # The runtimes saw exactly these requests, none failed or aborted.
    for kind, sim in fresh.items():
        stats = sim.stats()
        assert stats["requests_total"] == stats["completed"] == len(by[kind])
        assert stats["aborted"] == 0 and stats["failed"] == 0


@pytest.mark.parametrize("how", ["admin", "sighup", "watch"])
async def test_an_invalid_config_is_refused_and_nothing_changes(tmp_path, fresh, texts, how):
    vllm = fresh["vllm"]
    config_file, gw, top = gateway_on(tmp_path, fresh, "vllm", watch=how == "watch")
    load = StreamLoad(gw.url, 8)
    try:
        load.start()
        await load.until(8, since=0.0, timeout_s=60)
        broken = sim_config(fresh["sglang"], "sglang", **top)
        broken["models"]["m"]["backends"][0]["url"] = "ftp://nowhere"
        config_file.swap(broken)
        if how == "admin":
            r = await asyncio.to_thread(httpx.post, gw.url + "/admin/reload", headers=ADMIN, timeout=30)
            assert r.status_code == 400 and r.json()["error"]["code"] == "config_invalid"
            assert "must start with http:// or https://" in r.json()["error"]["message"]
        else:
            reload_by(how, gw)

        def refused() -> bool:
            metrics = httpx.get(gw.url + "/metrics", timeout=10).text
            return 'switchyard_config_reloads_total{result="invalid"} 1.0' in metrics

        await asyncio.to_thread(wait_for, refused, 30, "the refusal counted")
        after = time.monotonic()
        await load.until(8, since=after, timeout_s=60)
        answers = await load.stop()
        assert version_counter(gw) == 1
        log = gw.child.log()
        assert "ftp://nowhere" in log and "stays in force" in log
    finally:
        gw.stop()
    assert not [a for a in answers if a.error or a.finish != "stop"]
    assert all(a.text == texts["vllm"] for a in answers)
    assert fresh["sglang"].stats()["requests_total"] == 0
    assert vllm.stats()["requests_total"] == len(answers)


def test_the_admin_api_is_on_the_ops_listener_behind_an_admin_key(tmp_path, fresh):
    port, ops_port = free_port(), free_port()
    top = {"listen": {"host": "127.0.0.1", "port": port}, "ops": {"listen": {"host": "127.0.0.1", "port": ops_port}}}
    config_file = ConfigFile(tmp_path / "configmap", sim_config(fresh["vllm"], "vllm", **top))
    gw = start_on_file(tmp_path, config_file, port)
    ops = f"http://127.0.0.1:{ops_port}"
    try:
        assert httpx.get(gw.url + "/admin/config", headers=ADMIN).status_code == 404  # not on the main port
        assert httpx.get(ops + "/admin/config").status_code == 401
        assert httpx.post(ops + "/admin/reload", headers={"authorization": "Bearer not-the-key"}).status_code == 401
        shown = httpx.get(ops + "/admin/config", headers=ADMIN).json()
        assert shown["version"]["counter"] == 1 and shown["source"] == str(config_file.path)
        again = httpx.post(ops + "/admin/reload", headers=ADMIN).json()
        assert again["result"] == "unchanged" and again["version"] == shown["version"]
    finally:
        gw.stop()
