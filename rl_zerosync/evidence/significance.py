"""How much of a Sharpe ratio is sample noise: bootstrap intervals and the power of a segment.

Every Sharpe here is the project's (:func:`rl_zerosync.evidence.sharpe.sharpe_ratio`): per-bar net
returns ``r_1..r_n``, ``SR = mean(r) / std(r, ddof=1) * sqrt(P)`` with ``P = periods_per_year``
(0 when the std is 0).

============================================  =======================================================
function                                      what it gives
============================================  =======================================================
:func:`sharpe_interval`                       block-bootstrap interval of one series' Sharpe
:func:`paired_difference_interval`            interval of ``SR(a) - SR(b)``, both on the same bars
:func:`multi_series_sharpe_interval`          interval (or range) over seeds / assets / folds
:func:`sharpe_standard_error`                 ``sqrt((1 + SR_bar**2 / 2) / n) * sqrt(P)`` (Lo 2002)
:func:`sharpe_power_check`                    can ``n`` bars tell annualized Sharpe 1 from 0?
============================================  =======================================================

Bootstraps use :mod:`arch.bootstrap` (stationary bootstrap of Politis & Romano 1994, or the circular
block bootstrap), with the block length of Politis & White (2004, corrected by Patton, Politis & White
2009; :func:`rl_zerosync.evidence.resample.politis_white`, arch's ``optimal_block_length`` for all columns
at once), and percentile intervals: the
``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the replicated statistic. Results are
deterministic under ``seed`` (an int or a :class:`numpy.random.Generator`, handed to arch as ``seed=``).
Selection-bias tools (PSR, DSR, SPA, PBO) are in :mod:`rl_zerosync.evidence.overfitting`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence, Union

import numpy as np

if TYPE_CHECKING:  # arch (and the matplotlib it imports) only where a bootstrap runs: not at a run's start
    from arch.bootstrap import CircularBlockBootstrap, StationaryBootstrap

from rl_zerosync.evidence.sharpe import sharpe_ratio

MIN_BARS = 20
"""Fewest bars a bootstrapped series may have."""
MIN_REPS = 100
"""Fewest bootstrap replications accepted."""
MIN_SERIES_FOR_INTERVAL = 5
"""Fewer series than this, resampled at the series level only, give a min..max range, not an interval."""

Bootstrap = Literal["stationary", "circular"]
Seed = Union[int, np.random.Generator]
SeriesInput = Union[np.ndarray, Sequence[np.ndarray]]


# ------------------------------------------------------------------------------------ argument checks
def check_returns(x: object, name: str, min_bars: int = MIN_BARS) -> np.ndarray:
    """``x`` as a 1-D float64 array of finite per-bar returns with at least ``min_bars`` bars."""
    r = np.asarray(x, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of per-bar net returns, got shape {r.shape}")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise ValueError(f"{name}: expected finite returns, found {bad.size} NaN/inf (first at bar {bad[0]})")
    if r.size < min_bars:
        raise ValueError(f"{name}: expected at least {min_bars} bars, got {r.size}")
    return r


def check_periods_per_year(periods_per_year: float) -> float:
    """``periods_per_year`` as a float, finite and > 0."""
    p = float(periods_per_year)
    if not math.isfinite(p) or p <= 0:
        raise ValueError(f"periods_per_year: expected a finite number > 0, got {periods_per_year!r}")
    return p


def check_level(level: float) -> float:
    """A confidence level strictly between 0 and 1."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level: expected a number strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return float(level)


def check_reps(reps: int, minimum: int = MIN_REPS) -> int:
    """A whole number of bootstrap replications, at least ``minimum``."""
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < minimum:
        raise ValueError(f"reps: expected an integer >= {minimum}, got {reps!r}")
    return int(reps)


