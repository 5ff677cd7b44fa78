"""Intervals calibrated on the market they are used on, and a deflated Sharpe over the right trials.

**The statistic.** A report's Sharpe is the mean over series (assets, held-out series) of each
series' annualized Sharpe, averaged over seeds when there are several; a difference (agent - rule)
is the same mean of per-series differences, both sides on the same bars.

**The resampling** (:func:`panel_interval`), by what the series are:

* *Independent series* (the synthetic source: every held-out series is its own draw of the
  generator, no shared calendar) with at least :data:`MIN_CLUSTERS` of them: a **cluster
  bootstrap over whole series**. A series is the independent unit; its bars stay as they are, so
  every dependence inside a series (trends of hundreds of bars, volatility clustering, the
  strategy's positions) is kept whole. Seeds (the same trained models on every series) are drawn
  with replacement as well, crossed with the series. Deviations from the estimate are scaled by
  ``sqrt(m / (m - 1))`` (the bootstrap's variance of a mean of ``m`` units is ``(m - 1) / m`` of the
  unbiased one) and by ``t_{m-1} / z`` (the small-sample quantile; :data:`CLUSTER_INTERVAL`).
* *Series on one calendar* (file sources: assets over the same dates, walk-forward folds stitched
  in time), or fewer than :data:`MIN_CLUSTERS` independent series: a **stationary block bootstrap
  over bars**, one shared draw of bar indices for all series of one length (which keeps their
  cross-correlation; independent series get draws of their own), seeds drawn with replacement.
  The mean block length is the block rule :func:`block_rule`: the longest of the Politis-White
  estimate on the returns, on their absolute values (volatility clustering) and the integrated
  autocorrelation time of the strategy's position (how long a bet lasts), at most half the series.

Intervals are percentile intervals of the replicated statistic; ``se`` is its standard deviation
(the calibrated standard error the deflated Sharpe and the power check use). The coverage of the
cluster bootstrap on the project's own generator is measured by ``benchmarks/coverage.py``
(``benchmarks/results/coverage.json``).

**The deflated Sharpe** (:func:`deflated_sharpe`, Bailey & Lopez de Prado 2014) is computed where
the selection happened: on the selected trial's *validation* Sharpe, against the expected best of
``N`` zero-skill trials whose spread is their estimation noise on validation (``V = se**2``, from the
calibrated bootstrap), never a spread mixed across families of trials. ``N`` is the effective number of
independent trials among the candidates compared (:func:`effective_trials`: the participation ratio
of the eigenvalues of their validation returns' correlation matrix; successive checkpoints of one
run are highly correlated and count as few).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from scipy import stats

from rl_zerosync.evidence.overfitting import EULER_MASCHERONI
from rl_zerosync.evidence.resample import (
    chunks, cluster_counts, generator, politis_white, stationary_counts, stats_device, weighted_sharpes)
from rl_zerosync.evidence.significance import MIN_BARS, check_level, check_periods_per_year, check_reps

MIN_CLUSTERS = 8
"""Fewest independent series resampled as whole clusters; fewer are resampled by bars."""
LEVEL = 0.95
"""Nominal coverage of every interval."""
REPS = 2000
"""Bootstrap replications of an interval."""
CLUSTER_INTERVALS = ("percentile", "percentile_t", "studentized")
"""How a cluster bootstrap makes its interval (:func:`panel_interval`)."""
CLUSTER_INTERVAL = "percentile_t"
"""The one every report uses. ``benchmarks/coverage.py`` measures all three on the project's generator
(200 fresh sets of 32 series x 3,000 bars): the plain percentile covered 0.89 of sets (level) with
0.92x the true width; the t-scaled percentile and the bootstrap-t 0.905-0.92 with 0.93-0.96x. The
t-scaled percentile is the simplest of the two that meet 0.90-0.98 (and widens with few clusters)."""
POSITION_ACF_CUTOFF = 0.05
"""The position's autocorrelation time sums lags until the autocorrelation first falls below this."""

Panel = Sequence[Sequence[np.ndarray]]
"""Per-bar net returns ``[seed][series]`` (one seed: ``[[series...]]``)."""


