"""The backend set on its own (gateway/backends/backend_set.py): the adapter each backend
config builds, with every transport setting; a reload's plan and apply (what is kept, what
is rebuilt, what is retired and closed), the preflight's wait, the health and load probes
and their loops, and what the set says of itself. Scripted adapters, no process."""

from __future__ import annotations

import asyncio
import importlib
import logging

import pytest

from adapters.base import Health
from adapters.http_adapter import HTTPAdapter
from adapters.kv_events_zmq import KVEventSubscriber
from adapters.vllm import VLLMDialect
from gateway.backends import backend_set as module
from gateway.backends.backend_set import ADAPTER_CLASSES, BackendSet, Retired, build_adapter
from gateway.backends.kv_feeds import KVFeed
from gateway.config.schema import BackendConfig, parse_config
from policies.kv_index import KVBlockIndex
from processes.install import install_hint
from tests.gateway.scripted import ScriptedAdapter, _Overriding, always


def openai(name: str, url: str = "http://127.0.0.1:9/v1", **kw) -> dict:
    return {"name": name, "adapter": "openai", "url": url, **kw}


def config(**models: list[dict]):
    return parse_config({"models": {m: {"backends": b} for m, b in models.items()}})


class Closing(ScriptedAdapter):
    """A scripted adapter that notes its closing, its health probes and its load, and can fail each."""

    def __init__(self, name: str, *, healthy: bool = True, fail_close: bool = False, load=None) -> None:
        super().__init__(name, always())
        self.healthy, self.fail_close, self.loaded = healthy, fail_close, load
        self.closed = 0
        self.probes = 0

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail_close:
            raise RuntimeError("cannot close")

    async def health(self) -> Health:
        self.probes += 1
        if self.healthy is None:
            raise RuntimeError("probe broke")
        return Health(self.healthy, "scripted")

    def subscribe_kv_events(self, sink) -> None:  # as the native engine does, for its in-process feed
        self.sinks = [*getattr(self, "sinks", []), sink]

    def kv_block_hashes(self, request) -> list[int]:
        return []

    async def load(self):
        if isinstance(self.loaded, Exception):
            raise self.loaded
        return self.loaded


