"""``evaluate_policy``: walk a whole data segment once per asset with a greedy policy, beside the rules.

Each asset is one env that starts flat at its first tradable bar ``max(valid_start, window)`` and
trades every bar up to the second-to-last one (the last return it earns is into the last bar), with
the same execution as training (:func:`rl_zerosync.envs.core.execute`). Position and equity carry
over the whole segment; the progress feature of the observation cycles every ``episode_len`` steps
as in training episodes; ``stop_drawdown`` is not applied. All assets step together on ``device``
(:class:`~rl_zerosync.evaluation.walk.SegmentWalk`: no per-step host read, CUDA graphs on the GPU); the
per-bar records are copied to the host once at the end. The rule baselines
(:mod:`rl_zerosync.evaluation.rules`) walk the same bars in one more batched walk.

:func:`bar_table` lays one result out bar by bar (per asset: price, position, trade, cost, net
return, equity, buy-and-hold net return and equity) and :func:`portfolio_table` as the equal-weight portfolio of
its assets (the mean of the assets' net returns each bar), both as pandas frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.actions import NUM_ACTIONS
from rl_zerosync.envs.episode_stats import action_mix
from rl_zerosync.data.market import MarketData
from rl_zerosync.evaluation.metrics import equity_curve, mean_metrics, performance_metrics
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.evaluation.rules import TUNED_RULES, RuleWalk, choose
from rl_zerosync.evaluation.walk import SegmentWalk

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
    baseline_net: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """The per-bar net returns behind ``baseline_equity`` (same rules, per asset)."""
    rule_grid_net: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """Per rule variant label, per asset the net returns walked (for the evidence: SPA, PBO)."""
    prices: list[np.ndarray] = field(default_factory=list)
    """Per asset the close of the bars of ``E_0..E_n`` (filled by :func:`evaluate_policy`, not by
    :func:`walk_result`: the validation passes during training skip that host read)."""
    bars: list[np.ndarray] = field(default_factory=list)
    """Per asset the index of the bars of ``E_0..E_n`` in the asset's full series (its row in the
    source when the data was read from files)."""
    periods_per_year: float = 252.0
    """Bars per year of the data (annualization)."""
    oracle: dict[str, Any] = field(default_factory=dict)
    """The oracle reference policy on the same bars (:func:`rl_zerosync.evaluation.oracle.oracle_baseline`:
    synthetic data only, else absent with the reason); empty when not evaluated."""

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
            **({"oracle": self.oracle} if self.oracle else {}),
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
    split_bars: int = 0,
    split_warmup: int = 128,
) -> EvalResult:
    """Run ``policy_fn`` (obs f32[N, D] -> factored actions i64[N]; exposures 0..4 when
    ``route_exposure``, routed with the routing rule and ``routing`` thresholds) over every asset
    of ``data``; returns curves, metrics (formulas in :mod:`rl_zerosync.evaluation.metrics`), the rule
    baselines on the same bars (``rule_choice``: the tuned rules' variants, e.g. chosen on
    validation; default: the best variant on this segment by mean Sharpe) and the action mix.
    ``graph_key``: not None when ``policy_fn`` only reads static tensors (e.g. a module's forward),
    so its steps can be captured in a CUDA graph on the GPU; None steps eagerly. ``split_bars`` /
    ``split_warmup``: walk in time splits (:class:`~rl_zerosync.evaluation.walk.SegmentWalk`);
    default 0: each asset whole."""
    params = params if isinstance(params, EnvParams) else EnvParams.from_dict(params)
    params = replace(params, stop_drawdown=0.0)
    dev = torch.device(device) if device is not None else data.device
    data = data.to(dev)
    walk = SegmentWalk(data, params, routing=(routing or {}) if route_exposure else None,
                       split_bars=split_bars, split_warmup=split_warmup)
    result = walk_result(walk, walk.run(lambda obs, state: policy_fn(obs), key=graph_key))
    add_prices(result, walk)
    if baselines:
        add_rule_baselines(result, data, params, device=dev, routing=routing, rule_choice=rule_choice)
    return result


def add_rule_baselines(result: EvalResult, data: MarketData, params: EnvParams | Mapping[str, Any] | None = None, *,
                       device: torch.device | str | None = None, routing: Mapping[str, float] | None = None,
                       rule_choice: Optional[Mapping[str, str]] = None) -> None:
    """The rule baselines of :func:`evaluate_policy` (``baselines=True``) on ``data`` into ``result``, as a
    step of its own: a walk made with ``baselines=False`` and then this one is the same result."""
    params = params if isinstance(params, EnvParams) else EnvParams.from_dict(params)
    params = replace(params, stop_drawdown=0.0)
    data = data.to(torch.device(device) if device is not None else data.device)
    add_baselines(result, *cached_rule_metrics(data, params, routing), rule_choice=rule_choice)


RULE_CACHE_SIZE = 8
"""Segments whose rule walks a process keeps (:func:`cached_rule_metrics`)."""
_RULE_CACHE: "dict[tuple, tuple[dict, dict]]" = {}


def data_fingerprint(data: MarketData) -> str:
    """SHA-256 of a segment's content: every tensor field, the valid starts and lengths, the asset
    names and the bars per year (one host copy of the segment)."""
    import hashlib

    h = hashlib.sha256()
    for name in data.present_fields:
        t = getattr(data, name)
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())  # host read: the segment once, for its key
    h.update(repr((data.asset_names, float(data.periods_per_year), data.segment)).encode())
    return h.hexdigest()


def cached_rule_metrics(data: MarketData, params: EnvParams, routing: Optional[Mapping[str, float]]):
    """:func:`rule_metrics` of every rule variant on ``data``, walked once per process for a segment
    of the same content (:func:`data_fingerprint`), env parameters and routing: every evaluation of the
    same data (population members, checkpoints, re-evaluations) reuses the first one's walk. The
    returned dicts are shared: read them, do not change them."""
    key = (data_fingerprint(data), repr(params), tuple(sorted((routing or {}).items())), str(data.device))
    if key not in _RULE_CACHE:
        if len(_RULE_CACHE) >= RULE_CACHE_SIZE:
            _RULE_CACHE.pop(next(iter(_RULE_CACHE)))
        _RULE_CACHE[key] = rule_metrics(RuleWalk(data, params, routing))
    return _RULE_CACHE[key]


def walk_result(walk: SegmentWalk, records: Mapping[str, np.ndarray], replica: int = 0) -> EvalResult:
    """Curves and metrics of one replica of a walk's host records (a one-replica walk: replica 0)."""
    data = walk.data
    recs, equity, stamps, bars, metrics = [], [], [], [], {}
    counts = np.zeros(NUM_ACTIONS)
    offsets = data.offsets or (0,) * data.num_assets
    for a, name in enumerate(data.asset_names):
        rec = walk.env_records(records, a, replica)
        n, start = walk.steps[a], walk.starts[a]
        counts += np.bincount(rec["action"], minlength=NUM_ACTIONS)
        recs.append(rec)
        equity.append(equity_curve(rec["net"]))
        ts = data.timestamps[a] if data.timestamps is not None else None
        stamps.append(ts[start: start + n + 1] if ts is not None else None)
        bars.append(np.arange(start, start + n + 1, dtype=np.int64) + offsets[a])
        metrics[name] = record_metrics(rec, data.periods_per_year)
    metrics["mean"] = mean_metrics([metrics[n] for n in data.asset_names])
    return EvalResult(assets=list(data.asset_names), segment=data.segment, equity=equity, timestamps=stamps,
                      records=recs, metrics=metrics, action_counts=counts, bars=bars,
                      periods_per_year=float(data.periods_per_year))


def add_prices(result: EvalResult, walk: SegmentWalk) -> None:
    """Fill ``result.prices`` (the closes of each asset's bars ``E_0..E_n``) from the walk's data."""
    close = walk.data.close.cpu().numpy()  # host read: once per evaluation, the prices of the per-bar table
    result.prices = [close[a, s: s + n + 1].astype(np.float64)
                     for a, (s, n) in enumerate(zip(walk.starts, walk.steps))]


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
        result.rule_grid_net = dict(nets)
        labels = {"buy_and_hold": "buy_and_hold", **{r: choice[r] for r in TUNED_RULES}}
        result.baseline_net = {r: [np.asarray(n, dtype=np.float64) for n in nets[label]] for r, label in labels.items()}
        result.baseline_equity = {r: [equity_curve(n) for n in nets[label]] for r, label in labels.items()}


def best_rule(baselines: Mapping[str, Mapping[str, Any]], metric: str = "sharpe") -> str:
    """The rule with the highest mean ``metric`` in ``baselines`` (ties: the first of RULES)."""
    from rl_zerosync.evaluation.rules import RULES

    return max(RULES, key=lambda r: (baselines[r]["mean"][metric], -RULES.index(r)))


BAR_COLUMNS = ("timestamp", "bar", "asset", "price", "position", "trade", "fill_price", "cost", "net_return", "equity",
               "benchmark_net_return", "benchmark_equity")
"""Columns of :func:`bar_table` (``timestamp`` only when the data has timestamps)."""


def _dated(result: EvalResult) -> bool:
    return bool(result.timestamps) and all(t is not None for t in result.timestamps)


def _datetimes(stamps: np.ndarray):
    """Timestamps as a pandas DatetimeIndex (time-zone aware ones stay so), else unchanged."""
    import pandas as pd

    try:
        return pd.DatetimeIndex(pd.to_datetime(stamps))
    except (TypeError, ValueError):
        return stamps


def bar_table(result: EvalResult):
    """The per-bar series of every asset of ``result`` as one pandas frame (assets one after the
    other, each in time order; columns :data:`BAR_COLUMNS`).

    A row is one bar at its close: ``timestamp`` (when the data has timestamps) and ``bar`` (the
    bar's index in the asset's full series: its data row for file data) locate it, ``price`` is
    its close, ``position`` the exposure held at its close, reached by ``trade`` (the change in
    position), filled at ``fill_price`` (NaN without a trade): with ``env.execution_lag`` 1 during
    this bar (its open, its close without opens, or a passive order's limit price), decided at the
    previous close; with lag 0 at the previous close itself. It cost ``cost`` (fraction of equity),
    and ``net_return = previous position * (price / previous price - 1) + trade * (price /
    fill_price - 1) - cost`` (the metrics' ``r_i``; with lag 0 this is ``position * (price /
    previous price - 1) - cost``). ``equity`` is the equity at the bar's close, compounded from 1 (the
    metrics' ``E_i``: the last row of an asset is ``1 + total_return``), ``benchmark_net_return``
    and ``benchmark_equity`` the same for the buy-and-hold rule on the same bars (same execution and
    costs; NaN without baselines). An asset's first row is its first tradable bar: flat, return 0,
    equity 1.
    """
    import pandas as pd

    dated = _dated(result)
    bench = result.baseline_equity.get("buy_and_hold")
    bench_net = result.baseline_net.get("buy_and_hold")
    frames = []
    for a, name in enumerate(result.assets):
        rec = result.records[a]
        n = len(rec["net"])
        cols: dict[str, Any] = {}
        if dated:
            cols["timestamp"] = _datetimes(result.timestamps[a])
        cols["bar"] = result.bars[a]
        cols["asset"] = name
        cols["price"] = result.prices[a] if result.prices else np.full(n + 1, np.nan)
        for out, key in (("position", "position"), ("trade", "trade"), ("fill_price", "fill_price"),
                         ("cost", "cost"), ("net_return", "net")):
            # row 0 is the start (flat); row k holds step k-1 of the walk
            cols[out] = np.concatenate(([0.0], np.asarray(rec[key], dtype=np.float64)))
        cols["fill_price"] = np.where(cols["trade"] != 0.0, cols["fill_price"], np.nan)
        cols["equity"] = result.equity[a]
        cols["benchmark_net_return"] = (np.concatenate(([0.0], bench_net[a])) if bench_net is not None
                                        else np.full(n + 1, np.nan))
        cols["benchmark_equity"] = bench[a] if bench is not None else np.full(n + 1, np.nan)
        frames.append(pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True)


PORTFOLIO_COLUMNS = ("timestamp", "step", "assets", "position", "trade", "cost", "net_return", "equity",
                     "benchmark_net_return", "benchmark_equity")
"""Columns of :func:`portfolio_table` (``timestamp`` with dated data, else ``step``)."""


def portfolio_table(result: EvalResult):
    """The equal-weight portfolio of ``result``'s assets, rebalanced every bar, as a pandas frame.

    Each bar's ``net_return`` (and ``position``, ``trade``, ``cost``) is the mean over the assets
    that have that bar (``assets`` of them) of the per-asset values of :func:`bar_table`;
    ``equity`` compounds it from 1. ``benchmark_*``: the same for the buy-and-hold rule. Bars are
    matched by ``timestamp`` when the data has timestamps, else by ``step`` (bars since each
    asset's first tradable bar). The first row is the start: flat, equity 1.
    """
    import pandas as pd

    dated = _dated(result)
    bench = result.baseline_net.get("buy_and_hold")
    parts = []
    for a in range(len(result.assets)):
        rec = result.records[a]
        n = len(rec["net"])
        parts.append(pd.DataFrame({
            "key": _datetimes(result.timestamps[a][1:]) if dated else np.arange(1, n + 1),
            "position": np.asarray(rec["position"], dtype=np.float64),
            "trade": np.asarray(rec["trade"], dtype=np.float64),
            "cost": np.asarray(rec["cost"], dtype=np.float64),
            "net_return": np.asarray(rec["net"], dtype=np.float64),
            "benchmark_net_return": bench[a] if bench is not None else np.full(n, np.nan),
        }))
    groups = pd.concat(parts, ignore_index=True).groupby("key", sort=True)
    body = groups.mean()
    body.insert(0, "assets", groups.size())
    start = min(_datetimes(t[:1])[0] for t in result.timestamps) if dated else 0
    first = pd.DataFrame({"assets": [0], "position": [0.0], "trade": [0.0], "cost": [0.0], "net_return": [0.0],
                          "benchmark_net_return": [0.0 if bench is not None else np.nan]}, index=[start])
    table = pd.concat([first, body])
    table.index.name = "timestamp" if dated else "step"
    table["equity"] = equity_curve(table["net_return"].to_numpy()[1:])
    table["benchmark_equity"] = (equity_curve(table["benchmark_net_return"].to_numpy()[1:]) if bench is not None
                                 else np.nan)
    table = table.reset_index()
    return table[[c for c in PORTFOLIO_COLUMNS if c in table.columns]]


def portfolio_metrics(table, periods_per_year: float) -> dict[str, dict[str, float]]:
    """:func:`performance_metrics` of a :func:`portfolio_table`: ``{"agent": ..., "buy_and_hold": ...}``
    (the latter only when the table has a benchmark)."""
    rows = table.iloc[1:]
    agent = performance_metrics(rows["net_return"].to_numpy(), periods_per_year=periods_per_year,
                                positions=rows["position"].to_numpy(), trades=rows["trade"].to_numpy(),
                                costs=rows["cost"].to_numpy())
    out = {"agent": {k: v for k, v in agent.items() if not k.startswith("cost_") or k == "cost_total"}}
    bench = rows["benchmark_net_return"].to_numpy()
    if np.isfinite(bench).all():
        out["buy_and_hold"] = {k: v for k, v in performance_metrics(bench, periods_per_year=periods_per_year).items()
                               if k in ("bars", "total_return", "annualized_return", "annualized_volatility",
                                        "sharpe", "sortino", "max_drawdown", "calmar")}
    return out
