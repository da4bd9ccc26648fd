"""The retry budget alone, on an injected clock."""

from __future__ import annotations

from policies.ejection import EjectionConfig
from policies.retry_budget import RetryBudget
from tests.manual_clock import Clock


def test_the_floor_holds_with_no_requests_and_then_nothing_more():
    budget = RetryBudget(EjectionConfig(retry_ratio=0.2, min_retries=2, window_s=10), clock=Clock(1000.0))
    assert [budget.may_retry() for _ in range(3)] == [True, True, False]
    assert budget.refused == 1


def test_the_budget_is_a_ratio_of_the_requests_in_the_window():
    clock = Clock(1000.0)
    budget = RetryBudget(EjectionConfig(retry_ratio=0.2, min_retries=2, window_s=10), clock=clock)
    for _ in range(20):
        budget.record_request()
    assert [budget.may_retry() for _ in range(5)] == [True, True, True, True, False]  # 4 for 20 requests
    assert budget.totals() == (20, 4) and budget.refused == 1
    clock.now += 11  # the window moved on: requests and retries forgotten, the floor again
    assert budget.totals() == (0, 0)
    assert [budget.may_retry() for _ in range(3)] == [True, True, False]


def test_a_zero_budget_refuses_every_retry():
    budget = RetryBudget(EjectionConfig(retry_ratio=0.0, min_retries=0, window_s=10), clock=Clock(1000.0))
    for _ in range(100):
        budget.record_request()
    assert not budget.may_retry() and budget.refused == 1


def test_exhausted_counts_nothing_while_there_is_room_and_a_refusal_when_not():
    budget = RetryBudget(EjectionConfig(retry_ratio=0.0, min_retries=1, window_s=10), clock=Clock(1000.0))
    assert not budget.exhausted() and budget.totals() == (0, 0)
    assert budget.may_retry()
    assert budget.exhausted() and budget.refused == 1


def test_a_given_time_is_used_instead_of_the_clock_everywhere():
    # The clock reads 1000; every call here names its own time, around 0.
    budget = RetryBudget(EjectionConfig(retry_ratio=0.2, min_retries=1, window_s=10), clock=Clock(1000.0))
    for _ in range(10):
        budget.record_request(now=0.5)
    assert budget.totals(now=0.5) == (10, 0)
    assert not budget.exhausted(now=0.5)
    assert [budget.may_retry(now=0.5) for _ in range(4)] == [True, True, False, False]  # 2 for 10 requests
    assert budget.refused == 2
    assert budget.exhausted(now=0.5) and budget.refused == 3  # each refusal counted
    assert budget.totals() == (0, 0)  # at the clock's 1000 all of it is past


def test_a_second_leaves_the_window_exactly_window_s_later_and_seconds_stay_apart():
    budget = RetryBudget(EjectionConfig(retry_ratio=0.2, min_retries=1, window_s=10), clock=Clock(1000.0))
    budget.record_request(now=0.5)  # second 0
    budget.record_request(now=9.5)  # second 9
    assert budget.totals(now=9.99) == (2, 0)
    assert budget.totals(now=10.0) == (1, 0)  # second 0 is out at 0 + window_s, second 9 is not
    assert budget.totals(now=19.0) == (0, 0)


def test_a_pool_that_never_retries_holds_no_more_than_its_window():
    """Every request adds to the current second; a new second drops what left the
    window, so a day of traffic without one retry holds ten seconds, not a day."""
    clock = Clock(1000.0)
    budget = RetryBudget(EjectionConfig(window_s=10), clock=clock)
    for _ in range(86_400):
        budget.record_request()
        clock.now += 1
    assert len(budget._buckets) <= 11
    assert budget.totals() == (9, 0)


def test_a_retry_given_back_is_uncounted_once_from_the_newest_second_that_spent_one():
    clock = Clock(1000.0)
    budget = RetryBudget(EjectionConfig(retry_ratio=0.0, min_retries=3, window_s=10), clock=clock)
    assert budget.may_retry() and budget.may_retry()  # two retries in second 1000
    clock.now = 1003.0
    budget.record_request()  # second 1003 spent none
    budget.give_back()
    assert budget.totals() == (1, 1)
    budget.give_back()
    budget.give_back()  # nothing left to give back: never below none
    assert budget.totals() == (1, 0)
    assert [budget.may_retry() for _ in range(4)] == [True, True, True, False]
