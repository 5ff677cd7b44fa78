"""``MarketData``: per-asset price series and causal features as ``[num_assets, T]`` tensors.

Features are computed once, on the host, when the data is built (never inside a step). For bar ``t``
(0-based) of an asset with closes ``c``:

* ``log_ret[t] = log(c[t] / c[t-1])`` and ``ret[t] = c[t] / c[t-1] - 1`` (both 0 at ``t = 0``).
* ``vol[t] = sqrt(EWMA_t(log_ret**2))``: an exponentially weighted mean (pandas ``ewm(halflife,
  adjust=True)``) of squared log returns of bars ``1..t`` only; ``vol[0] = vol_floor``.
* ``ret_norm[t] = clip(log_ret[t] / max(vol[t-1], vol_floor), -ret_clip, ret_clip)``: the return of bar
  ``t`` scaled by the volatility known *before* it (lagged, so the scale does not contain the return).
* ``median_spread[t]``, ``median_vol[t]``: medians over the trailing ``median_window`` bars ending at
  ``t`` (fewer at the start).
* ``obs_spread[t] = log(max(spread[t], tiny) / max(median_spread[t], tiny))`` and ``obs_vol[t] =
  log(max(vol[t], vol_floor) / max(median_vol[t], vol_floor))`` with ``tiny = 1e-12``, both clipped
  to ``[-ratio_clip, ratio_clip]``.

Optional bar prices ``open``, ``high``, ``low`` (``[num_assets, T]``, or None when the source has
none of that column) are kept only for execution at the next bar (:mod:`rl_zerosync.envs.core`:
MARKET orders at the next open, passive orders that must trade through the next bar's range); no
feature reads them.

Every feature at ``t`` depends on bars ``<= t`` only. Rows of assets shorter than ``T`` are padded
after ``length[a]`` with the last bar and zero returns; ``valid_start[a]`` is the first bar whose
features are warm (the env never starts an episode before it).
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Sequence

import numpy as np
import torch

TENSOR_FIELDS = (
    "close", "log_ret", "ret", "spread", "median_spread", "vol", "median_vol", "ret_norm",
    "obs_spread", "obs_vol",
)
OPTIONAL_FIELDS = ("open", "high", "low")
"""Bar prices a source may lack (None in ``MarketData`` then); padded like levels."""
SPLITS = ("train", "validation", "test")
TINY = 1e-12
"""Floor of a spread and its median inside ``obs_spread``'s logarithm (a zero spread stays finite)."""
FEATURE_THREADS = 8
"""Most threads computing assets' features at once in :func:`build_market` (pandas' rolling median
and EWM release the GIL; an asset's features are the same numbers in any thread)."""
DEFAULT_MAX_ABS_LOG_RETURN = 0.4
"""Default of ``data.max_abs_log_return``: a close-to-close move beyond +-0.4 in log (x1.49 or
x0.67 in one bar) is taken as bad data (a spike, a unit change, or a split left unadjusted: 3:2 is
log 0.405, 8:5 log 0.47, 2:1 log 0.69, all caught; 5:4, log 0.22, is not). Data with real one-bar
moves that large (a crash, a biotech's trial result) sets its own limit, e.g. ``configs/panel.yaml``'s 0.8."""


@dataclass(frozen=True)
class FeatureConfig:
    """How causal features are computed (``data_cfg["features"]``)."""

    vol_halflife: float = 20.0
    """Half-life in bars of the EWMA of squared log returns."""
    median_window: int = 256
    """Trailing window in bars of the spread and volatility medians."""
    warmup: int = 64
    """Bars before the first tradable bar of a series (and history kept before a split segment)."""
    ret_clip: float = 10.0
    """Clip of the normalized returns in the observation."""
    vol_floor: float = 1e-8
    """Lower bound of the volatility used as a divisor."""
    ratio_clip: float = 10.0
    """Clip of the log spread and log volatility ratios in the observation."""

    def __post_init__(self) -> None:
        for name in ("vol_halflife", "ret_clip", "vol_floor", "ratio_clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"data.features.{name}: expected a finite number > 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        for name, minimum in (("median_window", 1), ("warmup", 2)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f"data.features.{name}: expected an int >= {minimum}, got {v!r}")

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | None) -> "FeatureConfig":
        cfg = dict(cfg or {})
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(cfg) - set(allowed))
        if unknown:
            raise ValueError(f"data.features: unknown key(s) {unknown}; allowed keys are {allowed}")
        return cls(**cfg)


