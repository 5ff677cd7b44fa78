"""Selection bias: is the best of many trials (seeds, configurations, checkpoints) any good?

============================================  =======================================================
function                                      what it gives
============================================  =======================================================
:func:`probabilistic_sharpe_ratio`            ``P[true SR > SR*]`` with skew and kurtosis (PSR, 2012)
:func:`expected_max_sharpe`                   expected best Sharpe of N zero-skill trials
:func:`deflated_sharpe_ratio`                 PSR against that expected maximum (DSR, 2014)
:func:`spa_test`                              Hansen's SPA: does the best candidate beat a benchmark?
:func:`pbo_cscv`                              probability of backtest overfitting by CSCV (2014)
============================================  =======================================================

PSR and DSR work in per-bar (non-annualized) Sharpe ratios internally, as the papers do: an
annualized ``SR`` enters as ``SR / sqrt(P)`` (``P = periods_per_year``), a variance of annualized trial
Sharpes as ``V / P``; results that are Sharpes are reported annualized again. Sharpe is the project's
(:func:`rl_zerosync.evidence.sharpe.sharpe_ratio`); skewness and kurtosis are the plain (biased)
sample moments, kurtosis not in excess (3 for normal returns).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
from arch.bootstrap import SPA
from scipy import stats

from rl_zerosync.evidence.sharpe import sharpe_ratio
from rl_zerosync.evidence.significance import (
    Seed, block_length_for, check_periods_per_year, check_reps, check_returns, make_rng)

EULER_MASCHERONI = 0.5772156649015329


# -------------------------------------------------------------------------------- PSR and DSR
def _moments(r: np.ndarray, name: str) -> tuple[float, float, float]:
    """Per-bar Sharpe, skewness and kurtosis of ``r``; a constant series has no Sharpe to test."""
    if not r.std(ddof=1) > 0:
        raise ValueError(f"{name}: expected returns that vary (their std is 0, so the Sharpe is undefined)")
    return sharpe_ratio(r, 1.0), float(stats.skew(r)), float(stats.kurtosis(r, fisher=False))


def psr_from_moments(*, sharpe: float, n_bars: int, skew: float, kurtosis: float, periods_per_year: float,
                     benchmark_sharpe: float = 0.0) -> float:
    """Probabilistic Sharpe ratio from summary statistics (Bailey & Lopez de Prado 2012).

    ``PSR = Phi((SR - SR*) * sqrt(n - 1) / sqrt(1 - g3 * SR + (g4 - 1) / 4 * SR**2))`` with ``SR``,
    ``SR*`` per bar (the annualized ``sharpe`` and ``benchmark_sharpe`` divided by ``sqrt(P)``),
    ``g3`` the skewness and ``g4`` the kurtosis (3 for normal returns) of the per-bar returns.
    """
    p = check_periods_per_year(periods_per_year)
    if isinstance(n_bars, bool) or not isinstance(n_bars, (int, np.integer)) or n_bars < 2:
        raise ValueError(f"n_bars: expected an integer >= 2, got {n_bars!r}")
    for name, v in (("sharpe", sharpe), ("skew", skew), ("kurtosis", kurtosis), ("benchmark_sharpe", benchmark_sharpe)):
        if not math.isfinite(v):
            raise ValueError(f"{name}: expected a finite number, got {v!r}")
    if kurtosis < 1.0 + skew * skew - 1e-9:
        raise ValueError(f"kurtosis: expected >= 1 + skew**2 = {1 + skew * skew:g} (true of every distribution; "
                         f"kurtosis is not in excess, 3 for normal), got {kurtosis!r}")
    sr, sr0 = sharpe / math.sqrt(p), benchmark_sharpe / math.sqrt(p)
    var = 1.0 - skew * sr + (kurtosis - 1.0) / 4.0 * sr * sr
    if not var > 0:
        raise ValueError(f"skew, kurtosis: 1 - skew*SR + (kurtosis-1)/4*SR**2 = {var:g} at per-bar SR {sr:g}; "
                         "expected > 0")
    return float(stats.norm.cdf((sr - sr0) * math.sqrt(n_bars - 1) / math.sqrt(var)))


def probabilistic_sharpe_ratio(returns: np.ndarray, periods_per_year: float, *,
                               benchmark_sharpe: float = 0.0) -> float:
    """``P[true Sharpe > benchmark_sharpe]`` (annualized benchmark) from the per-bar returns' own Sharpe,
    skewness and kurtosis: :func:`psr_from_moments` (Bailey & Lopez de Prado 2012)."""
    r = check_returns(returns, "returns")
    p = check_periods_per_year(periods_per_year)
    sr, g3, g4 = _moments(r, "returns")
    return psr_from_moments(sharpe=sr * math.sqrt(p), n_bars=int(r.size), skew=g3, kurtosis=g4,
                            periods_per_year=p, benchmark_sharpe=benchmark_sharpe)


def expected_max_sharpe(n_trials: int, trials_sharpe_variance: float, mean_sharpe: float = 0.0) -> float:
    """Expected maximum Sharpe of ``n_trials`` independent trials (Bailey & Lopez de Prado 2014).

    ``E[max SR] ~ mean + sqrt(V) * ((1 - g) * Phi^-1(1 - 1/N) + g * Phi^-1(1 - 1/(N e)))``, ``g`` the
    Euler-Mascheroni constant. Unit-free: the result is in the units of ``sqrt(V)`` and ``mean``
    (per-bar in, per-bar out). One trial has no selection: ``mean``.
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, (int, np.integer)) or n_trials < 1:
        raise ValueError(f"n_trials: expected an integer >= 1 (trials run, selected one included), got {n_trials!r}")
    if not (math.isfinite(trials_sharpe_variance) and trials_sharpe_variance >= 0):
        raise ValueError(f"trials_sharpe_variance: expected a finite number >= 0, got {trials_sharpe_variance!r}")
    if n_trials == 1:
        return float(mean_sharpe)
    z1 = stats.norm.ppf(1.0 - 1.0 / n_trials)
    z2 = stats.norm.ppf(1.0 - 1.0 / (n_trials * math.e))
    spread = (1 - EULER_MASCHERONI) * z1 + EULER_MASCHERONI * z2
    return float(mean_sharpe + math.sqrt(trials_sharpe_variance) * spread)


