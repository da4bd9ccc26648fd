"""gateway/app.py's wiring, seen from outside: which part each collaborator reaches,
pinned through what a client, an operator or the metrics see. Driven in process as in
test_app_parts.py (HotPath through httpx's ASGI transport; backends at a dead port, or
a runtime simulator on a thread where an answer is needed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.app import Gateway, HotPath, create_app
from gateway.config.schema import parse_config
from gateway.lifecycle.reload import ConfigSource
from gateway.lifecycle.workers import WorkerSlot
from gateway.observe.otel_trace import OtelTracing
from policies.auth import hash_key
from simulators.testing import start_in_process
from tests.gateway.serving.rollout_kit import Controller, rolled_out
from tests.gateway.test_app_parts import VLLM, config, lifespan, served
from tests.procs import keys_auth_config, sample_value

MSG = [{"role": "user", "content": "hi"}]
ADMIN = {"authorization": "Bearer admin-key"}
ADMIN_KEYS = {"api_keys": [{"sha256": hash_key("admin-key"), "name": "ops"}]}
DEAD = {"m": {"backends": [{"name": "b", **VLLM}], "max_retries": 0}}


@contextlib.contextmanager
def access_lines():
    """The access log's records while the block runs (the logger at INFO, as access_logger sets it)."""
    log, lines = logging.getLogger("switchyard.access"), []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(record.getMessage()))

    keep, level = Keep(), log.level
    log.addHandler(keep)
    log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        log.removeHandler(keep)
        log.setLevel(level)


def value(gw: Gateway, name: str, labels: dict) -> float | None:
    return sample_value(gw.metrics.registry, name, labels)


async def test_each_generating_route_is_traced_as_its_operation_and_a_backends_failure_counted():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with served(config(DEAD), tracing=OtelTracing(provider)) as (gw, _, client):
        for path, body in [
            ("/v1/chat/completions", {"model": "m", "messages": MSG}),
            ("/v1/completions", {"model": "m", "prompt": "hi"}),
            ("/v1/responses", {"model": "m", "input": "hi"}),
        ]:
            answer = await client.post(path, json=body)
            assert answer.status_code == 503 and answer.json()["error"]["code"] == "backend_unavailable", path
        failures = value(gw, "switchyard_backend_failures_total", {"backend": "b", "code": "backend_unavailable"})
        assert failures == 3
        # a stored response's read: traced (and recorded) by the Responses API's own routes
        missing = await client.get("/v1/responses/resp_nope")
        assert missing.status_code == 404
        assert value(gw, "switchyard_requests_total", {"backend": "-", "model": "-", "status": "404", "track": ""})
        assert "switchyard_responses_not_stored_total" in (await client.get("/metrics")).text
    servers = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    operations = [(s.attributes or {}).get("gen_ai.operation.name") for s in servers]
    assert operations == ["chat", "text_completion", "generate_content", "responses.get"]


async def test_tokenize_and_detokenize_are_recorded_and_their_backends_failure_counted():
    with access_lines() as lines:
        async with served(config(DEAD)) as (gw, _, client):
            for path, body in [
                ("/tokenize", {"model": "m", "prompt": "hi"}),
                ("/detokenize", {"model": "m", "tokens": [1]}),
            ]:
                answer = await client.post(path, json=body)
                assert answer.status_code == 503 and answer.json()["error"]["code"] == "backend_unavailable", path
            labels = {"backend": "b", "model": "m", "status": "503", "track": ""}
            assert value(gw, "switchyard_requests_total", labels) == 2
            failures = value(gw, "switchyard_backend_failures_total", {"backend": "b", "code": "backend_unavailable"})
            assert failures == 2
    assert lines == []  # access_log: false


async def test_the_access_log_and_the_tenant_label_follow_the_config():
    data = config(DEAD, access_log=True, auth=keys_auth_config({"k1": "t1"}), tenants={"t1": {}})
    with access_lines() as lines:
        async with served(data) as (gw, _, client):
            key = {"authorization": "Bearer k1"}
            await client.post("/tokenize", json={"model": "m", "prompt": "hi"}, headers=key)
            labels = {"model": "m", "status": "503", "tenant": "t1"}  # a tenant the config names: its own label
            assert value(gw, "switchyard_tenant_requests_total", labels) == 1
            version = gw.reloader.version.id
    assert [(line["tenant"], line["status"], line["config_version"]) for line in lines] == [
        ("t1", 503, version),
    ]
    assert version