# ------------------------------------------------------------------------------------ inputs
def as_panel(x: Panel | Sequence[np.ndarray], name: str) -> list[list[np.ndarray]]:
    """``x`` as ``[seed][series]`` float64 arrays (a flat list of series is one seed), checked: at
    least one series of at least :data:`MIN_BARS` finite bars, every seed with the same series lengths."""
    seq = list(x)
    if not seq:
        raise ValueError(f"{name}: expected per-series net returns (at least one series), got none")
    if np.ndim(seq[0]) == 1 and not isinstance(seq[0][0], (list, tuple, np.ndarray)):
        seq = [seq]  # one seed: a flat list of series
    out = [[np.asarray(r, dtype=np.float64) for r in seed] for seed in seq]
    lengths = [r.size for r in out[0]]
    for s, seed in enumerate(out):
        if [r.size for r in seed] != lengths:
            raise ValueError(f"{name}[{s}]: expected the series lengths of seed 0 {lengths}, got "
                             f"{[r.size for r in seed]}")
        for i, r in enumerate(seed):
            if r.ndim != 1 or r.size < MIN_BARS or not np.isfinite(r).all():
                raise ValueError(f"{name}[{s}][{i}]: expected a 1-D array of at least {MIN_BARS} finite per-bar "
                                 f"returns, got shape {r.shape}")
    return out


# -------------------------------------------------------------------------------------- block rule
def position_time(position: np.ndarray) -> float:
    """Integrated autocorrelation time ``1 + 2 sum_k rho_k`` of a position series, summed over lags
    until ``rho_k`` first falls below :data:`POSITION_ACF_CUTOFF` (1 for a constant position)."""
    x = np.asarray(position, dtype=np.float64)
    x = x - x.mean()
    n = x.size
    denom = float(x @ x)
    if n < 3 or denom <= 0:
        return 1.0
    size = 1 << int(2 * n - 1).bit_length()
    spec = np.fft.rfft(x, n=size)
    acf = np.fft.irfft(spec * np.conj(spec), n=size)[:n] / denom
    below = np.flatnonzero(acf[1:] < POSITION_ACF_CUTOFF)
    last = int(below[0]) if below.size else n - 1
    return float(1.0 + 2.0 * acf[1: 1 + last].sum())


def block_rule(columns: Sequence[np.ndarray], positions: Sequence[np.ndarray] | None = None) -> tuple[float, str]:
    """The mean block length of a bar bootstrap of ``columns`` (equal lengths) and how it was chosen:
    the longest of the Politis-White estimate (stationary) on the returns and on their absolute
    values, and :func:`position_time` of each given position series; at least 1, at most half the bars."""
    x = np.column_stack(columns)
    x = x[:, x.std(axis=0) > 0]
    parts = {}
    if x.shape[1]:
        parts["Politis-White on returns"] = float(np.max(politis_white(x)[0]))
        parts["on |returns|"] = float(np.max(politis_white(np.abs(x))[0]))
    if positions:
        parts["position autocorrelation time"] = max(position_time(p) for p in positions)
    finite = {k: v for k, v in parts.items() if math.isfinite(v)}
    n = len(columns[0])
    block = min(max([1.0, *finite.values()]), n / 2.0)
    how = ", ".join(f"{k} {v:.1f}" for k, v in finite.items()) or "constant series"
    return block, f"longest of ({how}), within [1, {n / 2.0:g}]"


# ---------------------------------------------------------------------------------------- intervals
def _per_cell_sharpes(panel: list[list[np.ndarray]], p: float, dev: torch.device) -> torch.Tensor:
    """``[seeds, series]`` annualized Sharpes (``ddof=1``, 0 for a constant series)."""
    out = np.zeros((len(panel), len(panel[0])))
    for s, seed in enumerate(panel):
        for i, r in enumerate(seed):
            sd = r.std(ddof=1)
            out[s, i] = r.mean() / sd * math.sqrt(p) if sd > 0 else 0.0
    return torch.as_tensor(out, device=dev)


def _seed_weights(seeds: int, reps: int, gen: torch.Generator) -> torch.Tensor:
    if seeds == 1:
        return torch.ones((reps, 1), dtype=torch.float64, device=gen.device)
    return cluster_counts(seeds, reps, gen) / seeds


