"""What precise routing hears, on /metrics: a gateway whose backend is a vLLM double
publishing KV-cache events over ZMQ counts the batches, shows the blocks its index
holds, and counts a publisher that starts again (the double killed and started anew
on the same ports) as a reconnect, after which the index holds only what the new
process announced."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from processes import free_port
from simulators.testing import start_simulator
from tests.procs import eventually, scrape, start_gateway


def sim_flags(pub: int, replay: int) -> dict:
    events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{pub}",
        "replay_endpoint": f"tcp://*:{replay}",
        "topic": "",
    }
    return {"kv_events_config": json.dumps(events), "enable_prompt_tokens_details": True}


def series(samples: dict[str, float], name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return samples.get(f"{name}{{{want}}}")


def complete(gateway_url: str, ids: list[int]) -> None:
    body = {"model": "m", "prompt": ids, "max_tokens": 1}
    r = httpx.post(gateway_url + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 200, r.text


def test_kv_events_batches_blocks_and_a_publisher_restart_are_on_metrics(tmp_path: Path) -> None:
    pub, replay, http_port = free_port(), free_port(), free_port()
    sim = start_simulator("vllm", port=http_port, **sim_flags(pub, replay))
    backend = {
        "name": "v0",
        "adapter": "vllm",
        "url": sim.url,
        "served_model": "sim-model",
        "kv_events": {"endpoint": f"tcp://127.0.0.1:{pub}", "replay_endpoint": f"tcp://127.0.0.1:{replay}"},
    }
    gateway = start_gateway(tmp_path, {"models": {"m": {"backends": [backend], "routing": "precise"}}})
    try:
        eventually(lambda: series(scrape(gateway), "switchyard_kv_index_blocks", backend="v0") == 0, 10)
        complete(gateway.url, list(range(1000, 1064)))  # 4 blocks of 16
        assert eventually(lambda: series(scrape(gateway), "switchyard_kv_index_blocks", backend="v0") == 4, 10)
        samples = scrape(gateway)
        assert series(samples, "switchyard_kv_events_batches_total", backend="v0") == 1
        assert series(samples, "switchyard_kv_events_lost_total", backend="v0", kind="gap") == 0
        assert series(samples, "switchyard_kv_events_lost_total", backend="v0", kind="restart") == 0

        # The double dies and a new one (an empty cache) takes its ports. Its numbers start
        # at 0 again; the gateway takes the connection made again as a new start.
        sim.stop()
        sim = start_simulator("vllm", port=http_port, **sim_flags(pub, replay))
        samples: dict[str, float] = {}

        def kv(name: str, **labels: str) -> float | None:
            samples.update(scrape(gateway))
            return series(samples, name, backend="v0", **labels)

        assert eventually(lambda: kv("switchyard_kv_events_lost_total", kind="reconnect") == 1, 10), samples
        assert kv("switchyard_kv_index_blocks") == 0  # the dead process's blocks are forgotten
        complete(gateway.url, list(range(5000, 5032)))  # 2 blocks, from the new process
        assert eventually(lambda: kv("switchyard_kv_index_blocks") == 2, 10), samples
        assert kv("switchyard_kv_events_lost_total", kind="gap") == 0
    finally:
        gateway.stop()
        sim.stop()
