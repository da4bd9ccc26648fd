"""The production stage's `replicas` and `quota` checks on vLLM simulators behind their own
gateways (real processes): a good candidate spreads sessions over a pool of two
instances, keeps a session on one, fails over with no failed request when an instance
stops, and refuses a tenant over its quota with 429 + Retry-After while serving another;
a gateway routing by turns (round robin) fails `replicas`, and one whose quota store fails closed
(its Redis unreachable: 503 without Retry-After, from the first request) fails `quota`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bakeoff.stages import production, production_quota, production_replicas
from bakeoff.verdict import CandidateTarget
from gateway.config.schema import GatewayConfig
from processes import free_port
from tests.bakeoff.stages.candidates import candidate, outcomes

BUDGET_S = 120.0
SETTINGS = production.Settings(checks=["replicas", "quota"], failover_hold_s=2.0)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Iterator[CandidateTarget]:
    with candidate(tmp_path_factory.mktemp("pool-good"), "good", itl_ms=1) as target:
        yield target


async def test_a_good_candidate_passes_replicas_and_quota(good: CandidateTarget) -> None:
    assert good.config_path is not None
    original = Path(good.config_path).read_text()
    result = await production.run(good, SETTINGS, BUDGET_S)
    assert outcomes(result) == {"replicas": "pass", "quota": "pass"}, result.checks
    replicas, quota = result.checks
    assert replicas.evidence["routing"] == "blended"  # the model named none: one that keeps sessions
    spread = replicas.evidence["spread"]["by_backend"]
    assert set(spread) == {"sim", "sim-replica"} and all(spread.values())
    assert list(replicas.evidence["session"]["by_backend"].values()).count(0) <= 1
    stopped = replicas.evidence["failover"]
    assert stopped["traffic"]["ok"] > 0 and set(stopped["traffic"]) == {"ok"}
    assert quota.evidence["limited"] == {"answered": 3, "429 with Retry-After": 3}
    assert quota.evidence["other"] == {"answered": 6}
    assert Path(good.config_path).read_text() == original  # the candidate was left as it was found


async def test_a_gateway_routing_round_robin_does_not_keep_a_session_on_its_instance(tmp_path: Path) -> None:
    config = {"model": {"routing": "round_robin"}}  # the model's own routing is kept: by turns
    with candidate(tmp_path, "forgetful", config=config, itl_ms=1) as target:
        result = await production.run(target, SETTINGS.model_copy(update={"checks": ["replicas"]}), BUDGET_S)
    assert outcomes(result) == {"replicas": "fail"}, result.checks
    assert "did not keep one instance (routing round_robin)" in result.checks[0].detail


async def test_a_quota_store_that_fails_closed_answers_503_not_429_with_retry_after(tmp_path: Path) -> None:
    # a Redis nobody listens on, and the policy to refuse when it cannot be reached
    store = {"kind": "redis", "url": f"redis://127.0.0.1:{free_port()}/0", "on_unavailable": "fail_closed"}
    with candidate(tmp_path, "closed", config={"quota_store": store}, itl_ms=1) as target:
        result = await production.run(target, SETTINGS.model_copy(update={"checks": ["quota"]}), BUDGET_S)
    assert outcomes(result) == {"quota": "fail"}, result.checks
    # every request of the limited tenant is refused as the store's outage, not as its quota
    assert "the tenant over its quota got {'503': 6}" in result.checks[0].detail


async def test_replicas_and_quota_need_the_admin_key_and_a_second_instance(good: CandidateTarget) -> None:
    anonymous = CandidateTarget(name="anon", runtime="vllm", gateway_url=good.gateway_url, model=good.model)
    result = await production.run(anonymous, SETTINGS, BUDGET_S)
    assert outcomes(result) == {"replicas": "skip", "quota": "skip"}
    alone = CandidateTarget(**{**good.__dict__, "replica": None})
    result = await production.run(alone, SETTINGS.model_copy(update={"checks": ["replicas"]}), BUDGET_S)
    assert outcomes(result) == {"replicas": "skip"} and "no second instance" in result.checks[0].detail


def test_the_quota_tenants_join_a_config_whose_keys_name_tenants_without_a_tenants_section() -> None:
    """A launched gateway's config: keys of the workload's tenants, no tenants section (the
    gateway refuses a tenants section that leaves out a key's tenant)."""
    keys = [{"sha256": "0" * 64, "tenant": "acme"}]
    config = {"auth": {"mode": "keys", "api_keys": keys}, "models": {"m": {"backends": [{"name": "b", "adapter": "vllm", "url": "http://127.0.0.1:9"}]}}}  # fmt: skip
    text = production_quota.with_tenants(yaml.safe_dump(config), {"bakeoff-quota-limited": "k1", "bakeoff-quota-other": "k2"}, 3)  # fmt: skip
    assert text is not None
    checked = GatewayConfig.model_validate(yaml.safe_load(text))
    assert checked.tenants["acme"].requests_per_minute is None
    assert checked.tenants["bakeoff-quota-limited"].requests_per_minute == 3
    assert [k.tenant for k in checked.auth.api_keys] == ["acme", "bakeoff-quota-limited", "bakeoff-quota-other"]


@pytest.mark.parametrize(
    ("stopped", "outcome"),
    [
        ({"ejected": 1.0, "healthy": 1.0, "late_attempts": 3.0}, "pass"),  # ejected
        ({"ejected": 0.0, "healthy": 0.0, "late_attempts": 3.0}, "pass"),  # its health check failed
        ({"ejected": 0.0, "healthy": 1.0, "late_attempts": 0.0}, "pass"),  # steered around: no longer tried
        ({"ejected": 0.0, "healthy": 1.0, "late_attempts": 2.0}, "fail"),  # still tried, and failing over
    ],
)
def test_a_stopped_instance_must_leave_rotation(stopped: dict[str, float], outcome: str) -> None:
    evidence = {
        "routing": "blended",
        "spread": {"answers": {"ok": 16}, "by_backend": {"a": 8.0, "b": 8.0}},
        "session": {"answers": {"ok": 6}, "by_backend": {"a": 6.0, "b": 0.0}},
        "failover": {"traffic": {"ok": 100}, "stopped": stopped},
    }
    check = production_replicas.verdict(SETTINGS, "a", "b", evidence)
    assert check.outcome == outcome, check.detail
    if outcome == "fail":
        assert "still tried 2 times" in check.detail
