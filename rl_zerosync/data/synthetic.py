"""Synthetic market: Markov-switching trend / mean-reversion regimes with stochastic volatility.

Generative model, per asset, bar ``t >= 1`` (all draws from ``numpy.random.default_rng(seed)``):

* Regime ``g_t`` in {TREND, REVERT}: a two-state Markov chain that stays with probability
  ``p_stay_trend`` / ``p_stay_revert`` (mean durations ``1 / (1 - p)`` bars). On every entry into a
  TREND regime a direction ``d`` in {-1, +1} is drawn with equal odds.
* Log volatility: ``h_t = m + phi (h_{t-1} - m) + vol_of_vol * e_t`` with ``m = log(vol_mean)``;
  ``sigma_t = exp(h_t)`` (stochastic volatility, persistent clusters).
* Normalized return ``z_t``: in TREND ``z_t = d * trend_drift + n_t``; in REVERT
  ``z_t = -revert_strength * z_{t-1} + sqrt(1 - revert_strength**2) * n_t`` (negative serial
  correlation). ``n_t`` standard normal. Log return ``r_t = sigma_t * z_t``; ``close_t = close_{t-1}
  * exp(r_t)``, ``close_0 = 100``.
* Relative spread ``s_t = spread_bps * 1e-4 * (sigma_t / vol_mean) ** spread_vol_elasticity *
  exp(spread_noise * k_t - spread_noise**2 / 2)``: spreads widen with volatility.

* With ``ohlc=True`` (:func:`synthetic_bars`, drawn from a second generator ``default_rng([seed, 1])``
  so the closes and spreads stay those above): ``open_t = close_{t-1} * exp(0.25 sigma_t a_t)``,
  ``high_t = max(open_t, close_t) * exp(0.5 sigma_t |b_t|)``, ``low_t = min(open_t, close_t) *
  exp(-0.5 sigma_t |c_t|)`` (``a, b, c`` standard normal; bar 0 opens at its close): bars for the
  next-bar execution (MARKET at the open, passive orders through the range).

Computation: no Python loop over bars. The regime chain and the directions are integer scans (a
cumulative xor and a running maximum of indices); ``h`` and ``z`` are float recurrences computed by
:func:`~rl_zerosync.data.scans.recurrence`, which runs blocks of bars side by side and checks each
against the block before, so every number is, bit for bit, the one the loop over bars gives
(:func:`synthetic_series_loop`, the generator as first written, kept as the reference the tests and
``benchmarks/synthetic_gen.py`` compare with): the same series for every seed, the sealed held-out
ones included. The draws are the loop's, made in the same order.

Why it is learnable and not trivial: inside a trend the mean of the last K normalized returns (what
the observation holds) estimates ``d * trend_drift`` with noise ``1 / sqrt(K)``; with the defaults
(drift 0.2, K = 16, trends of ~200 bars) a momentum rule is right about 3 times in 4 inside trends
and earns about ``0.1 sigma`` per bar there, enough to pay half-spread costs when it trades rarely.
In REVERT regimes momentum loses a little and fast reversal trading is eaten by costs, so a good
policy must recognise the regime, size its exposure and choose cheap order types. Nothing of the
future is in the observation: a policy cannot profit without learning the serial structure.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import numpy as np

from rl_zerosync.data.market import FeatureConfig, MarketData, build_market
from rl_zerosync.data.scans import ar1_approx, carry_last, recurrence, two_state_chain, warmup_bars

TREND, REVERT = 0, 1


def synthetic_series(
    num_assets: int,
    num_bars: int,
    seed: int = 0,
    *,
    vol_mean: float = 0.01,
    vol_persistence: float = 0.98,
    vol_of_vol: float = 0.05,
    p_stay_trend: float = 0.995,
    p_stay_revert: float = 0.99,
    trend_drift: float = 0.2,
    revert_strength: float = 0.2,
    spread_bps: float = 5.0,
    spread_vol_elasticity: float = 1.0,
    spread_noise: float = 0.2,
) -> dict[str, np.ndarray]:
    """Raw synthetic series ``[num_assets, num_bars]``: close, spread, sigma, regime, z (see module doc)."""
    model = dict(vol_mean=vol_mean, vol_persistence=vol_persistence, vol_of_vol=vol_of_vol, p_stay_trend=p_stay_trend,
                 p_stay_revert=p_stay_revert, trend_drift=trend_drift, revert_strength=revert_strength,
                 spread_bps=spread_bps, spread_vol_elasticity=spread_vol_elasticity, spread_noise=spread_noise)
    return _series(num_assets, num_bars, seed, model, _paths_scan)


_MODEL_DEFAULTS = {name: p.default for name, p in inspect.signature(synthetic_series).parameters.items()
                   if p.kind is p.KEYWORD_ONLY}
"""The model keywords of :func:`synthetic_series` and their defaults."""


def synthetic_series_loop(num_assets: int, num_bars: int, seed: int = 0, **model: Any) -> dict[str, np.ndarray]:
    """:func:`synthetic_series` computed by the plain loop over bars (the generator as first written):
    the reference the vectorised one is checked against, bit for bit (tests, ``benchmarks/synthetic_gen.py``)."""
    unknown = sorted(set(model) - set(_MODEL_DEFAULTS))
    if unknown:
        raise ValueError(f"data.synthetic: unknown model keyword(s) {unknown}; allowed: {list(_MODEL_DEFAULTS)}")
    return _series(num_assets, num_bars, seed, {**_MODEL_DEFAULTS, **model}, _paths_loop)


def _series(num_assets: int, num_bars: int, seed: int, model: dict[str, Any],
            paths: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """The draws, in their fixed order, the paths (regime, log volatility, normalized returns) and what
    follows from them; ``paths`` is :func:`_paths_scan` or :func:`_paths_loop` (the same numbers)."""
    _check("num_assets", num_assets, integer=True, lo=1)
    _check("num_bars", num_bars, integer=True, lo=2)
    _check("seed", seed, integer=True, lo=0)
    check_model(**model)
    rng = np.random.default_rng(seed)
    a, n = num_assets, num_bars
    m = math.log(model["vol_mean"])
    stat_sd = model["vol_of_vol"] / math.sqrt(1.0 - model["vol_persistence"] ** 2)
    h0 = m + stat_sd * rng.standard_normal(a)
    g0 = (rng.random(a) < 0.5).astype(np.int8)
    d0 = np.where(rng.random(a) < 0.5, -1.0, 1.0)
    draws = {"e_h": rng.standard_normal((n, a)), "e_z": rng.standard_normal((n, a)),
             "u_switch": rng.random((n, a)), "u_dir": rng.random((n, a))}  # [bar, asset]; row 0 unused
    h, z, regime = paths(h0, g0, d0, m=m, **draws, **model)
    sigma = np.exp(h)
    log_ret = sigma * z
    log_ret[:, 0] = 0.0
    close = 100.0 * np.exp(np.cumsum(log_ret, axis=1))
    k = rng.standard_normal((a, n))
    spread_bps, vol_mean, noise = model["spread_bps"], model["vol_mean"], model["spread_noise"]
    spread = (spread_bps * 1e-4) * (sigma / vol_mean) ** model["spread_vol_elasticity"] * np.exp(
        noise * k - 0.5 * noise**2
    )
    return {"close": close, "spread": spread, "sigma": sigma, "regime": regime, "z": z}


def _paths_scan(h0: np.ndarray, g0: np.ndarray, d0: np.ndarray, *, m: float, e_h: np.ndarray, e_z: np.ndarray,
                u_switch: np.ndarray, u_dir: np.ndarray, vol_persistence: float, vol_of_vol: float,
                p_stay_trend: float, p_stay_revert: float, trend_drift: float, revert_strength: float,
                **_: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log volatility ``h``, normalized returns ``z`` and regimes ``[asset, bar]``, with no Python loop
    over bars (:mod:`~rl_zerosync.data.scans`): the same floats as :func:`_paths_loop`."""
    phi, ar = vol_persistence, -revert_strength
    mix = math.sqrt(1.0 - revert_strength**2)
    g = two_state_chain(g0, u_switch, p_stay_trend, p_stay_revert)
    entry = np.zeros_like(g, dtype=bool)
    entry[1:] = (g[1:] == TREND) & (g[:-1] != TREND)  # a switch into TREND draws a new direction
    d = carry_last(np.concatenate((d0[None], np.where(u_dir[1:] < 0.5, -1.0, 1.0))), entry)

    def h_step(prev: np.ndarray, c: np.ndarray) -> np.ndarray:
        return m + phi * (prev - m) + c

    c = vol_of_vol * e_h
    if phi >= 0.5:  # lanes start within about 1 / (1 - phi) last bits of the loop's values
        guess, off = m + ar1_approx(h0 - m, phi, c), np.finfo(np.float64).eps / (1.0 - phi)
    else:           # a fast contraction: lanes start from 0 and need few bars
        guess, off = None, 1.0
    h = recurrence(h_step, h0, [c], warmup=warmup_bars(phi, off), guess=guess)

    def z_step(prev: np.ndarray, trend: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.where(trend, v, ar * prev + v)

    trend = g == TREND
    v = np.where(trend, d * trend_drift + e_z, mix * e_z)
    z = recurrence(z_step, np.zeros(len(h0)), [trend, v], warmup=warmup_bars(revert_strength, 1.0))
    return np.ascontiguousarray(h.T), np.ascontiguousarray(z.T), np.ascontiguousarray(g.T)


def _paths_loop(h0: np.ndarray, g0: np.ndarray, d0: np.ndarray, *, m: float, e_h: np.ndarray, e_z: np.ndarray,
                u_switch: np.ndarray, u_dir: np.ndarray, vol_persistence: float, vol_of_vol: float,
                p_stay_trend: float, p_stay_revert: float, trend_drift: float, revert_strength: float,
                **_: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_paths_scan` as a loop over bars: the reference."""
    a, n = len(h0), len(e_h)
    h = np.empty((a, n))
    z = np.zeros((a, n))
    regime = np.empty((a, n), dtype=np.int8)
    h[:, 0], g, d = h0, g0, d0
    regime[:, 0] = g
    mix = math.sqrt(1.0 - revert_strength**2)
    for t in range(1, n):
        stay = np.where(g == TREND, p_stay_trend, p_stay_revert)
        switch = u_switch[t] >= stay
        g = np.where(switch, 1 - g, g).astype(np.int8)
        d = np.where(switch & (g == TREND), np.where(u_dir[t] < 0.5, -1.0, 1.0), d)
        h[:, t] = m + vol_persistence * (h[:, t - 1] - m) + vol_of_vol * e_h[t]
        z[:, t] = np.where(g == TREND, d * trend_drift + e_z[t], -revert_strength * z[:, t - 1] + mix * e_z[t])
        regime[:, t] = g
    return h, z, regime


def synthetic_market(
    num_assets: int,
    num_bars: int,
    seed: int = 0,
    *,
    features: FeatureConfig | None = None,
    periods_per_year: float = 252.0,
    device: str = "cpu",
    ohlc: bool = False,
    **model: Any,
) -> MarketData:
    """``MarketData`` of :func:`synthetic_series` (keyword ``model`` arguments as documented there);
    ``ohlc``: with open/high/low bars (:func:`synthetic_bars`)."""
    if not isinstance(ohlc, bool):
        raise ValueError(f"data.synthetic.ohlc: expected true or false, got {ohlc!r}")
    raw = synthetic_series(num_assets, num_bars, seed, **model)
    prices = synthetic_bars(raw["close"], raw["sigma"], seed) if ohlc else None
    return build_market(
        list(raw["close"]), list(raw["spread"]),
        names=[f"synth{i}" for i in range(num_assets)],
        features=features, periods_per_year=periods_per_year, device=device,
        prices={k: list(v) for k, v in prices.items()} if prices else None,
    )


def synthetic_bars(close: np.ndarray, sigma: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Open, high and low ``[num_assets, num_bars]`` around the closes (module doc), from their own
    generator so the closes do not change."""
    rng = np.random.default_rng([seed, 1])
    a, b, c = (rng.standard_normal(close.shape) for _ in range(3))
    prev = np.concatenate((close[:, :1], close[:, :-1]), axis=1)
    opened = prev * np.exp(0.25 * sigma * a)
    opened[:, 0] = close[:, 0]
    high = np.maximum(opened, close) * np.exp(0.5 * sigma * np.abs(b))
    low = np.minimum(opened, close) * np.exp(-0.5 * sigma * np.abs(c))
    return {"open": opened, "high": high, "low": low}


MODEL_RANGES = {
    "vol_mean": (0.0, 1.0, True, False), "vol_persistence": (0.0, 1.0, False, True),
    "p_stay_trend": (0.0, 1.0, False, False), "p_stay_revert": (0.0, 1.0, False, False),
    "revert_strength": (0.0, 1.0, False, True), "vol_of_vol": (0.0, None, False, False),
    "trend_drift": (0.0, None, False, False), "spread_bps": (0.0, 10_000.0, False, False),
    "spread_vol_elasticity": (0.0, None, False, False), "spread_noise": (0.0, None, False, False),
}
"""Each model keyword's range ``(lo, hi, lo excluded, hi excluded)`` (``hi`` None: no upper bound);
``spread_bps`` at most 10,000 (the whole price)."""


def check_model(**model: Any) -> None:
    """ValueError ``data.synthetic.<name>: ...`` for a model keyword outside :data:`MODEL_RANGES`
    (the keywords given; ``ohlc`` a bool). What ``data.synthetic`` is checked by at load."""
    for name, v in model.items():
        if name == "ohlc":
            if not isinstance(v, bool):
                raise ValueError(f"data.synthetic.ohlc: expected true or false, got {v!r}")
            continue
        lo, hi, open_lo, open_hi = MODEL_RANGES[name]
        _check(name, v, lo=lo, hi=hi, open_lo=open_lo, open_hi=open_hi)


def _check(name: str, v: Any, *, integer: bool = False, lo: float | None = None, hi: float | None = None,
           open_lo: bool = False, open_hi: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or not math.isfinite(v):
        kind = "an int" if integer else "a finite number"
        raise ValueError(f"data.synthetic.{name}: expected {kind}, got {v!r}")
    if lo is not None and (v < lo or (open_lo and v == lo)):
        raise ValueError(f"data.synthetic.{name}: expected a value {'>' if open_lo else '>='} {lo}, got {v!r}")
    if hi is not None and (v > hi or (open_hi and v == hi)):
        raise ValueError(f"data.synthetic.{name}: expected a value {'<' if open_hi else '<='} {hi}, got {v!r}")
