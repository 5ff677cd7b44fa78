"""``make_market(data_cfg, split)``: ``env_config["data"]`` -> :class:`MarketData` of one time segment.

Keys of ``data_cfg`` (all optional except where noted):

* ``source``: ``"synthetic"`` (default), ``"csv"`` or ``"parquet"``.
* synthetic: ``num_assets`` (4), ``num_bars`` (20000), ``seed`` (0), ``synthetic`` (dict of model
  keywords of :func:`~rl_zerosync.envs.synthetic.synthetic_series`), ``regenerate_every`` (0: train
  on the ``train`` segment of series ``seed``; N > 0: every env runner trains on fresh series of
  ``num_bars`` bars drawn from new generator seeds every N rollouts, never ``seed``, while the
  validation and test segments stay those of series ``seed``; see :func:`training_seed`).
* files: ``paths`` (required; a path or a list), ``columns`` (mapping ``timestamp|open|high|low|close|
  bid|ask`` -> column name), ``asset_column``, ``names``, ``spread_source``, ``spread_bps``,
  ``cs_window``, ``min_spread_bps``, ``timestamp_format``, ``dayfirst`` (see
  :func:`~rl_zerosync.envs.loaders.load_market`).
* ``split``: fractions ``{"train": 0.7, "validation": 0.15, "test": 0.15}`` (or a 3-list).
* ``window``: ``[lo, hi]`` with ``0 <= lo < hi <= 1`` (default the whole series): use only bars
  ``[floor(lo * n), floor(hi * n))`` of each asset of ``n`` bars, applied before ``split`` (the
  fractions of ``split`` are of the window's bars; :meth:`MarketData.split` gives the exact bar
  bounds). Features are still computed on the whole series at load (causal: nothing after a bar
  enters its features) and, as for a split segment, ``features.warmup`` bars of history before the
  window are kept for the features and the observation window only. ``rl-zerosync evaluate
  --walk-forward K`` (:mod:`rl_zerosync.walkforward`) sets it per fold.
* ``features``: :class:`~rl_zerosync.envs.market.FeatureConfig` keywords.
* ``periods_per_year`` (``"auto"``: files infer it from their timestamps, see
  :func:`~rl_zerosync.envs.loaders.load_market`; synthetic series are daily bars, 252), ``device`` ("cpu").
* ``max_abs_log_return`` (0.5): a close-to-close ``|log return|`` above this on any bar is bad data
  (ValueError naming the file or asset, the row/bar and both closes); ``0`` or ``null`` turns the
  check off.

``split`` argument: ``"train"``, ``"validation"``, ``"test"`` or ``"all"`` (the whole series).
"""
from __future__ import annotations

from typing import Any, Mapping

from rl_zerosync.envs.loaders import check_periods_per_year
from rl_zerosync.envs.market import (
    DEFAULT_MAX_ABS_LOG_RETURN, SPLITS, FeatureConfig, MarketData, check_fractions, check_market_log_returns,
    check_max_abs_log_return, check_window,
)

SOURCES = ("synthetic", "csv", "parquet")
SYNTHETIC_PERIODS_PER_YEAR = 252.0
"""Bars per year of the synthetic series (daily bars) under ``periods_per_year: auto``."""
_COMMON = ("source", "split", "window", "features", "periods_per_year", "device", "max_abs_log_return")
_SYNTHETIC = ("num_assets", "num_bars", "seed", "synthetic", "regenerate_every")
_FILES = ("paths", "columns", "asset_column", "names", "spread_source", "spread_bps", "cs_window",
          "min_spread_bps", "timestamp_format", "dayfirst")
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


def check_data_keys(data_cfg: Mapping[str, Any] | None) -> str:
    """Validate ``data.source`` and the keys allowed for it (nothing is loaded); returns the source."""
    cfg = dict(data_cfg or {})
    source = cfg.get("source", "synthetic")
    if source not in SOURCES:
        raise ValueError(f"data.source: expected one of {SOURCES}, got {source!r}")
    allowed = _COMMON + (_SYNTHETIC if source == "synthetic" else _FILES)
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise ValueError(f"data: unknown key(s) {unknown} for source {source!r}; allowed keys are {list(allowed)}")
    if cfg.get("window") is not None:
        check_window(cfg["window"])
    from rl_zerosync.envs.fresh import regenerate_every

    regenerate_every(cfg)
    return source


def make_market(data_cfg: Mapping[str, Any] | None, split: str = "train") -> MarketData:
    """Build the market of ``data_cfg`` and return segment ``split`` (see the module doc)."""
    cfg = dict(data_cfg or {})
    source = check_data_keys(cfg)
    if split not in SPLITS + ("all",):
        raise ValueError(f"split: expected one of {SPLITS + ('all',)}, got {split!r}")
    fractions = split_fractions(cfg.get("split", DEFAULT_SPLIT))
    window = check_window(cfg["window"]) if cfg.get("window") is not None else None
    features = FeatureConfig.from_dict(cfg.get("features"))
    ppy = cfg.get("periods_per_year", "auto")
    check_periods_per_year(ppy)
    device = cfg.get("device", "cpu")
    limit = check_max_abs_log_return(cfg.get("max_abs_log_return", DEFAULT_MAX_ABS_LOG_RETURN))
    if source == "synthetic":
        from rl_zerosync.envs.synthetic import synthetic_market

        model = cfg.get("synthetic") or {}
        if not isinstance(model, Mapping):
            raise ValueError(f"data.synthetic: expected a mapping of model keywords, got {model!r}")
        try:
            market = synthetic_market(
                cfg.get("num_assets", 4), cfg.get("num_bars", 20000), cfg.get("seed", 0),
                features=features, periods_per_year=SYNTHETIC_PERIODS_PER_YEAR if ppy == "auto" else float(ppy),
                device=device, **dict(model),
            )
        except TypeError as exc:  # unknown model keyword
            raise ValueError(f"data.synthetic: {exc}") from exc
        check_market_log_returns(market, limit, where=f"data.synthetic (seed {cfg.get('seed', 0)})")
    else:
        from rl_zerosync.envs.loaders import load_market

        if "paths" not in cfg:
            raise ValueError(f"data.paths: required for source {source!r}")
        kwargs = {k: cfg[k] for k in _FILES if k in cfg and k != "paths"}
        market = load_market(cfg["paths"], fmt=source, features=features, periods_per_year=ppy,
                             device=device, max_abs_log_return=limit, **kwargs)
    if split == "all":
        return market if window is None else market.window(*window)
    return market.split(split, fractions, window=window)