@dataclass(frozen=True)
class DeflatedSharpe:
    """A deflated Sharpe ratio and what went into it. Sharpes annualized (per bar: ``/ sqrt(P)``)."""

    dsr: float
    sharpe: float
    expected_max_sharpe: float
    n_trials: int
    trials_sharpe_variance: float
    n_bars: int
    skew: float
    kurtosis: float
    periods_per_year: float
    trials_counted: str

    def __str__(self) -> str:
        return (f"DSR {self.dsr:.3f}: Sharpe {self.sharpe:.2f} vs expected best of {self.n_trials} "
                f"{self.expected_max_sharpe:.2f} over {self.n_bars} bars (trials: {self.trials_counted})")


def dsr_from_moments(*, sharpe: float, n_bars: int, skew: float, kurtosis: float, periods_per_year: float,
                     n_trials: int, trials_sharpe_variance: float, trials_counted: str) -> DeflatedSharpe:
    """Deflated Sharpe ratio from summary statistics (Bailey & Lopez de Prado 2014).

    ``DSR = PSR(SR0)`` with ``SR0 = expected_max_sharpe(N, V / P)`` per bar (zero-skill null, mean 0):
    ``sharpe`` is the selected trial's annualized Sharpe, ``trials_sharpe_variance`` ``V`` the variance
    of the ``N`` trials' annualized Sharpes. ``trials_counted`` says which trials ``N`` counts.
    """
    p = check_periods_per_year(periods_per_year)
    if not isinstance(trials_counted, str) or not trials_counted.strip():
        raise ValueError("trials_counted: expected a description of what the trials are "
                         f"(e.g. '12 configurations x 3 seeds'), got {trials_counted!r}")
    sr0 = expected_max_sharpe(n_trials, trials_sharpe_variance / p) * math.sqrt(p)
    dsr = psr_from_moments(sharpe=sharpe, n_bars=n_bars, skew=skew, kurtosis=kurtosis, periods_per_year=p,
                           benchmark_sharpe=sr0)
    return DeflatedSharpe(dsr, float(sharpe), sr0, int(n_trials), float(trials_sharpe_variance), int(n_bars),
                          float(skew), float(kurtosis), p, trials_counted)


