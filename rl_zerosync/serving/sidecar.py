"""The deployable part of an export's sidecar: every model input as a formula of raw bars.

:func:`input_spec` describes, for one run's settings, how one asset's raw bars (oldest first, the
last one ``T = n - 1`` the bar acted on) and the agent's own state become the exported net's two
inputs, and what its output columns mean, so the model can be served from any language:

* ``bars``: the columns read, the checks a live feed must pass, ``min_bars`` / ``recommended_bars``
  and the warm-up.
* ``series``: the intermediate series over bars ``t = 0 .. T`` (``log_ret``, ``spread``, ``vol``,
  ``ret_norm``, the trailing medians, ``obs_spread``, ``obs_vol``), each with its formula in plain
  math and the exact constants it uses in ``params``.
* ``obs`` / ``market``: one entry per element or block of each input vector: its name, its index
  range ``[start, stop)``, its dtype and its formula over the series (or the agent's state).
* ``actions``: the output columns, the exposure levels, order types and urgencies and what they
  mean for execution (the run's fill / price tables), and how the graph picks them.

Every number is read from the code's own constants and the run's settings (:class:`FeatureConfig`,
:data:`~rl_zerosync.data.market.TINY`, :class:`EnvParams`, the routing thresholds), never retyped.

``episode_progress`` (observation element ``window + 3``) is ``step / episode_len`` in training:
the fraction of the training episode elapsed. A live account has no episode, so the export fixes
it to :func:`live_step` ``= episode_len // 2`` (``live_value = live_step / episode_len``, a value seen
in every training episode, 0.5 for an even ``episode_len``): far from the episode start, where
the position is always 0 in training, and from its end. :meth:`rl_zerosync.serving.policy.Policy.act`
feeds the same value when no ``step`` is given; a ``step`` replays an env episode or a backtest.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from rl_zerosync.actions import NUM_ACTIONS, OrderType, Urgency

MARKET_COLUMNS = ("spread", "median_spread", "vol", "median_vol")
"""Columns of the ``market`` input (the route kernel's inputs at the observation's bar)."""
OUTPUT_COLUMNS = ("action", "exposure", "order_type", "urgency")
"""Columns of the output: factored action index and its exposure, order type and urgency."""
LIVE_PROGRESS_WHY = (
    "live trading has no episode: the policy is fed the progress of the middle of a training episode, "
    "a value seen in every training episode (episodes start at random bars), "
    "away from the episode start (where the position is always 0 in training) and from its end")


def live_step(episode_len: int) -> int:
    """The step whose progress the exported policy is fed in live trading: ``episode_len // 2``."""
    return int(episode_len) // 2


def progress_value(step: int, episode_len: int) -> float:
    """``step / episode_len`` rounded to float32 as the env's observation computes it."""
    return float(torch.tensor([step], dtype=torch.float32)[0] / float(episode_len))


def live_step_of(metadata: Mapping[str, Any]) -> int:
    """The live step an export's metadata gives (:func:`live_step` of its episode length for
    exports written before the key existed)."""
    for el in (metadata.get("inputs") or {}).get("obs", {}).get("elements") or ():
        if el.get("name") == "episode_progress" and "live_step" in el:
            return int(el["live_step"])
    return live_step(int(metadata["episode_len"]))


def _bars(data: Mapping[str, Any], features, window: int, min_bars: int, recommended: int) -> dict[str, Any]:
    return {
        "order": "one asset's bars, oldest first; the last one (t = T = n - 1) is the bar acted on",
        "columns": {
            "close": "required",
            "bid, ask": "optional: the spread (spread_source bid_ask)",
            "high, low": "optional: the spread (spread_source corwin_schultz); execution of LIMIT/PASSIVE",
            "open": "optional: execution of MARKET orders only, no input reads it",
            "timestamp": "optional: checked, no input reads it",
        },
        "column_names": ("data.columns maps close/bid/ask/high/low/open/timestamp to the feed's names: "
                         f"{dict(data.get('columns') or {})}; else the names themselves, case-insensitive "
                         "(timestamp also date, datetime, time)"),
        "checks": [
            "every price finite and > 0",
            "bid <= ask and low <= high on every bar; low <= open, close <= high",
            f"|log(close[t] / close[t-1])| <= max_abs_log_return = {data.get('max_abs_log_return')} "
            "(null: no limit) on every bar",
            f"n >= min_bars = {min_bars} = max(warmup {features.warmup}, window {window}) + 2",
        ],
        "min_bars": min_bars,
        "recommended_bars": recommended,
        "warmup": (f"every series starts at bar 0 of the bars given (no state is carried between calls): the "
                   f"EWMA of vol starts at bar 1, the medians take min(t + 1, {features.median_window}) bars. "
                   f"Training fed the features of the whole series; from recommended_bars = {recommended} "
                   "bars on, the inputs no longer depend on where the bars start (to ~1e-6). Any "
                   "implementation given the same n bars gets the same inputs"),
        "precision": "every series in float64; the inputs rounded to float32 at the end",
    }