def _cluster_replicates(d: torch.Tensor, reps: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Crossed cluster bootstrap of the mean of ``d [seeds, series]``: series and seeds drawn with
    replacement. Per replicate its mean and the standard error of that mean over its drawn series."""
    seeds, m = d.shape
    ws = _seed_weights(seeds, reps, gen)
    counts = cluster_counts(m, reps, gen)
    per_series = ws @ d  # [reps, series]: each series' mean over the drawn seeds
    mean = (counts * per_series).sum(dim=1) / m
    var = (counts * (per_series - mean[:, None]) ** 2).sum(dim=1) / (m - 1)
    return mean, (var / m).sqrt()


def _cluster_interval(d: torch.Tensor, reps: int, gen: torch.Generator, level: float,
                      how: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """``(low, high, se, description)`` of the cluster bootstrap of the mean of ``d``, by ``how``:
    ``percentile`` (deviations scaled by ``sqrt(m / (m - 1))``), ``percentile_t`` (those scaled again by
    ``t_{m-1} / z``, the small-sample quantile) or ``studentized`` (bootstrap-t: the quantiles of
    ``(mean* - mean) / se*`` times the observed standard error)."""
    from scipy import stats as st

    m = d.shape[1]
    est = d.mean()
    mean_r, se_r = _cluster_replicates(d, reps, gen)
    inflate = math.sqrt(m / (m - 1))
    se = mean_r.std() * inflate
    q = torch.tensor([(1.0 - level) / 2.0, (1.0 + level) / 2.0], dtype=torch.float64, device=d.device)
    if how == "studentized":
        observed = d.mean(dim=0).std() / math.sqrt(m)
        t = (mean_r - est) / torch.where(se_r > 0, se_r, torch.full_like(se_r, float("inf")))
        lo_q, hi_q = torch.quantile(t, q)
        return est - hi_q * observed, est - lo_q * observed, se, "bootstrap-t (studentized by each replicate's cluster SE)"
    scale = inflate
    if how == "percentile_t":
        z = float(st.norm.ppf((1.0 + level) / 2.0))
        scale *= float(st.t.ppf((1.0 + level) / 2.0, m - 1)) / z
    lo, hi = est + (torch.quantile(mean_r, q) - est) * scale
    text = {"percentile": "percentile, deviations x sqrt(m/(m-1))",
            "percentile_t": "percentile, deviations x sqrt(m/(m-1)) x t(m-1)/z"}[how]
    return lo, hi, se, text


def _bar_replicates(a: list[list[np.ndarray]], b: list[list[np.ndarray]] | None, p: float, reps: int,
                    gen: torch.Generator, shared: bool, positions: Sequence[np.ndarray] | None) -> tuple[torch.Tensor, list]:
    """Block bootstrap over bars: per replicate the ``[seeds, series]`` Sharpes (differences) with the
    bars redrawn, one shared draw per group of series (``shared``: series of one length share it)."""
    seeds, m = len(a), len(a[0])
    dev = gen.device
    if shared:
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(a[0]):
            groups.setdefault(r.size, []).append(i)
        group_list = list(groups.values())
    else:
        group_list = [[i] for i in range(m)]
    out = torch.empty((reps, seeds, m), dtype=torch.float64, device=dev)
    blocks = []
    for g in group_list:
        cols = [a[s][i] for s in range(seeds) for i in g] + ([b[s][i] for s in range(seeds) for i in g] if b else [])
        pos = [positions[i] for i in g] if positions is not None else None
        block, how = block_rule(cols, pos)
        blocks.append((block, how))
        x = torch.as_tensor(np.column_stack(cols), dtype=torch.float64, device=dev)
        n, k = x.shape[0], seeds * len(g)
        done = 0
        for size in chunks(reps, n):
            sr = weighted_sharpes(stationary_counts(n, block, size, gen), x, p)
            cell = sr[:, :k] - (sr[:, k:] if b else 0.0)
            out[done: done + size][:, :, g] = cell.reshape(size, seeds, len(g))
            done += size
    return out, blocks


def panel_interval(a: Panel | Sequence[np.ndarray], b: Panel | Sequence[np.ndarray] | None, periods_per_year: float,
                   *, independent_series: bool, positions: Sequence[np.ndarray] | None = None,
                   level: float = LEVEL, reps: int = REPS, seed: int = 0,
                   device: torch.device | str | None = None, cluster_interval: str | None = None) -> dict[str, Any]:
    """The calibrated interval (module doc) of the mean over seeds and series of per-series Sharpes of
    ``a`` or, given ``b`` (same shape, same bars), of ``a - b`` paired. ``independent_series``: the
    series are independent draws (the synthetic source), else they share a calendar. ``positions``:
    per series the strategy's position (for the block rule), when the resampling is by bars.
    ``cluster_interval``: how a cluster bootstrap makes its interval (:data:`CLUSTER_INTERVALS`; default
    :data:`CLUSTER_INTERVAL`).

    Returns ``estimate``, ``low``, ``high``, ``se``, ``level``, ``method``, ``design`` (``series
    clusters`` or ``bar blocks``), ``block`` (None for clusters), ``bars``, ``assets`` (series), ``seeds``."""
    pa = as_panel(a, "a")
    pb = as_panel(b, "b") if b is not None else None
    if pb is not None and (len(pb) != len(pa) or [r.size for r in pb[0]] != [r.size for r in pa[0]]):
        raise ValueError(f"a, b: expected the same seeds and bars per series (paired), got {len(pa)} x "
                         f"{[r.size for r in pa[0]]} and {len(pb)} x {[r.size for r in pb[0]]}")
    p = check_periods_per_year(periods_per_year)
    level, reps = check_level(level), check_reps(reps)
    dev = stats_device(device)
    gen = generator(seed, dev)
    seeds, m = len(pa), len(pa[0])
    d = _per_cell_sharpes(pa, p, dev) - (_per_cell_sharpes(pb, p, dev) if pb else 0.0)
    estimate_t = d.mean()
    clusters = independent_series and m >= MIN_CLUSTERS
    how = CLUSTER_INTERVAL if cluster_interval is None else cluster_interval
    if how not in CLUSTER_INTERVALS:
        raise ValueError(f"cluster_interval: expected one of {CLUSTER_INTERVALS}, got {how!r}")
    if clusters:
        low_t, high_t, se_t, text = _cluster_interval(d, reps, gen, level, how)
        block, design = None, "series clusters"
        method = (f"cluster bootstrap over {m} independent series (whole series drawn with replacement, bars kept "
                  f"whole: no block rule needed; series on one calendar get bar blocks by the block rule)"
                  f"{f', seeds drawn with replacement ({seeds}, crossed)' if seeds > 1 else ''}, {reps} reps, {text}")
    else:
        cells, blocks = _bar_replicates(pa, pb, p, reps, gen, shared=not independent_series, positions=positions)
        reps_stat = (cells * _seed_weights(seeds, reps, gen)[:, :, None]).sum(dim=1).mean(dim=1)
        block, design = max(bl for bl, _ in blocks), "bar blocks"
        why = ("series share a calendar: one shared bar draw per length" if not independent_series else
               f"{m} independent series (fewer than {MIN_CLUSTERS}): bars drawn per series")
        method = (f"stationary block bootstrap over bars ({why}), block {block:.1f} ({blocks[0][1]})"
                  f"{f', seeds drawn with replacement ({seeds})' if seeds > 1 else ''}, {reps} reps")
        q = torch.tensor([(1.0 - level) / 2.0, (1.0 + level) / 2.0], dtype=torch.float64, device=dev)
        low_t, high_t = torch.quantile(reps_stat, q)
        se_t = reps_stat.std()
    method += (f"; statistic: mean over {m} series{f' and {seeds} seeds' if seeds > 1 else ''} of per-series Sharpe"
               f"{' differences (paired, same bars)' if pb else ''}")
    host = torch.stack([estimate_t, low_t, high_t, se_t]).cpu().tolist()  # host read: the interval
    estimate, low, high, se = (float(v) for v in host)
    return {"estimate": estimate, "low": low, "high": high, "se": se, "level": level, "method": method,
            "design": design, "block": block, "bars": int(sum(r.size for r in pa[0])), "assets": m, "seeds": seeds}


def ratio_interval(a: Sequence[float], b: Sequence[float], *, level: float = LEVEL, reps: int = REPS, seed: int = 0,
                   device: torch.device | str | None = None) -> dict[str, Any]:
    """Interval of ``mean(a) / mean(b)`` over independent series (``a[i]``, ``b[i]``: two strategies'
    Sharpes on series ``i``, e.g. the agent's and the oracle's: the efficiency), by the cluster
    bootstrap of :func:`panel_interval` (pairs of series drawn together, t-scaled percentile); needs
    at least :data:`MIN_CLUSTERS` series and ``mean(b) > 0``."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m = x.size
    if x.shape != y.shape or x.ndim != 1 or m < MIN_CLUSTERS or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"a, b: expected two equal-length lists of at least {MIN_CLUSTERS} finite per-series "
                         f"Sharpes, got {x.shape} and {y.shape}")
    if not y.mean() > 0:
        raise ValueError(f"b: expected a mean > 0 (the denominator), got {y.mean():+.3f}")
    level, reps = check_level(level), check_reps(reps)
    dev = stats_device(device)
    gen = generator(seed, dev)
    c = cluster_counts(m, reps, gen)
    xt, yt = torch.as_tensor(x, device=dev), torch.as_tensor(y, device=dev)
    ratio = (c @ xt) / (c @ yt).clamp_min(1e-12)
    est = float(x.mean() / y.mean())
    from scipy import stats as st

    scale = math.sqrt(m / (m - 1)) * float(st.t.ppf((1 + level) / 2, m - 1) / st.norm.ppf((1 + level) / 2))
    q = torch.tensor([(1.0 - level) / 2.0, (1.0 + level) / 2.0], dtype=torch.float64, device=dev)
    lo, hi = (est + (torch.quantile(ratio, q) - est) * scale).cpu().tolist()  # host read: the interval
    return {"estimate": est, "low": float(lo), "high": float(hi), "level": level, "assets": m,
            "method": f"cluster bootstrap over {m} independent series (pairs drawn together), {reps} reps, "
                      "percentile, deviations x sqrt(m/(m-1)) x t(m-1)/z; statistic: mean(a) / mean(b)"}