@dataclass(frozen=True, eq=False)
class MarketData:
    """Device tensors ``[num_assets, T]`` (float32) plus per-asset ``valid_start``/``length`` (int64)."""

    close: torch.Tensor
    log_ret: torch.Tensor
    ret: torch.Tensor
    spread: torch.Tensor
    median_spread: torch.Tensor
    vol: torch.Tensor
    median_vol: torch.Tensor
    ret_norm: torch.Tensor
    obs_spread: torch.Tensor
    obs_vol: torch.Tensor
    valid_start: torch.Tensor
    length: torch.Tensor
    asset_names: tuple[str, ...]
    timestamps: tuple[np.ndarray, ...] | None = None
    """Host timestamps per asset (``length[a]`` entries), when the source has them."""
    offsets: tuple[int, ...] | None = None
    """Bar index in the full series of each row's bar 0 (split segments)."""
    periods_per_year: float = 252.0
    """Bars per year, for annualized metrics."""
    features: FeatureConfig = FeatureConfig()
    """How the features were computed."""
    open: torch.Tensor | None = None
    """Opening prices ``[num_assets, T]`` when the source has them (execution of MARKET orders)."""
    high: torch.Tensor | None = None
    """Bar highs when the source has high and low (passive orders must trade through them)."""
    low: torch.Tensor | None = None
    """Bar lows when the source has high and low."""
    segment: str = "all"
    """Time segment: "all", "train", "validation" or "test"."""
    source_info: Mapping[str, Any] | None = None
    """How the data was read (file sources): ``periods_per_year`` and where it came from, the spread
    source and median spread in bps per asset (see :func:`rl_zerosync.data.loaders.load_market`)."""

    @property
    def present_fields(self) -> tuple[str, ...]:
        """Every tensor field held: :data:`TENSOR_FIELDS` and the optional prices that are not None."""
        return TENSOR_FIELDS + tuple(f for f in OPTIONAL_FIELDS if getattr(self, f) is not None)

    @property
    def warmup(self) -> int:
        return self.features.warmup

    @property
    def num_assets(self) -> int:
        return int(self.close.shape[0])

    @property
    def num_bars(self) -> int:
        return int(self.close.shape[1])

    @property
    def device(self) -> torch.device:
        return self.close.device

    def to(self, device: torch.device | str) -> "MarketData":
        """Copy of the data on ``device`` (same object when already there)."""
        device = torch.device(device)
        if self.close.device == device:
            return self
        moved = {name: getattr(self, name).to(device) for name in self.present_fields}
        moved["valid_start"] = self.valid_start.to(device)
        moved["length"] = self.length.to(device)
        return replace(self, **moved)

    def split(self, name: str, fractions: Sequence[float] = (0.7, 0.15, 0.15),
              window: Sequence[float] | None = None) -> "MarketData":
        """Time segment ``name`` of every asset (fractions of each asset's bars, in time order).

        A segment keeps ``warmup`` bars of history before its first bar (features and the
        observation window only); its tradable bars start at ``valid_start``.

        ``window=(lo, hi)`` (see :meth:`window`) splits only bars ``[lo * n, hi * n)`` of an asset of
        ``n`` bars: the segment bounds are the points ``lo``, ``lo + train * w``, ``hi - test * w``
        and ``hi`` (``w = hi - lo``), each taken as bar ``floor(n * point)`` of the full series, so
        windows that share a point share that bar boundary exactly (walk-forward folds). ``None``
        or ``(0, 1)``: the plain split, bounds ``0, int(n * train), int(n * (train + validation)), n``.
        """
        if name not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {name!r}")
        fr = check_fractions(fractions)
        win = None if window is None else check_window(window)
        k = SPLITS.index(name)
        bounds = []
        for n in self.length.cpu().tolist():  # host read: load-time slicing
            if win is None or win == (0.0, 1.0):
                cuts = [0, int(n * fr[0]), int(n * (fr[0] + fr[1])), n]
            else:
                lo, hi = win
                w = hi - lo
                cuts = [_bar(n, p) for p in (lo, lo + fr[0] * w, hi - fr[2] * w, hi)]
            bounds.append((cuts[k], cuts[k + 1]))
        where = f"split {name!r}" + ("" if win is None else f" of data.window {list(win)}")
        return self._segment(bounds, name, where)

    def window(self, lo: float, hi: float) -> "MarketData":
        """Bars ``[floor(lo * n), floor(hi * n))`` of every asset of ``n`` bars (``0 <= lo < hi <= 1``).

        Like a :meth:`split` segment it keeps ``warmup`` bars of history before its first bar
        (features were computed on the full series and are causal, so nothing after ``hi`` enters),
        its tradable bars start at ``valid_start`` and ``offsets`` give its bars in the full series;
        the first window of a series (``lo = 0``) starts trading after the series' own warmup.
        To split a window into train/validation/test use ``split(name, fractions, window=(lo, hi))``
        (fractions of the window's bars, not of the returned rows, which include the history).
        """
        lo, hi = check_window((lo, hi))
        bounds = [(_bar(n, lo), _bar(n, hi)) for n in self.length.cpu().tolist()]  # host read: load time
        return self._segment(bounds, self.segment, f"data.window {[lo, hi]}")

    def _segment(self, bounds: Sequence[tuple[int, int]], segment: str, where: str) -> "MarketData":
        """Bars ``[lo, hi)`` of each asset (``bounds[a]``) plus ``warmup`` bars of history before them."""
        lengths = self.length.cpu().tolist()  # host read: load-time slicing
        starts = self.valid_start.cpu().tolist()  # host read: load-time slicing
        present = self.present_fields
        rows: dict[str, list[np.ndarray]] = {f: [] for f in present}
        new_start, new_len, stamps, offs = [], [], [], []
        host = {f: getattr(self, f).cpu().numpy() for f in present}  # host read: load time
        base_offsets = self.offsets or (0,) * self.num_assets
        for a, n in enumerate(lengths):
            lo, hi = bounds[a]
            first = max(lo, starts[a])
            cut = max(0, first - self.warmup)
            if hi - first < 2:
                raise ValueError(
                    f"{where}: asset {self.asset_names[a]!r} has {max(hi - first, 0)} tradable "
                    f"bars in this segment (of {n}); expected at least 2: use more data or other fractions"
                )
            for f in present:
                rows[f].append(host[f][a, cut:hi])
            new_start.append(first - cut)
            new_len.append(hi - cut)
            offs.append(base_offsets[a] + cut)
            if self.timestamps is not None:
                stamps.append(self.timestamps[a][cut:hi])
        width = max(new_len)
        tensors = {f: torch.from_numpy(_pad_rows(rows[f], width, f)).to(self.device) for f in present}
        return replace(
            self,
            **tensors,
            valid_start=torch.tensor(new_start, dtype=torch.int64, device=self.device),
            length=torch.tensor(new_len, dtype=torch.int64, device=self.device),
            timestamps=tuple(stamps) if self.timestamps is not None else None,
            offsets=tuple(offs),
            segment=segment,
        )


