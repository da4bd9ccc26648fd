"""Secrets never shown (issue 25, finding 7): secrets planted in the config (store
URLs' userinfo and `?password=`, the tracing endpoint's userinfo and headers, a
backend's URL and options), in request headers and in URLs a client sends; then
every surface the gateway writes is read and searched for them: `/admin/config`,
an admin reload's error, error bodies, `/readyz`, the access log and the text log
(one file: the gateway's stdout and stderr), `config check`, and, in process, the
trace spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from policies.auth import hash_key
from processes import free_port
from tests.gateway.live_gateway import serving
from tests.gateway.observe.test_tracing import request_spans, tracing_to
from tests.procs import ROOT, SWITCHYARD, Process, eventually, openai_backend_config, start_gateway, start_redis

ACME, ADMIN = "sk-sy-acme-key", "sk-sy-admin-key"
REDIS_PW = "PLANTED-redis-pw-7f3a"
TRACE_USERINFO_PW = "PLANTED-otlp-userinfo-91c2"
TRACE_AUTH = "PLANTED-otlp-bearer-55e0"
TRACE_TEAM = "PLANTED-otlp-team-c0de"
BACKEND_PW = "PLANTED-backend-pw-4b1d"
OPTION_KEY = "PLANTED-option-key-e77a"
CLIENT_KEY = "sk-PLANTED-client-key-0a9f-not-configured"
CLIENT_URL_PW = "PLANTED-client-url-pw-3c3c"
CLIENT_COOKIE = "PLANTED-cookie-6d6d"
RELOAD_PW = "PLANTED-reload-pw-2e2e"
PLANTED = (
    REDIS_PW,
    TRACE_USERINFO_PW,
    TRACE_AUTH,
    TRACE_TEAM,
    BACKEND_PW,
    OPTION_KEY,
    CLIENT_KEY,
    CLIENT_URL_PW,
    CLIENT_COOKIE,
    RELOAD_PW,
)
MSG = [{"role": "user", "content": "hi"}]


def leaked(*texts: str) -> list[str]:
    return [secret for secret in PLANTED if any(secret in text for text in texts)]


def gateway_config(upstream: Process, redis: Process) -> dict:
    port = redis.url.rsplit(":", 1)[1].split("/")[0]
    config = openai_backend_config(upstream)
    closed = free_port()
    config["models"]["down"] = {
        "backends": [
            {
                "name": "down",
                "adapter": "openai",
                "url": f"http://svc:{BACKEND_PW}@127.0.0.1:{closed}/v1",
                "options": {"api_key": OPTION_KEY},
            }
        ]
    }
    config["auth"] = {"mode": "keys", "api_keys": [{"sha256": hash_key(ACME), "tenant": "acme"}]}
    config["admin"] = {"api_keys": [{"sha256": hash_key(ADMIN), "name": "ops"}]}
    config["quota_store"] = {"kind": "redis", "url": f"redis://127.0.0.1:{port}/0?password={REDIS_PW}"}
    config["response_store"] = {"kind": "redis", "url": f"redis://default:{REDIS_PW}@127.0.0.1:{port}/1"}
    config["tenants"] = {"acme": {"requests_per_minute": 1000}}
    config["tracing"] = {
        "enabled": True,
        "endpoint": f"http://collector:{TRACE_USERINFO_PW}@127.0.0.1:{free_port()}",
        "headers": {"Authorization": f"Bearer {TRACE_AUTH}", "x-honeycomb-team": TRACE_TEAM},
    }
    return config


@pytest.fixture(scope="module")
def secret_redis(module_tmp):
    redis = start_redis(module_tmp)
    port = redis.url.rsplit(":", 1)[1].split("/")[0]
    subprocess.run(["redis-cli", "-p", port, "CONFIG", "SET", "requirepass", REDIS_PW], check=True, capture_output=True)
    yield redis
    redis.stop()


@pytest.fixture(scope="module")
def gw(module_tmp, upstream, secret_redis):
    config = gateway_config(upstream, secret_redis)
    p = start_gateway(module_tmp, config)
    p.config_path = next(  # type: ignore[attr-defined]
        path for path in module_tmp.glob("gw-*.yaml") if REDIS_PW in path.read_text()
    )
    yield p
    p.stop()


def test_no_surface_shows_a_planted_secret(gw):
    admin = {"authorization": f"Bearer {ADMIN}"}
    bodies = []
    # /admin/config: the config in force, every secret of it masked (but the config is there).
    shown = httpx.get(gw.url + "/admin/config", headers=admin, timeout=10)
    assert shown.status_code == 200
    config = shown.json()["config"]
    assert config["tracing"]["headers"] == {"Authorization": "***", "x-honeycomb-team": "***"}
    assert config["quota_store"]["url"].endswith("?password=***")
    assert config["models"]["down"]["backends"][0]["options"] == {"api_key": "***"}
    bodies.append(shown.text)
    # A served request, and the requests that fail on each secret-bearing input.
    ok = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "max_tokens": 2},
        headers={"authorization": f"Bearer {ACME}", "cookie": f"session={CLIENT_COOKIE}"},
        timeout=30,
    )
    assert ok.status_code == 200
    for headers, body in (
        ({"authorization": f"Bearer {CLIENT_KEY}"}, {"model": "m", "messages": MSG}),
        ({"api-key": CLIENT_KEY}, {"model": "m", "messages": MSG}),
        ({"authorization": f"Bearer {ACME}"}, {"model": f"redis://u:{CLIENT_URL_PW}@h/0", "messages": MSG}),
        ({"authorization": f"Bearer {ACME}"}, {"model": f"x?password={CLIENT_URL_PW}", "messages": MSG}),
        ({"authorization": f"Bearer {ACME}"}, {"model": "down", "messages": MSG, "max_tokens": 2}),
    ):
        answer = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert answer.status_code >= 400
        bodies.append(answer.text)
    # A reload of a config whose mistake quotes a secret: refused, the secret not quoted back.
    path: Path = gw.config_path
    good = path.read_text()
    bad = yaml.safe_load(good)
    bad["models"]["down"]["backends"][0]["url"] = f"ftp://svc:{RELOAD_PW}@127.0.0.1/v1"
    path.write_text(yaml.safe_dump(bad))
    try:
        refused = httpx.post(gw.url + "/admin/reload", headers=admin, timeout=30)
        assert refused.status_code == 400 and "ftp://svc:***@127.0.0.1" in refused.text
        bodies.append(refused.text)
    finally:
        path.write_text(good)
    ready = httpx.get(gw.url + "/readyz", timeout=10)
    bodies.append(ready.text)
    assert "down" in ready.text
    # The log: the access lines are written, the text log has had time for the exporter's failures.
    log = eventually(lambda: gw.log() if gw.log().count('"status":') >= 6 else "", timeout_s=10)
    assert log
    assert leaked(*bodies, log) == []


def test_config_check_does_not_print_a_secret(module_tmp):
    path = module_tmp / "bad-secret.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "quota_store": {"kind": "redis", "url": f"http://svc:{REDIS_PW}@127.0.0.1:1/0?password={RELOAD_PW}"},
                "models": {"m": {"backends": [{"name": "a", "adapter": "openai", "url": "http://127.0.0.1:1/v1"}]}},
            }
        )
    )
    done = subprocess.run(
        [*SWITCHYARD, "config", "check", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "quota_store" in done.stderr
    assert leaked(done.stdout, done.stderr) == []


async def test_spans_show_no_secret():
    """A runtime whose error quotes a connection string with a password, a backend
    address with userinfo, a client's model name with one: no span carries any."""

    async def failing(request: web.Request) -> web.Response:
        message = f"upstream db postgres://svc:{BACKEND_PW}@db:5432/x?password={REDIS_PW} refused"
        return web.json_response({"error": {"message": message, "type": "server_error"}}, status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", failing)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    exporter = InMemorySpanExporter()
    cfg = {
        "access_log": False,
        "models": {
            "m": {
                "backends": [{"name": "b", "adapter": "openai", "url": f"http://u:{OPTION_KEY}@127.0.0.1:{port}/v1"}],
                "max_retries": 0,
            }
        },
    }
    try:
        async with serving(cfg, tracing_to(exporter)) as served:
            client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
            with pytest.raises(openai.APIStatusError) as failed:
                await client.chat.completions.create(model="m", messages=MSG, max_tokens=2)
            with pytest.raises(openai.NotFoundError) as missing:
                await client.chat.completions.create(model=f"redis://u:{CLIENT_URL_PW}@h/0", messages=MSG, max_tokens=2)
            spans = await request_spans(exporter, 2)
    finally:
        await runner.cleanup()
    said = [failed.value.response.text, missing.value.response.text]
    for span in spans:
        said.append(json.dumps(dict(span.attributes or {}), default=str))
        said.append(span.status.description or "")
        said.extend(json.dumps(dict(e.attributes or {}), default=str) for e in span.events)
    assert any("***" in text for text in said)  # the runtime's message is told, masked
    assert leaked(*said) == []


def test_redact_runs_in_a_child_without_the_gateway():
    """The rule is a standard-library leaf: stores and adapters use it without the gateway."""
    code = "import sys, policies.redact; assert not [m for m in sys.modules if m.startswith('gateway')]"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
