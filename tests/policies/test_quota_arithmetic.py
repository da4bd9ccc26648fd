"""The quota arithmetic both stores share, at its boundaries: when a need fits
again in the sliding window, the OpenAI reset format, the x-ratelimit-* headers of
the tightest scope (a limit of 0 is a limit), the token budget a request reserves,
and the lease members of a request holding several concurrency units."""

from __future__ import annotations

from policies.quota import (
    UNLIMITED,
    QuotaExceeded,
    Reservation,
    ScopeState,
    TokenBudget,
    format_reset,
    lease_members,
    ratelimit_headers,
    refunded,
    reset_ms,
    time_until_fits,
    token_budget,
)

WINDOW, BUCKET = 60_000, 1_000


def fits(buckets, used, need, limit, now_ms):
    return time_until_fits(buckets, used, need, limit, now_ms, WINDOW, BUCKET)


def test_a_need_equal_to_the_whole_limit_can_wait_and_a_larger_one_cannot():
    assert fits([(3, 5)], used=5, need=10, limit=10, now_ms=3_500) == 63_000 - 3_500
    assert fits([(3, 5)], used=5, need=11, limit=10, now_ms=3_500) is None


def test_the_wait_is_until_the_oldest_buckets_that_free_enough_leave_the_window():
    buckets = [(2, 3), (1, 2), (5, 4)]  # unsorted on purpose
    # 6 tokens over: bucket 1 frees 2, bucket 2 brings it to 5, bucket 5 to 9
    assert fits(buckets, used=9, need=7, limit=10, now_ms=10_000) == 65_000 - 10_000
    # exactly enough freed by the first two buckets: bucket 2 is the one to wait for
    assert fits(buckets, used=9, need=6, limit=10, now_ms=10_000) == 62_000 - 10_000
    # 1 over: the oldest bucket alone frees it
    assert fits(buckets, used=9, need=2, limit=10, now_ms=10_000) == 61_000 - 10_000


def test_the_wait_is_whole_milliseconds_and_never_negative():
    wait = fits([(0, 5)], used=5, need=10, limit=10, now_ms=59_999)
    assert wait == 1 and isinstance(wait, int)
    assert fits([(0, 5)], used=5, need=10, limit=10, now_ms=WINDOW) == 0  # that bucket is leaving now
    assert fits([(0, 5)], used=5, need=10, limit=10, now_ms=WINDOW + 7) == 0


def test_a_debt_beyond_the_window_content_waits_a_full_window():
    assert fits([(3, 2)], used=20, need=1, limit=10, now_ms=3_000) == WINDOW


def test_reset_is_zero_without_a_limit_and_a_limit_of_zero_waits_for_its_debt():
    assert reset_ms([(10, 5)], 5, 1, -1, 10_500, WINDOW, BUCKET) == 0
    assert reset_ms([(10, 5)], 5, 1, 0, 10_500, WINDOW, BUCKET) == 70_000 - 10_500
    assert reset_ms([], 0, 1, 0, 10_500, WINDOW, BUCKET) == 0


def test_reset_of_a_need_larger_than_the_limit_is_when_the_window_is_empty():
    assert reset_ms([(10, 5)], 5, 500, 10, 10_500, WINDOW, BUCKET) == 70_000 - 10_500


def test_openai_reset_format_at_each_unit_boundary():
    assert format_reset(0) == "0s" and format_reset(-5) == "0s"
    assert format_reset(1) == "1ms" and format_reset(999) == "999ms"
    assert format_reset(1000) == "1s" and format_reset(1001) == "2s"
    assert format_reset(59_000) == "59s" and format_reset(59_001) == "1m0s"
    assert format_reset(60_000) == "1m0s" and format_reset(61_000) == "1m1s"
    assert format_reset(360_000) == "6m0s"


def state(name, req_limit=-1, req_left=0, tok_limit=-1, tok_left=0, reset=0) -> ScopeState:
    return ScopeState(name, req_limit, req_left, reset, tok_limit, tok_left, reset, 0)


def test_headers_come_from_the_tightest_scope_of_each_kind():
    roomy = state("tenant", req_limit=100, req_left=90, tok_limit=10_000, tok_left=9_000, reset=1_000)
    tight = state("key", req_limit=10, req_left=2, tok_limit=500, tok_left=100, reset=30_000)
    assert ratelimit_headers([roomy, tight]) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "30s",
        "x-ratelimit-limit-tokens": "500",
        "x-ratelimit-remaining-tokens": "100",
        "x-ratelimit-reset-tokens": "30s",
    }


def test_the_tightest_scope_is_the_one_with_least_left_not_the_smallest_limit():
    nearly_spent = state("tenant", req_limit=100, req_left=3, tok_limit=10_000, tok_left=50)
    small_but_fresh = state("key", req_limit=10, req_left=10, tok_limit=500, tok_left=500)
    headers = ratelimit_headers([small_but_fresh, nearly_spent])
    assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("100", "3")
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == ("10000", "50")


def test_a_limit_of_zero_is_reported_and_remaining_is_never_negative():
    headers = ratelimit_headers([state("t", req_limit=0, req_left=-3, tok_limit=0, tok_left=0)])
    assert headers["x-ratelimit-limit-requests"] == "0" and headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-limit-tokens"] == "0" and headers["x-ratelimit-remaining-tokens"] == "0"
    assert ratelimit_headers([state("t", tok_limit=5, tok_left=-2)])["x-ratelimit-remaining-tokens"] == "0"


def test_unlimited_scopes_send_no_headers():
    assert ratelimit_headers([state("t")]) == {}


def test_the_token_budget_never_goes_below_nothing_and_always_counts_one_choice():
    assert token_budget(-3, -5, 0, 100) == TokenBudget(0, 0, 1, False)
    assert token_budget(0, 0, 1, 100) == TokenBudget(0, 0, 1, False)
    assert token_budget(7, None, 2, 100) == TokenBudget(7, 100, 2, True)
    assert token_budget(7, None, 2, 100).total == 207


def test_a_request_holding_several_units_has_one_lease_member_per_unit():
    assert lease_members("L", 1) == ["L"]
    assert lease_members("L", 3) == ["L", "L#1", "L#2"]


def test_a_refusal_says_which_scope_and_limit_and_what_was_asked():
    err = QuotaExceeded("key:small", "tokens", None, [])
    assert str(err) == "key:small: tokens limit reached"
    assert (err.scope, err.limit, err.retry_after_s, err.requested, err.limit_value) == (
        "key:small",
        "tokens",
        None,
        1,
        0,
    )
    sized = QuotaExceeded("tenant", "tokens", 2.5, [], requested=400, limit_value=300)
    assert (sized.requested, sized.limit_value, sized.retry_after_s) == (400, 300, 2.5)


def test_a_refund_gives_back_the_request_its_tokens_and_its_leases_in_every_scope():
    states = [ScopeState("t", 100, 40, 2000, 1000, 900, 1500, 3), ScopeState("k", 50, 3, 0, UNLIMITED, 0, 0, 1)]
    reservation = Reservation("a", (), "lease", 0, 60, states, units=2)
    assert refunded(reservation) == [
        ScopeState("t", 100, 41, 2000, 1000, 960, 1500, 1),
        ScopeState("k", 50, 4, 0, UNLIMITED, 60, 0, 0),
    ]
    assert reservation.states[0].requests_remaining == 40  # the reservation itself is left as it was
