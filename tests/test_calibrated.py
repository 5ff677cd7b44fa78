"""Calibrated intervals and the deflated Sharpe (``rl_zerosync.evidence.calibrated`` and the DSR of
``evidence``): the paper's worked example, a planted edge that the DSR accepts, a pure-noise search
whose DSR spreads over [0, 1], trials from the wrong family that a test catches, and intervals whose
width matches the truth on series with long trends (where a bar bootstrap with short blocks is too narrow)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rl_zerosync.evidence.block import deflate
from rl_zerosync.evidence.calibrated import (
    block_rule, deflated_sharpe, effective_trials, expected_max_z, panel_interval, position_time)


def test_dsr_reproduces_the_papers_worked_example():
    # Bailey & Lopez de Prado (2014): SR 2.5, T 1250, skew -3, kurt 10, N 100, V 0.5 -> SR0 0.1132/bar, DSR 0.9004
    p, sr, t, g3, g4 = 250.0, 2.5, 1250, -3.0, 10.0
    srb = sr / math.sqrt(p)
    se = math.sqrt((1 - g3 * srb + (g4 - 1) / 4 * srb * srb) / (t - 1)) * math.sqrt(p)
    out = deflated_sharpe(sr, se, 100, se_trial=math.sqrt(0.5))
    assert out["expected_max"] / math.sqrt(p) == pytest.approx(0.1132, abs=5e-5)
    assert out["value"] == pytest.approx(0.9004, abs=5e-5)
    assert expected_max_z(1) == 0.0 and expected_max_z(1.1) == 0.0  # never below no selection at all
    assert 0.0 < expected_max_z(1.5) < expected_max_z(2) < expected_max_z(20)
    with pytest.raises(ValueError, match="n_trials: expected a number >= 1"):
        expected_max_z(0.5)
    with pytest.raises(ValueError, match="se: expected a standard error > 0"):
        deflated_sharpe(1.0, 0.0, 3)


def _search(rng, n_trials: int, edge: float, series: int = 8, bars: int = 1500, p: float = 252.0):
    """A selection on validation: ``n_trials`` strategies on ``series`` independent series, the last with
    per-bar mean ``edge``; the best by mean Sharpe is selected. Returns the DSR the evidence computes."""
    cand = [[rng.normal(0.0, 0.01, bars) for _ in range(series)] for _ in range(n_trials)]
    if edge:
        cand[-1] = [x + edge for x in cand[-1]]
    sr = [np.mean([x.mean() / x.std(ddof=1) * math.sqrt(p) for x in c]) for c in cand]
    best = int(np.argmax(sr))
    iv = panel_interval(cand[best], None, p, independent_series=True, reps=400, seed=int(rng.integers(1 << 30)))
    n, counted = effective_trials(np.column_stack([np.concatenate(c) for c in cand]))
    trials = {"n": n, "counted": counted, "selected_validation_sharpe": iv["estimate"], "se": iv["se"]}
    return deflate([trials]), sr


def test_a_planted_edge_among_noise_trials_is_accepted():
    rng = np.random.default_rng(1)
    for _ in range(5):
        dsr, _ = _search(rng, 30, edge=0.0012)  # annualized ~1.9 per series, se ~0.14
        assert dsr["value"] > 0.95
        assert 25 <= dsr["trials"] <= 30  # independent trials count (almost) fully


def test_a_pure_noise_search_spreads_the_dsr_over_zero_one():
    rng = np.random.default_rng(2)
    values = np.array([_search(rng, 20, edge=0.0, bars=800)[0]["value"] for _ in range(40)])
    # Spread over [0, 1] (uniform has sd 0.29): neither stuck near 0 (the old DSR's 0.00 by
    # construction) nor near 1, and rarely above 0.95 (the false positives of a 5% test, roughly).
    assert 0.3 < values.mean() < 0.7 and values.std() > 0.15
    assert values.min() < 0.2 and values.max() > 0.9
    assert (values > 0.95).mean() <= 0.15


def test_trials_of_another_family_would_sink_the_planted_edge():
    """The wrong trial family (rule variants' cross-sectional spread, sd ~1.5) as the null spread: the
    planted edge that the right family accepts is then 'not significant' — the test that catches it."""
    rng = np.random.default_rng(3)
    dsr, _ = _search(rng, 30, edge=0.0012)
    wrong = deflated_sharpe(dsr["sharpe"], dsr["se"], 391, se_trial=1.51)
    assert dsr["value"] > 0.95 and wrong["value"] < 0.05


def test_effective_trials_counts_correlated_candidates_as_few():
    rng = np.random.default_rng(4)
    base = rng.normal(size=(2000, 1))
    same = base + 0.05 * rng.normal(size=(2000, 20))  # successive checkpoints: nearly one policy
    assert effective_trials(same)[0] < 1.5
    assert effective_trials(rng.normal(size=(2000, 20)))[0] > 17
    flat = np.column_stack([rng.normal(size=(2000, 3)), np.zeros((2000, 2))])
    n, how = effective_trials(flat)
    assert 3.5 < n < 4.1 and "2 constant counted as one" in how


def _trend_series(rng, m: int, bars: int, p_switch: float = 1 / 200, drift: float = 0.0015):
    """Series whose mean flips sign in regimes of ~200 bars: the per-bar returns look nearly iid, their
    mean is not (the synthetic market's dependence, the reason short bar blocks are too narrow)."""
    out = []
    for _ in range(m):
        switch = rng.random(bars) < p_switch
        sign = np.where(np.cumsum(switch) % 2 == 0, 1.0, -1.0) * rng.choice([-1.0, 1.0])
        out.append(0.0003 + drift * sign + rng.normal(0.0, 0.01, bars))
    return out


def test_cluster_interval_has_the_true_width_on_trending_series():
    """Over fresh sets of 16 trending series, the interval's mean width is the true width of the
    estimate (0.8-1.25x) and it covers the truth in ~95% of sets; a bar bootstrap with a short fixed
    block (the old method) is far too narrow on the same sets — the test catches a wrong width."""
    rng = np.random.default_rng(5)
    p, m, bars, sets = 252.0, 16, 1200, 60
    truth_pool = [np.mean([x.mean() / x.std(ddof=1) * math.sqrt(p) for x in _trend_series(rng, m, bars)])
                  for _ in range(400)]
    truth = float(np.mean(truth_pool))
    true_width = float(np.subtract(*np.quantile(truth_pool, [0.975, 0.025])))
    widths, covered, short = [], 0, []
    for k in range(sets):
        s = _trend_series(rng, m, bars)
        iv = panel_interval(s, None, p, independent_series=True, reps=500, seed=k)
        widths.append(iv["high"] - iv["low"])
        covered += iv["low"] <= truth <= iv["high"]
        if k < 10:
            bad = panel_interval(s[:4], None, p, independent_series=False, reps=300, seed=k)  # bars, not clusters
            short.append((bad["high"] - bad["low"]) / 2.0)  # 4 of 16 series: x sqrt(4/16) for the same width
    ratio = float(np.mean(widths)) / true_width
    assert 0.8 <= ratio <= 1.25, ratio
    assert 0.88 <= covered / sets <= 1.0, covered
    assert iv["design"] == "series clusters" and "cluster bootstrap over 16 independent series" in iv["method"]


def test_design_follows_what_the_series_are():
    rng = np.random.default_rng(6)
    s = [rng.normal(0.0005, 0.01, 500) for _ in range(8)]
    assert panel_interval(s, None, 252.0, independent_series=True, reps=200)["design"] == "series clusters"
    few = panel_interval(s[:3], None, 252.0, independent_series=True, reps=200)
    assert few["design"] == "bar blocks" and "bars drawn per series" in few["method"]
    cal = panel_interval(s, None, 252.0, independent_series=False, reps=200)
    assert cal["design"] == "bar blocks" and "one shared bar draw" in cal["method"]
    same = panel_interval(s, s, 252.0, independent_series=True, reps=200)
    assert same["low"] == same["high"] == same["estimate"] == 0.0  # paired: what is common cancels
    with pytest.raises(ValueError, match=r"a, b: expected the same seeds and bars per series"):
        panel_interval(s, [x[:-1] for x in s], 252.0, independent_series=True)
    with pytest.raises(ValueError, match=r"a\[0\]\[0\]: expected a 1-D array of at least 20 finite"):
        panel_interval([np.array([0.1, np.nan] * 20)], None, 252.0, independent_series=True)


def test_seeds_are_crossed_and_widen_the_interval():
    rng = np.random.default_rng(7)
    series = [rng.normal(0.0005, 0.01, 800) for _ in range(12)]
    seeds = [[x + rng.normal(0.0, 0.004, 800) + rng.normal(0.0, 0.0004) for x in series] for _ in range(5)]
    one = panel_interval([seeds[0]], None, 252.0, independent_series=True, reps=1000)
    many = panel_interval(seeds, None, 252.0, independent_series=True, reps=1000)
    assert many["seeds"] == 5 and "seeds drawn with replacement (5, crossed)" in many["method"]
    assert many["estimate"] == pytest.approx(np.mean([[x.mean() / x.std(ddof=1) * math.sqrt(252) for x in s]
                                                      for s in seeds]))
    assert many["se"] > 0.5 * one["se"]


def test_block_rule_takes_the_longest_dependence():
    rng = np.random.default_rng(8)
    x = rng.normal(size=3000)
    pos = np.repeat(rng.choice([-1.0, 1.0], 30), 100)  # bets of 100 bars
    assert position_time(pos) > 50
    assert position_time(np.ones(100)) == 1.0
    block, how = block_rule([x], [pos])
    assert block == pytest.approx(position_time(pos)) and "position autocorrelation time" in how
    assert block_rule([x])[0] < 10


def test_ratio_interval_of_the_efficiency():
    from rl_zerosync.evidence.calibrated import ratio_interval

    rng = np.random.default_rng(9)
    oracle = rng.normal(1.9, 0.6, 32)
    agent = 0.75 * oracle + rng.normal(0.0, 0.3, 32)
    iv = ratio_interval(agent, oracle, reps=1000)
    assert iv["estimate"] == pytest.approx(agent.mean() / oracle.mean())
    assert iv["low"] < iv["estimate"] < iv["high"] and 0.6 < iv["low"] and iv["high"] < 0.9
    with pytest.raises(ValueError, match="b: expected a mean > 0"):
        ratio_interval(agent, -oracle)
    with pytest.raises(ValueError, match="at least 8 finite per-series"):
        ratio_interval(agent[:4], oracle[:4])
