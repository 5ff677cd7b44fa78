"""``series.json``: what the per-bar files of an evaluation are, for a tear-sheet tool (quantstats, a
spreadsheet), and the synthetic calendar of series without timestamps.

Every evaluation directory holds ``series.json`` beside ``bars_<segment>`` / ``portfolio_<segment>``
``.csv`` (and ``.parquet``), written by :func:`write_sidecar`:

* ``periods_per_year``: the bars per year the evaluation annualized with (its Sharpe is
  ``mean(r) / std(r, ddof=1) * sqrt(periods_per_year)`` of the ``net_return`` rows after the first);
* ``returns`` and ``benchmark``: the columns of the per-bar net return (``net_return``) and of the
  benchmark's (``benchmark_net_return``: the buy-and-hold rule on the same bars, with the same
  execution and costs), simple returns after costs as fractions of equity; the equity columns
  compound them from 1;
* ``calendar``: ``"data"`` (``timestamp`` is the data's own, the close of each bar) or
  ``"synthetic"`` (the data has no timestamps, e.g. the synthetic source: ``timestamp`` is made up
  from the bar index and ``periods_per_year`` by :func:`synthetic_timestamps`, described in
  ``synthetic_calendar``; it places the bars for a tool that needs dates, nothing traded then);
* ``segments``: per evaluated segment its files (names inside the directory), rows, first and last
  ``timestamp``, and ``first_row``: the first row of each asset and of the portfolio is the start
  (flat, return 0), not a traded bar, so a returns series leaves it out.

The synthetic calendar (:data:`SYNTHETIC_SPACINGS`) starts at :data:`SYNTHETIC_ORIGIN` (bar 0 is the
first date of the spacing on or after it) and spaces the bars by the convention of their
``periods_per_year``: 252 business days (Monday to Friday, no holidays), 365 calendar days, 52
Mondays, 12 month starts, 1,764 (252 x 7) seven hourly bars a business day from 09:30, 8,760 hours,
98,280 (252 x 390) one-minute bars a business day from 09:30, 525,600 minutes; any other value
(1,638 = 252 x 6.5 included) spaces them evenly, ``365.2425 days / periods_per_year`` apart (to the
second). Bars are placed by their index in the asset's whole series, so validation dates come
before test dates, as the bars do; sealed held-out series (``data.heldout_*_series``: each segment
whole series of its own) start again at bar 0, so their validation and test dates coincide.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

SIDECAR_FILE = "series.json"
SYNTHETIC_ORIGIN = "2000-01-03"
"""Bar 0 of the synthetic calendar: the first business day of 2000, a Monday."""
SESSION_OPEN = "09:30"
"""First bar of a business day in the intraday synthetic calendars."""
SYNTHETIC_SPACINGS: dict[float, tuple[str, int, str | None, str]] = {
    12.0: ("MS", 1, None, "month starts"),
    52.0: ("W-MON", 1, None, "Mondays"),
    252.0: ("B", 1, None, "business days (Monday to Friday, no holidays)"),
    365.0: ("D", 1, None, "calendar days"),
    252.0 * 7: ("B", 7, "1h", "7 hourly bars a business day, 09:30 .. 15:30"),
    8760.0: ("h", 1, None, "hours"),
    252.0 * 390: ("B", 390, "1min", "390 one-minute bars a business day, 09:30 .. 15:59"),
    525600.0: ("min", 1, None, "minutes"),
}
"""periods_per_year -> (pandas frequency of the days or bars, bars per day, spacing within a day,
words)."""
YEAR_SECONDS = 365.2425 * 86400


def _spacing(periods_per_year: float) -> tuple[str, int, str | None, str] | None:
    p = float(periods_per_year)
    return next((v for k, v in SYNTHETIC_SPACINGS.items() if abs(k - p) <= 1e-9 * k), None)


def synthetic_calendar(periods_per_year: float) -> dict[str, Any]:
    """How :func:`synthetic_timestamps` places the bars at ``periods_per_year`` (``series.json``'s
    ``synthetic_calendar``)."""
    spacing = _spacing(periods_per_year)
    if spacing is None:
        step = max(1, round(YEAR_SECONDS / float(periods_per_year)))
        return {"origin": f"{SYNTHETIC_ORIGIN} 00:00:00", "spacing": f"evenly, {step} s apart (365.2425 days / "
                f"{float(periods_per_year):g})", "step_seconds": step}
    freq, per_day, within, words = spacing
    out = {"origin": SYNTHETIC_ORIGIN, "spacing": words, "pandas_freq": freq}
    if per_day > 1:
        out.update({"bars_per_day": per_day, "session_open": SESSION_OPEN, "within_day": within})
    return out


def synthetic_timestamps(bars, periods_per_year: float):
    """The synthetic calendar's timestamps (a pandas DatetimeIndex, no time zone) of the bars with
    index ``bars`` (ints >= 0) at ``periods_per_year`` (module doc)."""
    import pandas as pd

    if not np.isfinite(periods_per_year) or periods_per_year <= 0:
        raise ValueError(f"periods_per_year: expected a finite number > 0, got {periods_per_year!r}")
    bars = np.asarray(bars, dtype=np.int64)
    if bars.size and bars.min() < 0:
        raise ValueError(f"bars: expected indices >= 0, got {int(bars.min())}")
    spacing = _spacing(periods_per_year)
    if spacing is None:
        step = max(1, round(YEAR_SECONDS / float(periods_per_year)))
        return pd.DatetimeIndex(pd.Timestamp(SYNTHETIC_ORIGIN) + pd.to_timedelta(bars * step, unit="s"))
    freq, per_day, within, _ = spacing
    days = bars // per_day
    grid = pd.date_range(SYNTHETIC_ORIGIN, periods=int(days.max()) + 1 if bars.size else 0, freq=freq)
    stamps = grid[days]
    if per_day > 1:
        stamps = stamps + pd.Timedelta(SESSION_OPEN + ":00") + (bars % per_day) * pd.Timedelta(within)
    return pd.DatetimeIndex(stamps)


def with_calendar(result, bars, portfolio):
    """``(bars, portfolio, calendar)``: the :func:`~rl_zerosync.evaluation.backtest.bar_table` and
    :func:`~rl_zerosync.evaluation.backtest.portfolio_table` of ``result`` as written, with a
    synthetic ``timestamp`` first when the data has none (``calendar`` ``"synthetic"``; the bars' from
    their ``bar``, the portfolio's from the first tradable bar of the longest asset plus ``step``, as
    on ``report.png``), unchanged otherwise (``"data"``)."""
    if "timestamp" in bars.columns:
        return bars, portfolio, "data"
    ppy = result.periods_per_year
    bars = bars.copy()
    bars.insert(0, "timestamp", synthetic_timestamps(bars["bar"].to_numpy(), ppy))
    longest = int(np.argmax([len(b) for b in result.bars]))
    portfolio = portfolio.copy()
    portfolio.insert(0, "timestamp", synthetic_timestamps(result.bars[longest][0] + portfolio["step"].to_numpy(), ppy))
    return bars, portfolio, "synthetic"


def _when(stamp) -> str | None:
    return None if stamp is None else str(stamp)


def segment_entry(result, files: Mapping[str, str], bars, portfolio, calendar: str) -> dict[str, Any]:
    """One segment of ``series.json``: its files (names), rows and time range."""
    return {
        "periods_per_year": float(result.periods_per_year),
        "calendar": calendar,
        "assets": list(result.assets),
        "files": {kind: Path(path).name for kind, path in files.items()},
        "bars_rows": int(len(bars)),
        "portfolio_rows": int(len(portfolio)),
        "start": _when(portfolio["timestamp"].iloc[0] if len(portfolio) else None),
        "end": _when(portfolio["timestamp"].iloc[-1] if len(portfolio) else None),
        "first_row": "the start (flat, net return 0) of each asset in bars and of the portfolio: not a traded bar, "
                     "leave it out of a returns series",
    }


def write_sidecar(out_dir: Path, segments: Mapping[str, dict[str, Any]]) -> Path:
    """``series.json`` (module doc) of the segment entries :func:`segment_entry` in ``out_dir``;
    top-level ``periods_per_year`` and ``calendar`` are the last segment's (the segments of one
    evaluation share the evaluated data's)."""
    last = segments[list(segments)[-1]]
    body: dict[str, Any] = {
        "periods_per_year": last["periods_per_year"],
        "calendar": last["calendar"],
    }
    if last["calendar"] == "synthetic":
        body["synthetic_calendar"] = {
            **synthetic_calendar(last["periods_per_year"]),
            "note": "the data has no timestamps: these are made up from each bar's index and periods_per_year "
                    "so that a tool which needs dates accepts the series; nothing traded at these times",
        }
    body.update({
        "returns": {"column": "net_return", "equity_column": "equity",
                    "what": "the agent's net return of the bar after costs (simple, fraction of equity); in "
                            "portfolio_<segment> the equal-weight portfolio of the assets (their mean each bar)"},
        "benchmark": {"name": "buy_and_hold", "column": "benchmark_net_return", "equity_column": "benchmark_equity",
                      "what": "the buy-and-hold rule on the same bars, with the same execution and costs"},
        "sharpe": "mean(net_return) / std(net_return, ddof=1) * sqrt(periods_per_year) over the rows after the first",
        "segments": dict(segments),
    })
    path = out_dir / SIDECAR_FILE
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