def rolled_out_dead() -> dict:
    """Model `m` rolled out over a stable and a candidate backend, both at a dead port."""
    data = rolled_out(VLLM["url"], VLLM["url"])
    return {**config(data["models"]), "admin": ADMIN_KEYS}


def tracks(gw: Gateway) -> list[str]:
    """The rollout track label of each request series of model `m`."""
    [family] = [f for f in gw.metrics.registry.collect() if f.name == "switchyard_requests"]
    return [s.labels["track"] for s in family.samples if s.name.endswith("_total") and s.labels["model"] == "m"]


@pytest.mark.parametrize("candidate", [None, 1.0])
async def test_the_request_path_reads_its_shares_from_and_records_to_the_rollout_sink(candidate):
    """By default the controller (its own shares: a track either way); a sink passed in replaces it."""
    sink = Controller(candidate=candidate) if candidate is not None else None
    async with served(rolled_out_dead(), rollouts=sink) as (gw, _, client):
        answer = await client.post("/v1/chat/completions", json={"model": "m", "messages": MSG})
        assert answer.status_code == 503
        if sink is None:
            assert tracks(gw) in (["stable"], ["candidate"])
        else:
            assert tracks(gw) == ["candidate"]
            assert [(model, record.track) for model, record in sink.records] == [("m", "candidate")]


async def test_the_rollout_admin_routes_and_metrics_reach_the_controller_on_the_configs_plans():
    async with served(rolled_out_dead()) as (gw, _, client):
        listed = await client.get("/admin/rollouts", headers=ADMIN)
        assert listed.status_code == 200 and [r["model"] for r in listed.json()["data"]] == ["m"]
        shown = await client.get("/admin/rollouts/m", headers=ADMIN)
        assert shown.status_code == 200 and shown.json()["steps"] == [0.25, 0.5, 1.0]
        assert "switchyard_rollout_candidate_share" in (await client.get("/metrics")).text
        # the conformance preflight reads the config in force: a model it no longer names is not run
        assert await gw.rollouts.preflight("gone") == ("preflight: model gone is no longer configured",)


@pytest.fixture(scope="module")
def vllm():
    with start_in_process("vllm", health_latency=0.0) as sim:
        yield sim


async def test_a_mirrored_request_is_compared_through_the_sink_and_counted_and_none_while_draining(vllm):
    sink = Controller(mirror=1.0)
    async with served({**rolled_out(vllm.url, vllm.url), "reload": config()["reload"]}, rollouts=sink) as (
        gw,
        _,
        client,
    ):
        body = {"model": "m", "messages": MSG, "max_tokens": 3}
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        await sink.compared(1, timeout_s=5)
        assert value(gw, "switchyard_rollout_mirror_copies_total", {"model": "m", "result": "compared"}) == 1
        gw.draining = True  # a drain: the request is served, no copy starts
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        assert not gw.mirror.tasks and len(sink.comparisons) == 1
        for result, count in {"compared": 1, "dropped": 0, "cancelled": 0}.items():
            assert value(gw, "switchyard_rollout_mirror_copies_total", {"model": "m", "result": result}) == count


def write(path, data: dict) -> None:
    path.write_text(json.dumps(data))


async def test_an_admin_reload_and_a_signals_reload_put_the_file_in_force_and_requests_see_its_version(tmp_path):
    path = tmp_path / "gateway.json"
    first = {**config(DEAD), "access_log": True, "admin": ADMIN_KEYS}
    write(path, first)
    with access_lines() as lines:
        async with served(first, source=ConfigSource(str(path))) as (gw, _, client):
            await client.post("/tokenize", json={"model": "m", "prompt": "hi"})
            v1 = gw.reloader.version.id
            write(path, {**first, "models": {**DEAD, "n": DEAD["m"]}})
            reload = await client.post("/admin/reload", headers=ADMIN)
            assert reload.status_code == 200 and reload.json()["result"] == "applied"
            assert [m["id"] for m in (await client.get("/v1/models")).json()["data"]] == ["m", "n"]
            await client.post("/tokenize", json={"model": "n", "prompt": "hi"})
            v2 = gw.reloader.version.id
            applied = sample_value(gw.metrics.registry, "switchyard_config_reloads_total", {"result": "applied"})
            assert applied == 1
            # what SIGHUP does (gateway/http/server.py): the lifecycle reloads on its own task
            write(path, {**first, "models": {"o": DEAD["m"]}})
            gw.lifecycle.reload_soon("SIGHUP")
            async with asyncio.timeout(10):
                while gw.reloader.version.counter < 3:
                    await asyncio.sleep(0.01)
            assert [m["id"] for m in (await client.get("/v1/models")).json()["data"]] == ["o"]
    assert [(line["model"], line["config_version"]) for line in lines] == [("m", v1), ("n", v2)] and v1 != v2


