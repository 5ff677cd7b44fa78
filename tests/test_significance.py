"""Sharpe statistics: bootstrap intervals, PSR / DSR, SPA, PBO by CSCV, validation power (CPU, fast).

Every randomized test runs from a fixed seed, so it is deterministic; each states the tolerance it
allows and why that tolerance is wide enough for the number of replications it runs.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import integrate, signal, stats

from rl_zerosync.evidence.overfitting import (
    EULER_MASCHERONI, deflated_sharpe_ratio, dsr_from_moments, expected_max_sharpe, pbo_cscv,
    probabilistic_sharpe_ratio, psr_from_moments, spa_test)
from rl_zerosync.evidence.sharpe import sharpe_ratio
from rl_zerosync.evidence.significance import (
    multi_series_sharpe_interval, paired_difference_interval, sharpe_interval, sharpe_power_check,
    sharpe_standard_error)

P = 252


def ar1_returns(rng: np.random.Generator, n: int, phi: float, annual_sharpe: float, sd: float = 0.01) -> np.ndarray:
    """``r_t = mu + e_t``, ``e_t = phi e_{t-1} + u_t`` (stationary start), with ``std(e) = sd`` so that
    the true annualized Sharpe ``mu / sd * sqrt(P)`` is ``annual_sharpe``."""
    u = rng.standard_normal(n + 200) * sd * math.sqrt(1.0 - phi * phi)
    e = signal.lfilter([1.0], [1.0, -phi], u)[200:]
    return annual_sharpe / math.sqrt(P) * sd + e


def coverage(n_rep: int, n_bars: int, phi: float, **kwargs) -> float:
    """Fraction of ``n_rep`` 90% intervals that hold the true annualized Sharpe (1.0)."""
    rng = np.random.default_rng(2024)
    hits = 0
    for i in range(n_rep):
        iv = sharpe_interval(ar1_returns(rng, n_bars, phi, 1.0), P, level=0.9, reps=500, seed=i, **kwargs)
        hits += iv.low <= 1.0 <= iv.high
    return hits / n_rep


# ------------------------------------------------------------------------------- bootstrap coverage
def test_interval_coverage_iid():
    """200 intervals (nominal 90%) on iid series of 1000 bars with Sharpe 1: coverage in [0.82, 0.97].

    The binomial sd of a coverage estimated from 200 replications is ~0.021; the band allows about
    -3.8 / +3.3 sd around 0.90 (1000 replications of this setup measured ~0.89)."""
    assert 0.82 <= coverage(200, 1000, 0.0) <= 0.97


def test_interval_coverage_ar1():
    """As above on AR(1) series (phi = 0.5) of 2000 bars: the block bootstrap keeps coverage in
    [0.82, 0.97] (600 replications of this setup measured ~0.89)."""
    assert 0.82 <= coverage(200, 2000, 0.5) <= 0.97
    iv = sharpe_interval(ar1_returns(np.random.default_rng(0), 2000, 0.5, 1.0), P, reps=200)
    assert "Politis-White" in iv.method and float(re.search(r"block ([0-9.]+)", iv.method).group(1)) > 3


def test_iid_bootstrap_undercovers_ar1():
    """Why blocks: with block length 1 (iid bootstrap) the same AR(1) series get intervals about
    ``sqrt((1 - phi) / (1 + phi)) = 0.58`` times too narrow, a coverage near 0.66; over 100
    replications (sd ~0.047) it must stay below 0.80."""
    assert coverage(100, 2000, 0.5, block_length=1.0) < 0.80


# ----------------------------------------------------------------------------------------- paired
def test_paired_identical_series_is_exactly_zero():
    r = np.random.default_rng(1).standard_normal(500) * 0.01
    iv = paired_difference_interval(r, r.copy(), P, reps=300)
    assert (iv.estimate, iv.low, iv.high) == (0.0, 0.0, 0.0)
    assert "same resampled bars" in iv.method


def test_paired_difference_sees_a_real_gap():
    """b = a minus 0.1% per bar (sd 1%): SR(a) - SR(b) ~ 0.1 * sqrt(252) = 1.59 whatever the bars, and
    pairing keeps the interval tight around it (width < 0.3), where each series' own interval is
    ~2 wide (1000 bars: 2 * 1.96 * sqrt(252 / 1000))."""
    a = np.random.default_rng(2).standard_normal(1000) * 0.01
    iv = paired_difference_interval(a, a - 0.001, P, reps=500)
    assert 1.3 < iv.low < iv.estimate < iv.high and iv.high - iv.low < 0.3
    single = sharpe_interval(a, P, reps=500)
    assert single.high - single.low > 1.5


def test_deterministic_under_seed():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(300) * 0.01, rng.standard_normal(300) * 0.01
    one = paired_difference_interval(a, b, P, reps=200, seed=7)
    assert one == paired_difference_interval(a, b, P, reps=200, seed=7)
    assert one == paired_difference_interval(a, b, P, reps=200, seed=np.random.default_rng(7))
    assert one != paired_difference_interval(a, b, P, reps=200, seed=8)
    assert sharpe_interval(a, P, reps=200, seed=5) == sharpe_interval(a, P, reps=200, seed=5)


# ------------------------------------------------------------------------------------ named errors
def test_errors_name_the_bad_argument():
    r = np.random.default_rng(4).standard_normal(100) * 0.01
    bad = r.copy()
    bad[17] = np.nan
    with pytest.raises(ValueError, match=r"returns: expected finite returns, found 1 NaN/inf \(first at bar 17\)"):
        sharpe_interval(bad, P)
    with pytest.raises(ValueError, match=r"returns: expected at least 20 bars, got 5"):
        sharpe_interval(r[:5], P)
    for p in (0, -252, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"periods_per_year: expected a finite number > 0"):
            sharpe_interval(r, p)
    with pytest.raises(ValueError, match=r"a, b: expected the same number of bars \(paired by bar\), got 100 and 99"):
        paired_difference_interval(r, r[:-1], P)
    with pytest.raises(ValueError, match=r"b: expected finite returns"):
        paired_difference_interval(r, bad, P)
    with pytest.raises(ValueError, match=r"level: expected a number strictly between 0 and 1"):
        sharpe_interval(r, P, level=95)
    with pytest.raises(ValueError, match=r"reps: expected an integer >= 100"):
        sharpe_interval(r, P, reps=10)
    with pytest.raises(ValueError, match=r"block_length: expected a number >= 1"):
        sharpe_interval(r, P, block_length=0.5)
    with pytest.raises(ValueError, match=r"seed: expected an integer >= 0 or a numpy Generator"):
        sharpe_interval(r, P, seed=-1)
    with pytest.raises(ValueError, match=r"returns: expected a 1-D array"):
        sharpe_interval(np.stack([r, r]), P)
    with pytest.raises(ValueError, match=r"n_blocks: expected an even integer >= 2, got 5"):
        pbo_cscv(np.stack([r, r], axis=1), P, n_blocks=5)
    with pytest.raises(ValueError, match=r"candidate_returns: expected 100 bars"):
        spa_test(r, np.stack([r, r], axis=1)[:-1])
    with pytest.raises(ValueError, match=r"trials_counted: expected a description"):
        deflated_sharpe_ratio(r, P, trial_sharpes=[0.1, 0.5], trials_counted=" ")
    with pytest.raises(ValueError, match=r"kurtosis: expected >= 1 \+ skew\*\*2"):
        psr_from_moments(sharpe=1.0, n_bars=500, skew=-3.0, kurtosis=3.0, periods_per_year=P)
    with pytest.raises(ValueError, match=r"returns: expected returns that vary"):
        probabilistic_sharpe_ratio(np.zeros(50), P)


# ------------------------------------------------------------------------------------ many series
def test_few_seeds_at_the_seed_level_give_a_range_not_an_interval():
    x = np.random.default_rng(5).standard_normal((3, 400)) * 0.01 + 0.0005
    iv = multi_series_sharpe_interval(x, P, resample="series")
    per = [sharpe_ratio(s, P) for s in x]
    assert iv.is_range and iv.level is None and (iv.low, iv.high) == (min(per), max(per))
    assert iv.method.startswith("range (min..max)") and "range" in str(iv) and "%" not in str(iv)
    assert iv.estimate == pytest.approx(sharpe_ratio(x.ravel(), P))


def test_many_series_intervals():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 500)) * 0.01 + 0.0005
    seeds = multi_series_sharpe_interval(x, P, resample="series", reps=400)
    assert not seeds.is_range and seeds.low < seeds.estimate < seeds.high and seeds.n_bars == 3000
    both = multi_series_sharpe_interval(x, P, reps=400)
    assert "then bars" in both.method and "one shared bar draw" in both.method
    # Walk-forward folds of different lengths: a list, each fold its own bar draws.
    folds = [rng.standard_normal(n) * 0.01 for n in (250, 400, 600)]
    iv = multi_series_sharpe_interval(folds, P, resample="bars", reps=400)
    assert "independent bar draws per series" in iv.method and iv.n_bars == 1250
    assert iv.estimate == pytest.approx(sharpe_ratio(np.concatenate(folds), P))
    with pytest.raises(ValueError, match=r"aligned: True needs series of one length"):
        multi_series_sharpe_interval(folds, P, aligned=True)


def test_bar_resampling_of_aligned_copies_matches_the_single_series_interval():
    """Two identical aligned series resampled at the bar level only are one series: same bars drawn
    from the same seed, so the interval equals sharpe_interval's exactly (tolerance: float rounding)."""
    r = np.random.default_rng(7).standard_normal(400) * 0.01 + 0.0004
    one = sharpe_interval(r, P, reps=300, seed=11)
    two = multi_series_sharpe_interval(np.stack([r, r]), P, resample="bars", statistic="mean", reps=300, seed=11)
    assert (two.low, two.high) == pytest.approx((one.low, one.high), abs=1e-12)


