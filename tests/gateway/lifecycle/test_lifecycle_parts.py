"""The parts of live reconfiguration, drain and workers, each on its own: backends
reconciled with a new config, retired ones closed only once no request of an
older version is left, requests ended by a drain answered cleanly, the admin
API's key check and redaction, each worker's share of a quota, and one /metrics
made from several workers'."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from adapters.errors import GatewayError
from gateway.backends.backend_set import BackendSet, Retired
from gateway.config.schema import parse_config
from gateway.lifecycle.inflight import InFlight
from gateway.lifecycle.process import Lifecycle, shutting_down
from gateway.observe.admin import admin_key_name, redacted
from gateway.observe.worker_metrics import merged_exposition
from gateway.protection.worker_quota import WorkerShareStore, worker_share
from policies.api_keys import hash_key
from policies.quota import UNLIMITED, QuotaExceeded, ScopeLimits


def models(**urls: str) -> dict:
    return {
        "models": {
            "m": {"backends": [{"name": n, "adapter": "vllm", "url": u} for n, u in urls.items()]},
            "other": {"backends": [{"name": "o", "adapter": "vllm", "url": "http://127.0.0.1:7"}]},
        }
    }


async def test_unchanged_backends_and_pools_are_kept_changed_and_removed_ones_retired():
    bs = BackendSet(parse_config(models(a="http://127.0.0.1:1", b="http://127.0.0.1:2")))
    a, b, o = bs.backends["a"], bs.backends["b"], bs.backends["o"]
    other_pool = bs.pools["other"]
    plan = await bs.plan(parse_config(models(a="http://127.0.0.1:1", c="http://127.0.0.1:3")))
    assert {x.name for x in plan.built} == {"c"}
    assert bs.backends["b"] is b, "a plan changes nothing before it is applied"
    retired = bs.apply(plan)
    assert bs.backends["a"] is a and bs.backends["o"] is o and bs.pools["other"] is other_pool
    assert [x.name for x in bs.pools["m"].backends] == ["a", "c"]
    assert retired.backends == [b] and retired.adapters == [b.adapter]

    changed = await bs.plan(parse_config(models(a="http://127.0.0.1:4", c="http://127.0.0.1:3")))
    retired = bs.apply(changed)
    assert bs.backends["a"] is not a and bs.backends["a"].config.url == "http://127.0.0.1:4"
    assert retired.backends == [a]
    await retired.aclose()
    await bs.aclose()


async def test_a_discarded_plan_closes_only_what_was_built_for_it():
    bs = BackendSet(parse_config(models(a="http://127.0.0.1:1")))
    plan = await bs.plan(parse_config(models(a="http://127.0.0.1:1", c="http://127.0.0.1:3")))
    closed: list[str] = []
    for backend in plan.backends.values():
        backend.adapter.aclose = (lambda name: lambda: _record(closed, name))(backend.name)  # type: ignore[method-assign]
    await bs.discard(plan)
    assert closed == ["c"] and set(bs.backends) == {"a", "o"}
    await bs.aclose()


async def _record(closed: list[str], name: str) -> None:
    closed.append(name)


async def test_retired_backends_close_once_no_request_of_their_version_is_left():
    class Served:
        config = parse_config({})
        draining = refusing = False

    inflight = InFlight()
    lifecycle = Lifecycle(Served(), inflight, reloader=None)  # type: ignore[arg-type]
    closed: list[str] = []

    class Adapter:
        async def aclose(self) -> None:
            closed.append("v1")

    lifecycle.retire(1, Retired([], [Adapter()], []))  # type: ignore[list-item]

    async def request(version: int, over: asyncio.Event) -> None:
        exchange = inflight.enter(version, None)
        try:
            await over.wait()
        finally:
            inflight.leave(exchange)

    old_over, new_over = asyncio.Event(), asyncio.Event()
    old = asyncio.create_task(request(1, old_over))
    new = asyncio.create_task(request(2, new_over))
    await asyncio.sleep(0)
    await lifecycle.close_unused()
    assert closed == [] and inflight.oldest_version() == 1
    old_over.set()
    await old
    await lifecycle.close_unused()  # a request of version 2 is no reason to keep version 1's
    assert closed == ["v1"] and lifecycle.retired == []
    new_over.set()
    await new


async def cut_answer(streaming: bool | None) -> bytes:
    """What a client receives when the drain ends its request: before the answer
    (None), in the middle of a stream (True)."""
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    inflight = InFlight()

    async def request() -> None:
        exchange = inflight.enter(1, send)
        try:
            if streaming:
                headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
                await exchange.send({"type": "http.response.start", "status": 200, "headers": headers})
                await exchange.send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            assert exchange.cut
            exchange.task.uncancel()
            await exchange.end_cut(shutting_down(1))
        finally:
            inflight.leave(exchange)

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    assert await inflight.cut() == 1 and len(inflight) == 0
    await task
    if not streaming:
        assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def test_a_request_the_drain_ends_gets_an_error_never_a_silent_close():
    before = orjson.loads(await cut_answer(streaming=None))
    assert before["error"]["code"] == "gateway_shutting_down"
    mid_stream = await cut_answer(streaming=True)
    assert mid_stream.startswith(b"data: {}\n\n") and mid_stream.endswith(b"data: [DONE]\n\n")
    assert b'"code":"gateway_shutting_down"' in mid_stream


def test_admin_keys_are_their_own_and_the_api_is_off_without_them():
    off = parse_config({})
    with pytest.raises(GatewayError) as exc:
        admin_key_name(off, {"authorization": "Bearer anything"})
    assert exc.value.status == 404
    on = parse_config(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key("tenant-key"), "tenant": "t"}]},
            "admin": {"api_keys": [{"sha256": hash_key("admin-key"), "name": "ops"}]},
        }
    )
    assert admin_key_name(on, {"authorization": "Bearer admin-key"}) == "ops"
    assert admin_key_name(on, {"api-key": "admin-key"}) == "ops"
    for headers in ({}, {"authorization": "Bearer tenant-key"}, {"authorization": "Basic admin-key"}):
        with pytest.raises(GatewayError) as exc:
            admin_key_name(on, headers)
        assert exc.value.status == 401


def test_the_shown_config_leaves_secrets_out():
    config = parse_config(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key("k"), "tenant": "t"}]},
            "quota_store": {"kind": "redis", "url": "redis://app:s3cret@redis.internal:6379/0"},
            "models": {
                "m": {
                    "backends": [
                        {
                            "name": "up",
                            "adapter": "openai",
                            "url": "https://user:pw@api.example.com/v1",
                            "options": {"api_key": "sk-upstream", "Authorization": "Bearer x", "tools": True},
                        }
                    ]
                }
            },
        }
    )
    shown = redacted(config)
    text = orjson.dumps(shown).decode()
    for secret in ("s3cret", "sk-upstream", "Bearer x", ":pw@", hash_key("k")):
        assert secret not in text
    assert shown["quota_store"]["url"] == "redis://app:***@redis.internal:6379/0"
    assert shown["auth"]["api_keys"][0]["sha256"] == hash_key("k")[:12] + "…"
    assert shown["models"]["m"]["backends"][0]["options"]["tools"] is True


@pytest.mark.parametrize(
    "limit, workers, share", [(60, 2, 30), (61, 2, 30), (10, 3, 3), (1, 2, 1), (0, 2, 0), (UNLIMITED, 4, UNLIMITED)]
)
def test_a_workers_share_of_a_limit(limit, workers, share):
    assert worker_share(limit, workers) == share


async def test_each_worker_store_admits_its_share():
    store = WorkerShareStore(2)
    scopes = (ScopeLimits("t", requests_per_window=10),)
    for i in range(5):
        await store.reserve("a", scopes, 0, f"lease-{i}", 30_000)
    with pytest.raises(QuotaExceeded) as exc:
        await store.reserve("a", scopes, 0, "lease-6", 30_000)
    assert exc.value.limit == "requests" and exc.value.limit_value == 5


def worker_exposition(requests: float, inflight: float) -> str:
    registry = CollectorRegistry()
    Counter("switchyard_requests", "Requests.", ["status"], registry=registry).labels("200").inc(requests)
    Gauge("switchyard_inflight_requests", "In flight.", registry=registry).set(inflight)
    return generate_latest(registry).decode()


def test_one_scrape_shows_every_workers_series_labelled():
    text = merged_exposition({0: worker_exposition(3, 1), 1: worker_exposition(4, 0)}).decode()
    assert 'switchyard_requests_total{status="200",worker="0"} 3.0' in text
    assert 'switchyard_requests_total{status="200",worker="1"} 4.0' in text
    assert 'switchyard_inflight_requests{worker="1"} 0.0' in text
    assert text.count("# TYPE switchyard_requests_total counter") == 1
