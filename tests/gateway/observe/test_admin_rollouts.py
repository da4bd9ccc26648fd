"""The rollout admin endpoints (gateway/observe/admin_rollouts.py) over ASGI, on a real
controller and store: the admin key's rules, 404 / 400 / 409, and the actions."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.config.schema import parse_config
from gateway.lifecycle.rollout import RolloutController
from gateway.observe.admin_rollouts import RolloutAdmin
from gateway.observe.rollout_metrics import RolloutMetrics
from policies.api_keys import hash_key
from policies.rollout_state import Plan
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_store import RolloutStoreUnavailable
from tests.manual_clock import Clock

ADMIN = {"Authorization": "Bearer admin-key"}
PLANS = {"org/m": Plan(rollout_id="r1", steps=(0.1, 1.0), auto_start=False, window_s=2.0)}


class DownStore(MemoryRolloutStore):
    """The shared store while `down` is set: every read fails as an outage does."""

    down = False

    async def ensure(self, model, rollout_id, now):
        if self.down:
            raise RolloutStoreUnavailable("connection refused")
        return await super().ensure(model, rollout_id, now)


def app_of(config_data, store=None):
    config = parse_config(config_data)
    clock = Clock(1001.0)
    controller = RolloutController(
        store or MemoryRolloutStore(clock), lambda: PLANS, RolloutMetrics(CollectorRegistry()), clock=clock
    )
    admin = RolloutAdmin(lambda: config, controller)
    routes = [Route(path, endpoint, methods=methods) for path, endpoint, methods in admin.routes()]
    return Starlette(routes=routes)


@pytest.fixture
async def client():
    app = app_of({"admin": {"api_keys": [{"sha256": hash_key("admin-key"), "name": "ops"}]}})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        yield c


async def test_no_admin_key_is_401_and_no_admin_api_is_404(client):
    for method, path in (
        ("GET", "/admin/rollouts"),
        ("GET", "/admin/rollouts/org/m"),
        ("POST", "/admin/rollouts/org/m/start"),
    ):
        r = await client.request(method, path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = await client.request(method, path, headers={"Authorization": "Bearer not-it"})
        assert r.status_code == 401
    off = app_of({})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=off), base_url="http://gw") as c:
        assert (await c.get("/admin/rollouts", headers=ADMIN)).status_code == 404


async def test_list_show_and_the_actions(client):
    index = (await client.get("/admin/rollouts", headers=ADMIN)).json()
    assert index["object"] == "list" and set(index) == {"object", "data"}
    listed = index["data"]
    assert listed == [
        {
            "model": "org/m",
            "rollout_id": "r1",
            "phase": "unknown",
            "step": None,
            "candidate_share": 0.0,
            "mirror_share": 0.0,
        }
    ]
    shown = (await client.get("/admin/rollouts/org/m", headers=ADMIN)).json()
    assert shown["state"]["phase"] == "pending" and shown["steps"] == [0.1, 1.0] and shown["evidence"] == []
    started = await client.post("/admin/rollouts/org/m/start", headers=ADMIN)
    assert started.status_code == 200
    assert started.json()["state"]["phase"] == "step" and started.json()["candidate_share"] == 0.1
    assert "start by ops" in started.json()["state"]["reason"]
    paused = (await client.post("/admin/rollouts/org/m/pause", headers=ADMIN)).json()
    assert paused["state"]["phase"] == "paused" and paused["candidate_share"] == 0.1
    again = await client.post("/admin/rollouts/org/m/pause", headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "rollout_state_conflict"
    assert again.json()["error"]["message"] == "the rollout is paused: nothing to pause"
    aborted = (await client.post("/admin/rollouts/org/m/abort", headers=ADMIN)).json()
    assert aborted["state"]["phase"] == "rolled_back" and aborted["candidate_share"] == 0.0
    listed = (await client.get("/admin/rollouts", headers=ADMIN)).json()["data"]
    assert listed[0]["phase"] == "rolled_back"


async def test_unknown_model_is_404_and_a_bad_action_400(client):
    r = await client.get("/admin/rollouts/nope", headers=ADMIN)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.post("/admin/rollouts/nope/start", headers=ADMIN)
    assert r.status_code == 404
    r = await client.post("/admin/rollouts/org/m/explode", headers=ADMIN)
    assert r.status_code == 400 and "start, pause, resume, promote, abort" in r.json()["error"]["message"]
    huge = "x" * 5000
    r = await client.post(f"/admin/rollouts/org/m/{huge}", headers=ADMIN)
    assert r.status_code == 400 and len(r.text) < 1000


async def test_the_store_down_is_503_and_says_traffic_keeps_its_shares():
    store = DownStore(Clock(1001.0))
    app = app_of({"admin": {"api_keys": [{"sha256": hash_key("admin-key"), "name": "ops"}]}}, store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        store.down = True
        for r in (
            await c.get("/admin/rollouts/org/m", headers=ADMIN),
            await c.post("/admin/rollouts/org/m/start", headers=ADMIN),
        ):
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            error = r.json()["error"]
            assert error["code"] == "rollout_store_unavailable" and "keeps the last known shares" in error["message"]
        store.down = False
        assert (await c.post("/admin/rollouts/org/m/start", headers=ADMIN)).status_code == 200
