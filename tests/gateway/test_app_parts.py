"""gateway/app.py in process: the ASGI entry point (HotPath) driven as an ASGI 3 app through
httpx's ASGI transport, its lifespan by hand, no server and no runtime (the backend's address is
never dialled). The routes it sends where (the API, the rest, the ops listener), a refusal while
stopping, a handler's bug as a 500, the model list and cards, the gateway's start and stop, a
reload's summary, the failure count and capacity it lends, and a worker's share of the metrics."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from adapters.errors import GatewayError
from gateway.app import Gateway, HotPath, create_app
from gateway.config.schema import parse_config
from gateway.lifecycle.reload import ConfigNotApplied, ConfigVersion
from gateway.lifecycle.workers import WorkerSlot
from tests.procs import keys_auth_config, sample_value

VLLM = {"adapter": "vllm", "url": "http://127.0.0.1:9"}
BASE = {"access_log": False, "reload": {"watch": False, "preflight": "off"}, "drain": {"retry_after_s": 7}}


def config(models=None, **extra) -> dict:
    models = models if models is not None else {"m": {"backends": [{"name": "b", **VLLM}]}}
    return {**BASE, "models": models, **extra}


@contextlib.asynccontextmanager
async def lifespan(hot: HotPath):
    """The app started and stopped as a server does: the ASGI lifespan protocol through HotPath."""
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(hot({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))

    async def answer() -> str:
        """The app's answer, or what ended it without one (never a wait without end)."""
        got = asyncio.ensure_future(outbox.get())
        done, _ = await asyncio.wait({got, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if got not in done:
            got.cancel()
            raise AssertionError(f"no lifespan answer: {task}")
        return got.result()["type"]

    await inbox.put({"type": "lifespan.startup"})
    assert await answer() == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert await answer() == "lifespan.shutdown.complete"
        await task


@contextlib.asynccontextmanager
async def served(data: dict, port: int = 80, **kwargs):
    gw = Gateway(parse_config(data), **kwargs)
    hot = HotPath(create_app(gw))
    async with lifespan(hot):
        transport = httpx.ASGITransport(app=hot)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://gw:{port}") as client:
            yield gw, hot, client


async def test_the_lifespan_starts_and_stops_the_gateway():
    gw = Gateway(parse_config(config()))
    hot = HotPath(create_app(gw))
    assert not gw.started and not gw.ready
    async with lifespan(hot):
        assert gw.started and gw.ready
        gw.draining = True
        assert gw.draining and not gw.ready and gw.started
    assert not gw.started


async def test_the_model_list_and_a_models_card():
    models = {
        "m": {"backends": [{"name": "b", **VLLM}], "owned_by": "acme"},
        "n": {"backends": [{"name": "c", **VLLM}]},
    }
    async with served(config(models)) as (gw, _, client):
        listed = (await client.get("/v1/models")).json()
        card = {"id": "m", "object": "model", "created": gw.started_at, "owned_by": "acme"}
        assert listed == {"object": "list", "data": [card, {**card, "id": "n", "owned_by": "switchyard"}]}
        assert (await client.get("/v1/models/m")).json() == card
        missing = await client.get("/v1/models/nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_the_models_a_key_may_not_see_are_left_out_and_no_key_is_401():
    auth = keys_auth_config({"k1": "t1"})
    models = {
        "m": {"backends": [{"name": "b", **VLLM}]},
        "n": {"backends": [{"name": "c", **VLLM}]},
    }
    async with served(config(models, auth=auth, tenants={"t1": {"models": ["m"]}})) as (_, _, client):
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.get("/v1/models/m")).status_code == 401
        key = {"authorization": "Bearer k1"}
        assert [m["id"] for m in (await client.get("/v1/models", headers=key)).json()["data"]] == ["m"]
        assert (await client.get("/v1/models/n", headers=key)).status_code == 404


async def test_a_stopping_gateway_refuses_api_requests_and_still_answers_the_rest():
    async with served(config()) as (gw, _, client):
        gw.refusing = True
        refused = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "gateway_shutting_down"
        assert refused.headers["connection"] == "close" and refused.headers["retry-after"] == "7"
        assert (await client.get("/healthz")).status_code == 200


async def test_api_requests_are_held_in_flight_and_a_handlers_bug_is_a_500(caplog):
    async with served(config()) as (gw, hot, client):
        seen = []

        async def broken(request):
            # held in flight under the version it started with (read here, asserted outside:
            # an assertion in the handler would be one more bug answered 500)
            seen.append((len(gw.inflight), gw.inflight.oldest_version()))
            raise RuntimeError("a bug")

        hot.routes["/v1/chat/completions"] = broken
        answer = await client.post("/v1/chat/completions", json={})
        assert answer.status_code == 500 and answer.json()["error"]["code"] == "internal_error"
        assert seen == [(1, gw.reloader.version.counter)] and gw.reloader.version.counter == 1
        assert len(gw.inflight) == 0
        assert "unhandled error on /v1/chat/completions" in caplog.text
        # a GET of a POST route goes through the framework: 405, OpenAI-shaped
        wrong = await client.get("/v1/chat/completions")
        assert wrong.status_code == 405 and "error" in wrong.json() and len(seen) == 1
        unknown = await client.post("/v1/nothing", json={})
        assert unknown.status_code == 404 and "/v1/chat/completions" in unknown.json()["error"]["message"]


async def test_the_ops_listener_serves_its_routes_only():
    async with served(config(ops={"listen": {"host": "127.0.0.1", "port": 9999}}), port=9999) as (_, hot, client):
        # no ops port known yet: its requests are the main listener's, which has no /metrics then
        assert (await client.get("/metrics")).status_code == 404
        assert (await client.get("/v1/models")).status_code == 200
        hot.serve_ops_on(9999)
        assert (await client.get("/metrics")).status_code == 200
        off = await client.get("/v1/models")
        assert off.status_code == 404 and "ops listener" in off.json()["error"]["message"]
    async with served(config(), port=80) as (_, hot, client):
        hot.serve_ops_on(9999)  # another port: not this request's
        assert (await client.get("/v1/models")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200  # no ops listener: served here


async def test_a_reload_says_what_it_changed():
    gw = Gateway(parse_config(config()))
    more = config(
        {
            "m": {"backends": [{"name": "b", **VLLM, "weight": 2.0}]},
            "n": {"backends": [{"name": "c", **VLLM}, {"name": "d", **VLLM}]},
        },
        access_log=True,
    )
    said = await gw.apply_config(parse_config(more), ConfigVersion(2, "abc", 0.0))
    assert said == "backends: 2 added, 0 removed, 1 changed, 0 kept"
    assert gw.config.models.keys() == {"m", "n"} and gw.recorder.access_log is not None
    fewer = config({"n": {"backends": [{"name": "c", **VLLM}, {"name": "d", **VLLM}]}})
    said = await gw.apply_config(parse_config(fewer), ConfigVersion(3, "def", 0.0))
    assert said == "backends: 0 added, 1 removed, 0 changed, 2 kept" and gw.recorder.access_log is None
    await gw.backends.aclose()


@pytest.mark.parametrize(("mode", "after"), [("refuse", "at once"), ("wait", "within 0.2 s")])
async def test_a_reload_whose_new_backend_does_not_answer_is_not_put_in_force(mode, after):
    gw = Gateway(parse_config(config()))
    reload = {"watch": False, "preflight": mode, "preflight_timeout_s": 0.2, "preflight_interval_s": 0.05}
    new = parse_config({**config({"n": {"backends": [{"name": "c", **VLLM}]}}), "reload": reload})
    with pytest.raises(ConfigNotApplied, match=f"did not answer their health check {after} "):
        await gw.apply_config(new, ConfigVersion(2, "abc", 0.0))
    assert gw.config.models.keys() == {"m"} and set(gw.backends.backends) == {"b"}
    await gw.backends.aclose()


def test_a_backends_failures_are_counted_by_code_and_a_models_capacity_lent():
    models = {"m": {"backends": [{"name": "b", **VLLM, "max_inflight": 3}, {"name": "c", **VLLM, "max_inflight": 4}]}}
    gw = Gateway(parse_config(config(models)))
    gw._count_backend_failure("b", GatewayError(502, "bad", code="upstream_error"))
    gw._count_backend_failure("b", GatewayError(503, "down"))
    registry = gw.metrics.registry
    name = "switchyard_backend_failures_total"
    assert sample_value(registry, name, {"backend": "b", "code": "upstream_error"}) == 1
    assert sample_value(registry, name, {"backend": "b", "code": "503"}) == 1
    assert gw._capacity("m") == 7 and gw._capacity("nope") is None


@pytest.mark.parametrize("count", [1, 2])
def test_one_of_several_workers_shares_its_metrics(count, tmp_path):
    slot = WorkerSlot(index=0, count=count, supervisor_pid=1, run_dir=str(tmp_path), port=1)
    gw = Gateway(parse_config(config()), worker=slot)
    if count == 1:
        assert gw.worker_metrics is None and gw.metrics_view == gw.ops.metrics_endpoint
    else:
        assert gw.worker_metrics is not None and gw.metrics_view == gw.worker_metrics.endpoint


async def test_chat_and_completions_reach_the_runtime_through_the_entry_point():
    from simulators.testing import start_in_process

    with start_in_process("vllm", health_latency=0.0) as sim:
        backend = {"name": "b", "adapter": "vllm", "url": sim.url, "served_model": "sim-model"}
        async with served(config({"m": {"backends": [backend]}})) as (_, _, client):
            chat = await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            )
            assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
            text = await client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 3})
            assert text.status_code == 200 and text.json()["object"] == "text_completion"
            answer = await client.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 16})
            assert answer.status_code == 200 and answer.json()["object"] == "response"