def deflated_sharpe_ratio(returns: np.ndarray, periods_per_year: float, *, trial_sharpes: Sequence[float],
                          trials_counted: str, n_trials: int | None = None) -> DeflatedSharpe:
    """Deflated Sharpe ratio of the selected trial's per-bar ``returns`` (Bailey & Lopez de Prado 2014).

    ``trial_sharpes``: the annualized Sharpe of every trial (the selected one included); their
    sample variance (``ddof=1``) is ``V``. ``n_trials`` defaults to ``len(trial_sharpes)``; give it when
    more trials were run than recorded, or fewer effectively independent ones. Then
    :func:`dsr_from_moments` with the returns' Sharpe, skewness and kurtosis.
    """
    r = check_returns(returns, "returns")
    p = check_periods_per_year(periods_per_year)
    trials = np.asarray(trial_sharpes, dtype=np.float64)
    if trials.ndim != 1 or trials.size < 2 or not np.isfinite(trials).all():
        raise ValueError("trial_sharpes: expected at least 2 finite annualized Sharpes (one per trial), "
                         f"got {trial_sharpes!r}")
    sr, g3, g4 = _moments(r, "returns")
    return dsr_from_moments(sharpe=sr * math.sqrt(p), n_bars=int(r.size), skew=g3, kurtosis=g4, periods_per_year=p,
                            n_trials=int(trials.size if n_trials is None else n_trials),
                            trials_sharpe_variance=float(trials.var(ddof=1)), trials_counted=trials_counted)


# ------------------------------------------------------------------------------------------------ SPA
def _candidates(x: object, name: str, n_bars: int | None = None, min_candidates: int = 1) -> np.ndarray:
    """``x`` as a finite float64 matrix ``[bars, candidates]`` (a 1-D array: one candidate)."""
    m = np.asarray(x, dtype=np.float64)
    if m.ndim == 1:
        m = m[:, None]
    if m.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [bars, candidates], got shape {m.shape}")
    if m.shape[1] < min_candidates:
        raise ValueError(f"{name}: expected at least {min_candidates} candidates (columns), got {m.shape[1]}")
    for j in range(m.shape[1]):
        check_returns(m[:, j], f"{name}[:, {j}]")
    if n_bars is not None and m.shape[0] != n_bars:
        raise ValueError(f"{name}: expected {n_bars} bars (rows, the benchmark's), got {m.shape[0]}")
    return m


class KernelSPA(SPA):
    """:class:`arch.bootstrap.SPA` with its variance of the loss differentials (Hansen 2005, the
    stationary-bootstrap kernel ``kappa_i = (1 - i/t) q^i + (i/t) q^(t-i)``, ``q = 1 - 1/block``, over
    every lag ``0 < i < t``) from the differentials' autocovariances at all lags at once (FFT):
    arch's own estimate to float64 rounding in O(t log t), where arch's lag loop is O(t^2) (many
    minutes at 100k bars x 50 candidates)."""

    def _compute_variance(self) -> None:
        if self.nested:  # arch's own bootstrap estimate
            return super()._compute_variance()
        demeaned = self._loss_diff - self._loss_diff.mean(axis=0)
        t = self.t
        q = 1.0 - 1.0 / self.block_size
        n = 1 << int(2 * t - 1).bit_length()  # zero-padded: linear, not circular, correlation
        spec = np.fft.rfft(demeaned, n=n, axis=0)
        lagged = np.fft.irfft(spec * np.conj(spec), n=n, axis=0)[:t]  # sum_s d_s d_{s+i}, i = 0..t-1
        i = np.arange(1, t, dtype=np.float64)
        kappa = (1.0 - i / t) * q**i + (i / t) * q ** (t - i)
        self._loss_diff_var = (lagged[0] + 2.0 * (kappa[:, None] * lagged[1:]).sum(axis=0)) / t
        return None