def _bar(n: int, point: float) -> int:
    """Bar ``floor(n * point)`` of a series of ``n`` bars; a product within 1e-6 below an integer
    counts as that integer, so two float roundings of the same point give the same bar."""
    return min(n, max(0, int(math.floor(n * point + 1e-6))))


def check_window(window: Any) -> tuple[float, float]:
    """Validate ``data.window``: ``[lo, hi]``, fractions of each asset's bars with ``0 <= lo < hi <= 1``."""
    expected = "expected [lo, hi], fractions of each asset's bars with 0 <= lo < hi <= 1"
    if isinstance(window, (str, bytes, Mapping)) or not isinstance(window, Sequence) or len(window) != 2:
        raise ValueError(f"data.window: {expected}, got {window!r}")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in window):
        raise ValueError(f"data.window: {expected}, got {window!r}")
    lo, hi = float(window[0]), float(window[1])
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"data.window: {expected}, got {list(window)!r}")
    return lo, hi


def check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Validate (train, validation, test) fractions: three values in [0, 1] summing to 1."""
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or any(not math.isfinite(f) or f < 0.0 or f > 1.0 for f in fr):
        raise ValueError(f"data.split: expected three fractions in [0, 1] (train, validation, test), got {fractions!r}")
    if abs(sum(fr) - 1.0) > 1e-6:
        raise ValueError(f"data.split: fractions must sum to 1, got {fractions!r} (sum {sum(fr)})")
    return fr  # type: ignore[return-value]


def _pad_rows(rows: list[np.ndarray], width: int, field: str) -> np.ndarray:
    """Stack rows padded to ``width``: returns pad with 0, levels with the last value."""
    out = np.zeros((len(rows), width), dtype=np.float32)
    zero_pad = field in ("log_ret", "ret", "ret_norm")
    for a, row in enumerate(rows):
        out[a, : len(row)] = row
        if len(row) < width and not zero_pad:
            out[a, len(row):] = row[-1]
    return out


def compute_features(close: np.ndarray, spread: np.ndarray, cfg: FeatureConfig) -> dict[str, np.ndarray]:
    """Causal features of one asset (float64 arrays of the input's length); see the module doc."""
    import pandas as pd

    close = np.asarray(close, dtype=np.float64)
    spread = np.asarray(spread, dtype=np.float64)
    log_ret = np.zeros_like(close)
    log_ret[1:] = np.log(close[1:] / close[:-1])
    ret = np.zeros_like(close)
    ret[1:] = close[1:] / close[:-1] - 1.0
    vol = np.full_like(close, cfg.vol_floor)
    if len(close) > 1:
        ewm_var = pd.Series(log_ret[1:] ** 2).ewm(halflife=cfg.vol_halflife, adjust=True).mean().to_numpy()
        vol[1:] = np.sqrt(ewm_var)
    lagged = np.maximum(np.concatenate(([cfg.vol_floor], vol[:-1])), cfg.vol_floor)
    ret_norm = np.clip(log_ret / lagged, -cfg.ret_clip, cfg.ret_clip)
    ret_norm[0] = 0.0
    median_spread = pd.Series(spread).rolling(cfg.median_window, min_periods=1).median().to_numpy()
    median_vol = pd.Series(vol).rolling(cfg.median_window, min_periods=1).median().to_numpy()
    obs_spread = np.log(np.maximum(spread, TINY) / np.maximum(median_spread, TINY))
    obs_vol = np.log(np.maximum(vol, cfg.vol_floor) / np.maximum(median_vol, cfg.vol_floor))
    obs_spread = np.clip(obs_spread, -cfg.ratio_clip, cfg.ratio_clip)
    obs_vol = np.clip(obs_vol, -cfg.ratio_clip, cfg.ratio_clip)
    return {
        "close": close, "log_ret": log_ret, "ret": ret, "spread": spread, "median_spread": median_spread,
        "vol": vol, "median_vol": median_vol, "ret_norm": ret_norm, "obs_spread": obs_spread,
        "obs_vol": obs_vol,
    }


def build_market(
    closes: Sequence[np.ndarray],
    spreads: Sequence[np.ndarray],
    *,
    names: Sequence[str] | None = None,
    features: FeatureConfig | None = None,
    timestamps: Sequence[np.ndarray] | None = None,
    periods_per_year: float = 252.0,
    device: torch.device | str = "cpu",
    max_abs_log_return: float | None = None,
    prices: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> MarketData:
    """``MarketData`` from per-asset close prices and relative spreads (host arrays).

    ``prices``: optional ``{"open" | "high" | "low": per-asset arrays}`` (same shapes as the closes;
    high and low together), kept for execution at the next bar.

    Raises ValueError naming the asset and bar when a close is not finite and > 0, a spread is not
    finite and >= 0, lengths differ, or a series is shorter than ``warmup + 2`` bars; with
    ``max_abs_log_return`` (> 0; None or 0: no check) also when a close-to-close log return
    exceeds it in absolute value (see :func:`check_log_returns`).
    """
    cfg = features or FeatureConfig()
    if len(closes) == 0:
        raise ValueError("market: expected at least one asset, got none")
    names = tuple(str(n) for n in (names if names is not None else [f"asset{i}" for i in range(len(closes))]))
    if len(names) != len(closes) or len(spreads) != len(closes):
        raise ValueError(
            f"market: got {len(closes)} close series, {len(spreads)} spread series and {len(names)} names; "
            "expected equal counts"
        )
    if not math.isfinite(periods_per_year) or periods_per_year <= 0:
        raise ValueError(f"data.periods_per_year: expected a finite number > 0, got {periods_per_year!r}")
    checked = []
    for a, (c, s) in enumerate(zip(closes, spreads)):
        c = np.asarray(c, dtype=np.float64)
        s = np.asarray(s, dtype=np.float64)
        if c.ndim != 1 or s.shape != c.shape:
            raise ValueError(f"market: asset {names[a]!r}: close {c.shape} and spread {s.shape} must be equal 1-D shapes")
        if len(c) < cfg.warmup + 2:
            raise ValueError(
                f"market: asset {names[a]!r} has {len(c)} bars; expected at least warmup + 2 = {cfg.warmup + 2}"
            )
        _check_series(names[a], "close", c, positive=True)
        _check_series(names[a], "spread", s, positive=False)
        check_log_returns(f"market: asset {names[a]!r}, column 'close'", c, max_abs_log_return)
        checked.append((c, s))
    feats = _features(checked, cfg)
    rows = {f: [x[f] for x in feats] for f in TENSOR_FIELDS}
    lengths = [len(r) for r in rows["close"]]
    width = max(lengths)
    device = torch.device(device)
    tensors = {f: torch.from_numpy(_pad_rows(rows[f], width, f)).to(device) for f in TENSOR_FIELDS}
    tensors.update(_price_tensors(prices, names, lengths, width, device))
    return MarketData(
        **tensors,
        valid_start=torch.full((len(names),), cfg.warmup, dtype=torch.int64, device=device),
        length=torch.tensor(lengths, dtype=torch.int64, device=device),
        asset_names=names,
        timestamps=tuple(np.asarray(t) for t in timestamps) if timestamps is not None else None,
        offsets=(0,) * len(names),
        periods_per_year=float(periods_per_year),
        features=cfg,
    )


def _features(series: Sequence[tuple[np.ndarray, np.ndarray]], cfg: FeatureConfig) -> list[dict[str, np.ndarray]]:
    """:func:`compute_features` of each ``(close, spread)``, in order, on up to :data:`FEATURE_THREADS` threads."""
    threads = min(len(series), FEATURE_THREADS, os.cpu_count() or 1)
    if threads <= 1:
        return [compute_features(c, s, cfg) for c, s in series]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda cs: compute_features(cs[0], cs[1], cfg), series))


