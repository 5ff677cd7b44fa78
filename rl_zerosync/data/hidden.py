"""The synthetic generator's hidden state behind a market segment, for reference policies that know it.

:class:`~rl_zerosync.data.market.MarketData` (all the env, the observation and the agent read) holds
prices, spreads and causal features only. The generator's volatility path ``sigma``, its normalized
returns ``z`` (``log_ret = sigma * z``) and its regimes stay out of it: :func:`synthetic_hidden`
draws the same series again from the data settings (same generator seed, same model keywords) and
lays them out row for row like the segment, so an evaluation can score a policy that knows the
generator (:mod:`rl_zerosync.evaluation.oracle`) on exactly the bars the agent is scored on. Nothing
in the training or validation path calls it.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from rl_zerosync.data.data_settings import HELDOUT_SEGMENTS, DataSettings, heldout_seed
from rl_zerosync.data.market import MarketData

CLOSE_RTOL = 1e-5
"""Relative tolerance of the check that the regenerated closes are the segment's (float32) closes."""


@dataclass(frozen=True)
class HiddenState:
    """The generator's series behind a segment, ``[num_assets, num_bars]`` like its rows (float64;
    rows past an asset's ``length`` repeat its last bar with ``z = 0``)."""

    sigma: np.ndarray
    """The true volatility ``sigma_t = exp(h_t)`` of each bar."""
    z: np.ndarray
    """The normalized return ``z_t = log_ret_t / sigma_t`` (0 on a series' first bar)."""
    regime: np.ndarray
    """The regime of each bar (``synthetic.TREND`` / ``synthetic.REVERT``; tests only: a filter
    infers it, it does not read it)."""
    model: Mapping[str, float]
    """Every model keyword of :func:`~rl_zerosync.data.synthetic.synthetic_series` (defaults filled in)."""
    seed: int
    """The generator seed of the series."""


def model_keywords(data_cfg: Mapping[str, Any] | None) -> dict[str, float]:
    """The generator's model parameters of ``data_cfg``: ``data.synthetic`` over the defaults of
    :func:`~rl_zerosync.data.synthetic.synthetic_series` (``ohlc`` left out)."""
    from rl_zerosync.data.synthetic import synthetic_series

    d = DataSettings.from_dict(data_cfg)
    defaults = {n: p.default for n, p in inspect.signature(synthetic_series).parameters.items()
                if p.kind is p.KEYWORD_ONLY}
    return {**defaults, **{k: v for k, v in d.synthetic.items() if k != "ohlc"}}


def synthetic_hidden(data_cfg: Mapping[str, Any] | None, market: MarketData) -> HiddenState:
    """The hidden state behind ``market``, a segment that :func:`~rl_zerosync.data.make_market` built
    from ``data_cfg`` (a held-out validation / test market, or a time segment of series
    ``data.seed``). ValueError when ``data_cfg`` is not synthetic, or when the series it draws do not
    give ``market``'s closes (another seed, segment or model)."""
    from rl_zerosync.data.synthetic import synthetic_series

    d = DataSettings.from_dict(data_cfg)
    if d.source != "synthetic":
        raise ValueError(f"hidden state: data.source {d.source!r} has no generator (synthetic data only)")
    model = model_keywords(data_cfg)
    if d.heldout_validation_series and market.segment in HELDOUT_SEGMENTS:
        seed = heldout_seed(d.seed, market.segment)
        count = d.heldout_validation_series if market.segment == "validation" else d.heldout_test_series
        bars = d.heldout_bars or d.num_bars
    else:
        seed, count, bars = d.seed, d.num_assets, d.num_bars
    raw = synthetic_series(count, bars, seed, **model)
    if count != market.num_assets:
        raise ValueError(f"hidden state: data settings give {count} series, the {market.segment!r} market has "
                         f"{market.num_assets} assets")
    lengths = market.length.cpu().tolist()  # host read: once per evaluation
    offsets = market.offsets or (0,) * count
    close = market.close.cpu().numpy()  # host read: once per evaluation, the check below
    shape = (count, market.num_bars)
    out = {"sigma": np.empty(shape), "z": np.zeros(shape), "regime": np.empty(shape, dtype=np.int8)}
    for a, (n, off) in enumerate(zip(lengths, offsets)):
        if off + n > bars:
            raise ValueError(f"hidden state: asset {market.asset_names[a]!r} has bars {off}..{off + n - 1}, "
                             f"the generator's series {bars}")
        given, drawn = close[a, :n].astype(np.float64), raw["close"][a, off:off + n]
        if not np.allclose(given, drawn, rtol=CLOSE_RTOL, atol=0.0):
            raise ValueError(f"hidden state: generator seed {seed} does not give the closes of asset "
                             f"{market.asset_names[a]!r} (segment {market.segment!r}): other data settings?")
        for key in out:
            row = raw[key][a, off:off + n]
            out[key][a, :n] = row
            out[key][a, n:] = 0 if key == "z" else row[-1]
    return HiddenState(sigma=out["sigma"], z=out["z"], regime=out["regime"], model=model, seed=seed)
