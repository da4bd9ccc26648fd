"""A routing, ejection, saturation, session, KV-index or rollout-plan setting is written once: the
gateway's config embeds the policy's own pydantic type, never a copy of its fields,
and a bad value is refused by that type with the config path that holds it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from pydantic import BaseModel

import gateway.config
from gateway.backends.backend_set import BackendSet
from gateway.config.rollout import RolloutConfig
from gateway.config.schema import BackendConfig, ConfigError, KVEventsConfig, ModelConfig, parse_config
from policies.ejection import EjectionConfig
from policies.kv_index import KVIndexSettings
from policies.rollout import GateLimits
from policies.rollout_state import MirrorSettings, PlanSettings
from policies.saturation import SaturationDetector
from policies.session import SessionAffinity
from policies.settings import Settings

BACKEND = {"name": "b", "adapter": "vllm", "url": "http://127.0.0.1:9"}


def model(**fields) -> dict:
    return {"models": {"m": {"backends": [BACKEND], **fields}}}


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_the_config_embeds_the_policies_own_types():
    fields = ModelConfig.model_fields
    assert fields["saturation"].annotation is SaturationDetector
    assert fields["session_affinity"].annotation is SessionAffinity
    assert fields["ejection"].annotation is EjectionConfig
    assert issubclass(KVEventsConfig, KVIndexSettings)
    assert BackendConfig.model_fields["kv_events"].annotation == KVEventsConfig | None
    assert issubclass(RolloutConfig, PlanSettings) and PlanSettings.model_fields["gates"].annotation is GateLimits
    assert PlanSettings.model_fields["mirror"].annotation is MirrorSettings


async def test_a_pool_reads_its_settings_as_configured_not_copied():
    cfg = parse_config(model(saturation={"queue_depth": 2}, ejection={"min_retries": 3}, session_affinity={"ttl_s": 9}))
    bs = BackendSet(cfg)
    try:
        pool, m = bs.pools["m"], cfg.models["m"]
        assert pool.detector is m.saturation and pool.ejection.config is m.ejection
        assert pool.retry_budget.config is m.ejection and pool.sessions.settings is m.session_affinity
    finally:
        await bs.aclose()


def test_no_config_section_mirrors_a_policys_settings():
    for info in pkgutil.iter_modules(gateway.config.__path__):
        importlib.import_module(f"gateway.config.{info.name}")
    sections = {c for c in _subclasses(BaseModel) if c.__module__.startswith("gateway.config.")}
    policy_types = {c for c in _subclasses(Settings) if c.__module__.startswith("policies.")}
    assert {
        SaturationDetector,
        SessionAffinity,
        EjectionConfig,
        KVIndexSettings,
        GateLimits,
        PlanSettings,
    } <= policy_types
    for section in sections:
        # A section carries a policy's fields only by being (a subclass of) its type.
        inherited = set().union(*(p.model_fields for p in policy_types if issubclass(section, p)))
        for policy in policy_types:
            if issubclass(section, policy):
                continue
            shared = (set(section.model_fields) - inherited) & set(policy.model_fields)
            assert len(shared) < 2, f"{section.__name__} repeats {policy.__name__}'s fields {sorted(shared)}"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"saturation": {"kv_cache_utilization": 1.5}}, "models.m.saturation.kv_cache_utilization"),
        ({"saturation": {"queue_depth": 5, "queue": 1}}, "models.m.saturation.queue"),
        ({"ejection": {"error_rate": 0}}, "models.m.ejection.error_rate"),
        ({"ejection": {"min_retries": -1}}, "models.m.ejection.min_retries"),
        ({"session_affinity": {"sources": ["cookie"]}}, "models.m.session_affinity.sources.0"),
        ({"session_affinity": {"max_sessions": 0}}, "models.m.session_affinity.max_sessions"),
    ],
)
def test_a_bad_setting_is_refused_where_it_is_written(fields, where):
    with pytest.raises(ConfigError, match=f"{where}: "):
        parse_config(model(**fields))


def test_a_bad_kv_index_setting_is_refused_in_the_backends_kv_events():
    events = {"endpoint": "tcp://127.0.0.1:1", "max_blocks": 0}
    with pytest.raises(ConfigError, match="models.m.backends.0.kv_events.max_blocks: "):
        parse_config({"models": {"m": {"backends": [{**BACKEND, "kv_events": events}]}}})


def test_settings_are_frozen_so_no_decision_changes_them():
    detector = SaturationDetector()
    with pytest.raises(ValueError, match="frozen"):
        detector.queue_depth = 1
    assert Settings.model_config.get("extra") == "forbid"