# ------------------------------------------------------------------------------------ deflated Sharpe
def expected_max_z(n_trials: float) -> float:
    """Expected maximum of ``n_trials`` independent standard normals (Bailey & Lopez de Prado 2014's
    approximation ``(1 - g) Phi^-1(1 - 1/N) + g Phi^-1(1 - 1/(N e))``, ``g`` Euler-Mascheroni), at
    least 0 (the approximation turns negative below ~1.3 trials); 0 for one trial. ``n_trials`` may
    be fractional (an effective count)."""
    n = float(n_trials)
    if not (math.isfinite(n) and n >= 1.0):
        raise ValueError(f"n_trials: expected a number >= 1 (effective trials), got {n_trials!r}")
    if n <= 1.0:
        return 0.0
    z1 = stats.norm.ppf(1.0 - 1.0 / n)
    z2 = stats.norm.ppf(1.0 - 1.0 / (n * math.e))
    # The approximation is for many trials; below ~1.3 effective trials it turns negative, where the
    # expected best of n >= 1 trials is >= 0: floored at 0 (one trial, no selection).
    return max(0.0, float((1 - EULER_MASCHERONI) * z1 + EULER_MASCHERONI * z2))


def effective_trials(returns: np.ndarray) -> tuple[float, str]:
    """Effective number of independent trials among the columns of ``returns [bars, K]`` (each a
    candidate's returns on the selection segment): ``K**2 / sum(C**2)`` over the correlation matrix
    ``C`` of the non-constant columns (the participation ratio of its eigenvalues: ``K`` for
    uncorrelated trials, 1 for identical ones); constant columns (a policy that stayed flat) count as
    one trial together. Returns the count and how it was made."""
    x = np.asarray(returns, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 1 or x.shape[0] < 3:
        raise ValueError(f"returns: expected [bars >= 3, trials >= 1], got shape {x.shape}")
    varying = x.std(axis=0) > 0
    k, flat = int(varying.sum()), int((~varying).sum())
    if k >= 2:
        c = np.corrcoef(x[:, varying], rowvar=False)
        n = float(k * k / np.sum(c * c))
    else:
        n = float(k)
    n += 1.0 if flat else 0.0
    how = (f"{x.shape[1]} candidates, effective {n:.1f} (participation ratio of their validation returns' "
           f"correlation eigenvalues{f'; {flat} constant counted as one' if flat else ''})")
    return max(n, 1.0), how


def deflated_sharpe(sharpe: float, se: float, n_trials: float, *, se_trial: float | None = None) -> dict[str, Any]:
    """Deflated Sharpe ratio ``Phi((SR - SR0) / se)`` of a selected ``sharpe`` (annualized, the
    selection segment's) with calibrated standard error ``se``, ``SR0 = se_trial * E[max of N
    standard normals]`` the expected best of ``n_trials`` zero-skill trials whose Sharpes scatter
    with ``se_trial`` (default ``se``): ``V = se_trial**2``. Returns ``value``, ``expected_max``,
    ``variance``, ``trials``."""
    for name, v in (("sharpe", sharpe), ("se", se)):
        if not math.isfinite(v):
            raise ValueError(f"{name}: expected a finite number, got {v!r}")
    if not se > 0:
        raise ValueError(f"se: expected a standard error > 0, got {se!r}")
    spread = se if se_trial is None else float(se_trial)
    sr0 = spread * expected_max_z(n_trials)
    value = float(stats.norm.cdf((sharpe - sr0) / se))
    return {"value": value, "sharpe": float(sharpe), "expected_max": sr0, "variance": spread * spread,
            "trials": float(n_trials), "se": float(se)}


def psr_calibrated(sharpe: float, se: float, benchmark: float = 0.0) -> float | None:
    """``P[true Sharpe > benchmark]`` from the calibrated standard error: ``Phi((SR - SR*) / se)``."""
    if not (math.isfinite(sharpe) and math.isfinite(se)) or not se > 0:
        return None
    return float(stats.norm.cdf((sharpe - benchmark) / se))