def _price_tensors(prices: Mapping[str, Sequence[np.ndarray]] | None, names: Sequence[str],
                   lengths: Sequence[int], width: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The optional ``open`` / ``high`` / ``low`` tensors of :func:`build_market` (ValueError naming the
    column: an unknown one, high without low, a wrong count or length, a price not finite and > 0)."""
    prices = dict(prices or {})
    unknown = sorted(set(prices) - set(OPTIONAL_FIELDS))
    if unknown:
        raise ValueError(f"market: unknown price column(s) {unknown}; expected some of {list(OPTIONAL_FIELDS)}")
    if ("high" in prices) != ("low" in prices):
        raise ValueError(f"market: expected both high and low price columns or neither, got {sorted(prices)}")
    out = {}
    for field, series in prices.items():
        if len(series) != len(names):
            raise ValueError(f"market: column {field!r}: expected {len(names)} series (one per asset), got {len(series)}")
        rows = []
        for a, x in enumerate(series):
            x = np.asarray(x, dtype=np.float64)
            if x.shape != (lengths[a],):
                raise ValueError(f"market: asset {names[a]!r}, column {field!r}: expected {lengths[a]} bars "
                                 f"(as the closes), got shape {x.shape}")
            _check_series(names[a], field, x, positive=True)
            rows.append(x)
        out[field] = torch.from_numpy(_pad_rows(rows, width, field)).to(device)
    return out


def _check_series(asset: str, column: str, x: np.ndarray, *, positive: bool) -> None:
    bad = ~np.isfinite(x) | ((x <= 0) if positive else (x < 0))
    if bad.any():
        row = int(np.argmax(bad))
        need = "finite and > 0" if positive else "finite and >= 0"
        raise ValueError(f"market: asset {asset!r}, column {column!r}, bar {row}: expected {need}, got {x[row]!r}")


def check_max_abs_log_return(value: Any) -> float | None:
    """Validate ``data.max_abs_log_return``: a finite number >= 0; returns the limit, or None when
    the check is off (``0`` or ``None``/``null``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"data.max_abs_log_return: expected a finite number >= 0 (0 or null turns the check off), got {value!r}"
        )
    return float(value) or None


def check_log_returns(where: str, close: np.ndarray, limit: float | None, *,
                      labels: Sequence[Any] | None = None, unit: str = "bar") -> None:
    """ValueError naming ``where``, the bar (``labels[i]`` if given) and both closes when
    ``|log(close[i] / close[i-1])| > limit`` (suspicious data: a spike or a missing split adjustment).
    ``limit`` None or 0: no check. ``close`` must already be finite and > 0."""
    if not limit or len(close) < 2:
        return
    c = np.asarray(close, dtype=np.float64)
    jump = np.abs(np.diff(np.log(c)))
    bad = jump > limit
    if bad.any():
        i = int(np.argmax(bad)) + 1
        label = labels[i] if labels is not None else i
        prev = labels[i - 1] if labels is not None else i - 1
        raise ValueError(
            f"{where}, {unit} {label}: close {float(c[i])!r} after {float(c[i - 1])!r} ({unit} {prev}) is a log return of "
            f"{np.log(c[i] / c[i - 1]):+.3g} (x{c[i] / c[i - 1]:.3g}), beyond data.max_abs_log_return = {limit:g} per "
            f"bar: a spike or a split left unadjusted? fix the data (adjust the prices before a split), or raise "
            f"the limit (0 or null turns the check off)"
        )


def check_market_log_returns(market: MarketData, limit: float | None, where: str = "market") -> None:
    """:func:`check_log_returns` on every asset of a built market (host read: load time)."""
    if not limit:
        return
    close = market.close.detach().cpu().numpy()  # host read: load-time validation
    for a, n in enumerate(market.length.cpu().tolist()):  # host read: load-time validation
        check_log_returns(f"{where}: asset {market.asset_names[a]!r}, column 'close'", close[a, :n], limit)