@dataclass(frozen=True)
class SPAResult:
    """Hansen's SPA p-values for ``H0: no candidate beats the benchmark`` (mean per-bar return)."""

    pvalue_lower: float
    pvalue_consistent: float
    pvalue_upper: float
    best_candidate: int
    best_mean_excess: float
    n_bars: int
    n_candidates: int
    method: str

    def rejects(self, alpha: float = 0.05) -> bool:
        """Whether the consistent p-value (Hansen's recommended one) is below ``alpha``."""
        return self.pvalue_consistent < alpha


def spa_test(benchmark_returns: np.ndarray, candidate_returns: np.ndarray, *, reps: int = 1000,
             bootstrap: Literal["stationary", "circular"] = "stationary", block_length: float | None = None,
             studentize: bool = True, seed: Seed = 0) -> SPAResult:
    """Hansen's (2005) test for superior predictive ability of the best candidate over a benchmark.

    ``candidate_returns`` is ``[bars, candidates]``, on the benchmark's bars. Losses are
    ``-returns``, so ``d_k = r_k - r_bench`` per bar and ``H0: max_k E[d_k] <= 0`` (no candidate has a
    higher mean per-bar net return); a small p-value says the best one does beat the benchmark, after
    accounting for having picked it among all. :class:`arch.bootstrap.SPA` (its variance of the
    loss differentials from FFT autocovariances, :class:`KernelSPA`), its block length the
    largest Politis-White estimate over the ``d_k`` (:func:`block_length_for`). Lower / consistent /
    upper p-values as in Hansen (2005); ``best_candidate`` has the largest mean ``d_k``.
    """
    bench = check_returns(benchmark_returns, "benchmark_returns")
    cand = _candidates(candidate_returns, "candidate_returns", bench.size)
    reps = check_reps(reps)
    diff = cand - bench[:, None]
    block, how = block_length_for(diff, bootstrap, block_length)
    spa = KernelSPA(-bench, -cand, block_size=block, reps=reps, bootstrap=bootstrap, studentize=bool(studentize),
              seed=make_rng(seed))
    spa.compute()
    pv = spa.pvalues
    best = int(np.argmax(diff.mean(axis=0)))
    method = (f"Hansen SPA on losses -returns, {bootstrap} bootstrap over bars, block {block:.1f} ({how}), "
              f"{reps} reps, {'studentized' if studentize else 'not studentized'}")
    return SPAResult(float(pv["lower"]), float(pv["consistent"]), float(pv["upper"]), best,
                     float(diff[:, best].mean()), int(bench.size), int(cand.shape[1]), method)


# ------------------------------------------------------------------------------------------ PBO / CSCV
@dataclass(frozen=True)
class PBOResult:
    """Probability of backtest overfitting and the CSCV splits behind it (Sharpes annualized)."""

    pbo: float
    n_combinations: int
    n_blocks: int
    n_candidates: int
    n_bars: int
    prob_oos_loss: float
    method: str
    logits: np.ndarray = field(repr=False, compare=False)
    is_sharpe: np.ndarray = field(repr=False, compare=False)
    oos_sharpe: np.ndarray = field(repr=False, compare=False)


