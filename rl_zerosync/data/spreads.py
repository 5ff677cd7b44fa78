"""Spreads a user can check: where each asset's spread came from, its median and range, the floor and
cap that applied, and warnings when an estimate sits far from what the user set.

:func:`spread_report` (the ``spreads`` entry of ``metrics.json``'s ``execution`` key and the
preflight's spread line) summarises the tradable bars ``[valid_start, length)`` of every asset, in
bps. Warnings (:func:`spread_warnings`), per asset with an estimated spread (``corwin_schultz``,
``bid_ask``):

* at the floor ``data.min_spread_bps`` on more than half of the bars: the floor, not the data, sets
  the costs;
* at the cap ``data.max_spread_bps`` on more than half of the bars: the cap sets the costs;
* a median more than :data:`FAR` times above or below ``data.spread_bps`` when that is set (the
  user's own idea of the spread);
* a Corwin-Schultz median above :data:`CS_HIGH_BPS` bps without a cap: the estimator overstates
  the spread of liquid assets (it reads the bar's range, i.e. volatility, as spread); set
  ``spread_source: fixed`` with ``spread_bps`` or a ``max_spread_bps``.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rl_zerosync.data.market import MarketData

FAR = 3.0
"""A median spread this many times above or below ``data.spread_bps`` is warned about."""
CS_HIGH_BPS = 20.0
"""A Corwin-Schultz median above this (bps) without a cap is warned about."""
DEFAULT_MIN_SPREAD_BPS = 0.1
"""``data.min_spread_bps`` when unset (the loaders' default)."""


def asset_spreads_bps(market: MarketData) -> dict[str, np.ndarray]:
    """Per asset the relative spread of its tradable bars, in bps (host read: report time)."""
    spread = market.spread.detach().cpu().numpy().astype(np.float64) * 1e4  # host read: report time
    starts = market.valid_start.cpu().tolist()  # host read: report time
    lengths = market.length.cpu().tolist()  # host read: report time
    return {name: spread[a, starts[a]:lengths[a]] for a, name in enumerate(market.asset_names)}


def spread_report(market: MarketData, data_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """Spread source, median and range (bps) per asset, the floor / fixed spread / cap settings and
    the warnings of :func:`spread_warnings`."""
    cfg = dict(data_cfg or {})
    files = cfg.get("source", "synthetic") in ("csv", "parquet")
    info = dict(market.source_info or {})
    sources = dict(info.get("spread_source") or {})
    per_asset = {}
    for name, bps in asset_spreads_bps(market).items():
        per_asset[name] = {
            "source": sources.get(name, "synthetic model" if not files else "unknown"),
            "median_bps": float(np.median(bps)), "min_bps": float(np.min(bps)), "max_bps": float(np.max(bps)),
        }
    settings = {"min_spread_bps": cfg.get("min_spread_bps", DEFAULT_MIN_SPREAD_BPS) if files else None,
                "spread_bps": cfg.get("spread_bps") if files else _synthetic_spread_bps(cfg),
                "max_spread_bps": cfg.get("max_spread_bps") if files else None}
    return {"segment": market.segment, "settings": settings, "per_asset": per_asset,
            "warnings": spread_warnings(per_asset, asset_spreads_bps(market), settings)}


def _synthetic_spread_bps(cfg: Mapping[str, Any]) -> float:
    """The synthetic model's mean spread: ``data.synthetic.spread_bps`` or its default."""
    import inspect

    from rl_zerosync.data.synthetic import synthetic_series

    default = inspect.signature(synthetic_series).parameters["spread_bps"].default
    return float((cfg.get("synthetic") or {}).get("spread_bps", default))


def spread_warnings(per_asset: Mapping[str, Mapping[str, Any]], bps: Mapping[str, np.ndarray],
                    settings: Mapping[str, Any]) -> list[str]:
    """The warnings of the module doc, one line each."""
    out = []
    floor, fixed, cap = settings.get("min_spread_bps"), settings.get("spread_bps"), settings.get("max_spread_bps")
    for name, row in per_asset.items():
        source, med = row["source"], row["median_bps"]
        if source not in ("corwin_schultz", "bid_ask"):
            continue
        x = bps[name]
        if floor and np.mean(x <= floor * (1 + 1e-6)) > 0.5:
            out.append(f"asset {name!r}: the {source} spread is at the floor data.min_spread_bps = {floor:g} on "
                       f"{100 * np.mean(x <= floor * (1 + 1e-6)):.0f}% of bars: the floor sets the costs")
        if cap and np.mean(x >= cap * (1 - 1e-6)) > 0.5:
            out.append(f"asset {name!r}: the {source} spread is at the cap data.max_spread_bps = {cap:g} on "
                       f"{100 * np.mean(x >= cap * (1 - 1e-6)):.0f}% of bars: the cap sets the costs")
        if fixed and (med > FAR * fixed or med < fixed / FAR):
            out.append(f"asset {name!r}: the {source} median spread {med:.2f} bps is far from data.spread_bps = "
                       f"{fixed:g} (more than {FAR:g}x off): check which one is right")
        if source == "corwin_schultz" and not cap and med > CS_HIGH_BPS:
            out.append(f"asset {name!r}: the Corwin-Schultz median spread is {med:.1f} bps: the estimator reads "
                       f"the bar range as spread and overstates liquid assets' spreads; set data.spread_source: "
                       f"fixed with data.spread_bps, or data.max_spread_bps")
    return out


def spread_line(report: Mapping[str, Any]) -> str:
    """One line: per asset source, median and range in bps, then floor / fixed / cap."""
    parts = [f"{n} {r['source']} median {r['median_bps']:.2f} bps ({r['min_bps']:.2f}-{r['max_bps']:.2f})"
             for n, r in report["per_asset"].items()]
    shown = parts if len(parts) <= 4 else parts[:3] + [f"... {len(parts) - 3} more"]
    s = report["settings"]
    limits = ", ".join(f"{k} {v:g}" if v is not None else f"{k} unset" for k, v in s.items())
    return f"spread: {'; '.join(shown)} | {limits}"
