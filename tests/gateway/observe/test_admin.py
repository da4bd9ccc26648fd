"""gateway/observe/admin.py: the admin key's rule (off: 404, no key or a wrong one: 401, each
with its message) and the two views over ASGI on a scripted reloader: each reload result's
status and code, the fan-out to other workers after an applied reload only, and the config
shown with its version, source and worker."""

from __future__ import annotations

import os

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.lifecycle.reload import ConfigSource, ConfigVersion, ReloadOutcome, ReloadResult
from gateway.observe.admin import AdminViews, admin_key_name
from policies.api_keys import hash_key

KEYS = {"admin": {"api_keys": [{"sha256": hash_key("admin-key"), "name": "ops"}, {"sha256": hash_key("k2")}]}}
ADMIN = {"Authorization": "Bearer admin-key"}
VERSION = ConfigVersion(3, "abcdef012345", 1700000000.1234)


def refused(config, headers) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        admin_key_name(config, headers)
    return exc.value


def test_no_admin_keys_is_404_saying_why():
    err = refused(parse_config({}), {"authorization": "Bearer admin-key"})
    assert (err.status, err.code) == (404, "not_found")
    assert err.message == "The admin API is off: the config names no admin.api_keys."


def test_no_key_or_a_wrong_one_is_401_saying_how_to_send_it():
    config = parse_config(KEYS)
    for headers in (
        {},
        {"authorization": "Bearer nope"},
        {"authorization": "Bearer"},
        {"authorization": "Basic admin-key"},
        {"authorization": "Token x admin-key"},
        {"api-key": "  "},
    ):
        err = refused(config, headers)
        assert (err.status, err.code) == (401, "invalid_api_key"), headers
        assert err.message == "An admin key is needed: send it as 'Authorization: Bearer <key>'."


def test_a_request_without_a_key_is_refused_whatever_the_keys_are():
    # No stand-in credential for a missing header can match a configured key.
    for key in ("XXXX", "", " "):
        config = parse_config({"admin": {"api_keys": [{"sha256": hash_key(key), "name": "odd"}]}})
        assert refused(config, {}).status == 401


def test_the_key_is_named_or_shown_by_its_digests_first_twelve():
    config = parse_config(KEYS)
    assert admin_key_name(config, {"authorization": "bearer  admin-key "}) == "ops"
    assert admin_key_name(config, {"api-key": " k2 "}) == hash_key("k2")[:12]


class Reloader:
    def __init__(self, result: ReloadResult) -> None:
        self.result = result
        self.triggers: list[str] = []
        self.version = VERSION
        self.source = ConfigSource("/etc/switchyard.yaml")
        tenant_key = {"sha256": hash_key("tenant"), "name": "t", "tenant": "acme"}
        self.active = parse_config({**KEYS, "tenants": {"acme": {}}, "auth": {"api_keys": [tenant_key]}})

    async def reload(self, trigger: str) -> ReloadOutcome:
        self.triggers.append(trigger)
        return ReloadOutcome(self.result, f"{self.result.value}: because", VERSION)


async def call(views: AdminViews, method: str, path: str, headers=None) -> httpx.Response:
    app = Starlette(
        routes=[
            Route("/admin/reload", views.reload, methods=["POST"]),
            Route("/admin/config", views.show_config, methods=["GET"]),
        ]
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        return await client.request(method, path, headers=headers)


@pytest.mark.parametrize(
    ("result", "status", "code"),
    [
        (ReloadResult.INVALID, 400, "config_invalid"),
        (ReloadResult.REFUSED, 409, "config_needs_restart"),
        (ReloadResult.FAILED, 500, "config_not_applied"),
    ],
)
async def test_a_reload_not_applied_is_an_error_with_the_reloaders_message(result, status, code):
    reloader, fanned = Reloader(result), []
    views = AdminViews(lambda: parse_config(KEYS), reloader, fan_out=lambda: fanned.append(1))
    r = await call(views, "POST", "/admin/reload", ADMIN)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"] == f"{result.value}: because"
    assert reloader.triggers == ["POST /admin/reload by ops"] and fanned == []


@pytest.mark.parametrize("result", [ReloadResult.APPLIED, ReloadResult.UNCHANGED])
async def test_a_reload_applied_or_unchanged_answers_its_result_and_version(result):
    reloader, fanned = Reloader(result), []
    views = AdminViews(lambda: parse_config(KEYS), reloader, fan_out=lambda: fanned.append(1))
    r = await call(views, "POST", "/admin/reload", ADMIN)
    assert r.status_code == 200
    assert r.json() == {"result": result.value, "message": f"{result.value}: because", "version": VERSION.to_dict()}
    assert fanned == ([1] if result == ReloadResult.APPLIED else [])
    # Not a worker: nothing to fan out to.
    assert (await call(AdminViews(lambda: parse_config(KEYS), reloader), "POST", "/admin/reload", ADMIN)).is_success


async def test_the_views_refuse_without_the_admin_key():
    reloader = Reloader(ReloadResult.APPLIED)
    views = AdminViews(lambda: parse_config(KEYS), reloader)
    for method, path in (("POST", "/admin/reload"), ("GET", "/admin/config")):
        r = await call(views, method, path, {"Authorization": "Bearer tenant"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert reloader.triggers == []
    off = AdminViews(lambda: parse_config({}), reloader)
    assert (await call(off, "GET", "/admin/config", ADMIN)).status_code == 404


async def test_the_config_is_shown_redacted_with_its_version_source_and_worker():
    reloader = Reloader(ReloadResult.APPLIED)
    shown = (await call(AdminViews(lambda: parse_config(KEYS), reloader), "GET", "/admin/config", ADMIN)).json()
    assert set(shown) == {"version", "source", "config"}
    assert shown["version"] == VERSION.to_dict() and shown["source"] == "/etc/switchyard.yaml"
    assert shown["config"]["auth"]["api_keys"][0]["sha256"] == hash_key("tenant")[:12] + "…"
    assert shown["config"]["admin"]["api_keys"][0] == {"sha256": hash_key("admin-key")[:12] + "…", "name": "ops"}
    views = AdminViews(lambda: parse_config(KEYS), reloader, worker={"index": 1, "count": 2})
    shown = (await call(views, "GET", "/admin/config", ADMIN)).json()
    assert shown["worker"] == {"index": 1, "count": 2, "pid": os.getpid()}
