"""gateway/observe/ops.py on scripted backends: /healthz, the process's readiness, /readyz
whole and for one model (health details redacted, each circuit), the backends' gauges of a
scrape (a backend a reload took out keeps its series), and the collectors read at scrape
time, named and described as docs/operations.md lists them."""

from __future__ import annotations

import json
from types import SimpleNamespace

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request

from adapters.base import Health
from adapters.errors import FailureKind
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.ops import OpsCollector, OpsViews, TextWorkCollector, model_health
from tests.gateway.scripted import ScriptedAdapter, always, backend_set

EJECT = {"ejection": {"consecutive_failures": 1}}


def backends():
    adapters = {name: ScriptedAdapter(name, always()) for name in ("b1", "b2", "b3")}
    return backend_set({"m": {"backends": ["b1", "b2"], **EJECT}, "n": {"backends": ["b3"]}}, adapters)


def request(query: bytes = b"") -> Request:
    return Request({"type": "http", "method": "GET", "path": "/readyz", "query_string": query, "headers": []})


async def answer(endpoint, query: bytes = b"") -> tuple[int, dict]:
    response = await endpoint(request(query))
    return response.status_code, json.loads(response.body)


def test_a_models_health_lists_each_backend_with_its_detail_redacted_and_its_circuit():
    bs = backends()
    bs.backends["b1"].health = Health(False, "connect http://u:pw@h/ failed")
    bs.backends["b2"].health = Health(True, "")
    bs.backends["b3"].health = Health(False, "")
    health = model_health(bs)
    assert health["m"].ready is True and health["n"].ready is False
    assert health["m"].backends == [
        {"backend": "b1", "healthy": False, "detail": "connect http://u:***@h/ failed", "circuit": "closed"},
        {"backend": "b2", "healthy": True, "detail": "", "circuit": "closed"},
    ]
    bs.pools["m"].ejection.record_failure("b2", FailureKind.CONNECT)
    (b2,) = [e for e in model_health(bs)["m"].backends if e["backend"] == "b2"]
    assert b2["circuit"] == "open" and b2["reason"] == "consecutive_failures"


async def test_healthz_and_the_process_readiness():
    ready = [True]
    views = OpsViews(backends(), GatewayMetrics(), lambda: ready[0])
    assert await answer(views.healthz) == (200, {"status": "ok"})
    assert await answer(views.readiness) == (200, {"status": "ready"})
    ready[0] = False
    assert await answer(views.readiness) == (503, {"status": "not_ready"})
    assert await answer(views.healthz) == (200, {"status": "ok"})


async def test_readyz_is_the_processs_readiness_with_each_models_health_beside_it():
    bs, ready = backends(), [True]
    bs.backends["b3"].health = Health(False, "down")
    views = OpsViews(bs, GatewayMetrics(), lambda: ready[0])
    status, body = await answer(views.readyz)
    assert status == 200 and body["status"] == "ready"  # a model with no healthy backend does not gate it
    assert body["models"]["n"] == {
        "ready": False,
        "backends": [{"backend": "b3", "healthy": False, "detail": "down", "circuit": "closed"}],
    }
    assert body["models"]["m"]["ready"] is True and set(body) == {"status", "models"}
    ready[0] = False
    status, body = await answer(views.readyz)
    assert status == 503 and body["status"] == "not_ready" and body["models"]["m"]["ready"] is True


async def test_readyz_for_one_model_needs_the_process_and_the_model():
    bs, ready = backends(), [True]
    bs.backends["b3"].health = Health(False, "down")
    views = OpsViews(bs, GatewayMetrics(), lambda: ready[0])
    status, body = await answer(views.readyz, b"model=m")
    assert status == 200 and body["status"] == "ready" and body["model"] == "m"
    assert [e["backend"] for e in body["backends"]] == ["b1", "b2"]
    status, body = await answer(views.readyz, b"model=n")
    assert (status, body["status"], body["model"]) == (503, "not_ready", "n")
    ready[0] = False
    assert (await answer(views.readyz, b"model=m"))[0] == 503
    status, body = await answer(views.readyz, b"model=nope")
    assert status == 404 and body["error"]["code"] == "model_not_found" and "nope" in body["error"]["message"]


