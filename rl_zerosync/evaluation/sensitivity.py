"""Cost and execution sensitivity of a report: the selected policy and the rule chosen on validation
re-walked with costs scaled and with every order forced to MARKET, all variants in one batched walk per actor.

Variants (:data:`VARIANTS`, name -> (cost multiplier ``m``, all orders MARKET)): ``cost_x0``,
``cost_x1``, ``cost_x2``, ``cost_x4`` (every cost of :func:`rl_zerosync.envs.core.execute` times ``m``:
fee, spread, impact and any maker rebate; fills and prices unchanged) and ``market_only`` (costs x1,
LIMIT and PASSIVE executed as MARKET of the same urgency). Each variant is one more replica of the
walk (:class:`~rl_zerosync.evaluation.walk.SegmentWalk` with per-env ``cost_scale`` /
``force_market``), so the policy and the rule are each walked once. ``cost_x1`` is the report's own
execution: its Sharpe is the segment's Sharpe. For a fixed action sequence without a rebate the net
return of every bar, hence the total return, falls with ``m`` (``net = pnl - m * cost``, ``cost >= 0``).

:func:`execution_report` is the ``execution`` key of ``metrics.json``: the execution settings, the
spreads of the evaluated data (:func:`rl_zerosync.data.spreads.spread_report`) and the sensitivity
of the last evaluated segment; :func:`execution_line` its segment of the printed summary.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.evaluation.metrics import mean_metrics
from rl_zerosync.evaluation.walk import ActFn, SegmentWalk

VARIANTS: dict[str, tuple[float, bool]] = {
    "cost_x0": (0.0, False), "cost_x1": (1.0, False), "cost_x2": (2.0, False), "cost_x4": (4.0, False),
    "market_only": (1.0, True),
}
"""Sensitivity variant -> (cost multiplier, every order executed as MARKET)."""
KEPT_METRICS = ("sharpe", "total_return", "cost_total", "turnover_per_bar")


def variant_tensors(num_assets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per env of a walk with one replica per variant (env ``e`` = variant ``e // A``, asset ``e % A``):
    ``(cost_scale f32[V A], force_market bool[V A])``."""
    scale = torch.tensor([m for m, _ in VARIANTS.values()], dtype=torch.float32).repeat_interleave(num_assets)
    market = torch.tensor([f for _, f in VARIANTS.values()]).repeat_interleave(num_assets)
    return scale, market


def _variant_metrics(per_variant: list[list[Mapping[str, np.ndarray]]], periods_per_year: float) -> dict:
    """variant -> mean over assets of :data:`KEPT_METRICS`."""
    from rl_zerosync.evaluation.backtest import record_metrics

    out = {}
    for name, recs in zip(VARIANTS, per_variant):
        mean = mean_metrics([record_metrics(r, periods_per_year) for r in recs])
        out[name] = {k: float(mean[k]) for k in KEPT_METRICS}
    return out


def policy_sensitivity(act: ActFn, data: MarketData, params: EnvParams, *,
                       routing: Optional[Mapping[str, float]] = None, graph_key: object = None) -> dict:
    """``act`` (obs, walk state) -> actions (exposures when ``routing`` is given) walked once over
    ``data`` with every variant as a replica: variant -> mean metrics over assets."""
    scale, market = variant_tensors(data.num_assets)
    walk = SegmentWalk(data, params, replicas=len(VARIANTS), routing=routing, cost_scale=scale,
                       force_market=market)
    rec = walk.run(act, key=graph_key)
    per = [[walk.env_records(rec, a, replica=v) for a in range(data.num_assets)] for v in range(len(VARIANTS))]
    return _variant_metrics(per, data.periods_per_year)


def rule_sensitivity(label: str, data: MarketData, params: EnvParams,
                     routing: Optional[Mapping[str, float]] = None) -> dict:
    """The rule variant ``label`` walked once with every sensitivity variant as a replica (``flat``:
    all zeros, nothing walked)."""
    from rl_zerosync.evaluation.rules import RuleWalk, parse_label

    if label == "flat":
        return {name: {k: 0.0 for k in KEPT_METRICS} for name in VARIANTS}
    rule = parse_label(label)
    walk = RuleWalk(data, params, routing, rule_variants=[rule] * len(VARIANTS),
                    cost_scale=[m for m, _ in VARIANTS.values()], force_market=[f for _, f in VARIANTS.values()])
    return _variant_metrics(walk.run_replicas(), data.periods_per_year)