# --------------------------------------------------------------------------------------- PSR / DSR
def test_dsr_worked_example_of_the_paper():
    """Bailey & Lopez de Prado (2014), "The Deflated Sharpe Ratio: Correcting for Selection Bias,
    Backtest Overfitting and Non-Normality", J. Portfolio Management 40(5), numerical example:
    N = 100 trials, annualized variance of their Sharpes V = 1/2, selected annualized SR = 2.5 over
    T = 1250 daily bars (5 years, 250 a year), skewness -3, kurtosis 10. The paper reports the
    expected maximum (per bar) SR0 = 0.1132 and DSR = 0.9004 (tolerance: half a unit of the 4th
    decimal they print)."""
    res = dsr_from_moments(sharpe=2.5, n_bars=1250, skew=-3.0, kurtosis=10.0, periods_per_year=250,
                           n_trials=100, trials_sharpe_variance=0.5, trials_counted="100 seasonal rules")
    assert res.expected_max_sharpe / math.sqrt(250) == pytest.approx(0.1132, abs=5e-5)
    assert res.dsr == pytest.approx(0.9004, abs=5e-5)
    assert res.n_trials == 100 and res.trials_counted == "100 seasonal rules"
    # DSR is the PSR against that expected maximum.
    psr = psr_from_moments(sharpe=2.5, n_bars=1250, skew=-3.0, kurtosis=10.0, periods_per_year=250,
                           benchmark_sharpe=res.expected_max_sharpe)
    assert psr == res.dsr