def _block_sums(returns: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per block (contiguous, ``np.array_split`` sizes) and candidate: bars, sums of centered r and r**2."""
    center = returns.mean(axis=0)
    c = returns - center
    parts = np.array_split(np.arange(len(returns)), n_blocks)
    n = np.array([len(ix) for ix in parts], dtype=np.float64)
    s1 = np.stack([c[ix].sum(axis=0) for ix in parts])
    s2 = np.stack([(c[ix] ** 2).sum(axis=0) for ix in parts])
    return n, s1, s2, center


def _sharpe_from_sums(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, center: np.ndarray, p: float) -> np.ndarray:
    """``sharpe_ratio`` per row (a split) and column (a candidate), from bar counts and centered sums."""
    mc = s1 / n[:, None]
    var = (s2 - n[:, None] * mc * mc) / (n[:, None] - 1)
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, (center + mc) / sd * math.sqrt(p), 0.0)


def _combinations(n_blocks: int, max_combinations: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Membership matrix ``[splits, blocks]`` of the in-sample halves: all ``C(S, S/2)``, or a sample."""
    half, total = n_blocks // 2, math.comb(n_blocks, n_blocks // 2)
    if total <= max_combinations:
        combos = list(itertools.combinations(range(n_blocks), half))
        how = f"all C({n_blocks}, {half}) = {total} splits"
    else:
        seen: set[tuple[int, ...]] = set()
        while len(seen) < max_combinations:
            seen.add(tuple(sorted(rng.choice(n_blocks, half, replace=False).tolist())))
        combos = sorted(seen)
        how = f"{max_combinations} of C({n_blocks}, {half}) = {total} splits, drawn without repetition"
    member = np.zeros((len(combos), n_blocks), dtype=np.float64)
    for i, c in enumerate(combos):
        member[i, list(c)] = 1.0
    return member, how


def pbo_cscv(returns: np.ndarray, periods_per_year: float, *, n_blocks: int = 16,
             max_combinations: int = 20000, seed: Seed = 0) -> PBOResult:
    """Probability of backtest overfitting by combinatorially symmetric cross-validation.

    Bailey, Borwein, Lopez de Prado & Zhu (2014/2017), "The Probability of Backtest Overfitting",
    J. Computational Finance. ``returns`` is ``[T bars, N candidates]``; its rows are cut into
    ``S = n_blocks`` (even) contiguous blocks (``np.array_split``: sizes differ by at most one bar, no
    bar dropped). For every split of the blocks into halves ``J`` (in sample) and ``J'`` (out of
    sample), ``C(S, S/2)`` of them (a deterministic sample of ``max_combinations`` under ``seed`` when
    more): ``n* = argmax_n SR_J(n)``, ``w = rank of SR_J'(n*) among SR_J' / (N + 1)`` (ranks 1..N
    ascending, ties averaged), logit ``l = ln(w / (1 - w))``. ``PBO = #{l <= 0} / #splits``;
    ``prob_oos_loss = #{SR_J'(n*) < 0} / #splits``. Written here: no well-kept Python package
    implements CSCV (the reference implementation is the R package ``pbo``).
    """
    m = _candidates(returns, "returns", min_candidates=2)
    p = check_periods_per_year(periods_per_year)
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 2 or n_blocks % 2:
        raise ValueError(f"n_blocks: expected an even integer >= 2, got {n_blocks!r}")
    if len(m) < 2 * n_blocks:
        raise ValueError(f"returns: expected at least 2 * n_blocks = {2 * n_blocks} bars (rows), got {len(m)}")
    if (isinstance(max_combinations, bool) or not isinstance(max_combinations, (int, np.integer))
            or max_combinations < 2):
        raise ValueError(f"max_combinations: expected an integer >= 2, got {max_combinations!r}")
    n, s1, s2, center = _block_sums(m, n_blocks)
    member, how = _combinations(int(n_blocks), int(max_combinations), make_rng(seed))
    ins = _sharpe_from_sums(member @ n, member @ s1, member @ s2, center, p)
    out_member = 1.0 - member
    oos = _sharpe_from_sums(out_member @ n, out_member @ s1, out_member @ s2, center, p)
    rows = np.arange(len(member))
    best = np.argmax(ins, axis=1)
    chosen = oos[rows, best]
    rank = 1.0 + (oos < chosen[:, None]).sum(axis=1) + 0.5 * ((oos == chosen[:, None]).sum(axis=1) - 1)
    w = rank / (m.shape[1] + 1.0)
    logits = np.log(w / (1.0 - w))
    method = (f"CSCV over {n_blocks} contiguous blocks of ~{len(m) // n_blocks} bars, {how}; "
              f"in-sample best by Sharpe, {m.shape[1]} candidates")
    return PBOResult(float(np.mean(logits <= 0)), len(member), int(n_blocks), int(m.shape[1]), int(len(m)),
                     float(np.mean(chosen < 0)), method, logits, ins[rows, best], chosen)
