"""``make_market(data_cfg, split)``: ``env_config["data"]`` -> :class:`MarketData` of one time segment.

The keys of ``data_cfg``, their defaults and their checks are the fields of :class:`DataSettings`
(one field each; :meth:`DataSettings.from_dict` validates a section without loading anything, and a
settings file's ``data`` section is checked by it at load). ``source`` picks the keys allowed:

* synthetic: ``num_assets``, ``num_bars``, ``seed``, ``synthetic`` (model keywords of
  :func:`~rl_zerosync.data.synthetic.synthetic_series`), ``regenerate_every`` (0: train on the
  ``train`` segment of series ``seed``; N > 0: every env runner trains on fresh series of
  ``num_bars`` bars drawn from new generator seeds every N rollouts, never ``seed``, while the
  validation and test segments stay those of series ``seed``; see :func:`training_seed`),
  ``heldout_validation_series`` / ``heldout_test_series`` (0 / 0, the default: validation and test
  are time segments of series ``seed``; V > 0 and T > 0, the sealed held-out layout: validation is V
  whole series and test T other whole series of ``heldout_bars`` bars (default ``num_bars``), each
  an asset of one market drawn with its own generator seed (:func:`heldout_seed`), never trained
  on; ``train`` is then the whole series ``seed`` and ``split`` is not used).
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
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from rl_zerosync.data.loaders import check_spread_keys
from rl_zerosync.data.market import (
    DEFAULT_MAX_ABS_LOG_RETURN, SPLITS, FeatureConfig, MarketData, check_fractions, check_market_log_returns,
    check_max_abs_log_return, check_window,
)
from rl_zerosync.data.periods import check_periods_per_year

SOURCES = ("synthetic", "csv", "parquet")
SYNTHETIC_PERIODS_PER_YEAR = 252.0
"""Bars per year of the synthetic series (daily bars) under ``periods_per_year: auto``."""
_COMMON = ("source", "split", "window", "features", "periods_per_year", "device", "max_abs_log_return")
_SYNTHETIC = ("num_assets", "num_bars", "seed", "synthetic", "regenerate_every", "heldout_validation_series",
              "heldout_test_series", "heldout_bars")
_FILES = ("paths", "columns", "asset_column", "names", "spread_source", "spread_bps", "cs_window",
          "min_spread_bps", "timestamp_format", "dayfirst", "max_spread_bps", "timestamp_unit")
DEFAULT_SPLIT = {"train": 0.7, "validation": 0.15, "test": 0.15}
SYNTHETIC_INT_MINIMA = {"num_assets": 1, "num_bars": 2, "seed": 0}
"""The smallest ``num_assets``, ``num_bars`` and ``seed`` of the synthetic source (the generator's rules)."""


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
    """The model keywords ``data.synthetic`` may set (keyword-only parameters of ``synthetic_series``)
    and ``ohlc`` (open/high/low bars, :func:`~rl_zerosync.data.synthetic.synthetic_bars`)."""
    from rl_zerosync.data.synthetic import synthetic_series

    model = tuple(n for n, p in inspect.signature(synthetic_series).parameters.items() if p.kind is p.KEYWORD_ONLY)
    return model + ("ohlc",)


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
    heldout_validation_series: int = 0
    """Synthetic: validation = this many held-out whole series (0: a time segment of series ``seed``)."""
    heldout_test_series: int = 0
    """Synthetic: test = this many other held-out whole series (0: a time segment of series ``seed``)."""
    heldout_bars: Optional[int] = None
    """Synthetic: bars of each held-out series (None: ``num_bars``)."""
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
    max_spread_bps: Optional[float] = None
    """Files: cap of the estimated or quoted spread in basis points (None: no cap)."""
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
        out.update(heldout_counts(cfg))
        model = cfg.get("synthetic") or {}
        if not isinstance(model, Mapping):
            raise ValueError(f"data.synthetic: expected a mapping of model keywords, got {model!r}")
        unknown = sorted(set(model) - set(synthetic_keywords()))
        if unknown:
            raise ValueError(f"data.synthetic: unknown model keyword(s) {unknown}; "
                             f"allowed: {list(synthetic_keywords())}")
        out["synthetic"] = dict(model)
        if source == "synthetic":
            from rl_zerosync.data.synthetic import check_model

            for key, minimum in SYNTHETIC_INT_MINIMA.items():
                value = cfg.get(key, getattr(cls, key))
                if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                    raise ValueError(f"data.{key}: expected an int >= {minimum}, got {value!r}")
            check_model(**model)
        else:
            check_spread_keys(**{k: cfg[k] for k in ("spread_bps", "cs_window", "min_spread_bps", "max_spread_bps")
                                 if k in cfg})
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


HELDOUT_SEGMENTS = ("validation", "test")


def heldout_counts(data_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """``heldout_validation_series``, ``heldout_test_series`` and ``heldout_bars``, validated: ints
    (>= 0, both 0 or both > 0; ``heldout_bars`` >= 2 or None), synthetic source only."""
    cfg = dict(data_cfg or {})
    out: dict[str, Any] = {}
    for key in ("heldout_validation_series", "heldout_test_series"):
        n = cfg.get(key, 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"data.{key}: expected an int >= 0 (held-out series), got {n!r}")
        out[key] = n
    bars = cfg.get("heldout_bars")
    if bars is not None and (isinstance(bars, bool) or not isinstance(bars, int) or bars < 2):
        raise ValueError(f"data.heldout_bars: expected an int >= 2 (bars per held-out series) or null, got {bars!r}")
    out["heldout_bars"] = bars
    v, t = out["heldout_validation_series"], out["heldout_test_series"]
    if (v == 0) != (t == 0):
        raise ValueError(f"data.heldout_validation_series, data.heldout_test_series: expected both 0 (time "
                         f"segments of series data.seed) or both > 0 (sealed held-out series), got {v} and {t}")
    if v and cfg.get("source", DataSettings.source) != "synthetic":
        raise ValueError(f"data.heldout_validation_series: only the synthetic source draws held-out series, "
                         f"got source {cfg.get('source')!r}")
    return out


def heldout_layout(data_cfg: Mapping[str, Any] | None) -> bool:
    """Whether ``data_cfg`` asks for sealed held-out validation and test series."""
    return heldout_counts(data_cfg)["heldout_validation_series"] > 0


def heldout_seed(data_seed: int, segment: str) -> int:
    """Generator seed of the held-out ``segment`` series (validation or test): never ``data_seed`` and
    never the other segment's (and, by its own tag, not a :func:`~rl_zerosync.data.fresh.training_seed`)."""
    if segment not in HELDOUT_SEGMENTS:
        raise ValueError(f"segment: expected one of {HELDOUT_SEGMENTS}, got {segment!r}")
    words = np.random.SeedSequence([int(data_seed), HELDOUT_SEGMENTS.index(segment), 0x5EA1]).generate_state(2)
    seed = int(words[0]) << 32 | int(words[1])
    return seed + 1 if seed == int(data_seed) else seed


def heldout_market(d: "DataSettings", segment: str) -> MarketData:
    """The held-out ``segment`` (validation / test) of ``d``: its series as the assets of one market,
    whole (trading after the features' warm-up); assets named ``<segment>0..``."""
    from rl_zerosync.data.synthetic import synthetic_market

    n = d.heldout_validation_series if segment == "validation" else d.heldout_test_series
    seed = heldout_seed(d.seed, segment)
    ppy = SYNTHETIC_PERIODS_PER_YEAR if d.periods_per_year == "auto" else float(d.periods_per_year)
    market = synthetic_market(n, d.heldout_bars or d.num_bars, seed, features=d.features, periods_per_year=ppy,
                              device=d.device, **d.synthetic)
    check_market_log_returns(market, d.max_abs_log_return, where=f"data.synthetic (held-out {segment}, seed {seed})")
    return replace(market, asset_names=tuple(f"{segment}{i}" for i in range(n)), segment=segment)


def check_data_keys(data_cfg: Mapping[str, Any] | None) -> str:
    """Validate the ``data`` section (:meth:`DataSettings.from_dict`; nothing is loaded); returns the source."""
    return DataSettings.from_dict(data_cfg).source


def make_market(data_cfg: Mapping[str, Any] | None, split: str = "train") -> MarketData:
    """Build the market of ``data_cfg`` and return segment ``split`` (see the module doc)."""
    d = DataSettings.from_dict(data_cfg)
    if split not in SPLITS + ("all",):
        raise ValueError(f"split: expected one of {SPLITS + ('all',)}, got {split!r}")
    ppy = d.periods_per_year
    if d.source == "synthetic" and d.heldout_validation_series and split in HELDOUT_SEGMENTS:
        return heldout_market(d, split)
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
    if split == "all" or (split == "train" and d.heldout_validation_series):
        whole = market if d.window is None else market.window(*d.window)
        return whole if split == "all" else _named(whole, "train")
    return market.split(split, d.split, window=d.window)


def _named(market: MarketData, segment: str) -> MarketData:
    return replace(market, segment=segment)
