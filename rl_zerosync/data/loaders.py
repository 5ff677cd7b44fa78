"""Load OHLCV market data from CSV or Parquet files into :class:`MarketData`.

One file per asset, or one file with an asset column. Columns are found by name (case-insensitive:
``timestamp|date|datetime|time``, ``open``, ``high``, ``low``, ``close``, ``bid``, ``ask``) or by an
explicit mapping ``columns={"close": "Adj Close", ...}``. Only ``close`` is required.

Relative spread per bar, by ``spread_source``:

* ``"bid_ask"``: ``(ask - bid) / ((ask + bid) / 2)``;
* ``"corwin_schultz"`` (needs high/low): the Corwin & Schultz (2012) estimator on bars ``(t-1, t)``,
  ``beta = ln(H_{t-1}/L_{t-1})^2 + ln(H_t/L_t)^2``, ``gamma = ln(max(H_{t-1}, H_t) / min(L_{t-1}, L_t))^2``,
  ``alpha = (sqrt(2 beta) - sqrt(beta)) / (3 - 2 sqrt 2) - sqrt(gamma / (3 - 2 sqrt 2))``,
  ``S = 2 (e^alpha - 1) / (1 + e^alpha)``; negative estimates are set to 0 (as in the paper), then a
  trailing mean over ``cs_window`` bars, floored at ``min_spread_bps`` (bar 0 takes the floor);
* ``"fixed"``: ``spread_bps * 1e-4`` on every bar;
* ``max_spread_bps`` (optional, >= ``min_spread_bps``): a cap on the estimated or quoted spread of every
  bar (``bid_ask`` and ``corwin_schultz``; a ``fixed`` spread above it is an error); the bars at the cap
  are counted in ``source_info["bars_at_cap"]``;
* ``"auto"``: bid/ask if both columns exist, else Corwin-Schultz if high/low exist, else fixed if
  ``spread_bps`` is set, else ValueError.

``periods_per_year`` (annualization of Sharpe, volatility and returns): a number, or ``"auto"``
(the default): with timestamps, the bars per year over the time the data covers (holes in it left
out), assets checked to agree, snapped to a common convention within 5% or rounded with a warning
(:mod:`rl_zerosync.data.periods`); without timestamps 252 (trading days), and the returned market
says it was assumed. The choice, its warnings and the spread source with its median in bps per
asset are in ``MarketData.source_info``.

Asset names are the file stems (or the ``asset_column`` values) unless ``names`` gives them; two
assets with one name (two files of one stem in different folders, one file listed twice) are refused
naming ``data.names``.

Bad data raises ValueError naming the file, the column and the row (0-based data row; the CSV line
is row + 2): missing columns, non-numeric / non-finite / non-positive prices, high < low, bid > ask,
unparseable, duplicate or decreasing timestamps, fewer rows than ``features.warmup + 2``, and
(with ``max_abs_log_return`` > 0; ``make_market`` passes ``data.max_abs_log_return``, default 0.5)
a close-to-close ``|log return|`` above it (a spike: the row and both closes are named).
"""
from __future__ import annotations

import errno
import math
import os
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.data.market import (
    FeatureConfig, MarketData, build_market, check_log_returns, check_max_abs_log_return,
)
from rl_zerosync.data.csv_hints import column_hint, dayfirst_hint, unnamed_dates, unnamed_timestamp_error
from rl_zerosync.data.periods import check_periods_per_year, periods_per_year_report

COLUMN_KEYS = ("timestamp", "open", "high", "low", "close", "bid", "ask")
_AUTO_NAMES = {"timestamp": ("timestamp", "date", "datetime", "time")}
SPREAD_SOURCES = ("auto", "bid_ask", "corwin_schultz", "fixed")
FORMATS = ("csv", "parquet")
_PRICE_KEYS = ("open", "high", "low", "close", "bid", "ask")