async def until(condition, timeout_s: float = 10.0) -> None:
    """Wait for `condition` (a loop's effect), however loaded the machine is."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture
def scripted(monkeypatch):
    """Every adapter the set builds is a `Closing`, kept by backend name (the last one built)."""
    built: dict[str, Closing] = {}

    def build(cfg, registry=None, shared=None):
        key = ("native", cfg.model_path, cfg.served_model)  # native backends of one model share an engine
        if cfg.adapter == "native" and shared is not None and key in shared:
            return shared[key]
        built[cfg.name] = Closing(cfg.name, healthy=cfg.options.get("healthy", True))
        if cfg.adapter == "native" and shared is not None:
            shared[key] = built[cfg.name]
        return built[cfg.name]

    monkeypatch.setattr(module, "build_adapter", build)
    return built


def test_each_http_runtime_gets_its_dialect_and_every_transport_setting():
    cfg = BackendConfig.model_validate(
        {
            "name": "b",
            "adapter": "vllm",
            "url": "http://10.0.0.1:8000",
            "served_model": "served",
            "options": {"x": 1},
            "timeout_s": 11,
            "connect_timeout_s": 2,
            "first_byte_timeout_s": 3,
            "stream_idle_timeout_s": 4,
            "pool_wait_s": 7,
            "max_connections": 6,
        }
    )
    adapter = build_adapter(cfg)
    assert isinstance(adapter, HTTPAdapter) and isinstance(adapter.dialect, VLLMDialect)
    assert adapter.name == "b" and adapter.dialect.served_model == "served"
    t = adapter.transport
    assert (t.backend, t.base_url, t.timeout_s, t.first_byte_timeout_s, t.stream_idle_timeout_s) == (
        "b",
        "http://10.0.0.1:8000",
        11,
        3,
        4,
    )
    assert t._connect == (7 + 2, 2) and t._max_connections == 6
    for kind, (module_name, class_name) in ADAPTER_CLASSES.items():
        assert hasattr(importlib.import_module(module_name), class_name), kind


def test_an_adapter_whose_module_is_missing_says_so_and_what_to_install(monkeypatch):
    real = importlib.import_module

    def missing(name, *a):
        if name in ("adapters.vllm", "adapters.native"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *a)

    monkeypatch.setattr(module.importlib, "import_module", missing)
    vllm = BackendConfig.model_validate({"name": "b", "adapter": "vllm", "url": "http://h:1"})
    with pytest.raises(RuntimeError) as caught:
        build_adapter(vllm)
    assert str(caught.value) == "backend b: adapter 'vllm' is unavailable: No module named 'adapters.vllm'"
    native = BackendConfig.model_validate({"name": "n", "adapter": "native", "model_path": "builtin:tiny"})
    with pytest.raises(RuntimeError) as caught:
        build_adapter(native)
    assert str(caught.value).endswith(f" (the native engine: {install_hint('engine')})")
    assert str(caught.value).startswith("backend n: adapter 'native' is unavailable: No module named")


def test_native_backends_of_one_model_share_one_engine(monkeypatch):
    made = []

    class Engine:
        def __init__(self, name, model_path, *, served_name, engine_options, registry):
            made.append((name, model_path, served_name, engine_options, registry))

    monkeypatch.setattr(module.importlib, "import_module", lambda name: type("M", (), {"NativeAdapter": Engine}))

    def native(name: str, path: str = "builtin:tiny", served: str | None = None) -> BackendConfig:
        cfg = BackendConfig.model_validate(
            {
                "name": name,
                "adapter": "native",
                "model_path": "builtin:tiny",
                "served_model": served,
                "options": {"a": 1},
            }
        )
        return cfg.model_copy(update={"model_path": path})  # another model, without one on disk

    kept = object()  # an engine a kept backend runs: a new backend of its model gets it
    assert build_adapter(native("k"), "reg", {("native", "builtin:tiny", "kept"): kept}) is not kept
    assert build_adapter(native("k", served="kept"), "reg", {("native", "builtin:tiny", "kept"): kept}) is kept
    made.clear()
    shared: dict = {}
    first = build_adapter(native("a"), "reg", shared)
    assert build_adapter(native("b"), "reg", shared) is first
    assert build_adapter(native("c", served="other"), "reg", shared) is not first
    assert build_adapter(native("d", path="builtin:other"), "reg", shared) is not first
    assert build_adapter(native("e"), "reg", None) is not first  # nothing shared where no table is kept
    assert made[0] == ("a", "builtin:tiny", None, {"a": 1}, "reg") and len(made) == 4
    assert made[1][2] == "other"  # the served name goes to the engine


async def test_a_reload_keeps_what_is_unchanged_rebuilds_what_changed_and_retires_the_rest(scripted):
    backends = BackendSet(config(m=[openai("a"), openai("b")], n=[openai("c")]))
    a, b, c = (backends.backends[x] for x in "abc")
    m_pool, n_pool = backends.pools["m"], backends.pools["n"]
    plan = await backends.plan(config(m=[openai("a"), openai("b", "http://127.0.0.1:8/v1")], n=[openai("c")]))
    assert [x.name for x in plan.built] == ["b"] and plan.backends["a"] is a and plan.backends["b"] is not b
    assert plan.pools["n"] is n_pool and plan.pools["m"] is not m_pool  # a pool of a changed backend is new
    assert scripted["b"].probes == 1 and scripted["a"].probes == 0  # only what was built is checked
    retired = backends.apply(plan)
    assert backends.backends["b"] is plan.backends["b"] and backends.pools["m"] is plan.pools["m"]
    assert retired.backends == [b] and retired.adapters == [b.adapter] and retired.feeds == []
    assert b.adapter.closed == 0  # requests under way still hold it
    await retired.aclose()
    assert b.adapter.closed == 1 and a.adapter.closed == 0 and c.adapter.closed == 0


async def test_a_pool_whose_config_changed_is_new_even_with_the_same_backends(scripted):
    backends = BackendSet(config(m=[openai("a")]))
    pool = backends.pools["m"]
    changed = parse_config({"models": {"m": {"backends": [openai("a")], "routing": "least_loaded"}}})
    plan = await backends.plan(changed)
    assert plan.built == [] and plan.pools["m"] is not pool and plan.backends["a"] is backends.backends["a"]


async def test_a_backend_serving_two_models_is_built_once_by_its_first_mention(scripted):
    backends = BackendSet(config(m=[openai("a")], n=[openai("a")]))
    assert backends.pools["m"].backends[0] is backends.pools["n"].backends[0]
    assert list(backends.backends) == ["a"]


async def test_a_plan_that_fails_to_build_closes_what_it_built_and_a_discarded_one_too(scripted, monkeypatch):
    backends = BackendSet(config(m=[openai("a")]))
    build = module.build_adapter

    def failing(cfg, registry=None, shared=None):
        if cfg.name == "z":
            raise RuntimeError("cannot build z")
        return build(cfg, registry, shared)

    monkeypatch.setattr(module, "build_adapter", failing)
    with pytest.raises(RuntimeError, match="cannot build z"):
        await backends.plan(config(m=[openai("a"), openai("y"), openai("z")]))
    assert scripted["y"].closed == 1 and scripted["a"].closed == 0
    plan = await backends.plan(config(m=[openai("a"), openai("x")]))
    await backends.discard(plan)
    assert scripted["x"].closed == 1 and scripted["a"].closed == 0 and "x" not in backends.backends


async def test_the_preflight_rechecks_the_down_backends_until_they_answer_or_time_runs_out(scripted):
    backends = BackendSet(config(m=[openai("a")]))
    plan = await backends.plan(config(m=[openai("a"), openai("b", options={"healthy": False})]))
    down = scripted["b"]
    assert [x.name for x in await backends.preflight(plan, 0, 0.01)] == ["b"] and down.probes == 1
    assert [x.name for x in await backends.preflight(plan, 0.05, 0.01)] == ["b"] and down.probes > 2
    loop = asyncio.get_running_loop()
    loop.call_later(0.03, lambda: setattr(down, "healthy", True))
    started = loop.time()
    assert await backends.preflight(plan, 5, 0.01) == []
    assert loop.time() - started < 1


async def test_health_and_load_probes_note_failures_and_their_loops_carry_on(scripted, caplog):
    backends = BackendSet(config(m=[openai("a"), openai("b")]), health_interval_s=0.01, load_interval_s=0.01)
    scripted["a"].healthy = None  # its probe raises
    scripted["a"].loaded = RuntimeError("no load")
    scripted["b"].loaded = "load of b"
    await backends.refresh_health()
    assert backends.backends["a"].health == Health(False, "health check failed: RuntimeError('probe broke')")
    assert backends.backends["b"].health.ok
    assert backends.ready() == {"m": True}
    await backends.refresh_load()
    assert backends.backends["a"].load is None and backends.backends["b"].load == "load of b"
    calls = []

    async def flaky() -> None:
        calls.append(1)
        raise RuntimeError("refresh broke")

    with caplog.at_level(logging.ERROR, logger="switchyard.backends"):
        task = asyncio.create_task(backends._loop(flaky, 0.01))
        await until(lambda: len(calls) >= 2)  # it carried on after the first failure
        task.cancel()
    assert "backend refresh failed" in caplog.text
    await backends.start()
    assert len(backends._tasks) == 2
    before = scripted["b"].probes
    await until(lambda: scripted["b"].probes > before)  # the health loop runs on its interval
    tasks = list(backends._tasks)
    await backends.aclose()
    assert backends._tasks == [] and scripted["a"].closed == scripted["b"].closed == 1
    assert all(t.done() for t in tasks)  # the loops are ended, not only told to


async def test_a_model_is_ready_while_one_of_its_backends_is_healthy(scripted):
    backends = BackendSet(config(m=[openai("a"), openai("b")], n=[openai("c")]))
    for name, ok in (("a", False), ("b", True), ("c", False)):
        backends.backends[name].health = Health(ok, "set")
    assert backends.ready() == {"m": True, "n": False}
    assert not backends.serves_in_process("a") and not backends.serves_in_process("nope")


async def test_a_retired_adapter_that_fails_to_close_leaves_the_others_closed(caplog):
    first, second = Closing("a", fail_close=True), Closing("b")
    with caplog.at_level(logging.ERROR, logger="switchyard.backends"):
        await Retired([], [first, second], []).aclose()
    assert first.closed == second.closed == 1
    assert "closing a retired backend's adapter failed" in caplog.text


async def test_only_a_native_backend_in_force_serves_in_process(scripted):
    native = {"name": "n", "adapter": "native", "model_path": "builtin:tiny"}
    backends = BackendSet(config(m=[openai("a"), native]))
    assert backends.serves_in_process("n") and not backends.serves_in_process("a")


class Subscriber:
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_a_retired_feeds_subscriber_is_closed_and_a_failed_close_logged_as_such(caplog):
    with_one, without = (
        KVFeed(KVBlockIndex(), lambda r, s: None, ("s",)),
        KVFeed(KVBlockIndex(), lambda r, s: None, ("s",)),
    )
    with_one.subscriber = Subscriber()  # type: ignore[assignment]
    failing = Closing("a", fail_close=True)
    with caplog.at_level(logging.ERROR, logger="switchyard.backends"):
        await Retired([], [failing], [with_one, without]).aclose()
    assert with_one.subscriber.closed == 1  # type: ignore[union-attr]
    assert [r.getMessage() for r in caplog.records] == ["closing a retired backend's adapter failed"]


class FrozenLoop:
    """A loop whose clock stands still: a preflight with no time left must not wait."""

    def time(self) -> float:
        return 100.0


async def test_a_preflight_with_no_time_left_answers_at_once(scripted, monkeypatch):
    backends = BackendSet(config(m=[openai("a")]))
    plan = await backends.plan(config(m=[openai("a"), openai("b", options={"healthy": False})]))
    monkeypatch.setattr(module, "asyncio", _Overriding(asyncio, get_running_loop=FrozenLoop))
    async with asyncio.timeout(2):
        assert [x.name for x in await backends.preflight(plan, 0, 0.01)] == ["b"]
    assert scripted["b"].probes == 1


async def test_the_load_loop_refreshes_each_backends_load_within_five_seconds_a_probe(scripted, monkeypatch, caplog):
    waits = []

    def timeout(delay):
        waits.append(delay)
        return asyncio.timeout(delay)

    monkeypatch.setattr(module, "asyncio", _Overriding(asyncio, timeout=timeout))
    backends = BackendSet(config(m=[openai("a")]), health_interval_s=60, load_interval_s=0.01)
    await backends.start()
    scripted["a"].loaded = "fresh"
    await until(lambda: backends.backends["a"].load == "fresh")
    await backends.aclose()
    assert backends.backends["a"].load == "fresh" and set(waits) >= {5, 10}  # load 5 s, health 10 s

    async def flaky() -> None:
        raise RuntimeError("refresh broke")

    with caplog.at_level(logging.ERROR, logger="switchyard.backends"):
        task = asyncio.create_task(backends._loop(flaky, 0.01))
        await until(lambda: len(caplog.records) >= 1)
        task.cancel()
    assert {r.getMessage() for r in caplog.records} == {"backend refresh failed"}


async def test_an_adapter_two_backends_share_is_closed_once(scripted):
    backends = BackendSet(config(m=[openai("a"), openai("b")]))
    backends.backends["b"].adapter = backends.backends["a"].adapter  # as native backends of one model share
    await backends.aclose()
    assert scripted["a"].closed == 1 and scripted["b"].closed == 0


async def test_a_reload_gives_a_new_native_backend_the_engine_a_kept_one_runs(monkeypatch):
    class Engine(Closing):
        def __init__(self, name, model_path, *, served_name, engine_options, registry):
            super().__init__(name)
            self.registry = registry

    monkeypatch.setattr(module.importlib, "import_module", lambda name: type("M", (), {"NativeAdapter": Engine}))
    native = {"adapter": "native", "model_path": "builtin:tiny"}
    backends = BackendSet(config(m=[{"name": "a", **native}]), registry="reg")
    assert backends.registry == "reg" and backends.backends["a"].adapter.registry == "reg"  # type: ignore[attr-defined]
    assert (backends.health_interval_s, backends.load_interval_s) == (5.0, 2.0)  # the defaults
    plan = await backends.plan(config(m=[{"name": "a", **native}, {"name": "b", **native}]))
    assert plan.backends["b"].adapter is backends.backends["a"].adapter and [b.name for b in plan.built] == ["b"]


def vllm(name: str, port: int) -> dict:
    return {
        "name": name,
        "adapter": "vllm",
        "url": "http://127.0.0.1:9",
        "kv_events": {"endpoint": f"tcp://127.0.0.1:{port}"},
    }


async def test_a_reload_keeps_the_feeds_of_kept_backends_and_starts_and_retires_the_others(scripted, monkeypatch):
    started: list[str] = []
    monkeypatch.setattr(KVEventSubscriber, "start", lambda self: started.append(self.name))
    backends = BackendSet(config(m=[vllm("a", 1), vllm("b", 2)]))
    old_a, old_b = backends.feeds["a"], backends.feeds["b"]
    assert backends.pools["m"].feeds == {"a": old_a, "b": old_b}
    backends._tasks.append(asyncio.create_task(asyncio.sleep(0)))  # started: new feeds start when applied
    plan = await backends.plan(config(m=[vllm("a", 1), vllm("b", 3)]))
    assert plan.feeds["a"] is old_a and plan.feeds["b"] is not old_b
    assert plan.pools["m"].name == "m" and plan.pools["m"].feeds == {"a": old_a, "b": plan.feeds["b"]}
    retired = backends.apply(plan)
    assert started == ["b"] and retired.feeds == [old_b] and backends.feeds == plan.feeds
    await asyncio.gather(*backends._tasks)
    backends._tasks.clear()


async def test_native_backends_get_an_in_process_feed_where_the_routing_is_precise_and_share_one_engines(scripted):
    native = {"adapter": "native", "model_path": "builtin:tiny"}
    plain = BackendSet(config(m=[{"name": "n", **native}]))
    assert plain.feeds == {}
    models = {"m": {"backends": [{"name": "n", **native}, {"name": "o", **native}], "routing": "precise"}}
    precise = BackendSet(parse_config({"models": models}))
    assert set(precise.feeds) == {"n", "o"} and precise.feeds["n"].names_own_blocks
    precise.backends["o"].adapter = precise.backends["n"].adapter  # one engine, as build_adapter shares it
    plan = await precise.plan(parse_config({"models": {**models, "x": {"backends": [{"name": "n", **native}]}}}))
    assert plan.feeds["n"] is precise.feeds["n"] and plan.built == []
    assert plan.pools["m"] is precise.pools["m"] and plan.pools["x"].backends == [precise.backends["n"]]


async def test_backends_of_one_engine_share_its_feed_and_its_adapter_is_retired_only_with_the_last(scripted):
    native = {"adapter": "native", "model_path": "builtin:tiny"}

    def precise(*names: str):
        return parse_config(
            {"models": {"m": {"backends": [{"name": n, **native} for n in names], "routing": "precise"}}}
        )

    backends = BackendSet(precise("n", "o"))
    assert backends.backends["o"].adapter is backends.backends["n"].adapter
    assert backends.feeds["o"] is backends.feeds["n"]  # one engine, one feed
    plan = await backends.plan(precise("n", "o", "p"))  # a new backend on the kept engine
    assert plan.backends["p"].adapter is backends.backends["n"].adapter and plan.feeds["p"] is backends.feeds["n"]
    retired = backends.apply(plan)
    assert retired.adapters == [] and retired.feeds == []
    retired = backends.apply(await backends.plan(precise("n")))  # o and p go; n still runs the engine
    assert [b.name for b in retired.backends] == ["o", "p"] and retired.adapters == [] and retired.feeds == []


async def test_each_adapter_a_reload_leaves_unused_is_retired(scripted):
    backends = BackendSet(config(m=[openai("a"), openai("b"), openai("c")]))
    retired = backends.apply(await backends.plan(config(m=[openai("a")])))
    assert retired.adapters == [scripted["b"], scripted["c"]]
