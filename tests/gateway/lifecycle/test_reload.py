"""Reloading a config in process (gateway/lifecycle/reload.py, Gateway.apply_config): what is
put in force at once, what is refused and why, what survives, and how the file
watcher tells a change (a ConfigMap's symlink swap) from a touch."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import yaml

from gateway.app import Gateway
from gateway.cli.main import main
from gateway.config.schema import parse_config
from gateway.lifecycle.reload import ConfigSource, FileWatch, ReloadResult, restart_only_changes
from policies.api_keys import hash_key
from policies.quota import ScopeLimits, token_budget
from processes import free_port
from tests.e2e.lifecycle_kit import ConfigFile

DEAD = "http://127.0.0.1:9"  # nothing listens: health checks fail fast, nothing is sent


def config(**top) -> dict:
    base = {
        "tenants": {"a": {"requests_per_minute": 10}},
        "models": {"m": {"backends": [{"name": "b1", "adapter": "vllm", "url": DEAD}]}},
    }
    return {**base, **top}


async def started(tmp_path, **top):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(**top)))
    source = ConfigSource(str(path))
    gw = Gateway(source.load(), source=source)
    await gw.startup()
    return gw, path


@pytest.fixture()
async def running(tmp_path):
    gw, path = await started(tmp_path)
    yield gw, path
    await gw.shutdown()


def reloads(gw: Gateway, result: str) -> float:
    return gw.metrics.registry.get_sample_value("switchyard_config_reloads_total", {"result": result}) or 0.0


async def test_tenants_and_routing_change_at_once_and_the_quota_store_is_kept(running):
    gw, path = running
    store = gw.protection.leases.store
    scopes = (ScopeLimits("t", requests_per_window=10),)
    await store.reserve("a", scopes, 0, "before-the-reload", 30_000)
    b1 = gw.backends.backends["b1"]

    # The new backend b2 is down: put in force anyway (preflight off).
    changed = config(
        tenants={"a": {"requests_per_minute": 10}, "b": {"max_concurrent": 2}}, reload={"preflight": "off"}
    )
    changed["models"]["m"]["routing"] = "least_loaded"
    changed["models"]["n"] = {"backends": [{"name": "b2", "adapter": "sglang", "url": DEAD}]}
    path.write_text(yaml.safe_dump(changed))
    outcome = await gw.reloader.reload("test")

    assert outcome.result == ReloadResult.APPLIED and outcome.version.counter == 2
    assert "1 added, 0 removed, 0 changed, 1 kept" in outcome.message
    assert set(gw.protection.auth.tenants) == {"a", "b"} and gw.protection.config is gw.config
    assert set(gw.backends.pools) == {"m", "n"} and gw.backends.backends["b1"] is b1  # kept as it was
    assert gw.backends.pools["m"].config.routing == "least_loaded"
    # The same store, with what it counted before the reload.
    assert gw.protection.leases.store is store
    after = await store.reserve("a", scopes, 0, "after-the-reload", 30_000)
    assert after.states[0].requests_remaining == 8
    assert reloads(gw, "applied") == 1


async def test_keys_and_counters_in_redis_carry_on_across_a_reload(tmp_path, redis_server):
    store = {"quota_store": {"kind": "redis", "url": redis_server.url}}
    keys = {"mode": "keys", "api_keys": [{"sha256": hash_key("sk-old"), "tenant": "a"}]}
    gw, path = await started(tmp_path, auth=keys, **store)
    try:
        principal = await gw.protection.authenticate({"authorization": "Bearer sk-old"})
        await gw.protection.leases.reserve(principal, gw.protection.leases.scopes_for(principal), budget(), 1)
        redis_store = gw.protection.leases.store

        keys["api_keys"].append({"sha256": hash_key("sk-new"), "tenant": "a"})
        path.write_text(yaml.safe_dump(config(auth=keys, **store)))
        assert (await gw.reloader.reload("test")).result == ReloadResult.APPLIED

        new = await gw.protection.authenticate({"authorization": "Bearer sk-new"})  # at once
        assert gw.protection.leases.store is redis_store
        second = await gw.protection.leases.reserve(new, gw.protection.leases.scopes_for(new), budget(), 1)
        assert second.states[0].requests_remaining == 8  # the minute's first request still counts
    finally:
        await gw.shutdown()


def budget():
    return token_budget(1, 1, 1, 1)


async def test_an_invalid_file_is_refused_and_the_version_stays(running):
    gw, path = running
    before = gw.reloader.version
    path.write_text(yaml.safe_dump(config(tenants={"a": {"requests_per_minute": -1}})))
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.INVALID and outcome.version == before
    assert "tenants.a.requests_per_minute" in outcome.message and "stays in force" in outcome.message
    assert gw.protection.config.tenants["a"].requests_per_minute == 10
    assert reloads(gw, "invalid") == 1


async def test_settings_fixed_at_start_refuse_the_whole_reload(running):
    gw, path = running
    path.write_text(yaml.safe_dump(config(workers=4, quota_store={"kind": "memory", "key_prefix": "other"})))
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.REFUSED
    assert "workers, quota_store cannot change while the gateway runs" in outcome.message
    assert gw.config.workers == 1 and reloads(gw, "refused") == 1


async def test_the_same_config_again_is_unchanged(running):
    gw, path = running
    path.write_text(yaml.safe_dump(config()) + "\n# a comment changes no setting\n")
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.UNCHANGED and outcome.version.counter == 1


async def test_a_config_that_cannot_be_put_in_force_changes_nothing(running, monkeypatch):
    gw, path = running

    def unbuildable(cfg, registry=None, shared=None):
        raise RuntimeError(f"backend {cfg.name}: adapter unavailable")

    monkeypatch.setattr("gateway.backends.backend_set.build_adapter", unbuildable)
    changed = config(tenants={"c": {}})
    changed["models"]["m"]["backends"][0]["url"] = "http://127.0.0.1:10"
    path.write_text(yaml.safe_dump(changed))
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.FAILED and "adapter unavailable" in outcome.message
    assert set(gw.protection.auth.tenants) == {"a"} and gw.backends.backends["b1"].config.url == DEAD
    assert reloads(gw, "failed") == 1


def test_restart_only_settings_are_named():
    active = parse_config(config())
    moved = parse_config(config(listen={"port": 9999}, limits={"max_headers": 50}, log_level="debug"))
    assert restart_only_changes(active, moved) == ["listen", "log_level", "limits.max_headers"]
    assert restart_only_changes(active, parse_config(config(tenants={}))) == []


def test_the_watcher_sees_a_configmap_swap_and_a_rewrite_but_not_a_touch(tmp_path):
    mounted = ConfigFile(tmp_path / "cm", config())
    watch = FileWatch(str(mounted.path))
    assert not watch.changed()
    os.utime(mounted.path, (time.time() + 5, time.time() + 5))  # a touch: same content
    assert not watch.changed()
    mounted.swap(config(tenants={}))  # the ..data symlink swapped
    assert watch.changed() and not watch.changed()
    target = os.path.realpath(mounted.path)
    with open(target, "a") as f:
        f.write("# rewritten in place\n")
    assert watch.changed()
    os.unlink(target)  # mid-swap: no change until it is there again
    assert not watch.changed()


def test_serve_refuses_fewer_than_one_worker(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--workers", "0"])
    assert exc.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def config_info(gw: Gateway) -> dict[tuple[str, str], float]:
    return {
        (s.labels["version"], s.labels["digest"]): s.value
        for family in gw.metrics.registry.collect()
        if family.name == "switchyard_config_info"
        for s in family.samples
    }


async def test_the_config_in_force_is_a_metric_and_every_reload_result_is_counted_from_zero(running):
    gw, path = running
    first = gw.reloader.version
    assert config_info(gw) == {("1", first.digest): 1.0}
    assert {r: reloads(gw, r) for r in ("applied", "unchanged", "invalid", "refused", "failed")} == dict.fromkeys(
        ("applied", "unchanged", "invalid", "refused", "failed"), 0.0
    )
    assert gw.metrics.registry.get_sample_value("switchyard_config_reloads_total", {"result": "failed"}) == 0.0
    path.write_text(yaml.safe_dump(config(tenants={"a": {"requests_per_minute": 20}})))
    assert (await gw.reloader.reload("test")).result == ReloadResult.APPLIED
    second = gw.reloader.version
    assert second.digest != first.digest
    assert config_info(gw) == {("2", second.digest): 1.0}  # the old version's series is gone, not 0
    path.write_text("models: [")
    assert (await gw.reloader.reload("test")).result == ReloadResult.INVALID
    assert config_info(gw) == {("2", second.digest): 1.0} and reloads(gw, "invalid") == 1


async def health_server(port: int) -> asyncio.Server:
    """A runtime that answers every request 200 (its /health), on a real loopback socket."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", port)