def segment_sensitivity(policy: Callable[[torch.Tensor], torch.Tensor], data: MarketData, params: EnvParams, *,
                        route_exposure: bool, routing: Mapping[str, float], best_rule: str,
                        device: torch.device | str | None = None) -> dict[str, Any]:
    """The ``sensitivity`` block of one segment: the greedy ``policy`` (obs -> actions, exposures when
    ``route_exposure``) and the rule variant ``best_rule`` (its label), each one batched walk."""
    from dataclasses import replace

    params = replace(params, stop_drawdown=0.0)
    data = data.to(device) if device is not None else data
    agent = policy_sensitivity(lambda obs, state: policy(obs), data, params,
                               routing=(routing or {}) if route_exposure else None, graph_key="sensitivity")
    rule = rule_sensitivity(best_rule, data, params, routing)
    return {
        "segment": data.segment,
        "variants": {name: {"cost_multiplier": m, "all_market": f} for name, (m, f) in VARIANTS.items()},
        "policy": agent,
        "best_rule": {"label": best_rule, **rule},
        "policy_sharpe": {name: agent[name]["sharpe"] for name in VARIANTS},
        "best_rule_sharpe": {name: rule[name]["sharpe"] for name in VARIANTS},
    }


def execution_settings(params: EnvParams, data: MarketData) -> dict[str, Any]:
    """How orders executed in the report: the env's execution keys and what the data allowed."""
    lag = params.execution_lag
    has_open, has_range = data.open is not None, data.high is not None and data.low is not None
    market = "same-bar close" if lag == 0 else "next open" if has_open else "next close (the data has no opens)"
    passive = ("same-bar close, filling their fraction whatever the next bar does" if lag == 0 else
               "rest at close * (1 + side * spread_frac * spread), fill only if the next bar trades through"
               if has_range else "executed as MARKET (the data has no high/low)")
    return {"execution_lag": lag, "maker_rebate_bps": params.maker_rebate_bps, "fill_mode": params.fill_mode,
            "fee": params.fee, "market_orders": market, "limit_and_passive_orders": passive}


def execution_report(ev, results: Mapping[str, Any]) -> dict[str, Any]:
    """The ``execution`` key of ``metrics.json`` for an evaluation ``ev``
    (:class:`rl_zerosync.evaluation.evaluate._Evaluation`) whose segments walked into ``results``:
    settings, spreads and the last segment's sensitivity (best rule: the one with the highest Sharpe
    on the segment that chose the variants, as in the summary)."""
    from rl_zerosync.data.spreads import spread_report
    from rl_zerosync.evaluation.backtest import best_rule

    last = ev.segments[-1]
    market = ev.markets[last]  # the segment as walked: not built (read) a second time
    best = best_rule(results[ev.segments[0]].baselines)
    label = results[last].baselines[best].get("variant", best)
    recorded = "execution_lag" in (ev.settings.get("env") or {})
    return {
        "settings": {**execution_settings(ev.params, market),
                     "execution_lag_source": "settings.yaml" if recorded else
                     "not in settings.yaml (a run of an earlier version): 0, the model it was trained under"},
        "spreads": spread_report(market, ev.data_cfg),
        "sensitivity": segment_sensitivity(ev.policy, market, ev.params, route_exposure=(ev.mode == "routed"),
                                           routing=ev.routing, best_rule=label, device=ev.device),
    }


def execution_line(execution: Mapping[str, Any]) -> str:
    """The printed summary's execution segment: lag and the Sharpe at cost x0/x1/x2/x4 and all-MARKET."""
    s = execution["sensitivity"]
    show = lambda d: "/".join(f"{d[n]:+.2f}" for n in VARIANTS)  # noqa: E731
    return (f" | execution lag {execution['settings']['execution_lag']}: sharpe at cost x0/x1/x2/x4/all-market "
            f"{show(s['policy_sharpe'])} (rule chosen on validation {show(s['best_rule_sharpe'])})")