async def test_a_reload_is_checked_for_as_long_as_its_mode_says_and_a_refused_plan_discarded(monkeypatch):
    gw = Gateway(parse_config(config()))
    waits, discarded = [], []

    async def preflight(plan, wait_s, interval_s):
        waits.append(wait_s)
        return list(plan.built)  # every new backend down

    async def discard(plan):
        discarded.append(plan)

    monkeypatch.setattr(gw.backends, "preflight", preflight)
    monkeypatch.setattr(gw.backends, "discard", discard)
    for mode in ("refuse", "wait"):
        reload = {"watch": False, "preflight": mode, "preflight_timeout_s": 30.0}
        new = parse_config({**config({"n": {"backends": [{"name": "c", **VLLM}]}}), "reload": reload})
        with pytest.raises(ConfigNotApplied):
            await gw.apply_config(new, ConfigVersion(2, "abc", 0.0))
    assert waits == [0.0, 30.0] and len(discarded) == 2 and all(p is not None for p in discarded)

    async def refuses(config):
        raise ValueError("the quota store cannot take it")

    monkeypatch.setattr(gw.protection, "reconfigure", refuses)
    with pytest.raises(ValueError):
        await gw.apply_config(parse_config(config()), ConfigVersion(2, "abc", 0.0))
    assert len(discarded) == 3 and discarded[-1] is not None
    await gw.backends.aclose()