async def test_a_worker_among_several_takes_its_share_of_a_quota_tells_the_supervisor_of_a_reload_and_merges_metrics(
    tmp_path,
):
    """Not started (no lifecycle tick): the supervisor here is this process, SIGHUP caught."""
    path = tmp_path / "gateway.json"
    data = {**config(DEAD), "admin": ADMIN_KEYS, "auth": keys_auth_config({"k1": "t1"})}
    data["tenants"] = {"t1": {"requests_per_minute": 2}}
    write(path, data)
    slot = WorkerSlot(index=0, count=2, supervisor_pid=os.getpid(), run_dir=str(tmp_path), port=1)
    hups: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda signum, frame: hups.append(signum))
    gw = Gateway(parse_config(data), source=ConfigSource(str(path)), worker=slot)
    try:
        transport = httpx.ASGITransport(app=HotPath(create_app(gw)))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            key = {"authorization": "Bearer k1"}
            codes = [(await client.post("/tokenize", json={"model": "m", "prompt": "hi"}, headers=key)).status_code]
            codes.append((await client.post("/tokenize", json={"model": "m", "prompt": "hi"}, headers=key)).status_code)
            assert codes == [503, 429]  # 2 a minute over 2 workers: 1 here
            shown = (await client.get("/admin/config", headers=ADMIN)).json()
            assert shown["worker"] == {"index": 0, "count": 2, "pid": os.getpid()}
            write(path, {**data, "models": {**DEAD, "n": DEAD["m"]}})
            assert (await client.post("/admin/reload", headers=ADMIN)).json()["result"] == "applied"
            metrics = (await client.get("/metrics")).text  # worker 1 has no socket: left out, counted
            assert hups == [signal.SIGHUP]
            assert 'switchyard_worker_scrape_failures_total{worker="0"} 1.0' in metrics
    finally:
        signal.signal(signal.SIGHUP, before)
        await gw.backends.aclose()


async def test_a_worker_whose_supervisor_is_gone_drains(tmp_path):
    slot = WorkerSlot(index=0, count=1, supervisor_pid=os.getpid(), run_dir=str(tmp_path), port=1)  # not our parent
    gw = Gateway(parse_config(config()), worker=slot)
    async with lifespan(HotPath(create_app(gw))):
        async with asyncio.timeout(10):
            while not gw.draining:
                await asyncio.sleep(0.01)


async def test_a_backend_a_reload_took_out_keeps_its_series_with_the_requests_that_hold_it():
    """Not started: no lifecycle tick closes what the reload retired while the test looks."""
    gw = Gateway(parse_config(config()))
    transport = httpx.ASGITransport(app=HotPath(create_app(gw)))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        await client.get("/metrics")
        await gw.apply_config(parse_config(config({"n": {"backends": [{"name": "c", **VLLM}]}})), gw.reloader.version)
        [retired] = gw.lifecycle.retired_backends()
        retired.inflight = 2  # as two requests still running on it would hold it
        await client.get("/metrics")
        assert value(gw, "switchyard_backend_inflight", {"backend": "b"}) == 2
        assert value(gw, "switchyard_backend_healthy", {"backend": "b"}) == 0
    await gw.lifecycle.aclose()
    await gw.backends.aclose()


async def test_the_model_cards_are_dated_when_the_gateway_was_built_and_the_document_has_its_version(monkeypatch):
    monkeypatch.setattr("gateway.app.gateway_version", lambda: "7.8.9")
    before = int(time.time())
    async with served(config()) as (_, _, client):
        after = int(time.time())
        created = (await client.get("/v1/models/m")).json()["created"]
        assert isinstance(created, int) and before <= created <= after
        assert (await client.get("/openapi.json")).json()["info"]["version"] == "7.8.9"
