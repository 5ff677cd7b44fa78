"""The guard's readback: one rank's pack read by name on CPU, and combine_ranks (how the per-rank
readbacks become one set of metrics under DDP)."""
from __future__ import annotations

import logging
import math

import pytest
import torch

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.layouts import CHECK, RECORD
from rl_zerosync.learner import LearnerSettings
from rl_zerosync.learner.training_guard import CHECKS, TrainingGuard, combine_ranks

NAN = float("nan")


def _rank(q_min, q_max, q_sum, rows, div_count=0.0, div_flag=0.0, div_rec=None, skipped=0.0):
    metrics = {
        "loss_mean": 0.5, "grad_norm_mean": 2.0, "updates": 10.0, "skipped": skipped, "clip_events": 0.0,
        "collapse_events": 0.0, "q_min": q_min, "q_max": q_max, "q_mean": q_sum / rows if rows else math.nan, "q_all_mean": 0.0,
        "divergence_count": div_count, "divergence_flag": div_flag, "updates_lifetime": 10.0,
        "_q_sum": q_sum, "_q_all_sum": 0.0, "_q_rows": rows,
    }
    recs = [[0.0] * RECORD.size for _ in CHECKS]
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


def test_checks_are_the_record_rows():
    assert CHECKS == CHECK.names == ("nonfinite", "grad_collapse", "divergence")


def test_collect_reads_one_pack_by_name(caplog):
    """Three updates on CPU (a collapse, a clipped loss with diverged Q, a non-finite step with NaN Q):
    every metric and first-trigger record comes back from the one pack as computed by hand."""
    settings = LearnerSettings(loss_clip=10.0, divergence_threshold=5.0, divergence_patience=2,
                               divergence_policy="warn", collapse_policy="warn", nonfinite_policy="skip")
    guard = TrainingGuard(kernels=get_kernels("cpu"), settings=settings)
    guard.bind_q(2, 2)
    guard.set_warmup_done(True)
    steps = [  # loss, grad norm, Q: row maxes (3, 2) / (6, 0) / NaN; means of all Q 1.5 / 1.5
        (2.0, 0.0, [[1.0, 3.0], [2.0, 0.0]]),
        (20.0, 0.25, [[6.0, 1.0], [-1.0, 0.0]]),
        (NAN, 1.0, [[NAN, 1.0], [0.0, 0.0]]),
    ]
    for loss, grad, q in steps:
        guard.check(torch.tensor([loss]), torch.tensor([grad]))
        guard.record(torch.tensor(q))
    m = guard.collect()
    assert {k: m[k] for k in ("updates", "skipped", "clip_events", "collapse_events")} == {
        "updates": 3.0, "skipped": 1.0, "clip_events": 1.0, "collapse_events": 1.0}
    assert (m["loss_mean"], m["grad_norm_mean"]) == ((2.0 + 10.0) / 2, 0.25 / 2)
    assert (m["q_min"], m["q_max"], m["q_mean"], m["q_all_mean"]) == (0.0, 6.0, (2.5 + 3.0) / 2, 1.5)
    assert (m["divergence_count"], m["divergence_flag"], m["updates_lifetime"]) == (2.0, 1.0, 3.0)
    assert guard.last_local_q == {k: m[k] for k in ("q_min", "q_max", "q_mean", "q_all_mean")}
    with caplog.at_level(logging.WARNING):
        guard.apply_policies()
    assert "grad_collapse check at update 0: loss=2, grad_norm=0, Q range=[2, 3]" in caplog.text
    assert "divergence check at update 2: loss=nan, grad_norm=1, Q range=[nan, nan]" in caplog.text
    assert not guard.records.any() and not guard.accum.any()  # every row re-armed, sums cleared