def load_market(
    paths: str | Sequence[str],
    *,
    fmt: str | None = None,
    columns: Mapping[str, str] | None = None,
    asset_column: str | None = None,
    names: Sequence[str] | None = None,
    spread_source: str = "auto",
    spread_bps: float | None = None,
    cs_window: int = 5,
    min_spread_bps: float = 0.1,
    timestamp_format: str | None = None,
    dayfirst: bool = False,
    features: FeatureConfig | None = None,
    periods_per_year: float | str = "auto",
    device: str = "cpu",
    max_abs_log_return: float | None = None,
    max_spread_bps: float | None = None,
    timestamp_unit: str | None = None,
) -> MarketData:
    """Read ``paths`` (one or more files), validate them and build ``MarketData`` (see module doc)."""
    features = features or FeatureConfig()
    limit = check_max_abs_log_return(max_abs_log_return)
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise ValueError("data.paths: expected at least one file, got none")
    if spread_source not in SPREAD_SOURCES:
        raise ValueError(f"data.spread_source: expected one of {SPREAD_SOURCES}, got {spread_source!r}")
    check_spread_keys(spread_bps, cs_window, min_spread_bps, max_spread_bps)
    unknown = sorted(set(columns or {}) - set(COLUMN_KEYS))
    if unknown:
        raise ValueError(f"data.columns: unknown key(s) {unknown}; allowed keys are {list(COLUMN_KEYS)}")
    check_periods_per_year(periods_per_year)
    check_timestamp_unit(timestamp_unit)
    check_distinct_files(paths)
    closes, spreads, stamps, asset_names, sources, bar_prices, notes, origins = [], [], [], [], [], [], [], []
    for path in paths:
        frame = _read(str(path), fmt)
        for asset, part in _assets(str(path), frame, asset_column):
            where = f"file {path}" + (f", asset {asset!r}" if asset_column else "")
            cols = resolve_columns(where, part, columns or {})
            if "timestamp" not in cols and unnamed_dates(part):  # read without them, the bars would have no dates
                raise ValueError(unnamed_timestamp_error(where, part.columns))
            prices, (spread, source), ts = clean_bars(where, part, cols, features, spread_source, spread_bps,
                                                      cs_window, min_spread_bps, timestamp_format, dayfirst,
                                                      timestamp_unit, max_spread_bps=max_spread_bps)
            close = prices["close"]
            bar_prices.append(prices)
            if "timestamp" in cols:
                notes.append(timestamp_note(part[cols["timestamp"]], timestamp_unit))
            check_log_returns(f"{where}, column {cols['close']!r}", close, limit,
                              labels=part.index.to_numpy(), unit="row")
            closes.append(close)
            spreads.append(spread)
            stamps.append(ts)
            sources.append(source)
            asset_names.append(str(asset) if asset_column else os.path.splitext(os.path.basename(str(path)))[0])
            origins.append(where)
    if names is not None:
        if len(names) != len(closes):
            raise ValueError(f"data.names: expected {len(closes)} names (one per asset), got {len(names)}")
        asset_names = [str(n) for n in names]
    check_distinct_names(asset_names, origins, given=names is not None, asset_column=asset_column)
    has_ts = all(t is not None for t in stamps)
    ppy, ppy_source, ppy_warnings = periods_per_year_report(periods_per_year, stamps if has_ts else None, asset_names)
    kept = execution_prices(bar_prices)
    market = build_market(closes, spreads, names=asset_names, features=features,
                          timestamps=stamps if has_ts else None, periods_per_year=ppy, device=device,
                          prices={k: [p[k] for p in bar_prices] for k in kept})
    info = {
        "periods_per_year": ppy,
        "periods_per_year_source": ppy_source,
        "timestamps": "; ".join(sorted(set(notes))) if notes else "timestamps: none",
        "spread_source": dict(zip(asset_names, sources)),
        **_spread_info(asset_names, spreads, max_spread_bps),
        "execution_prices": list(kept),
        "warnings": ppy_warnings,
    }
    return replace(market, source_info=info)