def _series(data: Mapping[str, Any], features) -> dict[str, Any]:
    from rl_zerosync.data.market import TINY

    f = features
    decay = 0.5 ** (1.0 / f.vol_halflife)
    spread = {
        "formula": "the relative spread of bar t (a fraction of the price), by spread_source",
        "spread_source": data.get("spread_source"),
        "auto": ("bid_ask when the bars have bid and ask, else corwin_schultz when they have high and low, "
                 "else fixed when spread_bps is set, else the bars are refused"),
        "sources": {
            "bid_ask": "spread[t] = (ask[t] - bid[t]) / ((ask[t] + bid[t]) / 2)",
            "corwin_schultz": (
                "for t >= 1: beta[t] = log(high[t-1] / low[t-1])^2 + log(high[t] / low[t])^2, "
                "gamma[t] = log(max(high[t-1], high[t]) / min(low[t-1], low[t]))^2, k = 3 - 2 * sqrt(2), "
                "alpha[t] = (sqrt(2 * beta[t]) - sqrt(beta[t])) / k - sqrt(gamma[t] / k), "
                "s[t] = max(2 * (exp(alpha[t]) - 1) / (1 + exp(alpha[t])), 0); "
                "spread[t] = max(mean(s[max(1, t - cs_window + 1) .. t]), min_spread_bps * 1e-4); "
                "spread[0] = min_spread_bps * 1e-4"),
            "fixed": "spread[t] = spread_bps * 1e-4",
        },
        "cap": "then spread[t] = min(spread[t], max_spread_bps * 1e-4) when max_spread_bps is not null",
        "params": {k: data.get(k) for k in ("spread_bps", "cs_window", "min_spread_bps", "max_spread_bps")},
    }
    return {
        "close": {"formula": "close[t]: the close of bar t"},
        "spread": spread,
        "log_ret": {"formula": "log_ret[t] = log(close[t] / close[t-1]) for t >= 1; log_ret[0] = 0"},
        "vol": {
            "formula": ("vol[0] = vol_floor; for t >= 1: vol[t] = sqrt(sum_{i=1..t} decay^(t-i) * log_ret[i]^2 / "
                        "sum_{i=1..t} decay^(t-i)), decay = 0.5^(1 / vol_halflife): the EWMA of the squared "
                        "log returns of bars 1..t with weights normalized to 1 (pandas ewm(halflife, "
                        "adjust=True)); recursively num[t] = decay * num[t-1] + log_ret[t]^2, "
                        "den[t] = decay * den[t-1] + 1, num[0] = den[0] = 0, vol[t] = sqrt(num[t] / den[t])"),
            "params": {"vol_halflife": f.vol_halflife, "decay": decay, "vol_floor": f.vol_floor},
        },
        "ret_norm": {
            "formula": ("ret_norm[t] = clip(log_ret[t] / max(vol[t-1], vol_floor), -ret_clip, ret_clip) for "
                        "t >= 1; ret_norm[0] = 0 (the return scaled by the volatility known before it)"),
            "params": {"vol_floor": f.vol_floor, "ret_clip": f.ret_clip},
        },
        "median_spread": {
            "formula": ("median_spread[t] = median(spread[max(0, t - median_window + 1) .. t]) (fewer bars at "
                        "the start; an even count takes the mean of the two middle values)"),
            "params": {"median_window": f.median_window},
        },
        "median_vol": {
            "formula": "median_vol[t] = median(vol[max(0, t - median_window + 1) .. t]) (as median_spread)",
            "params": {"median_window": f.median_window},
        },
        "obs_spread": {
            "formula": ("obs_spread[t] = clip(log(max(spread[t], tiny) / max(median_spread[t], tiny)), "
                        "-ratio_clip, ratio_clip)"),
            "params": {"tiny": TINY, "ratio_clip": f.ratio_clip},
        },
        "obs_vol": {
            "formula": ("obs_vol[t] = clip(log(max(vol[t], vol_floor) / max(median_vol[t], vol_floor)), "
                        "-ratio_clip, ratio_clip)"),
            "params": {"vol_floor": f.vol_floor, "ratio_clip": f.ratio_clip},
        },
    }


