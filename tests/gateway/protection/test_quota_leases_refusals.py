"""gateway/protection/quota_leases.py, continued: what each refusal says (status, code,
the limit and the wait), the scopes a principal's limits make, and the bound on the
releases kept while the store is down (the scripted store is in
tests/gateway/protection/test_quota_leases_mutants.py)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from adapters.errors import GatewayError
from gateway.config.schema import parse_config
from gateway.protection.metrics import ProtectionMetrics
from gateway.protection.quota_leases import MAX_PENDING_RELEASES, QuotaLeases
from policies.auth import Principal
from policies.quota import UNLIMITED, ScopeLimits, TokenBudget
from tests.gateway.protection.test_quota_leases_mutants import (
    BUDGET,
    WHO,
    leases_for,
    metric,
    reserve,
)
from tests.gateway.protection_kit import config

# ---- what a refusal says ------------------------------------------------------------------


async def refused(leases: QuotaLeases, units: int = 1, budget: TokenBudget = BUDGET) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        await reserve(leases, units, budget)
    return exc.value


@pytest.mark.parametrize(("limit", "units"), [(1, 2), (2, 3)])
async def test_more_generations_than_the_concurrency_limit_is_a_400(limit, units) -> None:
    leases, store, _, _ = leases_for(max_concurrent=limit, requests_per_minute=100)
    store.down = True  # same on the local store
    e = await refused(leases, units)
    assert (e.status, e.code, e.param, e.retry_after) == (400, "request_exceeds_concurrency_limit", "n", None)
    assert e.message == (
        f"This request starts {units} generations at once (its prompts x n), more than the {limit} "
        "concurrent ones tenant a may run. Reduce n or the number of prompts."
    )
    assert e.headers["x-ratelimit-limit-requests"] == "100"
    await leases.aclose()


async def test_exactly_the_concurrency_limit_while_one_runs_is_a_429_to_retry() -> None:
    leases, _, _, registry = leases_for(max_concurrent=2, requests_per_minute=100)
    await reserve(leases)
    e = await refused(leases, units=2)
    assert (e.status, e.code, e.retry_after) == (429, "concurrency_limit_exceeded", 1.0)
    assert e.message == "Too many concurrent requests for tenant a: limit 2. Retry when one of your requests finishes."
    assert e.headers["x-ratelimit-limit-requests"] == "100"
    assert metric(registry, "switchyard_quota_decisions_total", result="concurrency") == 1
    await leases.aclose()


async def test_a_token_limit_of_zero_is_403_and_of_one_cannot_fit() -> None:
    zero, _, _, _ = leases_for(tokens_per_minute=0)
    e = await refused(zero)
    assert (e.status, e.code) == (403, "quota_zero") and e.headers["x-ratelimit-limit-tokens"] == "0"
    assert "The tokens_per_minute limit of tenant a is 0" in e.message
    one, _, _, _ = leases_for(tokens_per_minute=1)
    e = await refused(one)
    assert (e.status, e.code) == (400, "request_exceeds_tpm_limit") and e.headers["x-ratelimit-limit-tokens"] == "1"
    await zero.aclose()
    await one.aclose()


@pytest.mark.parametrize(
    ("limit", "unit"),
    [("requests_per_minute", "requests per minute (RPM)"), ("tokens_per_minute", "tokens per minute (TPM)")],
)
async def test_a_rate_limit_names_its_unit_and_the_wait(limit, unit) -> None:
    leases, _, _, _ = leases_for(**{limit: 1 if limit == "requests_per_minute" else BUDGET.total})
    await reserve(leases)
    e = await refused(leases)
    requested = 1 if limit == "requests_per_minute" else BUDGET.total
    assert (e.status, e.code) == (429, "rate_limit_exceeded") and 0 < e.retry_after <= 60
    assert e.message.startswith(
        f"Rate limit reached for tenant a on {unit}: limit {requested}, requested {requested}. Please try again in "
    )
    assert e.headers and e.headers == {k: v for k, v in e.headers.items() if k.startswith("x-ratelimit-")}
    await leases.aclose()


@pytest.mark.parametrize(
    ("limit", "budget", "fix", "param"),
    [
        (10, TokenBudget(10, 5, 1, False), "Shorten the prompt", None),  # room 0
        (11, TokenBudget(10, 5, 1, False), "Set max_tokens to at most 1, or shorten the prompt", "max_tokens"),
        (12, TokenBudget(10, 5, 1, False), "Set max_tokens to at most 2, or shorten the prompt", "max_tokens"),
        (12, TokenBudget(10, 5, 2, False), "Set max_tokens to at most 1, lower n, or shorten the prompt", "max_tokens"),
        (11, TokenBudget(10, 5, 2, False), "Shorten the prompt", None),  # room 0 (1 // 2)
    ],
)
async def test_a_request_that_can_never_fit_says_what_to_change(limit, budget, fix, param) -> None:
    leases, _, _, _ = leases_for(tokens_per_minute=limit)
    e = await refused(leases, budget=budget)
    completion = f"{budget.choices} x {budget.per_choice} for max_tokens"
    assert e.message == (
        f"Request too large for tenant a: its tokens-per-minute (TPM) limit is {limit} and this request reserves "
        f"{budget.total} tokens: a prompt of about {budget.prompt} plus {completion}, so it can never be "
        f"admitted. {fix}, or ask for a higher tokens_per_minute."
    )
    assert (e.status, e.code, e.param, e.retry_after) == (400, "request_exceeds_tpm_limit", param, None)
    assert e.headers["x-ratelimit-limit-tokens"] == str(limit)
    await leases.aclose()


async def test_a_default_budget_that_can_never_fit_says_no_max_tokens_was_sent() -> None:
    leases, _, _, _ = leases_for(tokens_per_minute=12)
    e = await refused(leases, budget=TokenBudget(10, 5, 1, True))
    assert "plus 1 x 5 for the default completion budget (no max_tokens sent), so" in e.message
    await leases.aclose()


# ---- the scopes a principal's limits make ---------------------------------------------


@pytest.mark.parametrize(
    ("limits", "scope"),
    [
        ({"requests_per_minute": 3}, ScopeLimits("t", 3, UNLIMITED, UNLIMITED)),
        ({"tokens_per_minute": 0}, ScopeLimits("t", UNLIMITED, 0, UNLIMITED)),
        ({"max_concurrent": 2}, ScopeLimits("t", UNLIMITED, UNLIMITED, 2)),
        ({"requests_per_minute": 1, "tokens_per_minute": 2, "max_concurrent": 3}, ScopeLimits("t", 1, 2, 3)),
    ],
)
def test_a_tenant_with_any_limit_is_one_scope_with_the_rest_unlimited(limits, scope) -> None:
    cfg = parse_config(config(**limits))
    assert QuotaLeases(cfg, ProtectionMetrics(CollectorRegistry())).scopes_for(WHO) == (scope,)


def test_no_limit_no_scope_and_a_key_s_limits_are_a_scope_after_the_tenant_s() -> None:
    leases = QuotaLeases(parse_config(config()), ProtectionMetrics(CollectorRegistry()))
    assert leases.scopes_for(WHO) == ()
    keyed = Principal("a", "k1", ["*"], 1, key_tokens_per_minute=9)
    assert leases.scopes_for(keyed) == (ScopeLimits("k:k1", UNLIMITED, 9, UNLIMITED),)
    both = Principal("b", "k2", ["*"], 1, key_requests_per_minute=4, key_max_concurrent=0)
    assert leases.scopes_for(both) == (
        ScopeLimits("t", 1000, UNLIMITED, UNLIMITED),
        ScopeLimits("k:k2", 4, UNLIMITED, 0),
    )
    concurrency_only = Principal("zz", "k4", ["*"], 1, key_max_concurrent=2)
    assert leases.scopes_for(concurrency_only) == (ScopeLimits("k:k4", UNLIMITED, UNLIMITED, 2),)
    unlimited_key = Principal("zz", "k3", ["*"], 1)
    assert leases.scopes_for(unlimited_key) == ()
    assert leases.scopes_for(Principal("zz", None, ["*"], 1, key_requests_per_minute=5)) == ()


# ---- the bound on kept releases ---------------------------------------------------------


@pytest.mark.parametrize("kept", [MAX_PENDING_RELEASES - 1, MAX_PENDING_RELEASES, MAX_PENDING_RELEASES + 1])
async def test_at_most_max_pending_releases_are_kept_the_oldest_dropped(kept) -> None:
    leases, store, _, _ = leases_for()
    r = await reserve(leases)
    store.down = True
    for used in range(kept):
        await leases.release(r, used)
    assert len(leases.pending) == min(kept, MAX_PENDING_RELEASES)
    assert leases.pending[0].used_tokens == max(0, kept - MAX_PENDING_RELEASES)  # the oldest kept
    assert leases.pending[-1].used_tokens == kept - 1
    await leases.aclose()