def _spread_info(asset_names: Sequence[str], spreads: Sequence[np.ndarray],
                 max_spread_bps: float | None) -> dict[str, Any]:
    """The spread report of ``source_info``: median and range per asset in bps (and the bars at the
    cap when ``data.max_spread_bps`` is set). Bar 0 of Corwin-Schultz has no estimate (the floor), so
    the statistics are over bars 1..n-1."""
    info: dict[str, Any] = {
        "median_spread_bps": {n: float(np.median(sp[1:]) * 1e4) for n, sp in zip(asset_names, spreads)},
        "spread_range_bps": {n: [float(np.min(sp[1:]) * 1e4), float(np.max(sp[1:]) * 1e4)]
                             for n, sp in zip(asset_names, spreads)},
    }
    if max_spread_bps is not None:
        info["bars_at_cap"] = {n: int(np.sum(sp[1:] >= max_spread_bps * 1e-4)) for n, sp in zip(asset_names, spreads)}
    return info


def check_distinct_files(paths: Sequence[str | os.PathLike]) -> None:
    """ValueError naming ``data.paths`` when one file is listed twice (the same file under two
    spellings counts: its assets would be traded twice, one of them under a name of its own)."""
    seen: dict[str, int] = {}
    for i, path in enumerate(paths):
        key = os.path.realpath(str(path))
        if key in seen:
            raise ValueError(f"data.paths: entries {seen[key]} and {i} ({paths[seen[key]]!s} and {path!s}) are the "
                             f"same file {key}; list each file once")
        seen[key] = i


def check_distinct_names(asset_names: Sequence[str], origins: Sequence[str], *, given: bool = False,
                         asset_column: str | None = None) -> None:
    """ValueError naming the first asset name two assets share, where each came from, and
    ``data.names`` (one distinct name per asset, in order): assets are keyed by name in every report."""
    first: dict[str, int] = {}
    for i, name in enumerate(asset_names):
        if name not in first:
            first[name] = i
            continue
        j = first[name]
        if given:
            raise ValueError(f"data.names: {name!r} is given twice (assets {j} and {i}: {origins[j]} and {origins[i]}); "
                             "expected one distinct name per asset")
        how = f"from the asset column {asset_column!r}" if asset_column else "from the file stem"
        raise ValueError(f"asset name {name!r} ({how}) is given twice, by {origins[j]} and {origins[i]}: asset names "
                         f"must be distinct; set data.names to one distinct name per asset, in order "
                         f"({len(asset_names)} assets)")


MAX_SPREAD_BPS = 10_000.0
"""The largest spread setting in basis points (``spread_bps``, ``min_spread_bps``, ``max_spread_bps``):
10,000 bps are the whole price."""