async def test_a_reload_retires_what_it_took_out_under_the_version_it_leaves_and_reads_its_rollouts():
    gw = Gateway(parse_config(config()))
    new = config(
        {
            "n": {
                "backends": [{"name": "c", **VLLM}, {"name": "d", **VLLM, "track": "candidate"}],
                "rollout": {"steps": [0.1, 1.0]},
            }
        }
    )
    await gw.apply_config(parse_config(new), ConfigVersion(2, "abc", 0.0))
    assert [(version, [b.name for b in r.backends]) for version, r in gw.lifecycle.retired] == [(1, ["b"])]
    assert list(gw.rollout_plans) == ["n"]
    await gw.lifecycle.close_unused()
    await gw.backends.aclose()


async def test_the_document_has_the_gateways_version_and_readyz_its_detail_where_no_ops_listener_has_it():
    from gateway.openai.api_routes import gateway_version

    async with served(config()) as (_, _, client):
        assert (await client.get("/openapi.json")).json()["info"]["version"] == gateway_version()
        assert "models" in (await client.get("/readyz")).json()
    async with served(config(ops={"listen": {"host": "127.0.0.1", "port": 9999}})) as (_, _, client):
        assert (await client.get("/readyz")).json() == {"status": "ready"}


ROUTES = [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("POST", "/admin/reload")]
ROUTES += [("GET", "/admin/config"), ("GET", "/admin/rollouts"), ("GET", "/admin/rollouts/m")]
ROUTES += [("POST", "/admin/rollouts/m/pause")]
OTHER = {"GET": "POST", "POST": "GET"}


@pytest.mark.parametrize("ops", [False, True])
async def test_each_ops_and_admin_route_answers_on_its_listener_with_its_method_only(ops):
    extra = {"ops": {"listen": {"host": "127.0.0.1", "port": 9999}}} if ops else {}
    async with served(config(**extra), port=9999) as (_, hot, client):
        if ops:
            hot.serve_ops_on(9999)
        for method, path in ROUTES:
            answer = await client.request(method, path)
            # the route's own answer (a handler's 401 or 404 included), not the framework's
            assert answer.status_code not in (405, 500) and "No route" not in answer.text, (method, path)
            if path != "/admin/rollouts/m/pause":  # a GET of it is the rollout "m/pause"'s status
                wrong = await client.request(OTHER[method], path)
                assert wrong.status_code == 405, (OTHER[method], path)
        served_here = (
            "/healthz, /readyz, /metrics and /admin/* (the ops listener)"
            if ops
            else "/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/models, "
            "/tokenize and /detokenize"
        )
        missing = await client.get("/nothing")
        assert missing.json()["error"]["message"] == f"No route GET /nothing. This gateway serves {served_here}."
