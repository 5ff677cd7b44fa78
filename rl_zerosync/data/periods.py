"""``data.periods_per_year``: bars per year, given or inferred from the timestamps (``"auto"``).

Inference, per asset: the bar spacing's median ``m`` sets what a hole in the data is, a step longer
than ``max(GAP_SPACINGS * m, MIN_GAP)`` (10 bars, and at least a week: weekends, nights and holidays
are part of a bar rate, a missing decade is not). The asset's rate is its bars per year over the time
its data covers: ``steps kept / (their total length in years of 365.2425 days)``, the holes left out.
Then:

* the assets must agree: rates more than ``TOLERANCE`` (5%) apart (daily bars beside hourly ones,
  trading days beside calendar days) are an error naming each asset's rate, since one run
  annualizes with one number;
* their median is snapped to a convention within 5% (``CONVENTIONS``: 12 monthly, 52 weekly, 252
  trading days, 365 calendar days, 1,638 = 252 x 6.5 and 1,764 = 252 x 7 equity hours, 8,760
  hours, 98,280 = 252 x 390 equity minutes, 525,600 minutes), else rounded with a warning that it
  matches none;
* a rate outside ``PLAUSIBLE`` (1 to 1,000,000 a year) is an error: the timestamps are read wrongly
  (epochs in another unit) or the bars need an explicit number.

Without timestamps ``"auto"`` is 252 (trading days), and the source says it was assumed.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

CONVENTIONS = (12.0, 52.0, 252.0, 365.0, 252.0 * 6.5, 252.0 * 7.0, 8760.0, 252.0 * 390.0, 525600.0)
"""Bars per year that ``"auto"`` snaps to when the observed rate is within ``TOLERANCE`` of one."""
TOLERANCE = 0.05
PLAUSIBLE = (1.0, 1e6)
"""Bars per year that ``"auto"`` may infer (one a year to one every ~32 seconds)."""
GAP_SPACINGS = 10
"""A step longer than this many median bar spacings (and than ``MIN_GAP_DAYS``) is a hole in the data."""
MIN_GAP_DAYS = 7
YEAR_S = 365.2425 * 86400.0


def check_periods_per_year(value: Any) -> None:
    """``data.periods_per_year``: a finite number > 0 or ``"auto"`` (ValueError naming the key)."""
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"data.periods_per_year: expected a finite number > 0 or 'auto', got {value!r}")


def check_inferred_periods_per_year(observed: float, asset: str | None = None) -> None:
    """ValueError when bars per year inferred from timestamps are outside ``PLAUSIBLE``: never
    annualize with such a number."""
    lo, hi = PLAUSIBLE
    if not lo <= observed <= hi:
        of = f" of asset {asset!r}" if asset is not None else ""
        raise ValueError(
            f"data.periods_per_year: 'auto' inferred {observed:.6g} bars per year from the timestamps{of}, outside "
            f"the plausible {lo:g}..{hi:g}: check how the timestamps are read (data.timestamp_unit for integer "
            "epochs) or set data.periods_per_year")


def asset_rate(ts: np.ndarray) -> dict[str, float] | None:
    """One asset's ``rate`` (bars per year over the time its data covers), its median ``spacing_s``,
    the ``gaps`` left out and their ``gap_years``; None with fewer than two bars or no time spanned."""
    if len(ts) < 2:
        return None
    step = np.diff(np.asarray(ts, dtype="datetime64[ns]")).astype(np.int64).astype(np.float64) / 1e9
    median = float(np.median(step))
    if median <= 0.0:
        return None
    kept = step <= max(GAP_SPACINGS * median, MIN_GAP_DAYS * 86400.0)
    years = float(step[kept].sum()) / YEAR_S
    if years <= 0.0:
        return None
    return {"rate": float(kept.sum()) / years, "spacing_s": median, "years": years,
            "gaps": int((~kept).sum()), "gap_years": float(step[~kept].sum()) / YEAR_S}


def _snap(observed: float) -> tuple[float, bool]:
    """(the convention within ``TOLERANCE``, True) or (the rounded rate, False)."""
    near = min(CONVENTIONS, key=lambda c: abs(observed / c - 1.0))
    return (near, True) if abs(observed / near - 1.0) <= TOLERANCE else (float(round(observed)), False)


def _spacing(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} seconds"


def infer_periods_per_year(timestamps: Sequence[np.ndarray], names: Sequence[str] | None = None
                           ) -> tuple[float, str, list[str]]:
    """(bars per year, where it came from, warnings) inferred from every asset's timestamps (module doc)."""
    names = list(names) if names is not None else [f"asset {i}" for i in range(len(timestamps))]
    found = [(n, r) for n, r in zip(names, (asset_rate(ts) for ts in timestamps)) if r is not None]
    if not found:
        return 252.0, "assumed 252 (trading days): the timestamps span no time; set data.periods_per_year", []
    for name, r in found:
        check_inferred_periods_per_year(r["rate"], name)
    rates = [r["rate"] for _, r in found]
    if max(rates) > (1.0 + TOLERANCE) * min(rates):
        shown = ", ".join(f"{n!r} {r['rate']:,.1f} (bars {_spacing(r['spacing_s'])} apart)" for n, r in found)
        raise ValueError(f"data.periods_per_year: 'auto' found the assets at different bar rates per year ({shown}); "
                         "one run annualizes with one number: set data.periods_per_year, or train the assets apart")
    observed = float(np.median(rates))
    chosen, near = _snap(observed)
    years = float(np.median([r["years"] for _, r in found]))
    source = (f"inferred from timestamps: {observed:,.1f} bars per year observed (median over {len(found)} "
              f"asset(s), {years:.2f} years each, bars {_spacing(float(np.median([r['spacing_s'] for _, r in found])))} "
              f"apart), set to {chosen:g}")
    gaps = sum(r["gaps"] for _, r in found)
    if gaps:
        source += (f"; {gaps} gap(s) longer than {GAP_SPACINGS} bars and {MIN_GAP_DAYS} days left out "
                   f"({sum(r['gap_years'] for _, r in found):.2f} years)")
    warnings = [] if near else [
        f"data.periods_per_year: 'auto' inferred {observed:,.1f} bars per year, within {TOLERANCE:.0%} of no "
        f"convention ({', '.join(f'{c:g}' for c in CONVENTIONS)}); annualizing with {chosen:g}: set "
        "data.periods_per_year to be sure"]
    return chosen, source, warnings


def periods_per_year_report(value: float | str, timestamps: Sequence[np.ndarray] | None,
                            names: Sequence[str] | None = None) -> tuple[float, str, list[str]]:
    """(bars per year, where it came from, warnings) for ``value`` (a number, or ``"auto"``)."""
    check_periods_per_year(value)
    if value != "auto":
        return float(value), "data.periods_per_year", []
    if timestamps is None:
        return 252.0, "assumed 252 (trading days): the data has no timestamps; set data.periods_per_year", []
    return infer_periods_per_year(timestamps, names)


def resolve_periods_per_year(value: float | str, timestamps: Sequence[np.ndarray] | None,
                             names: Sequence[str] | None = None) -> tuple[float, str]:
    """(bars per year, where it came from): :func:`periods_per_year_report` without its warnings."""
    return periods_per_year_report(value, timestamps, names)[:2]
