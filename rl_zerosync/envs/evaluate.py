"""``evaluate_policy``: walk a whole data segment once per asset with a greedy policy.

Each asset is one env that starts flat at its first tradable bar ``max(valid_start, window)`` and
trades every bar up to the second-to-last one (the last return it earns is into the last bar), with
the same transition function as training (:func:`rl_zerosync.envs.core.transition`). Position and
equity carry over the whole segment; the progress feature of the observation cycles every
``episode_len`` steps as in training episodes; ``stop_drawdown`` is not applied. All assets step
together on ``device``; the per-bar records are copied to the host once at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np
import torch

from rl_zerosync.actions import NUM_ACTIONS, OrderType, Urgency, encode
from rl_zerosync.envs.core import EnvState, init_state, make_tables, observe, route_inputs, transition
from rl_zerosync.envs.episode_stats import action_mix
from rl_zerosync.envs.market import MarketData
from rl_zerosync.envs.metrics import equity_curve, mean_metrics, performance_metrics
from rl_zerosync.envs.params import EnvParams

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
    baselines: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """``baselines["flat"|"buy_and_hold"][asset|"mean"]``."""
    action_counts: np.ndarray = field(default_factory=lambda: np.zeros(NUM_ACTIONS))
    """Counts of the 45 factored actions over all traded bars."""

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: metrics, baselines and the action/routing mix (no curves)."""
        return {
            "segment": self.segment,
            "assets": list(self.assets),
            "metrics": self.metrics,
            "baselines": self.baselines,
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
) -> EvalResult:
    """Run ``policy_fn`` (obs f32[N, D] -> factored actions i64[N]; exposures 0..4 when
    ``route_exposure``, routed with the routing rule and ``routing`` thresholds) over every asset
    of ``data``; returns curves, metrics (formulas in :mod:`rl_zerosync.envs.metrics`), flat and
    buy-and-hold baselines on the same bars, and the action mix."""
    params = params if isinstance(params, EnvParams) else EnvParams.from_dict(params)
    params = replace(params, stop_drawdown=0.0)
    dev = torch.device(device) if device is not None else data.device
    data = data.to(dev)
    route = None
    if route_exposure:
        from rl_zerosync.kernels import get_kernels

        kern = get_kernels(dev)
        thresholds = {k: float(v) for k, v in (routing or {}).items()}

        def route(exposure: torch.Tensor, state: EnvState) -> torch.Tensor:
            out = torch.empty_like(exposure)
            kern.route(exposure.contiguous(), *route_inputs(data, state), out, **thresholds)
            return out

    result = _walk(policy_fn, data, params, route)
    if baselines:
        levels = params.exposure_levels
        flat = [{k: (v if k == "bars" else 0.0) for k, v in result.metrics[a].items()} for a in result.assets]
        top = int(np.argmax(levels))
        hold_action = encode(top, OrderType.MARKET, Urgency.NORMAL)
        hold = _walk(lambda obs: torch.full((obs.shape[0],), hold_action, dtype=torch.int64, device=obs.device),
                     data, params, None)
        result.baselines = {
            "flat": {**dict(zip(result.assets, flat)), "mean": mean_metrics(flat)},
            "buy_and_hold": hold.metrics,
        }
    return result


def _walk(policy_fn: PolicyFn, data: MarketData, params: EnvParams,
          route: Callable[[torch.Tensor, EnvState], torch.Tensor] | None) -> EvalResult:
    tables = make_tables(data, params)
    dev = data.device
    n_assets = data.num_assets
    first = tables.start_lo
    last = data.length - 2  # last bar at which a trade can earn a return
    steps = (last - first + 1).cpu().tolist()  # host read: evaluation setup
    state = init_state(data, tables, torch.arange(n_assets, dtype=torch.int64, device=dev))
    state = replace(state, asset=torch.arange(n_assets, dtype=torch.int64, device=dev), t=first.clone())
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("net", "pnl", "cost", "trade", "position", "action", "order_type")}
    for _ in range(max(steps)):
        with torch.no_grad():
            actions = policy_fn(observe(data, tables, state))
        actions = torch.as_tensor(actions, device=dev).to(torch.int64).reshape(n_assets)
        _check_actions(actions, 5 if route is not None else NUM_ACTIONS)
        if route is not None:
            actions = route(actions, state)
        state, info = transition(data, tables, state, actions)
        state = replace(state, t=torch.minimum(state.t, last), step=state.step % params.episode_len)
        for k, v in (("net", info.net), ("pnl", info.pnl), ("cost", info.cost), ("trade", info.trade),
                     ("position", state.pos), ("action", actions), ("order_type", info.order_type)):
            cols[k].append(v)
    host = {k: torch.stack(v, dim=1).cpu().numpy() for k, v in cols.items()}  # host read: once per evaluation
    records, equity, stamps, metrics = [], [], [], {}
    counts = np.zeros(NUM_ACTIONS)
    starts = first.cpu().tolist()  # host read: evaluation setup
    for a, name in enumerate(data.asset_names):
        n = steps[a]
        rec = {k: v[a, :n] for k, v in host.items()}
        counts += np.bincount(rec["action"], minlength=NUM_ACTIONS)
        records.append(rec)
        equity.append(equity_curve(rec["net"]))
        ts = data.timestamps[a] if data.timestamps is not None else None
        stamps.append(ts[starts[a]: starts[a] + n + 1] if ts is not None else None)
        metrics[name] = performance_metrics(
            rec["net"], periods_per_year=data.periods_per_year, positions=rec["position"], pnl=rec["pnl"],
            trades=rec["trade"], costs=rec["cost"], order_types=rec["order_type"],
        )
    metrics["mean"] = mean_metrics([metrics[n] for n in data.asset_names])
    return EvalResult(assets=list(data.asset_names), segment=data.segment, equity=equity, timestamps=stamps,
                      records=records, metrics=metrics, action_counts=counts)


def _check_actions(actions: torch.Tensor, n: int) -> None:
    lo, hi = int(actions.min()), int(actions.max())  # host read: evaluation is not a hot path
    if lo < 0 or hi >= n:
        raise ValueError(f"policy_fn: expected actions in 0..{n - 1}, got values in {lo}..{hi}")