def test_psr_formula_and_returns_path():
    """PSR with normal moments (skew 0, kurtosis 3) is Phi(SR sqrt(n-1) / sqrt(1 + SR^2/2)), per-bar SR
    (Bailey & Lopez de Prado 2012, "The Sharpe Ratio Efficient Frontier", J. Risk 15(2)); the returns
    path uses the returns' own per-bar Sharpe and plain sample moments (tolerance 1e-12)."""
    sr = 1.0 / math.sqrt(P)
    expect = stats.norm.cdf(sr * math.sqrt(503) / math.sqrt(1 + sr * sr / 2))
    psr = psr_from_moments(sharpe=1.0, n_bars=504, skew=0.0, kurtosis=3.0, periods_per_year=P)
    assert psr == pytest.approx(expect, abs=1e-12)
    r = np.random.default_rng(8).standard_t(5, 756) * 0.01 + 0.0006
    direct = psr_from_moments(sharpe=sharpe_ratio(r, P), n_bars=756, skew=float(stats.skew(r)),
                              kurtosis=float(stats.kurtosis(r, fisher=False)), periods_per_year=P, benchmark_sharpe=0.5)
    assert probabilistic_sharpe_ratio(r, P, benchmark_sharpe=0.5) == pytest.approx(direct, abs=1e-12)
    trials = [0.2, -0.3, 0.8, sharpe_ratio(r, P)]
    dsr = deflated_sharpe_ratio(r, P, trial_sharpes=trials, trials_counted="4 configs, seed 0")
    assert dsr.n_trials == 4 and dsr.trials_sharpe_variance == pytest.approx(np.var(trials, ddof=1))
    assert dsr.dsr < probabilistic_sharpe_ratio(r, P)  # deflating against a positive expected max


