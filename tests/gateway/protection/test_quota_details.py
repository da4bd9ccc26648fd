"""What a client is told by the quota step (gateway/protection/gate.py, in process):
a request that can never fit says so and what to change, with no Retry-After;
the x-ratelimit-reset-* headers are the limiter's own answer; and a request
without max_tokens is held to the completion budget it reserved."""

from __future__ import annotations

import re

import pytest

from tests.gateway.protection_kit import KEY_B, config, make, never_gone, principal, refusal, request, with_named_key

OPENAI_DURATION = re.compile(r"^(\d+ms|\d+s|\d+m\d+s)$")


# ---- a request that can never fit ------------------------------------------------


async def test_a_request_over_a_key_token_limit_names_the_key_and_the_fix():
    p, small = await with_named_key("small", {"tokens_per_minute": 100_000}, tokens_per_minute=300)
    e = await refusal(p, small, "m", request(max_tokens=200, n=2), 20)
    assert e.status == 400 and e.retry_after is None and e.param == "max_tokens"
    assert "key small" in e.message and "limit is 300" in e.message and "reserves 420 tokens" in e.message
    assert "2 x 200" in e.message and "max_tokens to at most 140, lower n" in e.message
    await p.aclose()


async def test_without_max_tokens_the_message_says_the_default_budget_was_reserved():
    p = await make(config(tokens_per_minute=500, max_tokens_cap=600))
    error = await refusal(p, await principal(p), "m", request(max_tokens=None), 10)
    assert error.status == 400
    assert "no max_tokens sent" in error.message and "max_tokens to at most 490" in error.message
    await p.aclose()


async def test_a_prompt_alone_over_the_limit_asks_for_a_shorter_prompt():
    p = await make(config(tokens_per_minute=500))
    error = await refusal(p, await principal(p), "m", request(max_tokens=10), 800)
    assert error.status == 400 and error.param is None
    assert "Shorten the prompt" in error.message and "max_tokens to at most" not in error.message
    await p.aclose()


@pytest.mark.parametrize("limit", ["requests_per_minute", "max_concurrent"])
async def test_a_limit_of_zero_is_403_not_a_retry_loop(limit):
    p = await make(config(**{limit: 0}))
    e = await refusal(p, await principal(p), "m", request(), 1)
    assert e.status == 403 and e.code == "quota_zero" and e.retry_after is None
    assert f"{limit} limit of tenant a is 0" in e.message
    await p.aclose()


async def test_a_request_that_fits_later_is_still_429_with_retry_after():
    p = await make(config(tokens_per_minute=1000))
    who = await principal(p)
    held = await p.admit(who, "m", request(max_tokens=500), 10, never_gone)
    error = await refusal(p, who, "m", request(max_tokens=500), 10)
    assert error.status == 429 and error.code == "rate_limit_exceeded"
    assert 0 < error.retry_after <= 60
    await held.release(None)
    await p.aclose()


# ---- x-ratelimit-reset-* -----------------------------------------------------------


async def test_reset_headers_say_when_the_same_request_fits_again():
    # A 2 s window of 100 ms buckets, so the waits are short and distinct from a minute.
    p = await make(config(requests_per_minute=3, tokens_per_minute=1000), window_ms=2000, bucket_ms=100)
    who = await principal(p)
    first = await p.admit(who, "m", request(max_tokens=390), 10, never_gone)
    assert first.headers["x-ratelimit-reset-requests"] == "0s"  # two more fit now
    assert first.headers["x-ratelimit-reset-tokens"] == "0s"  # another 400 fits now
    second = await p.admit(who, "m", request(max_tokens=390), 10, never_gone)
    assert second.headers["x-ratelimit-reset-requests"] == "0s"
    # 800 of 1000 used: another 400 fits when the first leaves the 2 s window
    assert 0 < _seconds(second.headers["x-ratelimit-reset-tokens"]) <= 2
    third = await p.admit(who, "m", request(max_tokens=90), 10, never_gone)
    assert third.headers["x-ratelimit-reset-requests"] != "0s"  # 3 of 3 requests used
    refused = await refusal(p, who, "m", request(max_tokens=90), 10)
    assert refused.status == 429
    reset = refused.headers["x-ratelimit-reset-requests"]
    assert OPENAI_DURATION.match(reset)
    assert reset != "1m0s" and _seconds(reset) == pytest.approx(refused.retry_after, abs=1.0)
    for t in (first, second, third):
        await t.release(None)
    await p.aclose()


def _seconds(duration: str) -> float:
    if duration.endswith("ms"):
        return int(duration[:-2]) / 1000
    minutes, _, seconds = duration.rstrip("s").rpartition("m")
    return int(minutes or 0) * 60 + int(seconds)


# ---- what is sent upstream without max_tokens -------------------------------------


async def test_without_max_tokens_a_token_limit_caps_generation_at_the_reservation():
    p = await make(config(tokens_per_minute=10_000, max_tokens_cap=64))
    who = await principal(p)
    unsent = request(max_tokens=None, n=2)
    t = await p.admit(who, "m", unsent, 10, never_gone)
    assert t.reservation.tokens == 10 + 2 * 64
    assert unsent.sampling.max_tokens == 64  # per choice, as reserved
    await t.release(None)
    sent = request(max_tokens=500)
    await (await p.admit(who, "m", sent, 10, never_gone)).release(None)
    assert sent.sampling.max_tokens == 500  # what the client asked for stays
    await p.aclose()


async def test_without_a_token_limit_max_tokens_is_left_to_the_runtime():
    p = await make(config(requests_per_minute=100, max_tokens_cap=64))
    unsent = request(max_tokens=None)
    await (await p.admit(await principal(p), "m", unsent, 10, never_gone)).release(None)
    assert unsent.sampling.max_tokens is None
    unlimited = request(max_tokens=None)
    await (await p.admit(await principal(p, KEY_B), "m", unlimited, 10, never_gone)).release(None)
    assert unlimited.sampling.max_tokens is None
    await p.aclose()
