"""``evaluate_policy``: walk a whole data segment once per asset with a greedy policy, beside the rules.

Each asset is one env that starts flat at its first tradable bar ``max(valid_start, window)`` and
trades every bar up to the second-to-last one (the last return it earns is into the last bar), with
the same execution as training (:func:`rl_zerosync.envs.core.execute`). Position and equity carry
over the whole segment; the progress feature of the observation cycles every ``episode_len`` steps
as in training episodes; ``stop_drawdown`` is not applied. All assets step together on ``device``
(:class:`~rl_zerosync.envs.walk.SegmentWalk`: no per-step host read, CUDA graphs on the GPU); the
per-bar records are copied to the host once at the end. The rule baselines
(:mod:`rl_zerosync.envs.rules`) walk the same bars in one more batched walk.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.actions import NUM_ACTIONS
from rl_zerosync.envs.episode_stats import action_mix
from rl_zerosync.envs.market import MarketData
from rl_zerosync.envs.metrics import equity_curve, mean_metrics, performance_metrics
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.envs.rules import TUNED_RULES, RuleWalk, choose
from rl_zerosync.envs.walk import SegmentWalk

PolicyFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class EvalResult:
    """Per-asset curves and metrics of a policy and its baselines on one segment."""

    assets: list[str]
    segment: str
    equity: list[np.ndarray]
    """Per asset ``[E_0 = 1, ..., E_n]`` (n = bars traded)."""
    timestamps: list[np.ndarray | None]
    """Per asset the timestamps of ``E_0..E_n`` (the close of each bar), when the data has them."""
    records: list[dict[str, np.ndarray]]
    """Per asset per-bar arrays: net, pnl, cost, trade, position, action, order_type."""
    metrics: dict[str, dict[str, float]]
    """``metrics[asset]`` and ``metrics["mean"]`` (equal-weight mean over assets)."""
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``baselines[rule][asset|"mean"]`` for flat, buy_and_hold, momentum, mean_reversion; the
    tuned rules also carry ``"variant"`` (the label of the variant used)."""
    rule_grid: dict[str, dict[str, float]] = field(default_factory=dict)
    """Mean metrics over assets of every rule variant walked (label -> metrics)."""
    rule_choice: dict[str, str] = field(default_factory=dict)
    """Tuned rule -> variant label used for ``baselines`` (chosen here or passed in)."""
    action_counts: np.ndarray = field(default_factory=lambda: np.zeros(NUM_ACTIONS))
    """Counts of the 45 factored actions over all traded bars."""
    baseline_equity: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Per walked rule (buy_and_hold and the tuned rules' chosen variants), per asset equity curves."""

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: metrics, baselines and the action/routing mix (no curves)."""
        return {
            "segment": self.segment,
            "assets": list(self.assets),
            "metrics": self.metrics,
            "baselines": self.baselines,
            "rule_choice": dict(self.rule_choice),
            "rule_grid_sharpe": {k: v["sharpe"] for k, v in self.rule_grid.items()},
            "action_mix": dict(action_mix(self.action_counts.tolist())),  # host read: numpy counts
            "action_counts": [int(c) for c in self.action_counts],
        }


def evaluate_policy(
    policy_fn: PolicyFn,
    data: MarketData,
    params: EnvParams | Mapping[str, Any] | None = None,
    *,
    device: torch.device | str | None = None,
    route_exposure: bool = False,
    routing: Mapping[str, float] | None = None,
    baselines: bool = True,
    rule_choice: Optional[Mapping[str, str]] = None,
    graph_key: object = None,
) -> EvalResult:
    """Run ``policy_fn`` (obs f32[N, D] -> factored actions i64[N]; exposures 0..4 when
    ``route_exposure``, routed with the routing rule and ``routing`` thresholds) over every asset
    of ``data``; returns curves, metrics (formulas in :mod:`rl_zerosync.envs.metrics`), the rule
    baselines on the same bars (``rule_choice``: the tuned rules' variants, e.g. chosen on
    validation; default: the best variant on this segment by mean Sharpe) and the action mix.
    ``graph_key``: not None when ``policy_fn`` only reads static tensors (e.g. a module's forward),
    so its steps can be captured in a CUDA graph on the GPU; None steps eagerly."""
    params = params if isinstance(params, EnvParams) else EnvParams.from_dict(params)
    params = replace(params, stop_drawdown=0.0)
    dev = torch.device(device) if device is not None else data.device
    data = data.to(dev)
    walk = SegmentWalk(data, params, routing=(routing or {}) if route_exposure else None)
    result = walk_result(walk, walk.run(lambda obs, state: policy_fn(obs), key=graph_key))
    if baselines:
        add_baselines(result, *rule_metrics(RuleWalk(data, params, routing)), rule_choice=rule_choice)
    return result


def walk_result(walk: SegmentWalk, records: Mapping[str, np.ndarray]) -> EvalResult:
    """Curves and metrics of a one-replica walk's host records."""
    data = walk.data
    recs, equity, stamps, metrics = [], [], [], {}
    counts = np.zeros(NUM_ACTIONS)
    for a, name in enumerate(data.asset_names):
        rec = walk.env_records(records, a)
        n = walk.steps[a]
        counts += np.bincount(rec["action"], minlength=NUM_ACTIONS)
        recs.append(rec)
        equity.append(equity_curve(rec["net"]))
        ts = data.timestamps[a] if data.timestamps is not None else None
        stamps.append(ts[walk.starts[a]: walk.starts[a] + n + 1] if ts is not None else None)
        metrics[name] = record_metrics(rec, data.periods_per_year)
    metrics["mean"] = mean_metrics([metrics[n] for n in data.asset_names])
    return EvalResult(assets=list(data.asset_names), segment=data.segment, equity=equity, timestamps=stamps,
                      records=recs, metrics=metrics, action_counts=counts)


def record_metrics(rec: Mapping[str, np.ndarray], periods_per_year: float) -> dict[str, float]:
    """:func:`performance_metrics` of one env's per-bar records."""
    return performance_metrics(
        rec["net"], periods_per_year=periods_per_year, positions=rec["position"], pnl=rec["pnl"],
        trades=rec["trade"], costs=rec["cost"], order_types=rec["order_type"],
    )


def rule_metrics(rules: RuleWalk) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, list[np.ndarray]]]:
    """Walk every rule variant: (label -> {asset: metrics, "mean": metrics}, label -> per-asset
    net returns)."""
    data = rules.walk.data
    grid, nets = {}, {}
    for label, recs in rules.run().items():
        per = {name: record_metrics(r, data.periods_per_year) for name, r in zip(data.asset_names, recs)}
        per["mean"] = mean_metrics([per[n] for n in data.asset_names])
        grid[label] = per
        nets[label] = [r["net"] for r in recs]
    return grid, nets