def _obs_elements(params) -> list[dict[str, Any]]:
    k, n = params.window, params.episode_len
    j = live_step(n)
    return [
        {"name": "ret_norm", "index": [0, k], "dtype": "float32", "series": "ret_norm",
         "formula": f"obs[i] = ret_norm[T - {k - 1} + i] for i = 0 .. {k - 1} (oldest first: obs[{k - 1}] = ret_norm[T])"},
        {"name": "position", "index": [k, k + 1], "dtype": "float32", "source": "agent state",
         "formula": ("the current position as a signed fraction of equity (< 0: short), in training one of "
                     "exposure_levels after a full fill or between them after a partial one")},
        {"name": "obs_spread", "index": [k + 1, k + 2], "dtype": "float32", "series": "obs_spread",
         "formula": "obs_spread[T]"},
        {"name": "obs_vol", "index": [k + 2, k + 3], "dtype": "float32", "series": "obs_vol",
         "formula": "obs_vol[T]"},
        {"name": "episode_progress", "index": [k + 3, k + 4], "dtype": "float32", "source": "agent state",
         "formula": (f"step / episode_len (episode_len = {n}): step = bars traded in the current training "
                     f"episode, 0 .. {n - 1}; backtests cycle it every episode_len bars. Live: live_value"),
         "episode_len": n, "live_step": j, "live_value": progress_value(j, n), "why": LIVE_PROGRESS_WHY},
    ]


def _market_elements() -> list[dict[str, Any]]:
    return [{"name": name, "index": [i, i + 1], "dtype": "float32", "series": name, "formula": f"{name}[T]"}
            for i, name in enumerate(MARKET_COLUMNS)]


def _actions(params, mode: str, routing: Mapping[str, float]) -> dict[str, Any]:
    fired = {
        "routed": ("the Q network chooses the exposure; order_type and urgency come from the routing rule "
                   "inside the graph (routing_rule), which reads the market input"),
        "flat": "the Q network chooses one of the 45 factored actions (the market input is not read)",
        "branching": ("one Q head per part: exposure, order_type and urgency each its own argmax (the market "
                      "input is not read)"),
    }[mode]
    meaning = {
        "action": f"factored action index = exposure * 9 + order_type * 3 + urgency, 0 .. {NUM_ACTIONS - 1}",
        "exposure": ("index into exposure_levels: the target position = exposure_levels[exposure], a signed "
                     "fraction of equity"),
        "order_type": "how to trade towards the target (values)",
        "urgency": ("the column of fill_prob / spread_frac / impact: higher urgency prices more aggressively and "
                    "fills more often"),
    }
    orders = {
        OrderType.MARKET: "a market order for the whole change (next bar's open under execution_lag 1)",
        OrderType.LIMIT: ("a limit order at limit_price for the change (row 1 of the tables: by default priced at "
                          "or through the close, a buy above it)"),
        OrderType.PASSIVE: ("a resting limit order at limit_price (row 2 of the tables: by default at or inside "
                            "the close, a buy below it)"),
    }
    return {
        "columns": [{"name": name, "index": i, "dtype": "int64", "meaning": meaning[name]}
                    for i, name in enumerate(OUTPUT_COLUMNS)],
        "exposure_levels": list(params.exposure_levels),
        "order_types": {str(int(o)): {"name": o.name, "meaning": orders[o]} for o in OrderType},
        "urgencies": {str(int(u)): u.name for u in Urgency},
        "chosen_by": fired,
        "limit_price": ("L = close[T] * (1 + side * spread_frac[order_type][urgency] * spread[T]), side = +1 to buy "
                        "(target > position), -1 to sell; it fills only when the execution bar trades through L "
                        "(low <= L to buy, high >= L to sell), at L (execution_lag 1; under 0 every order fills "
                        "fill_prob of the change at close[T]: execution.how)"),
        "tables": {"rows": "order_type", "columns": "urgency", "fill_prob": [list(r) for r in params.fill_prob],
                   "spread_frac": [list(r) for r in params.spread_frac], "impact": [list(r) for r in params.impact],
                   "meaning": ("the training execution model: fill fraction, limit offset (LIMIT/PASSIVE) or cost "
                               "(MARKET) as a fraction of the spread, impact per unit of vol; see execution.how")},
        "routing_rule": (
            f"rs = spread / median_spread, rv = vol / median_vol (each 1 when the median is <= 0 or either is "
            f"not finite); wide = rs >= {routing['wide']}, high = rv >= {routing['high_vol']}; order_type = "
            f"(LIMIT if wide else MARKET) if high else (PASSIVE if wide else LIMIT); urgency = HIGH if high else "
            f"(LOW if rv <= {routing['low_vol']} else NORMAL)" if mode == "routed" else None),
    }


def input_spec(params, features, data: Mapping[str, Any], mode: str, routing: Mapping[str, float],
               min_bars: int, recommended_bars: int) -> dict[str, Any]:
    """``{"bars", "series", "obs", "market", "actions"}`` of the module doc for a run's ``EnvParams``,
    ``FeatureConfig``, data settings (``export._data_metadata``), action mode and routing thresholds."""
    return {
        "bars": _bars(data, features, params.window, min_bars, recommended_bars),
        "series": _series(data, features),
        "obs": _obs_elements(params),
        "market": _market_elements(),
        "actions": _actions(params, mode, routing),
    }
