"""Evaluation metrics of a trading run (numpy, host side).

Inputs per bar ``i = 1..n``: net simple return ``r_i = pnl_i - cost_i`` (fraction of equity),
position held over the bar ``p_i``, trade ``q_i`` and its cost by order type. ``P`` =
``periods_per_year``. Equity ``E_0 = 1``, ``E_i = E_{i-1} (1 + r_i)``.

============================  =====================================================================
metric                        formula
============================  =====================================================================
``total_return``              ``E_n - 1``
``annualized_return``         ``E_n ** (P / n) - 1`` (``-1`` when ``E_n <= 0``)
``annualized_volatility``     ``std(r, ddof=1) * sqrt(P)``
``sharpe``                    ``mean(r) / std(r, ddof=1) * sqrt(P)`` (0 when the std is 0 or n < 2;
                              :func:`rl_zerosync.evidence.sharpe.sharpe_ratio`)
``sortino``                   ``mean(r) / sqrt(mean(min(r, 0)**2)) * sqrt(P)`` (0 when no r < 0)
``max_drawdown``              ``max_i (1 - E_i / max_{j <= i} E_j)`` over ``i = 0..n``
``calmar``                    ``annualized_return / max_drawdown`` (0 when max_drawdown is 0)
``turnover``                  ``sum |q_i|`` (units of equity traded)
``turnover_per_bar``          ``turnover / n``
``hit_rate``                  ``#{i: p_i != 0 and pnl_i > 0} / #{i: p_i != 0}`` (0 if never exposed)
``exposure``                  ``mean |p_i|``
``cost_total``                ``sum cost_i``; ``cost_market|limit|passive``: the sum over bars whose
                              order type is MARKET / LIMIT / PASSIVE (negative = net rebate)
``bars``                      ``n``
============================  =====================================================================
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from rl_zerosync.evidence.sharpe import sharpe_ratio

ORDER_NAMES = ("market", "limit", "passive")


def equity_curve(net_returns: np.ndarray) -> np.ndarray:
    """``[E_0 = 1, E_1, ..., E_n]`` from net returns (compounded, floored at 0)."""
    r = np.asarray(net_returns, dtype=np.float64)
    return np.concatenate(([1.0], np.maximum(np.cumprod(1.0 + r), 0.0)))


def max_drawdown(equity: np.ndarray) -> float:
    """``max_i (1 - E_i / max_{j <= i} E_j)`` (0 for a non-decreasing curve)."""
    e = np.asarray(equity, dtype=np.float64)
    peak = np.maximum.accumulate(e)
    with np.errstate(divide="ignore", invalid="ignore"):
        dd = np.where(peak > 0, 1.0 - e / peak, 1.0)
    return float(dd.max()) if dd.size else 0.0


def sortino_ratio(net_returns: np.ndarray, periods_per_year: float) -> float:
    r = np.asarray(net_returns, dtype=np.float64)
    if r.size == 0:
        return 0.0
    dd = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2)))
    return float(r.mean() / dd * math.sqrt(periods_per_year)) if dd > 0 else 0.0


def performance_metrics(
    net_returns: np.ndarray,
    *,
    periods_per_year: float,
    positions: np.ndarray | None = None,
    pnl: np.ndarray | None = None,
    trades: np.ndarray | None = None,
    costs: np.ndarray | None = None,
    order_types: np.ndarray | None = None,
) -> dict[str, float]:
    """All metrics of the module table for one run (missing inputs give 0 for their metrics)."""
    if not math.isfinite(periods_per_year) or periods_per_year <= 0:
        raise ValueError(f"periods_per_year: expected a finite number > 0, got {periods_per_year!r}")
    r = np.asarray(net_returns, dtype=np.float64)
    if not np.isfinite(r).all():
        raise ValueError("net_returns: expected finite values")
    n = r.size
    eq = equity_curve(r)
    final = eq[-1]
    ann = (final ** (periods_per_year / n) - 1.0) if (n and final > 0) else (-1.0 if n else 0.0)
    mdd = max_drawdown(eq)
    out = {
        "bars": float(n),
        "total_return": float(final - 1.0),
        "annualized_return": float(ann),
        "annualized_volatility": float(r.std(ddof=1) * math.sqrt(periods_per_year)) if n > 1 else 0.0,
        "sharpe": sharpe_ratio(r, periods_per_year),
        "sortino": sortino_ratio(r, periods_per_year),
        "max_drawdown": mdd,
        "calmar": float(ann / mdd) if mdd > 0 else 0.0,
    }
    q = np.zeros(n) if trades is None else np.asarray(trades, dtype=np.float64)
    out["turnover"] = float(np.abs(q).sum())
    out["turnover_per_bar"] = out["turnover"] / n if n else 0.0
    p = np.zeros(n) if positions is None else np.asarray(positions, dtype=np.float64)
    g = r if pnl is None else np.asarray(pnl, dtype=np.float64)
    exposed = p != 0
    out["hit_rate"] = float(((g > 0) & exposed).sum() / exposed.sum()) if exposed.any() else 0.0
    out["exposure"] = float(np.abs(p).mean()) if n else 0.0
    c = np.zeros(n) if costs is None else np.asarray(costs, dtype=np.float64)
    out["cost_total"] = float(c.sum())
    o = np.full(n, -1) if order_types is None else np.asarray(order_types)
    for k, name in enumerate(ORDER_NAMES):
        out[f"cost_{name}"] = float(c[o == k].sum())
    return out


def mean_metrics(per_asset: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average of each metric over assets (equal weights)."""
    if not per_asset:
        return {}
    return {k: float(np.mean([m[k] for m in per_asset])) for k in per_asset[0]}