def add_baselines(result: EvalResult, grid: Mapping[str, Mapping[str, Mapping[str, float]]],
                  nets: Optional[Mapping[str, list[np.ndarray]]] = None, *,
                  rule_choice: Optional[Mapping[str, str]] = None) -> None:
    """Fill ``result.baselines`` / ``rule_grid`` / ``rule_choice`` (and ``baseline_equity`` when
    ``nets`` is given) from :func:`rule_metrics`."""
    flat = [{k: (v if k == "bars" else 0.0) for k, v in result.metrics[a].items()} for a in result.assets]
    result.rule_grid = {label: dict(m["mean"]) for label, m in grid.items()}
    choice = dict(rule_choice) if rule_choice is not None else choose(result.rule_grid)
    result.rule_choice = choice
    result.baselines = {
        "flat": {**dict(zip(result.assets, flat)), "mean": mean_metrics(flat)},
        "buy_and_hold": dict(grid["buy_and_hold"]),
    }
    for rule in TUNED_RULES:
        if choice[rule] not in grid:
            raise ValueError(f"rule_choice[{rule!r}]: unknown variant {choice[rule]!r}")
        result.baselines[rule] = {**grid[choice[rule]], "variant": choice[rule]}
    if nets is not None:
        labels = {"buy_and_hold": "buy_and_hold", **{r: choice[r] for r in TUNED_RULES}}
        result.baseline_equity = {r: [equity_curve(n) for n in nets[label]] for r, label in labels.items()}


def best_rule(baselines: Mapping[str, Mapping[str, Any]], metric: str = "sharpe") -> str:
    """The rule with the highest mean ``metric`` in ``baselines`` (ties: the first of RULES)."""
    from rl_zerosync.envs.rules import RULES

    return max(RULES, key=lambda r: (baselines[r]["mean"][metric], -RULES.index(r)))
