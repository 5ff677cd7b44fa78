"""Bootstrap on tensors: every resampling of the evidence as multiplicities and matrix products.

A bootstrap replicate of a statistic that is built from sums over bars (a Sharpe ratio, a mean
loss differential) needs only how often each bar was drawn: with ``W[r, t]`` the multiplicity of bar
``t`` in replicate ``r``, the replicate's sums are ``W @ x`` and ``W @ x**2``. So a whole bootstrap
is one index draw, one scatter and two matrix products, on the device that holds the returns (the
GPU when there is one, else the CPU: the same code on a CPU tensor).

==========================================  ===========================================================
function                                    what it gives
==========================================  ===========================================================
:func:`stationary_indices`                  the stationary bootstrap's bar indices (Politis & Romano
                                            1994), exactly arch's given the same uniform draws
:func:`stationary_counts`                   their multiplicities ``W[reps, n]``, drawn on the device
:func:`cluster_counts`                      multiplicities of ``m`` whole units drawn with replacement
:func:`weighted_sharpes`                    annualized Sharpe of every column under every replicate
:func:`kernel_variance`                     Hansen's (2005) stationary-bootstrap variance of a mean
:func:`politis_white`                       the Politis-White optimal block length of every column,
                                            arch's ``optimal_block_length`` for all columns at once
:func:`spa_pvalues`                         Hansen's SPA p-values from replicated mean differentials
==========================================  ===========================================================

Draws come from a :class:`torch.Generator` on the statistics' device seeded with ``seed``: a report
is reproducible on one kind of device; a CPU and a GPU give different draws of the same bootstrap
(agreement within Monte-Carlo error, ``tests/test_resample.py``). Replicates are made in chunks of
at most :data:`CHUNK_CELLS` multiplicities, so memory stays bounded for long series.
"""
from __future__ import annotations

import math

import numpy as np
import torch

CHUNK_CELLS = 1 << 24
"""Most multiplicities (replicates x bars) held at once."""


