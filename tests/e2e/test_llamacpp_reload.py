"""Swapping model "m" to llama.cpp by config reload, under streaming traffic, on real
runtimes serving the same weights: from the native engine (`make test-llamacpp`) and
from vLLM (`make test-parity`, which builds vLLM too). No request fails or is cut, and
the access log shows each runtime served requests under its own config version."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import openai
import pytest

from policies.api_keys import hash_key
from processes import VLLM_CPU_ENV, VLLM_PYTHON, free_port, vllm_server_argv
from tests.e2e.lifecycle_kit import ADMIN, ADMIN_KEY, PROMPT, ConfigFile, admin_config, start_on_file, wait_for
from tests.llamacpp_tier import backend, start_llamacpp, tiny_model
from tests.procs import Process

CLIENTS = 10


def config(model_backend: dict, port: int) -> dict:
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "admin": {"api_keys": [{"sha256": hash_key(ADMIN_KEY), "name": "test-admin"}]},
        "models": {"m": {"backends": [model_backend]}},
        # POST /admin/reload is the swap under test: the file watcher would race it to the edit
        "reload": {"watch": False},
    }


async def traffic(url: str, stop: asyncio.Event, answers: list[dict]) -> None:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)

    async def one_client() -> None:
        while not stop.is_set():
            answer: dict = {"started": time.monotonic(), "finish": None, "error": None}
            answers.append(answer)
            try:
                stream = await client.chat.completions.create(
                    model="m", messages=PROMPT, stream=True, max_tokens=16, temperature=0
                )
                async for chunk in stream:
                    for choice in chunk.choices:
                        answer["finish"] = choice.finish_reason or answer["finish"]
            except Exception as exc:  # recorded: the test says which requests failed and how
                answer["error"] = f"{type(exc).__name__}: {exc}"

    await asyncio.gather(*(one_client() for _ in range(CLIENTS)))
    await client.close()


async def swap_under_load(tmp_path, before: dict, after: dict) -> None:
    port = free_port()
    config_file = ConfigFile(tmp_path / "configmap", config(before, port))
    gw = start_on_file(tmp_path, config_file, port)
    stop, answers = asyncio.Event(), []
    try:
        load = asyncio.create_task(traffic(gw.url, stop, answers))
        await asyncio.to_thread(wait_for, lambda: sum(1 for a in answers if a["finish"]) >= CLIENTS, 120, "load")
        config_file.swap(config(after, port))
        r = await asyncio.to_thread(httpx.post, gw.url + "/admin/reload", headers=ADMIN, timeout=60)
        assert r.status_code == 200 and r.json()["result"] == "applied", r.text
        in_force = time.monotonic()
        await asyncio.to_thread(
            wait_for,
            lambda: sum(1 for a in answers if a["started"] > in_force and a["finish"]) >= 2 * CLIENTS,
            120,
            "requests served after the swap",
        )
        stop.set()
        await load
        assert admin_config(gw)["config"]["models"]["m"]["backends"][0]["adapter"] == "llamacpp"
    finally:
        stop.set()
        gw.stop()
    failed = [a for a in answers if a["error"] or a["finish"] not in ("stop", "length")]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed or were cut: {failed[:3]}"
    lines = [json.loads(line) for line in gw.child.log().splitlines() if line.startswith('{"ts"')]
    served = {(r["config_version"].split("-")[0], r["backend"]) for r in lines}
    assert {("1", before["name"]), ("2", after["name"])} <= served and ("2", before["name"]) not in served
    print(f"{len(answers)} requests, none failed, across the swap {before['adapter']} -> llamacpp")


@pytest.mark.llamacpp
async def test_native_to_llamacpp_under_traffic(tmp_path):
    model = tiny_model(tmp_path)
    server = start_llamacpp(model, tmp_path, slot_ctx=1024)
    try:
        native = {"name": "native", "adapter": "native", "model_path": str(model)}
        await swap_under_load(tmp_path, native, backend(server))
    finally:
        server.stop()


@pytest.mark.parity
async def test_vllm_to_llamacpp_under_traffic(tmp_path):
    if not VLLM_PYTHON.exists():
        pytest.fail("no .venv-vllm: run `make test-parity` (it runs scripts/install-vllm.sh first)")
    model = tiny_model(tmp_path)
    server = start_llamacpp(model, tmp_path, slot_ctx=1024)
    port = free_port()
    vllm = Process(
        vllm_server_argv(model, port, 2048), f"http://127.0.0.1:{port}", tmp_path / "vllm.log", env=VLLM_CPU_ENV
    )
    try:
        vllm.wait_ready("/health", timeout=float(os.environ.get("VLLM_START_TIMEOUT", "600")))
        before = {"name": "vllm", "adapter": "vllm", "url": vllm.url, "served_model": "tiny"}
        await swap_under_load(tmp_path, before, backend(server))
    finally:
        vllm.stop()
        server.stop()