def make_rng(seed: Seed) -> np.random.Generator:
    """The Generator every draw of one call comes from: ``np.random.default_rng(seed)`` or ``seed`` itself."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0 or a numpy Generator, got {seed!r}")
    return np.random.default_rng(int(seed))


# ------------------------------------------------------------------------------------- block bootstrap
def block_length_for(x: np.ndarray, bootstrap: Bootstrap = "stationary",
                     block_length: float | None = None) -> tuple[float, str]:
    """Block length for the columns of ``x`` (bars on axis 0) and how it was chosen.

    Given ``block_length`` (>= 1) is used as is. Otherwise the Politis-White (2004) estimate for the
    mean of each column (:func:`rl_zerosync.evidence.resample.politis_white`, arch's
    ``optimal_block_length`` for all columns at once: the ``stationary`` or ``circular`` one), the
    largest over columns; an estimate below 1 (no detectable
    autocorrelation) is raised to 1, the iid bootstrap, and the description says so. Columns with zero
    variance carry no dependence and are left out (all constant: 1). The circular bootstrap needs
    whole blocks: the length is rounded up.
    """
    if bootstrap not in ("stationary", "circular"):
        raise ValueError(f"bootstrap: expected 'stationary' or 'circular', got {bootstrap!r}")
    if block_length is not None:
        b = float(block_length)
        if not math.isfinite(b) or b < 1.0:
            raise ValueError(f"block_length: expected a number >= 1 (bars) or None, got {block_length!r}")
        how = "given"
    else:
        cols = x.reshape(len(x), -1)
        cols = cols[:, cols.std(axis=0) > 0]
        if cols.shape[1] == 0:
            b, how = 1.0, "constant series"
        else:
            from rl_zerosync.evidence.resample import politis_white

            est = float(np.max(politis_white(cols)[0 if bootstrap == "stationary" else 1]))
            if not math.isfinite(est):
                raise ValueError(f"block_length: the Politis-White estimate is undefined ({est}) for these "
                                 "returns; expected an explicit block_length (bars)")
            b, how = (est, "Politis-White") if est >= 1.0 else (1.0, f"Politis-White {est:.2f} raised to 1")
    if bootstrap == "circular":
        b = float(math.ceil(b))
    return b, how


def _bootstrap(kind: Bootstrap, block: float, data: np.ndarray,
               rng: np.random.Generator) -> StationaryBootstrap | CircularBlockBootstrap:
    from arch.bootstrap import CircularBlockBootstrap, StationaryBootstrap

    if kind == "stationary":
        return StationaryBootstrap(block, data, seed=rng)
    return CircularBlockBootstrap(int(block), data, seed=rng)


def _percentiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.quantile(stats, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


@dataclass(frozen=True)
class SharpeInterval:
    """An annualized Sharpe (or Sharpe difference) with its interval.

    ``level`` is the nominal coverage of ``[low, high]``; ``None`` marks a plain min..max range over
    too few series, which is no confidence interval. ``method`` says what was resampled.
    """

    estimate: float
    low: float
    high: float
    level: float | None
    method: str
    n_bars: int
    n_series: int = 1

    @property
    def is_range(self) -> bool:
        return self.level is None

    def __str__(self) -> str:
        what = "range" if self.level is None else f"{self.level:.0%} interval"
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}] ({what}; {self.method}; {self.n_bars} bars)"


def sharpe_interval(returns: np.ndarray, periods_per_year: float, *, level: float = 0.95, reps: int = 2000,
                    bootstrap: Bootstrap = "stationary", block_length: float | None = None,
                    seed: Seed = 0) -> SharpeInterval:
    """Percentile block-bootstrap interval of the annualized Sharpe of one series.

    Bars are resampled in blocks (stationary bootstrap: geometric block lengths of mean ``b``;
    circular: blocks of ``b`` bars, wrapping around), ``b`` from :func:`block_length_for`, and
    ``SR* = sharpe_ratio(r*, P)`` is computed on each of ``reps`` resamples ``r*``; the interval is
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``SR*`` (Politis & Romano 1994).
    """
    r = check_returns(returns, "returns")
    p = check_periods_per_year(periods_per_year)
    level, reps = check_level(level), check_reps(reps)
    block, how = block_length_for(r, bootstrap, block_length)
    bs = _bootstrap(bootstrap, block, r, make_rng(seed))
    stats = bs.apply(lambda x: np.array([sharpe_ratio(x, p)]), reps)[:, 0]
    low, high = _percentiles(stats, level)
    method = f"{bootstrap} block bootstrap over bars, block {block:.1f} ({how}), {reps} reps"
    return SharpeInterval(sharpe_ratio(r, p), low, high, level, method, int(r.size))


def paired_difference_interval(a: np.ndarray, b: np.ndarray, periods_per_year: float, *, level: float = 0.95,
                               reps: int = 2000, bootstrap: Bootstrap = "stationary",
                               block_length: float | None = None, seed: Seed = 0) -> SharpeInterval:
    """Percentile interval of ``SR(a) - SR(b)`` (annualized), paired by bar.

    ``a`` and ``b`` are two strategies' returns over the same bars (e.g. agent and a rule). Each
    resample draws ONE set of bar indices (blocks as in :func:`sharpe_interval`, the block length the
    larger of the two series' estimates) and applies it to both, so the correlation between them
    is kept and what is common to both cancels: identical series give exactly ``[0, 0]``.
    """
    x = check_returns(a, "a")
    y = check_returns(b, "b")
    if x.size != y.size:
        raise ValueError(f"a, b: expected the same number of bars (paired by bar), got {x.size} and {y.size}")
    p = check_periods_per_year(periods_per_year)
    level, reps = check_level(level), check_reps(reps)
    xy = np.column_stack([x, y])
    block, how = block_length_for(xy, bootstrap, block_length)
    bs = _bootstrap(bootstrap, block, xy, make_rng(seed))
    stats = bs.apply(lambda z: np.array([sharpe_ratio(z[:, 0], p) - sharpe_ratio(z[:, 1], p)]), reps)[:, 0]
    low, high = _percentiles(stats, level)
    method = (f"paired {bootstrap} block bootstrap over bars (the same resampled bars for a and b), "
              f"block {block:.1f} ({how}), {reps} reps")
    return SharpeInterval(sharpe_ratio(x, p) - sharpe_ratio(y, p), low, high, level, method, int(x.size))


# --------------------------------------------------------------------------------------- many series
Resample = Literal["series_and_bars", "series", "bars"]
Statistic = Literal["pooled", "mean"]


def _as_series(returns: SeriesInput, aligned: bool | None) -> tuple[list[np.ndarray], bool]:
    if isinstance(returns, np.ndarray) and returns.ndim != 2:
        raise ValueError(f"returns: expected a 2-D array [series, bars] or a list of 1-D arrays, "
                         f"got an array of shape {returns.shape}")
    inferred = isinstance(returns, np.ndarray)
    series = [check_returns(s, f"returns[{i}]") for i, s in enumerate(returns)]
    if len(series) < 2:
        raise ValueError(f"returns: expected at least 2 series (use sharpe_interval for one), got {len(series)}")
    aligned = inferred if aligned is None else bool(aligned)
    if aligned and len({s.size for s in series}) > 1:
        raise ValueError("aligned: True needs series of one length (the same bars), got lengths "
                         f"{sorted({s.size for s in series})}")
    return series, aligned


def _statistic(series: Sequence[np.ndarray], statistic: Statistic, p: float) -> float:
    if statistic == "pooled":
        return sharpe_ratio(np.concatenate(series), p)
    return float(np.mean([sharpe_ratio(s, p) for s in series]))


def _pooled_from_sums(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, center: float, p: float) -> float:
    """``sharpe_ratio`` of a concatenation from its parts' bar counts ``n`` and sums of ``r - center``
    (``s1``) and ``(r - center)**2`` (``s2``); centering keeps the variance free of cancellation."""
    n_all = n.sum()
    mc = s1.sum() / n_all
    var = (s2.sum() - n_all * mc * mc) / (n_all - 1)
    return float((center + mc) / math.sqrt(var) * math.sqrt(p)) if var > 0 else 0.0


def _series_level_stats(series: list[np.ndarray], statistic: Statistic, p: float, draws: np.ndarray) -> np.ndarray:
    """The statistic of each row of ``draws`` (indices of drawn series), bars kept as they are."""
    if statistic == "mean":
        return np.array([sharpe_ratio(s, p) for s in series])[draws].mean(axis=1)
    center = float(np.concatenate(series).mean())
    n = np.array([s.size for s in series], dtype=np.float64)
    s1 = np.array([(s - center).sum() for s in series])
    s2 = np.array([((s - center) ** 2).sum() for s in series])
    return np.array([_pooled_from_sums(n[d], s1[d], s2[d], center, p) for d in draws])


def _bar_level_stats(series: list[np.ndarray], aligned: bool, kind: Bootstrap, blocks: list[float],
                     rng: np.random.Generator, draws: np.ndarray, statistic: Statistic, p: float) -> np.ndarray:
    """The statistic of each row of ``draws`` with the drawn series' bars block-resampled: one shared
    draw of bar indices per replicate when aligned, else an independent draw for every drawn series."""
    out = np.empty(len(draws))
    if aligned:
        bs = _bootstrap(kind, blocks[0], np.column_stack(series), rng)
        for k, ((x,), _) in enumerate(bs.bootstrap(len(draws))):
            out[k] = _statistic([x[:, j] for j in draws[k]], statistic, p)
        return out
    gens = [_bootstrap(kind, b, s, rng).bootstrap(draws.size) for s, b in zip(series, blocks)]
    for k, d in enumerate(draws):
        out[k] = _statistic([next(gens[j])[0][0] for j in d], statistic, p)
    return out


def multi_series_sharpe_interval(returns: SeriesInput, periods_per_year: float, *,
                                 resample: Resample = "series_and_bars", statistic: Statistic = "pooled",
                                 aligned: bool | None = None, level: float = 0.95, reps: int = 2000,
                                 bootstrap: Bootstrap = "stationary", block_length: float | None = None,
                                 seed: Seed = 0) -> SharpeInterval:
    """Interval of a Sharpe over several series: seeds, assets, or walk-forward folds.

    ``returns``: a 2-D array ``[series, bars]`` or a list of 1-D arrays (lengths may differ).
    ``aligned`` (default: True for a 2-D array, False for a list) says whether the series share their
    bars (seeds or assets over one test period) or cover separate periods (walk-forward folds).

    ``statistic``: ``"pooled"``, the Sharpe of all bars concatenated, or ``"mean"``, the mean of the
    per-series Sharpes. What one replicate resamples (``resample``):

    * ``"series"``: ``m`` series drawn with replacement from the ``m``, bars kept as they are. With
      fewer than :data:`MIN_SERIES_FOR_INTERVAL` series no interval is made: ``[low, high]`` is the
      min..max of the per-series Sharpes, ``level=None`` (a range, not a confidence interval).
    * ``"bars"``: every series once, its bars resampled by the block bootstrap; aligned series share
      one draw of bar indices (keeping their cross-correlation), others are drawn independently.
    * ``"series_and_bars"`` (two-stage): series drawn as in ``"series"``, then the bars of the drawn
      series as in ``"bars"`` (a series drawn twice gets two independent bar draws unless aligned).

    Which to use: the two-stage ``"series_and_bars"`` is the conservative choice. The series level
    already carries each series' own bar noise, so resampling bars again counts that part twice
    (Davison & Hinkley 1997, sec. 3.8): for independent, exchangeable series it can be 1.5-2x wider
    than either level alone. It is the right split for seeds on one test period (aligned): seeds
    give the training spread, the shared bar draw the market noise common to all seeds, which no
    seed-level resampling sees. Folds or assets with no training spread to speak of: ``"bars"``.

    Block length: :func:`block_length_for` over all series when aligned, per series otherwise.
    """
    series, aligned = _as_series(returns, aligned)
    p = check_periods_per_year(periods_per_year)
    level, reps = check_level(level), check_reps(reps)
    if resample not in ("series_and_bars", "series", "bars"):
        raise ValueError(f"resample: expected 'series_and_bars', 'series' or 'bars', got {resample!r}")
    if statistic not in ("pooled", "mean"):
        raise ValueError(f"statistic: expected 'pooled' or 'mean', got {statistic!r}")
    m, n_bars = len(series), int(sum(s.size for s in series))
    estimate = _statistic(series, statistic, p)
    what = "pooled Sharpe of all bars" if statistic == "pooled" else "mean of per-series Sharpes"
    if resample == "series" and m < MIN_SERIES_FOR_INTERVAL:
        per = [sharpe_ratio(s, p) for s in series]
        method = (f"range (min..max) of per-series Sharpe over {m} series: fewer than "
                  f"{MIN_SERIES_FOR_INTERVAL} series give no series-level interval; estimate: {what}")
        return SharpeInterval(estimate, float(min(per)), float(max(per)), None, method, n_bars, m)
    rng = make_rng(seed)
    draws = rng.integers(0, m, size=(reps, m)) if resample != "bars" else np.tile(np.arange(m), (reps, 1))
    if resample == "series":
        stats = _series_level_stats(series, statistic, p, draws)
        method = f"series drawn with replacement ({m} series, bars kept), {reps} reps; statistic: {what}"
    else:
        if aligned:
            blocks = [block_length_for(np.column_stack(series), bootstrap, block_length)] * m
        else:
            blocks = [block_length_for(s, bootstrap, block_length) for s in series]
        stats = _bar_level_stats(series, aligned, bootstrap, [b for b, _ in blocks], rng, draws, statistic, p)
        sizes = sorted({f"{b:.1f}" for b, _ in blocks}, key=float)
        block_txt = f"block {sizes[0]}" if len(sizes) == 1 else f"blocks {sizes[0]}..{sizes[-1]} per series"
        stage = f"series drawn with replacement ({m} series), then " if resample == "series_and_bars" else ""
        shared = "one shared bar draw for all series (aligned)" if aligned else "independent bar draws per series"
        method = (f"{stage}bars by {bootstrap} block bootstrap, {shared}, {block_txt} ({blocks[0][1]}), "
                  f"{reps} reps; statistic: {what}")
        if resample == "series_and_bars" and m < MIN_SERIES_FOR_INTERVAL:
            method += f"; only {m} series: the series-level part of the spread is poorly estimated"
    low, high = _percentiles(stats, level)
    return SharpeInterval(estimate, low, high, level, method, n_bars, m)


# ---------------------------------------------------------------------------------- validation power
def _total_bars(bars: int | Sequence[int]) -> int:
    items = [bars] if isinstance(bars, (int, np.integer)) else list(bars)
    if not items or any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 2 for b in items):
        raise ValueError(f"bars: expected an integer >= 2 or a non-empty list of them (one per asset/series), "
                         f"got {bars!r}")
    return int(sum(items))


def sharpe_standard_error(bars: int | Sequence[int], periods_per_year: float, sharpe: float = 0.0) -> float:
    """Standard error of an annualized Sharpe estimated over ``bars`` bars (iid returns; Lo 2002).

    ``SE = sqrt((1 + SR_bar**2 / 2) / n) * sqrt(P)`` with ``SR_bar = sharpe / sqrt(P)`` the per-bar
    Sharpe and ``n`` the bars (a list is pooled over assets/series: bars summed, which treats them as
    independent). Positively autocorrelated returns have a larger SE (Lo 2002 gives the correction);
    the block-bootstrap intervals above account for it.
    """
    n = _total_bars(bars)
    p = check_periods_per_year(periods_per_year)
    if not math.isfinite(sharpe):
        raise ValueError(f"sharpe: expected a finite annualized Sharpe, got {sharpe!r}")
    sr_bar = sharpe / math.sqrt(p)
    return math.sqrt((1.0 + sr_bar * sr_bar / 2.0) / n) * math.sqrt(p)


@dataclass(frozen=True)
class PowerCheck:
    """Whether ``bars`` can tell annualized Sharpe ``target_sharpe`` from 0, with a one-line message."""

    ok: bool
    standard_error: float
    bars: int
    bars_needed: int
    target_sharpe: float
    message: str


def sharpe_power_check(bars: int | Sequence[int], periods_per_year: float, *, target_sharpe: float = 1.0,
                       z: float = 2.0) -> PowerCheck:
    """Can a validation segment tell annualized Sharpe ``target_sharpe`` from 0? ``ok`` when ``z * SE < target``.

    ``SE`` is :func:`sharpe_standard_error` at ``sharpe=target_sharpe``; ``bars_needed`` is the fewest
    bars with ``z * SE < target``, just above ``z**2 * P * (1 + SR_bar**2 / 2) / target**2`` (about 4
    years of bars for ``target=1``, ``z=2``). ``message`` is one line; when not ok it says what to change.
    """
    n = _total_bars(bars)
    p = check_periods_per_year(periods_per_year)
    if not (math.isfinite(target_sharpe) and target_sharpe > 0):
        raise ValueError(f"target_sharpe: expected a finite annualized Sharpe > 0, got {target_sharpe!r}")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z: expected a finite number > 0 (standard errors), got {z!r}")
    se = sharpe_standard_error(n, p, target_sharpe)
    sr_bar = target_sharpe / math.sqrt(p)
    needed = math.ceil(z * z * p * (1.0 + sr_bar * sr_bar / 2.0) / (target_sharpe * target_sharpe))
    while z * sharpe_standard_error(needed, p, target_sharpe) >= target_sharpe:  # float rounding at equality
        needed += 1
    ok = z * se < target_sharpe
    span = f"{n} bars ({n / p:.2f} years at {p:g} bars/year)"
    if ok:
        message = (f"{span} can tell annualized Sharpe {target_sharpe:g} from 0: "
                   f"{z:g}*SE = {z * se:.2f} < {target_sharpe:g}")
    else:
        message = (f"validation cannot tell annualized Sharpe {target_sharpe:g} from 0 with {span}: "
                   f"{z:g}*SE = {z * se:.2f} >= {target_sharpe:g}; needs >= {needed} bars "
                   f"({needed / p:.1f} years): use longer segments, more assets or more folds (bars add up)")
    return PowerCheck(ok, se, n, needed, float(target_sharpe), message)