def stats_device(device: torch.device | str | None = None) -> torch.device:
    """Where the statistics run: ``device``, else the GPU when there is one, else the CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def generator(seed: int, device: torch.device) -> torch.Generator:
    """The one generator of a call's draws, on ``device``, seeded with ``seed`` (an int >= 0)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def chunks(reps: int, n: int) -> list[int]:
    """Replicate counts per chunk so that a chunk holds at most :data:`CHUNK_CELLS` cells."""
    per = max(1, CHUNK_CELLS // max(n, 1))
    return [min(per, reps - i) for i in range(0, reps, per)]


def stationary_indices(starts: torch.Tensor, u: torch.Tensor, block: float) -> torch.Tensor:
    """Stationary-bootstrap bar indices ``[reps, n]`` from random ``starts`` (ints in ``[0, n)``) and
    uniforms ``u`` of the same shape: bar ``t`` starts a new block at a random bar when ``t == 0`` or
    ``u[:, t] <= 1 / block``, else continues the previous block (wrapping at ``n``). Given arch's own
    draws this is :func:`arch.bootstrap.StationaryBootstrap`'s ``index`` exactly (a loop there, a
    cumulative maximum here)."""
    reps, n = starts.shape
    t = torch.arange(n, device=starts.device)
    new = u <= 1.0 / float(block)
    new[:, 0] = True
    last = torch.where(new, t, torch.zeros_like(t)).cummax(dim=1).values  # the bar where t's block began
    return (starts.gather(1, last) + (t - last)) % n


def stationary_counts(n: int, block: float, reps: int, gen: torch.Generator,
                      dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Multiplicities ``[reps, n]`` of ``reps`` stationary-bootstrap draws of ``n`` bars, mean block
    ``block``, on the generator's device."""
    dev = gen.device
    starts = torch.randint(0, n, (reps, n), generator=gen, device=dev)
    u = torch.rand((reps, n), generator=gen, device=dev, dtype=torch.float64)
    idx = stationary_indices(starts, u, block)
    return counts_of(idx, n, dtype)


def counts_of(idx: torch.Tensor, n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Multiplicities ``[reps, n]`` of drawn indices ``idx [reps, k]``."""
    out = torch.zeros((idx.shape[0], n), dtype=dtype, device=idx.device)
    return out.scatter_add_(1, idx, torch.ones(idx.shape, dtype=dtype, device=idx.device))


def cluster_counts(m: int, reps: int, gen: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Multiplicities ``[reps, m]`` of ``m`` units (series, seeds) drawn with replacement."""
    idx = torch.randint(0, m, (reps, m), generator=gen, device=gen.device)
    return counts_of(idx, m, dtype)


def weighted_sharpes(w: torch.Tensor, x: torch.Tensor, periods_per_year: float) -> torch.Tensor:
    """Annualized Sharpe (``ddof=1``, 0 where the replicate's returns are constant) of every column of
    ``x [n, k]`` under every row of multiplicities ``w [reps, n]`` (a row sums to the bars drawn)."""
    center = x.mean(dim=0)
    xc = x - center
    total = w.sum(dim=1, keepdim=True)
    mean_c = (w @ xc) / total
    var = ((w @ (xc * xc)) - total * mean_c * mean_c) / (total - 1.0)
    sd = var.clamp_min(0.0).sqrt()
    sr = (center + mean_c) / torch.where(sd > 0, sd, torch.ones_like(sd)) * math.sqrt(periods_per_year)
    return torch.where(sd > 0, sr, torch.zeros_like(sr))


def kernel_variance(diff: np.ndarray, block: float) -> np.ndarray:
    """Hansen's (2005) variance of ``sqrt(t) * mean`` of each column of ``diff [t, k]`` under the
    stationary bootstrap of mean block ``block``: ``gamma_0 + 2 sum_i kappa_i gamma_i`` with
    ``kappa_i = (1 - i/t) q^i + (i/t) q^(t-i)``, ``q = 1 - 1/block``, over every lag ``0 < i < t``; the
    autocovariances from one FFT (arch's own loop to float64 rounding, in O(t log t))."""
    demeaned = diff - diff.mean(axis=0)
    t = len(diff)
    q = 1.0 - 1.0 / block
    size = 1 << int(2 * t - 1).bit_length()  # zero-padded: linear, not circular, correlation
    spec = np.fft.rfft(demeaned, n=size, axis=0)
    lagged = np.fft.irfft(spec * np.conj(spec), n=size, axis=0)[:t]  # sum_s d_s d_{s+i}, i = 0..t-1
    i = np.arange(1, t, dtype=np.float64)
    kappa = (1.0 - i / t) * q**i + (i / t) * q ** (t - i)
    return (lagged[0] + 2.0 * (kappa[:, None] * lagged[1:]).sum(axis=0)) / t


def politis_white(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Politis & White (2004; Patton, Politis & White 2009) optimal mean block length of each column
    of ``x [n, k]`` (bars on axis 0): ``(stationary, circular)``, each ``[k]``. The same estimate as
    :func:`arch.bootstrap.optimal_block_length` (to float64 rounding: ``tests/test_resample.py``), for
    every column at once and without a BLAS call per lag and column (arch's loop makes ~3 ``m_max``
    dot products per column; an evaluation of the 10-stock panel on a 16-core GPU host stalled for
    minutes with its stack in that loop, thread contention in those small BLAS calls the likely cause)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    n = x.shape[0]
    eps = x - x.mean(axis=0)
    b_max = np.ceil(min(3 * np.sqrt(n), n / 3))
    kn = max(5, int(np.log10(n)))
    m_max = int(np.ceil(np.sqrt(n))) + kn
    cv = 2 * np.sqrt(np.log10(n) / n)
    lags = np.arange(m_max + 1)
    rows = np.ascontiguousarray(eps.T)  # einsum's own loops, no BLAS call per lag and column
    cross = np.stack([np.einsum("ct,ct->c", rows[:, i:], rows[:, :n - i]) if i < n else np.zeros(len(rows))
                      for i in lags])  # sum_t eps_t eps_{t-i}
    cum = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(eps**2, axis=0)])  # cum[j] = sum_{t<j}
    v1 = cum[n] - cum[np.minimum(lags + 1, n)]  # sum over t >= i + 1
    v2 = cum[np.maximum(n - lags - 1, 0)]  # sum over t < n - i - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        abs_acorr = np.abs(cross) / np.sqrt(v1 * v2)
    acv = cross / n
    # The first kn consecutive autocorrelations below cv (NaN counts as not below, as in arch).
    below = np.concatenate([np.zeros((1, x.shape[1]), dtype=np.int64), np.cumsum(abs_acorr < cv, axis=0)])
    starts = np.arange(m_max - kn + 1)
    window = (below[starts + kn] - below[starts]) == kn  # [starts, k]
    found = window.any(axis=0)
    opt_m = np.where(found, window.argmax(axis=0), 0)
    m = np.minimum(np.where(found, 2 * np.maximum(opt_m, 1), m_max), m_max).astype(np.float64)
    k = lags[1:, None].astype(np.float64)
    lam = np.where(k / m <= 0.5, 1.0, 2.0 * (1.0 - k / m)) * (k <= m)
    g = (2.0 * lam * k * acv[1:]).sum(axis=0)
    lr_acv = acv[0] + (2.0 * lam * acv[1:]).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_sb = ((2 * g**2) / (2 * lr_acv**2)) ** (1 / 3) * n ** (1 / 3)
        b_cb = ((2 * g**2) / (4 / 3 * lr_acv**2)) ** (1 / 3) * n ** (1 / 3)
    return np.minimum(b_sb, b_max), np.minimum(b_cb, b_max)


def spa_pvalues(mean_diff: np.ndarray, replicated: torch.Tensor, variance: np.ndarray, t: int, *,
                studentize: bool) -> dict[str, float]:
    """Hansen's SPA p-values (lower, consistent, upper) of ``H0: max_k E[d_k] <= 0``.

    ``mean_diff [k]``: the candidates' mean differentials over the benchmark; ``replicated [reps, k]``:
    their bootstrap means; ``variance [k]``: the variance of ``sqrt(t) * mean`` (e.g.
    :func:`kernel_variance`). Re-centring: upper by the mean, lower by ``max(mean, 0)``, consistent by
    the mean where ``mean >= -sqrt(variance / t * 2 log log t)`` else 0 (Hansen 2005). The statistic is
    ``max_k mean_k`` (``studentize=False``, what :class:`arch.bootstrap.SPA` computes) or
    ``max_k mean_k / sqrt(variance_k / t)`` (Hansen's studentized statistic)."""
    dev = replicated.device
    mean = torch.as_tensor(mean_diff, dtype=torch.float64, device=dev)
    var = torch.as_tensor(variance, dtype=torch.float64, device=dev)
    valid = mean >= -torch.sqrt(var / t * 2.0 * math.log(math.log(t)))
    scale = torch.sqrt(var / t).clamp_min(1e-300) if studentize else torch.ones_like(mean)
    observed = (mean / scale).max()
    out = {}
    for name, centre in (("lower", mean.clamp_min(0.0)), ("consistent", torch.where(valid, mean, torch.zeros_like(mean))),
                         ("upper", mean)):
        simulated = ((replicated - centre) / scale).max(dim=1).values
        out[name] = (simulated > observed).double().mean()
    host = torch.stack([out["lower"], out["consistent"], out["upper"]]).cpu().tolist()  # host read: three p-values
    return dict(zip(("lower", "consistent", "upper"), (float(v) for v in host)))
