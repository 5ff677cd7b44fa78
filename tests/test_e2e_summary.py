"""``benchmarks/e2e.py``'s time-to-target ratio: seeds that never reached the target are censored,
so a ratio is reported only when it means something. CPU only, no Ray."""
from __future__ import annotations

from bench_module import bench_module


def _e2e():
    return bench_module("e2e")


def _runs(times, budget):
    return [{"time_to_target_s": t, "train_s": budget} for t in times]


def test_exact_when_most_seeds_of_both_sides_reached():
    value, kind = _e2e().time_to_target_ratio(_runs([1.0, 2.0, None], 5.0), _runs([10.0, 40.0, 30.0], 100.0))
    assert kind == "exact" and value == 30.0 / 2.0


def test_lower_bound_when_stock_mostly_censored():
    value, kind = _e2e().time_to_target_ratio(_runs([1.0, 2.0, 3.0], 5.0), _runs([None, None, 30.0], 150.0))
    assert kind.startswith("lower bound") and value == 150.0 / 2.0


def test_no_ratio_when_ours_mostly_censored():
    # the committed GPU run: ours reached the target in 1 of 3 seeds, stock in 0 of 3
    value, kind = _e2e().time_to_target_ratio(_runs([1.9, None, None], 4.5), _runs([None, None, None], 151.0))
    assert value is None and kind.startswith("not comparable")
