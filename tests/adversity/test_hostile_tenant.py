"""What a hostile tenant (or an anonymous caller) can learn or break through a real
gateway process with API keys: validation only after authentication, models
outside its list indistinguishable from missing ones, one credential per request,
a broken key file, and bodies built to crash the encoder."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml

from policies.auth import hash_key
from tests.procs import Process, openai_backend_config, start_gateway

ACME, GLOBEX, FROM_FILE, ROTATED = "sk-sy-acme-key", "sk-sy-globex-key", "sk-sy-file-key", "sk-sy-rotated-key"
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def keys_file(module_tmp) -> Path:
    path = module_tmp / "api-keys.yaml"
    path.write_text(yaml.safe_dump([{"sha256": hash_key(FROM_FILE), "tenant": "globex"}]))
    return path


@pytest.fixture(scope="module")
def gw(module_tmp, upstream, keys_file):
    config = openai_backend_config(upstream)
    config["models"]["other"] = openai_backend_config(upstream, "other")["models"]["other"]
    config["auth"] = {
        "mode": "keys",
        "api_keys": [{"sha256": hash_key(ACME), "tenant": "acme"}, {"sha256": hash_key(GLOBEX), "tenant": "globex"}],
        "api_keys_file": str(keys_file),
    }
    config["tenants"] = {"acme": {"models": ["m"]}, "globex": {"models": ["*"]}}
    p = start_gateway(module_tmp, config)
    yield p
    p.stop()


def post(gw: Process, body, key: str | None = ACME, headers: list | None = None) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = [("content-type", "application/json"), *(headers or [])]
    if key:
        sent.append(("authorization", f"Bearer {key}"))
    return httpx.post(gw.url + "/v1/chat/completions", content=raw, headers=sent, timeout=30)


def access_log_status(gw: Process, request_id: str) -> int:
    for _ in range(50):
        for line in gw.child.log().splitlines():
            if line.startswith("{") and f'"request_id":"{request_id}"' in line:
                return json.loads(line)["status"]
        time.sleep(0.1)
    raise AssertionError(f"no access-log line for {request_id}")


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[]", {"model": 5}, {"model": "m", "messages": [{"role": ["user"], "content": "x"}]}],
    ids=["bad json", "not an object", "bad model", "bad role"],
)
def test_an_anonymous_caller_learns_nothing_from_validation(gw, body):
    anonymous = post(gw, body, key=None)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "authentication_error"
    assert post(gw, body).status_code == 400


def test_a_model_outside_the_list_answers_exactly_like_a_missing_one(gw):
    assert post(gw, {"model": "m", "messages": MSG, "max_tokens": 2}).status_code == 200
    assert post(gw, {"model": "other", "messages": MSG, "max_tokens": 2}, key=GLOBEX).status_code == 200
    hidden, missing = post(gw, {"model": "other", "messages": MSG}), post(gw, {"model": "nope", "messages": MSG})
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"] == json.loads(missing.text.replace("nope", "other"))["error"]
    models = {
        m: httpx.get(gw.url + f"/v1/models/{m}", headers={"authorization": f"Bearer {ACME}"}) for m in ("other", "nope")
    }
    assert models["other"].status_code == models["nope"].status_code == 404
    assert models["other"].json()["error"] == json.loads(models["nope"].text.replace("nope", "other"))["error"]


@pytest.mark.parametrize(
    "headers",
    [
        [("authorization", f"Bearer {ACME}"), ("authorization", f"Bearer {GLOBEX}")],
        [("authorization", f"Bearer {GLOBEX}"), ("authorization", f"Bearer {ACME}")],
        [("authorization", f"Bearer {ACME}"), ("api-key", GLOBEX)],
        [("api-key", ACME), ("api-key", ACME)],
    ],
)
def test_more_than_one_credential_is_401(gw, headers):
    r = post(gw, {"model": "m", "messages": MSG, "max_tokens": 2}, key=None, headers=headers)
    assert r.status_code == 401 and "exactly one credential" in r.json()["error"]["message"]
    models = httpx.get(gw.url + "/v1/models", headers=headers)
    assert models.status_code == 401


def test_a_broken_key_file_keeps_the_last_good_keys_and_is_counted(gw, keys_file):
    def rotate(text: str) -> None:
        keys_file.write_text(text)
        st = keys_file.stat()
        os.utime(keys_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        time.sleep(1.2)  # the gateway looks at the file at most once a second

    body = {"model": "m", "messages": MSG, "max_tokens": 2}
    assert post(gw, body, key=FROM_FILE).status_code == 200
    rotate("- {sha256: [this is not yaml")
    for _ in range(3):
        assert post(gw, body, key=FROM_FILE).status_code == 200
        assert post(gw, body).status_code == 200
    errors = [
        line for line in httpx.get(gw.url + "/metrics").text.splitlines() if line.startswith("switchyard_auth_keys")
    ]
    assert errors == ["switchyard_auth_keys_reload_errors_total 1.0"]
    rotate(yaml.safe_dump([{"sha256": hash_key(ROTATED), "tenant": "globex"}]))
    assert post(gw, body, key=ROTATED).status_code == 200
    assert post(gw, body, key=FROM_FILE).status_code == 401


@pytest.mark.parametrize(
    "where",
    ["vendor_field", "content", "tool_parameters", "tool_calls"],
)
@pytest.mark.parametrize("levels", [100, 300, 1000])
def test_deep_nesting_anywhere_is_400_and_logged_as_400(gw, where, levels):
    deep = "[" * levels + "]" * levels
    text = {
        "vendor_field": '{"model": "m", "messages": [{"role": "user", "content": "x"}], "vendor": DEEP}',
        "content": '{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": DEEP}]}]}',
        "tool_parameters": '{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": '
        '"function", "function": {"name": "f", "parameters": {"type": "object", "x": DEEP}}}]}',
        "tool_calls": '{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": '
        '"function", "function": {"name": "f", "arguments": DEEP}}]}, {"role": "user", "content": "x"}]}',
    }[where]
    r = post(gw, text.replace("DEEP", deep).encode())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] in ("vendor", "messages", "tools")
    assert access_log_status(gw, r.headers["x-request-id"]) == 400
