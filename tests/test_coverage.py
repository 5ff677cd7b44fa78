"""The calibrated intervals on the project's own market (``benchmarks/coverage.py``, its quick size):
over 60 fresh test sets drawn by local.yaml's generator and walked through the project's rules, the
95% interval of momentum(64,1)'s mean Sharpe and of momentum(64,1) - buy-and-hold covers the truth
in 90-98% of sets with a mean width 0.8-1.25x the true width; the old bar bootstrap (short
Politis-White blocks) on the same sets is too narrow, which this test would catch."""
from __future__ import annotations

import pytest

from benchmarks.coverage import QUICK, coverage


@pytest.fixture(scope="module")
def result():
    sets, series, bars = QUICK
    return coverage(sets, series, bars, reps=1000, device="cpu")


@pytest.mark.parametrize("statistic", ["level", "paired_difference"])
def test_calibrated_interval_covers_with_the_true_width(result, statistic):
    r = result[statistic]["calibrated"]
    assert r["sets"] == QUICK[0]
    assert 0.90 <= r["coverage"] <= 0.98, r
    assert 0.8 <= r["width_ratio"] <= 1.25, r
    assert "cluster bootstrap over 16 independent series" in r["method"]


def test_the_old_bar_bootstrap_is_too_narrow_on_the_same_sets(result):
    for statistic in ("level", "paired_difference"):
        assert result[statistic]["old_bar_bootstrap"]["width_ratio"] < 0.8
