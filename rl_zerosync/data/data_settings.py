"""``make_market(data_cfg, split)``: ``env_config["data"]`` -> :class:`MarketData` of one time segment.

The keys of ``data_cfg``, their defaults and their checks are the fields of :class:`DataSettings`
(one field each; :meth:`DataSettings.from_dict` validates a section without loading anything, and a
settings file's ``data`` section is checked by it at load). ``source`` picks the keys allowed:

* synthetic: ``num_assets``, ``num_bars``, ``seed``, ``synthetic`` (model keywords of
  :func:`~rl_zerosync.data.synthetic.synthetic_series`), ``regenerate_every`` (0: train on the
  ``train`` segment of series ``seed``; N > 0: every env runner trains on fresh series of
  ``num_bars`` bars drawn from new generator seeds every N rollouts, never ``seed``, while the
  validation and test segments stay those of series ``seed``; see :func:`training_seed`).
* files (csv, parquet): ``paths`` (required) and the keywords of
  :func:`~rl_zerosync.data.loaders.load_market` (``columns``, ``asset_column``, ``names``,
  ``spread_source``, ``spread_bps``, ``cs_window``, ``min_spread_bps``, ``timestamp_format``,
  ``dayfirst``, ``timestamp_unit``), passed only when given.
* both: ``split`` (a dict with keys train/validation/test or a 3-list), ``window``, ``features``
  (:class:`~rl_zerosync.data.market.FeatureConfig` keywords), ``periods_per_year`` (``"auto"``: files
  infer it from their timestamps, see :func:`~rl_zerosync.data.loaders.load_market`; synthetic series
  are daily bars), ``device``, ``max_abs_log_return`` (a close-to-close ``|log return|`` above it on
  any bar is bad data: ValueError naming the file or asset, the row/bar and both closes; ``0`` or
  ``null`` turns the check off).

``window``: ``[lo, hi]`` with ``0 <= lo < hi <= 1``: use only bars ``[floor(lo * n), floor(hi * n))``
of each asset of ``n`` bars, applied before ``split`` (the fractions of ``split`` are of the window's
bars; :meth:`MarketData.split` gives the exact bar bounds). Features are still computed on the whole
series at load (causal: nothing after a bar enters its features) and, as for a split segment,
``features.warmup`` bars of history before the window are kept for the features and the observation
window only. ``rl-zerosync evaluate --walk-forward K`` (:mod:`rl_zerosync.run.walkforward`) sets it per fold.

``split`` argument: ``"train"``, ``"validation"``, ``"test"`` or ``"all"`` (the whole series).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from rl_zerosync.data.loaders import check_periods_per_year
from rl_zerosync.data.market import (
    DEFAULT_MAX_ABS_LOG_RETURN, SPLITS, FeatureConfig, MarketData, check_fractions, check_market_log_returns,
    check_max_abs_log_return, check_window,
)

SOURCES = ("synthetic", "csv", "parquet")
SYNTHETIC_PERIODS_PER_YEAR = 252.0
"""Bars per year of the synthetic series (daily bars) under ``periods_per_year: auto``."""
_COMMON = ("source", "split", "window", "features", "periods_per_year", "device", "max_abs_log_return")
_SYNTHETIC = ("num_assets", "num_bars", "seed", "synthetic", "regenerate_every")
_FILES = ("paths", "columns", "asset_column", "names", "spread_source", "spread_bps", "cs_window",
          "min_spread_bps", "timestamp_format", "dayfirst", "timestamp_unit")
DEFAULT_SPLIT = {"train": 0.7, "validation": 0.15, "test": 0.15}


def split_fractions(value: Any) -> tuple[float, float, float]:
    """(train, validation, test) from a dict with exactly those keys or a 3-sequence."""
    if isinstance(value, Mapping):
        keys = set(value)
        if keys != set(SPLITS):
            raise ValueError(f"data.split: expected keys {list(SPLITS)}, got {sorted(keys)}")
        value = [value[k] for k in SPLITS]
    try:
        return check_fractions(value)
    except TypeError as exc:
        raise ValueError(f"data.split: expected three fractions, got {value!r}") from exc


def synthetic_keywords() -> tuple[str, ...]:
    """The model keywords ``data.synthetic`` may set (keyword-only parameters of ``synthetic_series``)."""
    from rl_zerosync.data.synthetic import synthetic_series

    return tuple(n for n, p in inspect.signature(synthetic_series).parameters.items() if p.kind is p.KEYWORD_ONLY)


@dataclass(frozen=True)
class DataSettings:
    """The typed ``data`` section (``env_config["data"]``): every key :func:`make_market` reads, validated
    by :meth:`from_dict` (nothing is loaded). File keys left out are None: the loader's default applies
    (:func:`make_market` passes only the file keys given)."""

    source: str = "synthetic"
    """Where bars come from: one of SOURCES."""
    split: tuple[float, float, float] = split_fractions(DEFAULT_SPLIT)
    """(train, validation, test) fractions, by time."""
    window: Optional[tuple[float, float]] = None
    """``(lo, hi)``: only bars ``[floor(lo * n), floor(hi * n))`` of each asset (None: all)."""
    features: FeatureConfig = FeatureConfig()
    """How causal features are computed."""
    periods_per_year: Union[float, str] = "auto"
    """Bars per year, or "auto" (files: from the timestamps; synthetic: SYNTHETIC_PERIODS_PER_YEAR)."""
    device: str = "cpu"
    """Device the market tensors are built on."""
    max_abs_log_return: Optional[float] = DEFAULT_MAX_ABS_LOG_RETURN
    """A close-to-close |log return| above this is bad data; None (``0`` or ``null``): no check."""
    num_assets: int = 4
    """Synthetic: assets."""
    num_bars: int = 20000
    """Synthetic: bars per asset."""
    seed: int = 0
    """Synthetic: generator seed of the series (validation and test always use it)."""
    synthetic: Mapping[str, Any] = field(default_factory=dict)
    """Synthetic: model keywords of :func:`~rl_zerosync.data.synthetic.synthetic_series`."""
    regenerate_every: int = 0
    """Synthetic: train on fresh series every this many rollouts (0 = off)."""
    paths: Optional[Union[str, Sequence[str]]] = None
    """Files: one path or a list (required for csv/parquet)."""
    columns: Optional[Mapping[str, str]] = None
    """Files: ``timestamp|open|high|low|close|bid|ask`` -> column name."""
    asset_column: Optional[str] = None
    """Files: the column naming the asset when one file holds several."""
    names: Optional[Sequence[str]] = None
    """Files: asset names."""
    spread_source: Optional[str] = None
    """Files: where spreads come from."""
    spread_bps: Optional[float] = None
    """Files: a fixed spread in basis points."""
    cs_window: Optional[int] = None
    """Files: Corwin-Schultz window in bars."""
    min_spread_bps: Optional[float] = None
    """Files: floor of the estimated spread in basis points."""
    timestamp_format: Optional[str] = None
    """Files: strptime format of the timestamps."""
    dayfirst: Optional[bool] = None
    """Files: day-first dates."""
    timestamp_unit: Optional[str] = None
    """Files: unit of integer epoch timestamps, ``s``, ``ms``, ``us`` or ``ns``; unset or ``auto``: by
    magnitude (stated in the preflight's ``data:`` line). Text dates with an offset are read in UTC."""

    @classmethod
    def from_dict(cls, data_cfg: Mapping[str, Any] | None) -> "DataSettings":
        """Validate ``data_cfg`` (source, its allowed keys and every value checkable without loading
        anything); ValueError naming ``data.<key>``."""
        cfg = dict(data_cfg or {})
        source = cfg.get("source", "synthetic")
        if source not in SOURCES:
            raise ValueError(f"data.source: expected one of {SOURCES}, got {source!r}")
        allowed = _COMMON + (_SYNTHETIC if source == "synthetic" else _FILES)
        unknown = sorted(set(cfg) - set(allowed))
        if unknown:
            raise ValueError(f"data: unknown key(s) {unknown} for source {source!r}; allowed keys are {list(allowed)}")
        out = dict(cfg)
        out["split"] = split_fractions(cfg.get("split", DEFAULT_SPLIT))
        out["window"] = check_window(cfg["window"]) if cfg.get("window") is not None else None
        out["features"] = FeatureConfig.from_dict(cfg.get("features"))
        check_periods_per_year(cfg.get("periods_per_year", "auto"))
        out["max_abs_log_return"] = check_max_abs_log_return(cfg.get("max_abs_log_return", DEFAULT_MAX_ABS_LOG_RETURN))
        out["regenerate_every"] = regenerate_every(cfg)
        model = cfg.get("synthetic") or {}
        if not isinstance(model, Mapping):
            raise ValueError(f"data.synthetic: expected a mapping of model keywords, got {model!r}")
        unknown = sorted(set(model) - set(synthetic_keywords()))
        if unknown:
            raise ValueError(f"data.synthetic: unknown model keyword(s) {unknown}; "
                             f"allowed: {list(synthetic_keywords())}")
        out["synthetic"] = dict(model)
        if source != "synthetic" and "paths" not in cfg:
            raise ValueError(f"data.paths: required for source {source!r}")
        return cls(**out)


def regenerate_every(data_cfg: Mapping[str, Any] | None) -> int:
    """``data.regenerate_every`` (0 = off), validated: synthetic source only, an int >= 0."""
    cfg = dict(data_cfg or {})
    n = cfg.get("regenerate_every", DataSettings.regenerate_every)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"data.regenerate_every: expected an int >= 0, got {n!r}")
    if n and cfg.get("source", DataSettings.source) != "synthetic":
        raise ValueError(f"data.regenerate_every: only the synthetic source can draw fresh series, "
                         f"got source {cfg.get('source')!r}")
    return n