def _bps(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= MAX_SPREAD_BPS


def check_spread_keys(spread_bps: Any = None, cs_window: Any = 5, min_spread_bps: Any = 0.1,
                      max_spread_bps: Any = None) -> None:
    """``data.spread_bps`` (None or in [0, 10,000]), ``data.cs_window`` (an int >= 1),
    ``data.min_spread_bps`` (in [0, 10,000]) and ``data.max_spread_bps`` (:func:`check_max_spread_bps`):
    ValueError naming the key. The loader's defaults are the arguments' defaults; checked at load and
    by :func:`load_market`."""
    if spread_bps is not None and not _bps(spread_bps):
        raise ValueError(f"data.spread_bps: expected a finite number in [0, {MAX_SPREAD_BPS:g}] (bps), "
                         f"got {spread_bps!r}")
    if isinstance(cs_window, bool) or not isinstance(cs_window, int) or cs_window < 1:
        raise ValueError(f"data.cs_window: expected an int >= 1, got {cs_window!r}")
    if not _bps(min_spread_bps):
        raise ValueError(f"data.min_spread_bps: expected a finite number in [0, {MAX_SPREAD_BPS:g}] (bps), "
                         f"got {min_spread_bps!r}")
    check_max_spread_bps(max_spread_bps, min_spread_bps, spread_bps)


def check_max_spread_bps(value: Any, min_spread_bps: float, spread_bps: float | None) -> None:
    """``data.max_spread_bps``: None (no cap) or a number in (0, 10,000] >= ``data.min_spread_bps`` and
    >= ``data.spread_bps`` when that is set (ValueError naming the keys)."""
    if value is None:
        return
    if not _bps(value) or value == 0:
        raise ValueError(f"data.max_spread_bps: expected a finite number in (0, {MAX_SPREAD_BPS:g}] (bps; or null: "
                         f"no cap), got {value!r}")
    if value < min_spread_bps:
        raise ValueError(f"data.max_spread_bps: expected a cap >= data.min_spread_bps = {min_spread_bps:g}, got {value!r}")
    if spread_bps is not None and spread_bps > value:
        raise ValueError(f"data.max_spread_bps: {value!r} is below data.spread_bps = {spread_bps:g}; raise the cap "
                         "or lower the fixed spread")


def execution_prices(bar_prices: Sequence[Mapping[str, np.ndarray]]) -> tuple[str, ...]:
    """The optional prices every asset has (``open``; ``high`` and ``low`` together), kept for
    execution at the next bar; an asset without a column leaves it out for all (the preflight says so)."""
    have = lambda k: all(k in p for p in bar_prices)  # noqa: E731
    kept = ("open",) if have("open") else ()
    return kept + (("high", "low") if have("high") and have("low") else ())


def corwin_schultz(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Raw Corwin-Schultz spread of bars ``(t-1, t)`` assigned to ``t`` (NaN at ``t = 0``, >= 0)."""
    high = np.asarray(high, dtype=np.float64)
    low = np.asarray(low, dtype=np.float64)
    out = np.full(high.shape, np.nan)
    if len(high) < 2:
        return out
    hl = np.log(high / low) ** 2
    beta = hl[:-1] + hl[1:]
    gamma = np.log(np.maximum(high[:-1], high[1:]) / np.minimum(low[:-1], low[1:])) ** 2
    k = 3.0 - 2.0 * math.sqrt(2.0)
    alpha = (np.sqrt(2.0 * beta) - np.sqrt(beta)) / k - np.sqrt(gamma / k)
    s = 2.0 * (np.exp(alpha) - 1.0) / (1.0 + np.exp(alpha))
    out[1:] = np.maximum(s, 0.0)
    return out


def _read(path: str, fmt: str | None):
    import pandas as pd

    kind = fmt or ("parquet" if path.lower().endswith((".parquet", ".pq")) else "csv")
    if kind not in FORMATS:
        raise ValueError(f"data.format: expected one of {FORMATS}, got {kind!r}")
    if os.path.isdir(path):
        raise ValueError(f"file {path}: is a directory; expected a {kind} file (list the files in data.paths)")
    if not os.path.isfile(path):
        raise ValueError(missing_file(path))
    try:
        frame = pd.read_csv(path) if kind == "csv" else pd.read_parquet(path)
    except OSError as exc:  # a file that exists but the system will not read (no permission, an I/O error)
        raise ValueError(f"file {path}: cannot be read: {_os_reason(exc)}") from exc
    except Exception as exc:  # parser errors of all kinds -> one clear message
        raise ValueError(f"file {path}: cannot be read as {kind}: {exc}") from exc
    return frame.reset_index(drop=True)


def _os_reason(err: OSError) -> str:
    """The system's words and the errno name, ``Permission denied (EACCES)`` (the data floor's copy of
    ``rl_zerosync.rundir.os_errors.reason``, which sits above it)."""
    name = errno.errorcode.get(err.errno) if isinstance(err.errno, int) else None
    words = err.strerror or str(err)
    return f"{words} ({name})" if name else words


def missing_file(path: str) -> str:
    """Why ``path`` is no file to read, said as it is: a loop of symbolic links, a link to nothing, an
    OS error by errno, a leading ``~`` (not expanded in settings; the expanded path shown) or not found."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"file {path}: a loop of symbolic links (ELOOP); expected a file"
        if err.errno != errno.ENOENT:
            return f"file {path}: {_os_reason(err)}"
    if os.path.islink(path):
        return f"file {path}: a symbolic link to {os.readlink(path)}, which does not exist"
    if str(path).startswith("~"):
        return (f"file {path}: not found ('~' is not expanded in data.paths; write the full path, e.g. "
                f"{os.path.expanduser(path)})")
    return f"file {path}: not found"


def check_constant(where: str, close: np.ndarray) -> None:
    """ValueError naming ``where`` when every close is the same (zero variance: no price move to trade,
    every return 0, a Sharpe made of costs alone)."""
    if len(close) and np.all(close == close[0]):
        raise ValueError(f"{where}: every one of the {len(close)} closes is {_show(close[0])} (zero variance); "
                         "expected a price series that moves")


def _assets(path: str, frame, asset_column: str | None):
    if asset_column is None:
        return [(None, frame)]
    if asset_column not in frame.columns:
        raise ValueError(f"file {path}: missing asset column {asset_column!r}; found columns {list(frame.columns)}")
    missing = frame[asset_column].isna().to_numpy()
    if missing.any():
        row = int(np.argmax(missing))
        raise ValueError(f"file {path}, column {asset_column!r}, row {row}: missing asset name")
    return [(asset, part) for asset, part in frame.groupby(asset_column, sort=False)]


def resolve_columns(where: str, frame, mapping: Mapping[str, str]) -> dict[str, str]:
    """Data key (``close``, ``timestamp``, ...) -> the column of ``frame`` holding it: the
    ``data.columns`` mapping first, else the usual names; a frame without a close column is a
    ``ValueError`` naming ``where`` and the columns found."""
    lower = {str(c).lower(): c for c in frame.columns}
    cols: dict[str, str] = {}
    for key in COLUMN_KEYS:
        if key in mapping:
            if mapping[key] not in frame.columns:
                raise ValueError(f"{where}: missing column {mapping[key]!r} (data.columns.{key}); found columns "
                                 f"{list(frame.columns)}{column_hint(frame, mapping, key)}")
            cols[key] = mapping[key]
            continue
        for cand in _AUTO_NAMES.get(key, (key,)):
            if cand in lower:
                cols[key] = lower[cand]
                break
    if "close" not in cols:
        raise ValueError(f"{where}: missing column 'close' (set data.columns.close); found columns {list(frame.columns)}")
    return cols


def clean_bars(where, frame, cols, features, spread_source, spread_bps, cs_window, min_spread_bps,
               timestamp_format, dayfirst, timestamp_unit=None, *, max_spread_bps=None):
    """``(prices, (relative spread, its source), timestamps)`` of one asset's bars: every price
    column checked finite and > 0 (low <= high, bid <= ask, OHLC consistent), the timestamps parsed,
    the spread estimated as ``spread_source`` says and capped at ``max_spread_bps``. What training
    data goes through, and what :meth:`rl_zerosync.serving.policy.Policy.act` applies to live bars."""
    rows = frame.index.to_numpy()
    if len(frame) < features.warmup + 2:
        raise ValueError(
            f"{where}: {len(frame)} rows, expected at least features.warmup + 2 = {features.warmup + 2}"
        )
    prices: dict[str, np.ndarray] = {}
    for key in _PRICE_KEYS:
        if key not in cols:
            continue
        col = cols[key]
        raw = frame[col]
        values = numeric_column(f"{where}, column {col!r}", raw, rows)
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{where}, column {col!r}, row {rows[i]}: expected a finite price > 0, got {_show(raw.iloc[i])}")
        prices[key] = values
    if "close" in prices:
        check_constant(f"{where}, column {cols['close']!r}", prices["close"])
    for lo_key, hi_key in (("low", "high"), ("bid", "ask")):
        if lo_key in prices and hi_key in prices:
            bad = prices[lo_key] > prices[hi_key]
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"{where}, column {cols[lo_key]!r}, row {rows[i]}: {lo_key} {_show(prices[lo_key][i])} is above "
                    f"{hi_key} {_show(prices[hi_key][i])} (column {cols[hi_key]!r})"
                )
    check_ohlc(where, prices, cols, rows)
    ts = None
    if "timestamp" in cols:
        ts = parse_timestamps(f"{where}, column {cols['timestamp']!r}", frame[cols["timestamp"]], rows,
                              timestamp_format, dayfirst, timestamp_unit)
    values, source = _spread(where, prices, cols, spread_source, spread_bps, cs_window, min_spread_bps)
    if max_spread_bps is not None:
        values = np.minimum(values, max_spread_bps * 1e-4)
    return prices, (values, source), ts