def moved_to(url: str, **reload) -> dict:
    changed = config(reload=reload)
    changed["models"]["m"]["backends"][0]["url"] = url
    return changed


async def test_preflight_refuse_keeps_the_old_backend_when_the_new_one_is_down(running):
    gw, path = running
    dead = f"http://127.0.0.1:{free_port()}"
    path.write_text(yaml.safe_dump(moved_to(dead, preflight="refuse")))
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.FAILED and outcome.version.counter == 1
    assert "b1 (" in outcome.message and "at once (reload.preflight: refuse)" in outcome.message
    assert gw.backends.backends["b1"].config.url == DEAD and gw.config.reload.preflight == "wait"
    assert reloads(gw, "failed") == 1


async def test_preflight_wait_gives_up_after_its_timeout(running):
    gw, path = running
    path.write_text(yaml.safe_dump(moved_to(f"http://127.0.0.1:{free_port()}", preflight_timeout_s=0.3)))
    outcome = await gw.reloader.reload("test")
    assert outcome.result == ReloadResult.FAILED and "within 0.3 s (reload.preflight: wait)" in outcome.message
    assert gw.backends.backends["b1"].config.url == DEAD


async def test_preflight_wait_puts_the_config_in_force_once_the_new_backend_answers(running):
    gw, path = running
    port = free_port()
    path.write_text(yaml.safe_dump(moved_to(f"http://127.0.0.1:{port}", preflight_interval_s=0.05)))
    reload = asyncio.create_task(gw.reloader.reload("test"))
    await asyncio.sleep(0.3)  # the reload has checked the new backend: down, so it waits
    assert not reload.done() and gw.backends.backends["b1"].config.url == DEAD
    server = await health_server(port)
    try:
        outcome = await asyncio.wait_for(reload, 30)
    finally:
        server.close()
    assert outcome.result == ReloadResult.APPLIED and outcome.version.counter == 2
    assert gw.backends.backends["b1"].config.url == f"http://127.0.0.1:{port}"