def test_expected_max_sharpe():
    """The Euler-Mascheroni approximation against the exact E[max of N standard normals] by quadrature
    (measured: +2.3% at N = 10, +0.9% at 100, +0.4% at 1000; it is an asymptotic formula, better
    for large N): within 3% at N = 10 and 1% at N >= 100. One trial is no selection (0)."""
    for n, tol in ((10, 0.03), (100, 0.01), (1000, 0.01)):
        exact = integrate.quad(lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1), -10, 10)[0]
        approx = expected_max_sharpe(n, 1.0)
        assert approx == pytest.approx(exact, rel=tol)
        assert approx == pytest.approx((1 - EULER_MASCHERONI) * stats.norm.ppf(1 - 1 / n)
                                       + EULER_MASCHERONI * stats.norm.ppf(1 - 1 / (n * math.e)))
    assert expected_max_sharpe(1, 4.0) == 0.0
    assert expected_max_sharpe(100, 4.0) == pytest.approx(2 * expected_max_sharpe(100, 1.0))


# ---------------------------------------------------------------------------------------------- SPA
def test_spa_noise_does_not_reject_and_a_real_edge_does():
    """20 datasets of 1000 bars, a benchmark and 10 candidates, all iid noise (daily sd 1%): at most
    3 of 20 rejections at 5% (expected ~1; P[>= 4 | 5% size] ~ 1.6%). Plant a per-bar edge of 0.2 sd
    (annualized Sharpe ~3.2) on candidate 3: at least 18 of 20 rejections, candidate 3 named best."""
    rng = np.random.default_rng(9)
    null_rejections = edge_rejections = named = 0
    for i in range(20):
        bench = rng.standard_normal(1000) * 0.01
        cand = rng.standard_normal((1000, 10)) * 0.01
        null_rejections += spa_test(bench, cand, reps=300, seed=i).rejects(0.05)
        cand[:, 3] += 0.002
        res = spa_test(bench, cand, reps=300, seed=i)
        edge_rejections += res.rejects(0.05)
        named += res.best_candidate == 3
    assert null_rejections <= 3
    assert edge_rejections >= 18 and named == 20
    assert res.pvalue_lower <= res.pvalue_consistent <= res.pvalue_upper


@pytest.mark.parametrize("block", [1.0, 3.5, 40.0, 900.0])
def test_spa_fft_kernel_matches_arch(block):
    """The FFT-kernel SPA gives arch's p-values and critical values (through the variance of the
    loss differentials) to float64 rounding (AR(1) candidates, 3,000 bars, so arch's full O(t^2) sum is still quick)."""
    from arch.bootstrap import SPA

    from rl_zerosync.evidence.overfitting import KernelSPA

    rng = np.random.default_rng(4)
    bench = ar1_returns(rng, 3000, 0.3, 0.0)
    cand = np.column_stack([ar1_returns(rng, 3000, 0.3, s) for s in (0.0, 0.5, 1.0, -0.5)])
    ours = KernelSPA(-bench, -cand, block_size=block, reps=200, seed=np.random.default_rng(1))
    ref = SPA(-bench, -cand, block_size=block, reps=200, seed=np.random.default_rng(1))
    ours.compute()
    ref.compute()
    np.testing.assert_allclose(ours.pvalues.to_numpy(), ref.pvalues.to_numpy(), rtol=0, atol=0)
    for level in (0.05, 0.1, 0.5):  # continuous in the variance, unlike the p-values' counts
        np.testing.assert_allclose(ours.critical_values(level).to_numpy(), ref.critical_values(level).to_numpy(),
                                   rtol=1e-10)