def numeric_column(where: str, raw, rows) -> np.ndarray:
    """A price column as float64: numbers, or text that reads as numbers (a CSV cell that does not
    stays NaN for the caller's finite-price check, which names its row). A bool column, or a cell
    that is neither a number nor text (a bool, bytes, a date), is refused naming the row: never
    read as 1.0 / 0.0."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(raw.dtype):
        raise ValueError(f"{where}, row {rows[0]}: column of dtype bool ({raw.iloc[0]!r}); expected prices as numbers")
    if raw.dtype == object or pd.api.types.is_string_dtype(raw.dtype):
        odd = np.array([isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, float, np.number))
                        for v in raw.to_numpy()])
        if odd.any():
            i = int(np.argmax(odd))
            cell = raw.iloc[i]
            raise ValueError(f"{where}, row {rows[i]}: {type(cell).__name__} {cell!r} in a column of dtype object; "
                             "expected a price as a number")
    elif not pd.api.types.is_numeric_dtype(raw.dtype):
        raise ValueError(f"{where}, row {rows[0]}: column of dtype {raw.dtype} ({raw.iloc[0]!r}); expected prices as numbers")
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)


def check_ohlc(where: str, prices: dict, cols: Mapping[str, str], rows) -> None:
    """Open and close within the bar's range: ``low <= open, close <= high`` where those columns exist
    (ValueError naming the column, the row and both values)."""
    for key in ("open", "close"):
        if key not in prices:
            continue
        for bound, outside in (("low", prices[key] < prices.get("low", prices[key])),
                               ("high", prices[key] > prices.get("high", prices[key]))):
            if outside.any():
                i = int(np.argmax(outside))
                side = "below" if bound == "low" else "above"
                raise ValueError(
                    f"{where}, column {cols[key]!r}, row {rows[i]}: {key} {_show(prices[key][i])} is {side} {bound} "
                    f"{_show(prices[bound][i])} (column {cols[bound]!r}); expected low <= {key} <= high")


TIMESTAMP_UNITS = ("s", "ms", "us", "ns")
"""Units of integer epoch timestamps (``data.timestamp_unit``; ``auto`` or unset: by magnitude)."""
_EPOCH_LIMITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"))
"""Largest ``|epoch|`` read in each unit by magnitude: 1e11 s is the year 5138, 1e11 ms is 1973
(so seconds up to 5138, milliseconds from 1973 on, and so on); above 1e17, nanoseconds."""


def check_timestamp_unit(unit: Any) -> str | None:
    """``data.timestamp_unit``: one of ``TIMESTAMP_UNITS``, ``"auto"`` or unset (None)."""
    if unit is None or unit == "auto":
        return None
    if unit not in TIMESTAMP_UNITS:
        raise ValueError(f"data.timestamp_unit: expected one of {list(TIMESTAMP_UNITS)} or 'auto', got {unit!r}")
    return unit


def epoch_unit(values: np.ndarray) -> str:
    """The unit of integer epoch timestamps by the magnitude of the largest one (``_EPOCH_LIMITS``)."""
    top = float(np.max(np.abs(values))) if len(values) else 0.0
    return next((unit for limit, unit in _EPOCH_LIMITS if top < limit), "ns")


def _is_epoch(raw) -> bool:
    """Whether a timestamp column holds numbers (epochs), not text or datetimes; bool is refused."""
    import pandas as pd

    return pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype)


def timestamp_note(raw, unit: str | None = None) -> str:
    """How a timestamp column is read, for the preflight's ``data:`` line."""
    if not _is_epoch(raw):
        return "timestamps: dates (UTC)"
    values = raw.to_numpy(dtype=np.float64)
    chosen = check_timestamp_unit(unit) or epoch_unit(values[np.isfinite(values)])
    return f"timestamps: epoch {chosen} ({'data.timestamp_unit' if unit not in (None, 'auto') else 'by magnitude'})"