async def test_preflight_off_puts_a_dead_backend_in_force(running):
    gw, path = running
    dead = f"http://127.0.0.1:{free_port()}"
    path.write_text(yaml.safe_dump(moved_to(dead, preflight="off")))
    assert (await gw.reloader.reload("test")).result == ReloadResult.APPLIED
    assert gw.backends.backends["b1"].config.url == dead


def backend_gauges(gw: Gateway, name: str) -> tuple:
    gw.ops.metrics_text()  # what a scrape sets
    get = gw.metrics.registry.get_sample_value
    return tuple(
        get(metric, {"backend": name})
        for metric in (
            "switchyard_backend_healthy",
            "switchyard_backend_inflight",
            "switchyard_backend_prefill_backlog_tokens",
        )
    )


async def test_a_retired_backends_gauges_fall_to_zero_rather_than_vanish(running):
    gw, path = running
    old = gw.backends.backends["b1"]
    held = gw.inflight.enter(1, None)  # a request of version 1 keeps b1 open after the reload
    old.inflight = 2
    assert backend_gauges(gw, "b1") == (0.0, 2.0, 0.0)  # in force (its DEAD url fails health)
    changed = config(reload={"preflight": "off"})
    changed["models"]["m"]["backends"] = [{"name": "b2", "adapter": "vllm", "url": DEAD}]
    path.write_text(yaml.safe_dump(changed))
    assert (await gw.reloader.reload("test")).result == ReloadResult.APPLIED
    assert "b1" not in gw.backends.backends and gw.lifecycle.retired_backends() == [old]
    assert backend_gauges(gw, "b1") == (0.0, 2.0, 0.0)  # out of service, its requests still counted
    old.inflight = 0
    gw.inflight.leave(held)
    await gw.lifecycle.close_unused()
    assert gw.lifecycle.retired_backends() == []
    assert backend_gauges(gw, "b1") == (0.0, 0.0, 0.0)  # closed: 0, not gone


def test_the_swap_steps_edit_a_copy_and_the_watcher_sees_only_the_move(tmp_path):
    # docs/operations.md, "Swapping vLLM for SGLang": edit FILE.new, check it, mv it over FILE.
    served = tmp_path / "config.yaml"
    served.write_text(yaml.safe_dump(config()))
    watch = FileWatch(str(served))
    copy = tmp_path / "config.yaml.new"
    copy.write_text(served.read_text())
    copy.write_text(yaml.safe_dump(config(tenants={"a": {"requests_per_minute": 20}})))
    assert not watch.changed()  # saves of the copy are not seen
    assert main(["config", "check", str(copy)]) == 0
    os.replace(copy, served)
    assert watch.changed() and not watch.changed()