def check_data_keys(data_cfg: Mapping[str, Any] | None) -> str:
    """Validate the ``data`` section (:meth:`DataSettings.from_dict`; nothing is loaded); returns the source."""
    return DataSettings.from_dict(data_cfg).source


def make_market(data_cfg: Mapping[str, Any] | None, split: str = "train") -> MarketData:
    """Build the market of ``data_cfg`` and return segment ``split`` (see the module doc)."""
    d = DataSettings.from_dict(data_cfg)
    if split not in SPLITS + ("all",):
        raise ValueError(f"split: expected one of {SPLITS + ('all',)}, got {split!r}")
    ppy = d.periods_per_year
    if d.source == "synthetic":
        from rl_zerosync.data.synthetic import synthetic_market

        market = synthetic_market(
            d.num_assets, d.num_bars, d.seed, features=d.features,
            periods_per_year=SYNTHETIC_PERIODS_PER_YEAR if ppy == "auto" else float(ppy),
            device=d.device, **d.synthetic,
        )
        check_market_log_returns(market, d.max_abs_log_return, where=f"data.synthetic (seed {d.seed})")
    else:
        from rl_zerosync.data.loaders import load_market

        given = {k: v for k, v in dict(data_cfg or {}).items() if k in _FILES and k != "paths"}
        market = load_market(d.paths, fmt=d.source, features=d.features, periods_per_year=ppy,
                             device=d.device, max_abs_log_return=d.max_abs_log_return, **given)
    if split == "all":
        return market if d.window is None else market.window(*d.window)
    return market.split(split, d.split, window=d.window)