class TimestampRangeError(ValueError):
    """A timestamp outside the dates a ``datetime64[ns]`` holds (1677-09-21 .. 2262-04-11): named by
    row, never wrapped around to another century."""


_NS_PER = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
"""Nanoseconds per epoch unit."""


def _out_of_range(where: str, i: int, raw, rows, shown: str) -> TimestampRangeError:
    import pandas as pd

    lo, hi = pd.Timestamp.min, pd.Timestamp.max
    return TimestampRangeError(
        f"{where}, row {rows[i]}: timestamp {_show(raw.iloc[i])} ({shown}) is outside the dates a timestamp holds "
        f"here, {lo:%Y-%m-%d} .. {hi:%Y-%m-%d} (datetime64[ns]); check the data or data.timestamp_unit")


def _epochs_to_ns(where: str, values: np.ndarray, unit: str, raw, rows) -> np.ndarray:
    """Finite epochs in ``unit`` as ``datetime64[ns]`` (NaT where not finite), each checked to fit:
    :class:`TimestampRangeError` naming the first that does not. Integer columns are scaled as
    integers (exact to the nanosecond), others as whole units plus a rounded fraction."""
    import pandas as pd

    per = int(_NS_PER[unit])
    limit = (2 ** 63 - 1) // per - 1  # whole units that fit in int64 nanoseconds (NaT is int64 min)
    if pd.api.types.is_integer_dtype(raw.dtype):
        ints = raw.to_numpy(dtype=np.int64)
        bad = (ints > limit) | (ints < -limit)
        if bad.any():
            i = int(np.argmax(bad))
            raise _out_of_range(where, i, raw, rows, f"epoch {unit}")
        return (ints * per).astype("datetime64[ns]")
    finite = np.isfinite(values)
    bad = finite & (np.abs(values) > limit)
    if bad.any():
        i = int(np.argmax(bad))
        raise _out_of_range(where, i, raw, rows, f"epoch {unit}")
    v = np.where(finite, values, 0.0)
    whole = np.floor(v)
    # whole units exactly in int64, the fraction rounded to whole nanoseconds
    ns = whole.astype(np.int64) * per + np.round((v - whole) * per).astype(np.int64)
    return np.where(finite, ns, np.iinfo(np.int64).min).astype("datetime64[ns]")  # int64 min is NaT