def gauges(text: str, name: str) -> dict[str, float]:
    """{backend: value} of one gauge in an exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('backend="')[1].split('"')[0]] = float(value)
    return out


async def test_a_scrape_shows_each_backends_health_inflight_and_backlog_and_keeps_a_retired_ones():
    bs = backends()
    b1, b2 = bs.backends["b1"], bs.backends["b2"]
    b1.inflight, b1.backlog, b2.health = 3, 120, Health(False, "down")
    retired: list = []
    views = OpsViews(bs, GatewayMetrics(), lambda: True, lambda: retired)
    response = await views.metrics_endpoint(request())
    assert response.media_type == CONTENT_TYPE_LATEST
    text = response.body.decode()
    assert gauges(text, "switchyard_backend_healthy") == {"b1": 1, "b2": 0, "b3": 1}
    assert gauges(text, "switchyard_backend_inflight") == {"b1": 3, "b2": 0, "b3": 0}
    assert gauges(text, "switchyard_backend_prefill_backlog_tokens") == {"b1": 120, "b2": 0, "b3": 0}
    # A reload takes b1 out: it serves its last requests, then its series read 0.
    del bs.backends["b1"]
    leaving = SimpleNamespace(name="b1", inflight=2, backlog=40)
    retired[:] = [leaving, SimpleNamespace(name="b3", inflight=9, backlog=9)]  # b3 still in force
    text = views.metrics_text().decode()
    assert gauges(text, "switchyard_backend_healthy") == {"b1": 0, "b2": 0, "b3": 1}
    assert gauges(text, "switchyard_backend_inflight") == {"b1": 2, "b2": 0, "b3": 0}
    assert gauges(text, "switchyard_backend_prefill_backlog_tokens") == {"b1": 40, "b2": 0, "b3": 0}
    retired.clear()
    text = views.metrics_text().decode()
    assert gauges(text, "switchyard_backend_inflight")["b1"] == 0
    assert gauges(text, "switchyard_backend_prefill_backlog_tokens")["b1"] == 0


def families(collector) -> dict:
    return {f.name: f for f in collector.collect()}


def test_the_collector_reads_each_models_readiness_circuits_budget_and_key_reload_errors():
    bs = backends()
    bs.backends["b3"].health = Health(False, "down")
    bs.pools["m"].ejection.record_failure("b1", FailureKind.CONNECT)
    bs.pools["m"].retry_budget.refused = 4
    collector = OpsCollector(bs, lambda: SimpleNamespace(reload_errors=2))
    assert collector.describe() == []
    got = families(collector)
    described = {name: (f.type, f.documentation) for name, f in got.items()}
    assert described == {
        "switchyard_model_ready": ("gauge", "1 when at least one backend of the model is healthy."),
        "switchyard_backend_ejected": (
            "gauge",
            "1 while the outlier detector holds the backend out of the model's pool (open or half-open circuit).",
        ),
        "switchyard_backend_ejections": (
            "counter",
            "Ejections of a backend from a model's pool, by reason (consecutive_failures, error_rate, probe_failed).",
        ),
        "switchyard_retry_budget_exhausted": (
            "counter",
            "Failovers not made because the model's retry budget was spent (the client got the error).",
        ),
        "switchyard_kv_index_blocks": ("gauge", "Blocks the backend's KV-event index holds."),
        "switchyard_kv_events_batches": (
            "counter",
            "KV-event batches received from the runtime's publisher (ZMQ), replayed ones included.",
        ),
        "switchyard_kv_events_lost": (
            "counter",
            "What the KV-event feed could not trust, by kind: gap (sequence numbers skipped), restart "
            "(the numbers started again), reconnect (the connection to the publisher was made again: "
            "the index started over), undecodable (a batch not understood), replay_failed.",
        ),
        "switchyard_auth_keys_reload_errors": (
            "counter",
            "Versions of auth.api_keys_file that could not be used (the last good key set stayed in force).",
        ),
    }
    values = {
        (name, tuple(s.labels.items())): s.value
        for name, f in got.items()
        for s in f.samples
        if not s.name.endswith("_created")
    }
    assert values == {
        ("switchyard_model_ready", (("model", "m"),)): 1,
        ("switchyard_model_ready", (("model", "n"),)): 0,
        ("switchyard_backend_ejected", (("model", "m"), ("backend", "b1"))): 1,
        ("switchyard_backend_ejected", (("model", "m"), ("backend", "b2"))): 0,
        ("switchyard_backend_ejected", (("model", "n"), ("backend", "b3"))): 0,
        ("switchyard_backend_ejections", (("model", "m"), ("backend", "b1"), ("reason", "consecutive_failures"))): 1,
        ("switchyard_retry_budget_exhausted", (("model", "m"),)): 4,
        ("switchyard_retry_budget_exhausted", (("model", "n"),)): 0,
        ("switchyard_auth_keys_reload_errors", ()): 2,
    }


def test_the_text_work_collector_reads_the_pool_at_scrape_time():
    work = SimpleNamespace(waiting=lambda: 3, running=2, refused=5)
    collector = TextWorkCollector(work)  # type: ignore[arg-type]
    assert collector.describe() == []
    got = families(collector)
    assert {name: (f.type, f.documentation) for name, f in got.items()} == {
        "switchyard_native_text_work_waiting": (
            "gauge",
            "Chat-template, tokenize and detokenize pieces of the native engine's backends waiting for a worker.",
        ),
        "switchyard_native_text_work_running": (
            "gauge",
            "Pieces of the native engine's text work running on its worker threads now.",
        ),
        "switchyard_native_text_work_refused": (
            "counter",
            "Calls refused 429 tokenizer_busy: the tenant's or the pool's queue of text work was full.",
        ),
    }
    assert [s.value for f in got.values() for s in f.samples if not s.name.endswith("_created")] == [3, 2, 5]


class Index:
    def __init__(self, blocks: int, gaps: int, restarts: int, reconnects: int) -> None:
        self.blocks, self.gaps, self.restarts, self.reconnects = blocks, gaps, restarts, reconnects

    def __len__(self) -> int:
        return self.blocks


def test_the_collector_reads_each_kv_event_feed_and_its_subscribers_counts():
    bs = backends()
    stats = SimpleNamespace(batches=3, replayed_batches=2, undecodable=1, replay_failures=4)
    bs.feeds = {
        "b2": SimpleNamespace(index=Index(7, 1, 2, 3), subscriber=SimpleNamespace(stats=stats)),
        "b1": SimpleNamespace(index=Index(5, 0, 0, 1), subscriber=None),  # fed in process: no ZMQ counts
    }
    got = families(OpsCollector(bs, lambda: SimpleNamespace(reload_errors=0)))

    def samples(name):
        return [(tuple(s.labels.items()), s.value) for s in got[name].samples if not s.name.endswith("_created")]

    assert samples("switchyard_kv_index_blocks") == [((("backend", "b1"),), 5), ((("backend", "b2"),), 7)]
    assert samples("switchyard_kv_events_batches") == [((("backend", "b2"),), 5)]
    assert samples("switchyard_kv_events_lost") == [
        ((("backend", "b1"), ("kind", "gap")), 0),
        ((("backend", "b1"), ("kind", "restart")), 0),
        ((("backend", "b1"), ("kind", "reconnect")), 1),
        ((("backend", "b2"), ("kind", "gap")), 1),
        ((("backend", "b2"), ("kind", "restart")), 2),
        ((("backend", "b2"), ("kind", "reconnect")), 3),
        ((("backend", "b2"), ("kind", "undecodable")), 1),
        ((("backend", "b2"), ("kind", "replay_failed")), 4),
    ]
