"""Readiness, metrics and where they are served, on real gateway processes: the
process stays ready while one model has no healthy backend (per-model health in
the body, `?model=` and `switchyard_model_ready`), the ops listener keeps the
views off the main port, and a config that would show them to anyone on a public
address is refused by `serve` and `config check` alike."""

from __future__ import annotations

import subprocess

import httpx
import pytest
import yaml

from gateway.config.schema import ConfigError, load_config
from policies.auth import hash_key
from processes import free_port
from tests.procs import ROOT, SWITCHYARD, openai_backend_config, start_gateway, stopped_after

KEY = "sk-sy-ops-test-key"


def with_dead_model(upstream) -> dict:
    config = openai_backend_config(upstream)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config["models"]["dead"] = {"backends": [{"name": "dead", "adapter": "openai", "url": dead}]}
    return config


@pytest.fixture(scope="module")
def split(module_tmp, upstream):
    """Auth on, the views on an ops listener of their own."""
    ops_port = free_port()
    config = with_dead_model(upstream)
    config["auth"] = {"mode": "keys", "api_keys": [{"sha256": hash_key(KEY), "tenant": "t"}]}
    config["ops"] = {"listen": {"host": "127.0.0.1", "port": ops_port}}
    p = start_gateway(module_tmp, config)
    yield p, f"http://127.0.0.1:{ops_port}"
    p.stop()


@pytest.fixture(scope="module")
def together(module_tmp, upstream):
    yield from stopped_after(start_gateway(module_tmp, with_dead_model(upstream)))


def model_ready(metrics_text: str) -> dict[str, float]:
    out = {}
    for line in metrics_text.splitlines():
        if line.startswith("switchyard_model_ready{"):
            labels, _, value = line.rpartition(" ")
            out[labels.split('model="')[1].split('"')[0]] = float(value)
    return out


def test_one_model_without_a_healthy_backend_leaves_the_process_ready(together):
    r = httpx.get(together.url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    models = r.json()["models"]
    assert models["m"]["ready"] is True and models["dead"]["ready"] is False
    assert models["dead"]["backends"][0]["healthy"] is False
    one = httpx.get(together.url + "/readyz", params={"model": "dead"})
    assert one.status_code == 503 and one.json()["status"] == "not_ready"
    assert httpx.get(together.url + "/readyz", params={"model": "m"}).status_code == 200
    missing = httpx.get(together.url + "/readyz", params={"model": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert model_ready(httpx.get(together.url + "/metrics").text) == {"m": 1.0, "dead": 0.0}


def test_the_ops_listener_has_the_views_and_the_main_port_only_readiness(split):
    gw, ops = split
    main_ready = httpx.get(gw.url + "/readyz")
    assert main_ready.status_code == 200 and main_ready.json() == {"status": "ready"}
    assert httpx.get(gw.url + "/readyz", params={"model": "dead"}).json() == {"status": "ready"}
    assert httpx.get(gw.url + "/metrics").status_code == 404
    assert httpx.get(gw.url + "/healthz").status_code == 200

    detail = httpx.get(ops + "/readyz")
    assert detail.status_code == 200 and detail.json()["models"]["dead"]["ready"] is False
    assert httpx.get(ops + "/readyz", params={"model": "dead"}).status_code == 503
    assert model_ready(httpx.get(ops + "/metrics").text) == {"m": 1.0, "dead": 0.0}
    assert httpx.get(ops + "/healthz").status_code == 200
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"authorization": f"Bearer {KEY}"}
    assert httpx.post(ops + "/v1/chat/completions", json=body, headers=headers).status_code == 404
    assert httpx.get(ops + "/v1/models", headers=headers).status_code == 404
    assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=30).status_code == 200


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SWITCHYARD, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def write(tmp_path, name: str, config: dict):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_public_views_need_a_decision_and_serve_and_config_check_refuse_alike(tmp_path, upstream):
    keys = {"mode": "keys", "api_keys": [{"sha256": hash_key(KEY), "tenant": "t"}]}
    base = {**openai_backend_config(upstream), "auth": keys}
    public = write(tmp_path, "public", {**base, "listen": {"host": "0.0.0.0", "port": free_port()}})
    check = run_cli("config", "check", str(public))
    serve = run_cli("serve", "--config", str(public))
    assert check.returncode == serve.returncode == 2
    assert "set ops.listen" in check.stderr and check.stderr.strip() == serve.stderr.strip()
    # The command line's address is checked as the file's would be.
    loopback = write(tmp_path, "loopback", {**base, "listen": {"host": "127.0.0.1", "port": free_port()}})
    moved = run_cli("serve", "--config", str(loopback), "--host", "0.0.0.0")
    assert moved.returncode == 2 and "set ops.listen" in moved.stderr, moved.stderr
    load_config(loopback)
    load_config(write(tmp_path, "on-purpose", {**base, "listen": {"host": "0.0.0.0"}, "ops": {"public": True}}))
    ops = {"listen": {"host": "0.0.0.0", "port": free_port()}}
    load_config(write(tmp_path, "split", {**base, "listen": {"host": "0.0.0.0"}, "ops": ops}))
    # auth.mode none on a public address: the API itself is open to anyone already.
    load_config(write(tmp_path, "open", {"listen": {"host": "0.0.0.0"}, "auth": {"mode": "none"}}))


def test_the_ops_listener_needs_its_own_port(tmp_path):
    same = {"listen": {"host": "127.0.0.1", "port": 8080}, "ops": {"listen": {"host": "127.0.0.1", "port": 8080}}}
    with pytest.raises(ConfigError, match="its own port"):
        load_config(write(tmp_path, "same", same))