def _dates_to_ns(where: str, parsed, raw, rows) -> np.ndarray:
    """Parsed dates (any resolution pandas chose) as ``datetime64[ns]``, each checked to fit:
    :class:`TimestampRangeError` naming the first that does not (a cast would wrap it around)."""
    import pandas as pd

    outside = (parsed.notna() & ((parsed < pd.Timestamp.min) | (parsed > pd.Timestamp.max))).to_numpy()
    if outside.any():
        i = int(np.argmax(outside))
        raise _out_of_range(where, i, raw, rows, parsed.iloc[i].isoformat())
    return parsed.dt.as_unit("ns").to_numpy()


def parse_timestamps(where: str, raw, rows, timestamp_format, dayfirst, unit=None) -> np.ndarray:
    """A timestamp column as naive UTC ``datetime64[ns]``: numbers are epochs (``unit``, else by
    magnitude: :func:`epoch_unit`), text and datetimes are parsed with their offsets (``Z``,
    ``+00:00``, ...) and converted to UTC (naive ones taken as UTC). ValueError naming ``where`` and
    the row for a cell that does not parse, a duplicate or an earlier timestamp; bool refused; a
    date outside 1677-09-21 .. 2262-04-11 is a :class:`TimestampRangeError` (converted with a
    checked unit, never wrapped)."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(raw.dtype):
        raise ValueError(f"{where}: timestamps of dtype bool; expected dates or integer epochs")
    try:
        if _is_epoch(raw):
            values = raw.to_numpy(dtype=np.float64)
            chosen = check_timestamp_unit(unit) or epoch_unit(values[np.isfinite(values)])
            ts = _epochs_to_ns(where, values, chosen, raw, rows)
        else:
            parsed = pd.Series(pd.to_datetime(raw, errors="coerce", format=timestamp_format, dayfirst=dayfirst,
                                              utc=True)).dt.tz_convert(None)
            if timestamp_format is None and parsed.isna().any():  # pandas infers one format from row 0:
                iso = pd.Series(pd.to_datetime(raw, errors="coerce", format="ISO8601", utc=True)).dt.tz_convert(None)
                if iso.notna().sum() > parsed.notna().sum():  # ISO 8601 rows of other spellings read too
                    parsed = iso
            ts = _dates_to_ns(where, parsed, raw, rows)
    except TimestampRangeError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{where}: timestamps cannot be parsed: {exc}") from exc
    nat = np.isnat(ts)
    if nat.any():
        i = int(np.argmax(nat))
        raise ValueError(f"{where}, row {rows[i]}: cannot parse timestamp {raw.iloc[i]!r}"
                         f"{dayfirst_hint(raw, timestamp_format, dayfirst)}")
    _check_order(where, ts, raw, rows)
    return ts


def _check_order(where: str, ts: np.ndarray, raw, rows) -> None:
    """ValueError naming the row of the first duplicate or earlier timestamp."""
    step = ts[1:] - ts[:-1]
    dup = step == np.timedelta64(0)
    if dup.any():
        i = int(np.argmax(dup)) + 1
        raise ValueError(f"{where}, row {rows[i]}: duplicate timestamp {raw.iloc[i]!r} (same as row {rows[i - 1]})")
    back = step < np.timedelta64(0)
    if back.any():
        i = int(np.argmax(back)) + 1
        raise ValueError(
            f"{where}, row {rows[i]}: timestamps not sorted ({raw.iloc[i]!r} is before "
            f"{raw.iloc[i - 1]!r} at row {rows[i - 1]})"
        )


def _show(value: Any) -> str:
    """Readable repr of a cell (plain floats, quoted strings)."""
    if isinstance(value, (float, np.floating, int, np.integer)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def _spread(where, prices, cols, source, spread_bps, cs_window, min_spread_bps) -> tuple[np.ndarray, str]:
    """(relative spread per bar, the source used: ``auto`` resolved)."""
    have_ba = "bid" in prices and "ask" in prices
    have_hl = "high" in prices and "low" in prices
    if source == "auto":
        source = "bid_ask" if have_ba else "corwin_schultz" if have_hl else "fixed" if spread_bps is not None else None
        if source is None:
            raise ValueError(
                f"{where}: no bid/ask or high/low columns to estimate the spread and no data.spread_bps set"
            )
    return _spread_values(where, prices, cols, source, spread_bps, cs_window, min_spread_bps), source


def _spread_values(where, prices, cols, source, spread_bps, cs_window, min_spread_bps) -> np.ndarray:
    import pandas as pd

    have_ba = "bid" in prices and "ask" in prices
    have_hl = "high" in prices and "low" in prices
    if source == "bid_ask":
        if not have_ba:
            raise ValueError(f"{where}: spread_source 'bid_ask' needs columns bid and ask; found {sorted(cols)}")
        mid = 0.5 * (prices["ask"] + prices["bid"])
        return (prices["ask"] - prices["bid"]) / mid
    if source == "corwin_schultz":
        if not have_hl:
            raise ValueError(f"{where}: spread_source 'corwin_schultz' needs columns high and low; found {sorted(cols)}")
        raw = corwin_schultz(prices["high"], prices["low"])
        smooth = pd.Series(raw).rolling(cs_window, min_periods=1).mean().to_numpy(copy=True)
        smooth[0] = 0.0
        return np.maximum(smooth, min_spread_bps * 1e-4)
    if spread_bps is None:
        raise ValueError(f"{where}: spread_source 'fixed' needs data.spread_bps")
    return np.full(len(prices["close"]), spread_bps * 1e-4)
