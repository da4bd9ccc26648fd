"""Routing has one pipeline: every name `models.<name>.routing` accepts is a profile of
it, both ways a pool orders its backends (a generation's `route`, a one-shot call's
`order`) end in its one entry point, and nothing else in the tree orders candidates:
a second ordering path makes one of these tests fail."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from adapters.base import GenerationRequest
from gateway.backends import pool as pool_module
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import ConfigError, parse_config
from policies.pickers import PICKERS
from policies.profiles import PROFILES, PickerName, ProfileName
from policies.routing import RouteResult

ROOT = Path(__file__).parents[3]
PIPELINE = "policies/routing.py"


def backends(n: int = 3) -> list[dict]:
    return [{"name": f"b{i}", "adapter": "vllm", "url": "http://127.0.0.1:9"} for i in range(n)]


def test_every_routing_name_is_a_profile_and_every_picker_is_named():
    assert set(PROFILES) == set(get_args(ProfileName))
    assert set(PICKERS) == set(get_args(PickerName))
    assert {p.picker for p in PROFILES.values()} == set(PICKERS)  # no picker that no name reaches
    for name in get_args(ProfileName):
        model = parse_config({"models": {"m": {"routing": name, "backends": backends(1)}}}).models["m"]
        assert model.routing == name
    with pytest.raises(ConfigError, match="routing.name: Input should be 'round_robin'"):
        parse_config({"models": {"m": {"routing": "fastest", "backends": backends(1)}}})


@pytest.mark.parametrize("profile", [*get_args(ProfileName), {"picker": "least_loaded"}, {"scorers": {"queue": 1}}])
async def test_both_ways_a_pool_orders_its_backends_are_the_one_entry_point(profile, monkeypatch):
    calls: list[RouteResult] = []
    real = pool_module.route

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(pool_module, "route", spy)
    bs = BackendSet(parse_config({"models": {"m": {"routing": profile, "backends": backends()}}}))
    try:
        pool = bs.pools["m"]
        req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], session_keys={"user": "u"})
        assert pool.route(req) is calls[-1] and len(calls) == 1
        assert pool.order(req, pool.backends[1:]) is calls[-1] and len(calls) == 2
        assert [b.name for b in calls[-1].candidates] in (["b1", "b2"], ["b2", "b1"])
    finally:
        await bs.aclose()


def _sources(*dirs: str) -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text()) for d in dirs for p in sorted((ROOT / d).rglob("*.py"))}


def test_only_the_pipeline_picks_and_builds_a_route_result_and_only_the_pool_calls_it():
    builds, picks, callers = set(), set(), set()
    for path, tree in _sources("gateway", "policies", "adapters").items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RouteResult":
                builds.add(path)
            if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "PICKERS":
                picks.add(path)
            if isinstance(node, ast.ImportFrom) and node.module == "policies.routing":
                if any(alias.name == "route" for alias in node.names):
                    callers.add(path)
    assert builds == {PIPELINE} and picks == {PIPELINE}
    assert callers == {"gateway/backends/pool.py"}
