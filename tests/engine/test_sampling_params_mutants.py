"""engine/sampling_params.py: each documented limit at, below and above its boundary
(a flipped or widened comparison fails), and what greedy and penalties mean."""

from __future__ import annotations

import pytest

from engine.sampling_params import SamplingParams

# (field, values taken, values refused, the refusal's words)
LIMITS = [
    ("max_tokens", (1, 2), (0, -1), "max_tokens must be at least 1"),
    ("temperature", (0.0, 0.01, 2.0), (-0.01,), "temperature must be >= 0"),
    ("top_p", (1.0, 0.01), (0.0, 1.01, 2.0), "top_p must be in (0, 1]"),
    ("top_k", (0, 1), (-1,), "top_k must be >= 0 (0 disables it)"),
    ("min_p", (0.0, 1.0, 0.5), (-0.01, 1.01, 2.0), "min_p must be in [0, 1]"),
    ("repetition_penalty", (0.01, 1.0), (0.0, -1.0), "repetition_penalty must be > 0"),
    ("n", (1, 2), (0,), "n must be at least 1"),
    ("min_tokens", (0, 16), (-1, 17), "min_tokens must be in [0, max_tokens]"),
    ("logprobs", (None, 0, 5), (-1,), "logprobs must be >= 0"),
]


@pytest.mark.parametrize(("name", "taken", "refused", "words"), LIMITS, ids=[limit[0] for limit in LIMITS])
def test_each_limit_at_below_and_above_its_boundary(name, taken, refused, words):
    for value in taken:
        SamplingParams(**{name: value}).validate()
    for value in refused:
        with pytest.raises(ValueError) as info:
            SamplingParams(**{name: value}).validate()
        assert str(info.value) == words, (name, value)


def test_min_tokens_may_equal_max_tokens_but_not_pass_it():
    SamplingParams(max_tokens=4, min_tokens=4).validate()
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=4, min_tokens=5).validate()


def test_greedy_is_temperature_zero_and_penalties_are_any_off_their_neutral_value():
    assert SamplingParams(temperature=0.0).greedy and not SamplingParams(temperature=0.01).greedy
    assert not SamplingParams().needs_penalties
    for changed in ({"presence_penalty": 0.1}, {"frequency_penalty": -0.1}, {"repetition_penalty": 1.1}):
        assert SamplingParams(**changed).needs_penalties, changed
