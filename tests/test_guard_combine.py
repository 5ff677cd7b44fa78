"""combine_ranks: how the guard's per-rank readbacks become one set of metrics under DDP."""
from __future__ import annotations

import math

import pytest

from rl_zerosync.learner.training_guard import CHECKS, combine_ranks


def _rank(q_min, q_max, q_sum, rows, div_count=0.0, div_flag=0.0, div_rec=None, skipped=0.0):
    metrics = {
        "loss_mean": 0.5, "grad_norm_mean": 2.0, "updates": 10.0, "skipped": skipped, "clip_events": 0.0,
        "collapse_events": 0.0, "q_min": q_min, "q_max": q_max, "q_mean": q_sum / rows if rows else math.nan, "q_all_mean": 0.0,
        "divergence_count": div_count, "divergence_flag": div_flag, "updates_lifetime": 10.0,
        "_q_sum": q_sum, "_q_all_sum": 0.0, "_q_rows": rows,
    }
    recs = [[0.0] * 6 for _ in CHECKS]
    if div_rec is not None:
        recs[CHECKS.index("divergence")] = div_rec
    return metrics, recs


def test_one_rank_is_unchanged_minus_private_keys():
    m, recs = combine_ranks([_rank(-1.0, 2.0, 5.0, 10.0)])
    assert m["q_min"] == -1.0 and m["q_mean"] == 0.5
    assert not any(k.startswith("_") for k in m)


def test_two_ranks_combine_q_stats_and_divergence():
    rec_a = [1.0, 7.0, 0.1, 1.0, -5.0, 90.0]
    rec_b = [1.0, 4.0, 0.1, 1.0, -3.0, 80.0]
    m, recs = combine_ranks([
        _rank(-1.0, 2.0, 5.0, 10.0, div_count=3.0, div_flag=1.0, div_rec=rec_a),
        _rank(-4.0, 1.0, 15.0, 10.0, div_count=5.0, div_flag=1.0, div_rec=rec_b),
    ])
    assert (m["q_min"], m["q_max"]) == (-4.0, 2.0)
    assert m["q_mean"] == pytest.approx(20.0 / 20.0)
    assert (m["divergence_count"], m["divergence_flag"]) == (5.0, 1.0)
    assert recs[CHECKS.index("divergence")] == rec_b  # the earlier trigger (update 4)
    assert m["updates"] == 10.0 and m["loss_mean"] == 0.5


def test_a_rank_without_finite_q_does_not_poison_the_combine():
    empty = _rank(math.nan, math.nan, 0.0, 0.0)
    m, _ = combine_ranks([_rank(-1.0, 2.0, 5.0, 10.0), empty])
    assert (m["q_min"], m["q_max"], m["q_mean"]) == (-1.0, 2.0, 0.5)


def test_disagreeing_decisions_raise_naming_the_key():
    with pytest.raises(RuntimeError, match="'skipped'.*\\[0.0, 1.0\\]"):
        combine_ranks([_rank(-1.0, 2.0, 5.0, 10.0), _rank(-1.0, 2.0, 5.0, 10.0, skipped=1.0)])
