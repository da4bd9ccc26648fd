"""gateway/lifecycle/reload.py's parts without a gateway: the version's shape and digest,
where a config comes from, the reloader's outcomes and their words, the version handed
to the apply function, the log level of each result, and the watcher told that what a
reload read is seen."""

from __future__ import annotations

import logging
import re
import time

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gateway.config.schema import ConfigError, GatewayConfig, parse_config
from gateway.lifecycle.reload import (
    ConfigReloader,
    ConfigSource,
    ConfigVersion,
    ReloadResult,
    config_digest,
    preflight_refusal,
)

DEAD = "http://127.0.0.1:9"


def raw(backend: str = "b1") -> dict:
    return {"models": {"m": {"backends": [{"name": backend, "adapter": "vllm", "url": DEAD}]}}}


def test_a_version_is_its_counter_and_digest() -> None:
    version = ConfigVersion(3, "abcdef012345", 1234.56789)
    assert version.id == "3-abcdef012345"
    assert version.to_dict() == {"id": "3-abcdef012345", "counter": 3, "digest": "abcdef012345", "loaded_at": 1234.568}


def test_the_digest_is_twelve_hex_characters_of_the_validated_config() -> None:
    a, b = parse_config(raw("b1")), parse_config(raw("b2"))
    assert re.fullmatch(r"[0-9a-f]{12}", config_digest(a))
    assert config_digest(a) == config_digest(parse_config(raw("b1"))) != config_digest(b)


def test_a_source_without_a_file_has_nothing_to_reload() -> None:
    with pytest.raises(
        ConfigError, match="^the gateway was started without a config file: there is nothing to reload$"
    ):
        ConfigSource(None).load()


def test_a_source_applies_the_command_line_s_listen_overrides(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw()))
    plain = ConfigSource(str(path)).load()
    moved = ConfigSource(str(path), host="127.0.0.2", port=18123, workers=2).load()
    assert (moved.listen.host, moved.listen.port, moved.workers) == ("127.0.0.2", 18123, 2)
    assert (plain.listen.port, plain.workers) != (18123, 2)


class FakeBackend:
    def __init__(self, name: str, detail: str | None) -> None:
        self.name = name
        self.health = type("Health", (), {"detail": detail})()


def test_a_preflight_refusal_names_each_down_backend_and_the_mode() -> None:
    down = [FakeBackend("a", "connection refused"), FakeBackend("b", None)]
    assert preflight_refusal(down, "wait", 2.5) == (
        "new backend(s) did not answer their health check within 2.5 s (reload.preflight: wait): "
        "a (connection refused), b (unhealthy)"
    )
    assert "at once (reload.preflight: refuse)" in preflight_refusal(down, "refuse", 0)


class Applied:
    """An apply function that records what it was given, or raises `fails`."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.calls: list[tuple[GatewayConfig, ConfigVersion]] = []
        self.fails = fails

    async def __call__(self, config: GatewayConfig, version: ConfigVersion) -> str:
        self.calls.append((config, version))
        if self.fails is not None:
            raise self.fails
        return "what changed"


def reloader(tmp_path, apply: Applied) -> tuple[ConfigReloader, object]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw("b1")))
    source = ConfigSource(str(path))
    return ConfigReloader(source, source.load(), apply, CollectorRegistry()), path


async def test_an_applied_reload_hands_the_next_version_to_apply_and_logs_at_info(tmp_path, caplog) -> None:
    apply = Applied()
    before = time.time()
    r, path = reloader(tmp_path, apply)
    first = r.version
    assert first.counter == 1 and first.digest == config_digest(r.active)
    assert before <= first.loaded_at <= time.time()
    path.write_text(yaml.safe_dump(raw("b2")))
    assert r.file_changed()
    path.write_text(yaml.safe_dump(raw("b3")))  # changed again before the reload reads it
    with caplog.at_level(logging.INFO, logger="switchyard.reload"):
        outcome = await r.reload("test")
    assert not r.file_changed()  # what the reload read is seen: the watcher does not reload it again
    ((config, version),) = apply.calls
    assert first.loaded_at <= version.loaded_at <= time.time()
    assert version.counter == 2 and version.digest == config_digest(config) and outcome.version == version
    assert outcome.result == ReloadResult.APPLIED and outcome.message == f"version {version.id} in force (what changed)"
    assert [rec.levelno for rec in caplog.records] == [logging.INFO]
    again = await r.reload("test")
    assert again.result == ReloadResult.UNCHANGED
    assert again.message == f"the file holds version {version.id}, in force"


async def test_a_failed_apply_keeps_the_version_names_the_error_and_logs_at_error(tmp_path, caplog) -> None:
    r, path = reloader(tmp_path, Applied(fails=RuntimeError("adapter exploded")))
    path.write_text(yaml.safe_dump(raw("b2")))
    with caplog.at_level(logging.INFO, logger="switchyard.reload"):
        outcome = await r.reload("test")
    assert outcome.result == ReloadResult.FAILED and outcome.version.counter == 1
    assert outcome.message == f"RuntimeError: adapter exploded; version {r.version.id} stays in force"
    (line,) = [rec for rec in caplog.records if rec.getMessage().startswith("config reload (test): failed")]
    assert line.levelno == logging.ERROR


async def test_a_reloader_without_a_file_watches_nothing(tmp_path) -> None:
    r = ConfigReloader(ConfigSource(None), parse_config(raw()), Applied(), CollectorRegistry())
    assert r.watch is None and not r.file_changed()
    outcome = await r.reload("test")
    assert outcome.result == ReloadResult.INVALID and "nothing to reload" in outcome.message