# ---------------------------------------------------------------------------------------------- PBO
def test_pbo_noise_near_half_and_a_real_edge_small():
    """CSCV with S = 10 blocks (all C(10, 5) = 252 splits), 20 candidates x 1000 bars. Pure noise:
    the mean PBO of 10 datasets is in [0.3, 0.7] (200 datasets measured a mean 0.50, and means of 10
    between 0.40 and 0.62). Candidate 7 with a per-bar edge of 0.2 sd: mean PBO < 0.1 (measured ~0.01)."""
    rng = np.random.default_rng(10)
    noise, edge = [], []
    for _ in range(10):
        x = rng.standard_normal((1000, 20)) * 0.01
        res = pbo_cscv(x, P, n_blocks=10)
        noise.append(res.pbo)
        x[:, 7] += 0.002
        edge.append(pbo_cscv(x, P, n_blocks=10).pbo)
    assert res.n_combinations == 252 and res.logits.shape == (252,)
    assert 0.3 <= np.mean(noise) <= 0.7
    assert np.mean(edge) < 0.1


def test_pbo_samples_splits_deterministically_when_too_many():
    x = np.random.default_rng(11).standard_normal((400, 5)) * 0.01
    one = pbo_cscv(x, P, n_blocks=20, max_combinations=300, seed=3)
    assert one.n_combinations == 300 and "300 of C(20, 10) = 184756" in one.method
    assert one == pbo_cscv(x, P, n_blocks=20, max_combinations=300, seed=3)
    np.testing.assert_array_equal(one.logits, pbo_cscv(x, P, n_blocks=20, max_combinations=300, seed=3).logits)


def test_pbo_sharpes_match_the_project_definition():
    """The split Sharpes come from block sums; they equal sharpe.sharpe_ratio on the split's bars."""
    x = np.random.default_rng(12).standard_normal((120, 3)) * 0.01 + 0.01  # a large mean: cancellation check
    res = pbo_cscv(x, P, n_blocks=4)
    # The first split (in lexicographic order) is blocks (0, 1) in sample: bars 0..59.
    first_is = max(sharpe_ratio(x[:60, j], P) for j in range(3))
    assert res.is_sharpe[0] == pytest.approx(first_is, rel=1e-10)


# ------------------------------------------------------------------------------------------ power
def test_standard_error_and_power_check():
    """Lo (2002), "The Statistics of Sharpe Ratios", FAJ 58(4): iid SE of SR ~ sqrt((1 + SR^2/2) / n)
    per bar. 1008 bars at 252/year, SR 0: SE = sqrt(252 / 1008) = 0.5 exactly; pooled over assets the
    bars add up. A Monte Carlo check: the sd of 4000 Sharpes of 252-bar iid normal series is within
    5% of the formula (sd of an sd estimate from 4000 draws ~1.1%)."""
    assert sharpe_standard_error(1008, 252) == pytest.approx(0.5)
    assert sharpe_standard_error([504, 504], 252) == sharpe_standard_error(1008, 252)
    sims = np.random.default_rng(13).standard_normal((4000, 252)) * 0.01 + 0.01 * 2.0 / math.sqrt(252)
    sd = np.std(sims.mean(axis=1) / sims.std(axis=1, ddof=1) * math.sqrt(252))
    assert sd == pytest.approx(sharpe_standard_error(252, 252, sharpe=2.0), rel=0.05)

    short = sharpe_power_check(630, 252)
    assert not short.ok and "\n" not in short.message
    assert "cannot tell annualized Sharpe 1 from 0" in short.message and "longer segments" in short.message
    enough, one_less = short.bars_needed, short.bars_needed - 1
    assert 2 * sharpe_standard_error(enough, 252, 1.0) < 1.0 <= 2 * sharpe_standard_error(one_less, 252, 1.0)
    pooled = sharpe_power_check([630, 630], 252)
    assert pooled.ok and pooled.bars == 1260
    with pytest.raises(ValueError, match=r"bars: expected an integer >= 2"):
        sharpe_standard_error(0, 252)
