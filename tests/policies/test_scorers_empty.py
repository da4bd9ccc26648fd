"""Every scorer accepts an empty candidate list (a pool whose backends were all
filtered out) and scores nothing, rather than failing on min()/max() of nothing."""

from __future__ import annotations

import pytest

from policies import scorers
from policies.saturation import SaturationDetector


@pytest.mark.parametrize("name", sorted(scorers.SCORERS))
def test_no_candidates_score_nothing(name):
    assert scorers.SCORERS[name]([], SaturationDetector()) == []
