"""gateway/config/schema.py's plain functions in process: the loader (a file it cannot
read, YAML it cannot parse, the source each message names), the environment's overrides,
the command line's listen flags, how a validation error is worded, and each refusal of
a backend's url or native model path, word for word (a person acts on these)."""

from __future__ import annotations

import importlib.util

import pytest

from gateway.config import schema
from gateway.config.schema import (
    ConfigError,
    apply_env_overrides,
    backend_url_problem,
    load_config,
    native_problem,
    parse_config,
    with_listen,
)
from processes.install import install_hint

VLLM = {"name": "v", "adapter": "vllm", "url": "http://127.0.0.1:8000"}
MODELS = {"models": {"m": {"backends": [VLLM]}}}


def test_a_config_that_is_not_there_names_the_file_and_why(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert str(refused.value) == f"cannot read config {path}: No such file or directory"


def test_yaml_that_does_not_parse_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("models: [\n")
    with pytest.raises(ConfigError) as refused:
        load_config(str(path), env={})
    assert str(refused.value).startswith(f"{path} is not valid YAML: ")


def test_an_invalid_file_is_named_in_its_refusal_and_no_file_is_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workers: 0\n")
    with pytest.raises(ConfigError) as refused:
        load_config(str(path), env={})
    assert str(refused.value) == f"{path} is not valid:\n  workers: Input should be greater than or equal to 1"
    with pytest.raises(ConfigError) as refused:
        load_config(None, env={"SWITCHYARD_LOG_LEVEL": "loud"})
    assert str(refused.value).startswith("config is not valid:\n  log_level: ")


def test_an_empty_file_is_the_default_config_and_the_environment_applies(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    cfg = load_config(path, env={"SWITCHYARD_PORT": "9001"})
    assert cfg.listen.port == 9001 and cfg.listen.host == "127.0.0.1"


def test_the_process_environment_is_read_when_none_is_given(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_PORT", "9002")
    assert load_config(None).listen.port == 9002
    assert load_config(None, env={}).listen.port == 8080


def test_each_environment_override_lands_where_it_belongs():
    data = {**MODELS, "listen": {"host": "127.0.0.2", "port": 1}, "quota_store": {"kind": "memory", "x": 1}}
    env = {
        "SWITCHYARD_HOST": "127.0.0.3",
        "SWITCHYARD_PORT": "7000",
        "SWITCHYARD_REDIS_URL": "redis://r:6379/0",
        "SWITCHYARD_AUTH_MODE": "keys",
        "SWITCHYARD_LOG_LEVEL": "debug",
    }
    out = apply_env_overrides(data, env)
    assert out == {
        **MODELS,
        "listen": {"host": "127.0.0.3", "port": "7000"},
        "quota_store": {"kind": "memory", "x": 1, "url": "redis://r:6379/0"},  # an explicit kind stays
        "auth": {"mode": "keys"},
        "log_level": "debug",
    }
    assert data["listen"] == {"host": "127.0.0.2", "port": 1}  # the caller's data is not changed
    assert apply_env_overrides({}, {"SWITCHYARD_REDIS_URL": "redis://r"}) == {
        "quota_store": {"url": "redis://r", "kind": "redis"}
    }
    assert apply_env_overrides({"auth": {"api_keys": []}}, {"SWITCHYARD_AUTH_MODE": "none"}) == {
        "auth": {"api_keys": [], "mode": "none"}
    }
    assert apply_env_overrides({}, {}) == {}  # no listen section made up
    assert apply_env_overrides({"listen": None}, {"SWITCHYARD_PORT": "1"}) == {"listen": {"port": "1"}}
    assert apply_env_overrides({"listen": {"host": "h"}}, {"SWITCHYARD_PORT": "1"}) == {
        "listen": {"host": "h", "port": "1"}
    }
    assert apply_env_overrides(["a"], {"SWITCHYARD_PORT": "1"}) == ["a"]  # not a mapping: parse_config says so


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (["a"], "config: the top level must be a mapping, not list"),
        ("x", "config: the top level must be a mapping, not str"),
    ],
)
def test_a_top_level_that_is_not_a_mapping_is_refused(data, message):
    with pytest.raises(ConfigError) as refused:
        parse_config(data)
    assert str(refused.value) == message


def test_no_data_is_the_default_config():
    assert parse_config(None) == parse_config({})


def test_a_validation_error_names_each_place_and_drops_pydantic_s_prefix():
    with pytest.raises(ConfigError) as refused:
        parse_config({"workers": 0, "listen": {"port": -1}, "models": {"m": {"backends": [{**VLLM, "url": "x"}]}}})
    lines = str(refused.value).splitlines()
    assert lines[0] == "config is not valid:"
    assert "  workers: Input should be greater than or equal to 1" in lines
    assert "  listen.port: Input should be greater than or equal to 0" in lines
    assert "  models.m.backends.0: backend 'v': url 'x' must start with http:// or https:// and name a host" in lines
    with pytest.raises(ConfigError) as top:
        parse_config({"listen": {"host": "0.0.0.0"}, **MODELS})
    assert str(top.value).splitlines()[1].startswith("  (top level): listen.host is '0.0.0.0' but auth")


def test_the_command_line_s_listen_flags_are_applied_and_validated():
    cfg = parse_config({**MODELS, "listen": {"port": 8000}})
    assert with_listen(cfg, None, None) is cfg and with_listen(cfg, "", None, None) is cfg
    moved = with_listen(cfg, "127.0.0.9", 9000, 3)
    assert (moved.listen.host, moved.listen.port, moved.workers) == ("127.0.0.9", 9000, 3)
    assert with_listen(cfg, None, 0).listen == parse_config({"listen": {"port": 0}}).listen
    assert with_listen(cfg, "127.0.0.9", None).listen.port == 8000  # what the flags leave is kept
    assert with_listen(cfg, None, None, 2).workers == 2 and with_listen(cfg, None, None, 2).listen.port == 8000
    with pytest.raises(ConfigError) as refused:
        with_listen(cfg, "0.0.0.0", None)
    assert str(refused.value).startswith("the command line is not valid:\n  (top level): listen.host is '0.0.0.0'")


@pytest.mark.parametrize(
    ("adapter", "url", "problem"),
    [
        ("vllm", "vllm-a:8000", "url 'vllm-a:8000' must start with http:// or https:// and name a host"),
        ("vllm", "http://", "url 'http://' must start with http:// or https:// and name a host"),
        ("vllm", "http://h:x", "url 'http://h:x' has no valid port"),
        ("vllm", "http://:8000", "url 'http://:8000' must name a host (and a port from 1 to 65535, if any)"),
        ("vllm", "http://h:0", "url 'http://h:0' must name a host (and a port from 1 to 65535, if any)"),
        ("vllm", "http://h#f", "url 'http://h#f' must not carry a query or fragment"),
        ("vllm", "http://h?q", "url 'http://h?q' must not carry a query or fragment"),
        (
            "openai",
            "http://h:9/",
            "adapter openai takes the API base, not the server root: http://h:9/v1 for most servers",
        ),
        ("tgi", "https://h/tgi/v1/", "adapter tgi takes the server root and adds /v1 itself: https://h/tgi"),
    ],
)
def test_each_url_refusal_says_what_to_write(adapter, url, problem):
    assert backend_url_problem(adapter, url) == problem


@pytest.mark.parametrize(
    ("adapter", "url"),
    [
        ("vllm", "http://h:1"),
        ("vllm", "https://h:65535/x"),
        ("openai", "http://h/v1"),
        ("openai", "http://h/X/"),  # only the slashes are stripped
        ("sglang", "http://h/v1x"),
    ],
)
def test_urls_each_adapter_takes(adapter, url):
    assert backend_url_problem(adapter, url) is None


def test_native_needs_torch_and_a_model(monkeypatch):
    if importlib.util.find_spec("torch") is not None:
        assert native_problem("builtin:tiny") is None
        assert native_problem("builtin:huge").startswith("model_path unknown built-in model 'huge'")
    real = importlib.util.find_spec

    def no_torch(name, *args):
        return None if name == "torch" else real(name, *args)

    monkeypatch.setattr(schema.importlib.util, "find_spec", no_torch)
    needs = f"adapter native needs the engine extra ({install_hint('engine')}): torch is not installed"
    assert native_problem("builtin:tiny") == needs

    def refusing(name, *args):
        raise ImportError(name)

    monkeypatch.setattr(schema.importlib.util, "find_spec", refusing)
    assert native_problem("builtin:tiny") == needs
