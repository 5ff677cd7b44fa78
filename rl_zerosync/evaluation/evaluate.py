"""``rl-zerosync evaluate``: the greedy policy of a checkpoint on held-out data -> JSON, per-bar
series and a PNG report.

Loads the Q module from the checkpoint (by default the run's best-validation checkpoint; no Ray
needed), rebuilds the run's data from the checkpoint's ``settings.yaml`` and walks the validation
and test segments once per asset with :func:`rl_zerosync.evaluation.backtest.evaluate_policy` (or the
whole of ``--data FILE``), beside the rule baselines (variants chosen on validation, frozen for
test). Writes to the output directory:

* ``metrics.json``: policy and rule metrics per segment (per asset, their mean, and the
  equal-weight portfolio of the assets), which checkpoint and iteration, action and routing mix,
  the data settings used (``data``, with ``periods_per_year`` and how the files were read per
  segment), ``overlap`` (the training-period check below) and ``warnings``.
* ``bars_<segment>.csv`` (and ``.parquet`` when pyarrow is installed) per evaluated segment
  (``validation``, ``test``; ``all`` for ``--data``): one row per asset and bar with ``timestamp``
  (when the data has timestamps), ``bar`` (the bar's index in the asset's series), ``asset``,
  ``price`` (close), ``position`` (exposure held over the bar), ``trade`` (the change in position
  into it, made at the previous bar's close), ``cost`` (of that trade, fraction of equity),
  ``net_return`` (``position * (price / previous price - 1) - cost``), ``equity`` (from 1) and
  ``benchmark_equity`` (the buy-and-hold rule, same execution and costs); see :func:`rl_zerosync.evaluation.backtest.bar_table`. The last ``equity`` of an
  asset is ``1 + total_return`` of its metrics.
* ``portfolio_<segment>.csv`` (and ``.parquet``): the equal-weight portfolio of the assets (the mean
  of their net returns each bar) and its buy-and-hold benchmark
  (:func:`rl_zerosync.evaluation.backtest.portfolio_table`).
* ``report.png``: one column per segment (validation, test), dates on the x axis when the data has
  timestamps: equity per asset, the equal-weight portfolio and its buy-and-hold benchmark (and the
  tuned rules' portfolios); positions; drawdowns; below, the exposure and routing mix.

The summary line (test segment, or ``all`` for ``--data``) reports the Sharpe beside flat,
buy-and-hold and the best rule, and the equity return in percent (mean over assets and, with
several assets, of the equal-weight portfolio, each beside buy-and-hold).

``--data FILE`` takes the run's column mapping, asset column, spread, feature and spike-check
settings and ``periods_per_year`` when the run trained on files (``auto`` or unset: inferred from
the file's own timestamps). ``overrides`` (``--set data.KEY=VALUE``,
parsed as the settings loader parses ``--set``) change the evaluated data's settings last, so an
explicit ``data.periods_per_year`` wins over the run's value and over inference from timestamps;
only ``data.*`` keys are accepted (the rest of a checkpoint's settings belong to the trained model).
Without ``--data`` they change the run's data settings for every segment evaluated (the ``train``
segment of the train-minus-test gap included).

Training-period overlap: when the evaluated bars and the run's training data both have timestamps,
the evaluated bars (all assets) are compared with the time range of the run's ``train`` segment
(rebuilt from the checkpoint's data settings, before any override); evaluated bars inside it give
a one-line warning on stderr and an entry in ``warnings`` (results partly in sample). The check
is by time only, whatever the assets. Synthetic data has no timestamps, so runs trained on
synthetic data (or evaluated on undated files) are not checked (``overlap.checked`` false, with
the reason).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from rl_zerosync.actions import NUM_EXPOSURES

MODULE_PATH = Path("learner_group") / "learner" / "rl_module" / "default_policy"


def load_module(ckpt: Path):
    """The trained Q module of a checkpoint, on the CPU, in eval mode."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    path = ckpt / MODULE_PATH
    if not path.is_dir():
        raise FileNotFoundError(f"{ckpt}: no RLModule at {MODULE_PATH}")
    module = RLModule.from_checkpoint(str(path.resolve()))
    return module.to("cpu").eval()


def greedy_policy(module):
    """obs -> greedy action: exposure index (routed) or factored index (flat, branching)."""

    def policy(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return module.greedy_actions(module.q_values(obs))

    return policy


def data_overrides(data_cfg: dict, overrides: list[str] | None) -> dict:
    """``data_cfg`` with ``--set data.KEY=VALUE`` overrides applied (values parsed as the settings
    loader parses ``--set``; nested keys like ``data.columns.close=...`` allowed). Any other section
    raises :class:`~rl_zerosync.config.settings.SettingsError` naming the key."""
    from rl_zerosync.config.settings import SettingsError, apply_overrides

    for item in overrides or []:
        section = next(iter(apply_overrides({}, [item])))  # SettingsError on a malformed item
        if section != "data":
            key = item.split("=", 1)[0].strip()
            raise SettingsError(
                f"--set {key}: with --checkpoint only data.KEY settings can be changed (the evaluated "
                f"data: columns, asset_column, periods_per_year, spread_source, spread_bps, ...); the "
                f"run's other settings belong to the trained model"
            )
    return apply_overrides({"data": dict(data_cfg)}, list(overrides or []))["data"]


def _data_cfg(settings: dict, data_file: str | None,
              overrides: list[str] | None = None) -> tuple[dict, list[str]]:
    cfg = dict(settings.get("data") or {})
    if data_file is None:
        return data_overrides(cfg, overrides), ["validation", "test"]
    suffix = Path(data_file).suffix.lower()
    source = "parquet" if suffix in (".parquet", ".pq") else "csv"
    file_cfg = {"source": source, "paths": [data_file]}
    for key in ("columns", "asset_column", "spread_source", "spread_bps", "features", "periods_per_year",
                "max_abs_log_return"):
        if key in cfg and cfg.get("source") in ("csv", "parquet"):
            file_cfg[key] = cfg[key]
    return data_overrides(file_cfg, overrides), ["all"]


def _training_market(settings: dict):
    """What the run trained on: its ``train`` segment, or with ``data.regenerate_every`` the first
    fresh series of the local env runner."""
    from rl_zerosync.data import make_market
    from rl_zerosync.data.data_settings import regenerate_every
    from rl_zerosync.data.fresh import build_training_market, training_seed

    data_cfg = dict(settings.get("data") or {})
    if not regenerate_every(data_cfg):
        return make_market(data_cfg, "train")
    runner_seed = (settings.get("runner") or {}).get("seed")
    run_seed = runner_seed if runner_seed is not None else settings["run"]["seed"]
    return build_training_market(data_cfg, training_seed(data_cfg.get("seed", 0), run_seed, 0, 0))


def _naive_times(stamps: list[np.ndarray]):
    """All ``stamps`` as one pandas DatetimeIndex without time zone (aware ones in UTC)."""
    import pandas as pd

    values = np.concatenate([np.asarray(t) for t in stamps]) if stamps else np.array([], "datetime64[ns]")
    try:
        idx = pd.DatetimeIndex(pd.to_datetime(values))
    except (TypeError, ValueError):  # mixed time zones
        idx = pd.DatetimeIndex(pd.to_datetime(values, utc=True))
    return idx.tz_convert("UTC").tz_localize(None) if idx.tz is not None else idx


def _show_time(t) -> str:
    return t.strftime("%Y-%m-%d") if t == t.normalize() else t.isoformat()


def training_overlap(results: list, train_market) -> tuple[dict[str, Any], str | None]:
    """Compare the evaluated bars of ``results`` (the bars with a return, all assets) with the traded
    bars of ``train_market`` (the run's ``train`` segment; None: synthetic data) by time: ``(info
    for metrics.json, the warning or None)``. Not checked (``info["checked"]`` false, with the
    reason) when either side has no timestamps."""
    if train_market is None or train_market.timestamps is None:
        why = "synthetic data" if train_market is None else "its files have no timestamp column"
        return {"checked": False, "reason": f"the run's training data has no timestamps ({why})"}, None
    if not all(t is not None for res in results for t in res.timestamps):
        return {"checked": False, "reason": "the evaluated data has no timestamps"}, None
    starts = train_market.valid_start.cpu().tolist()  # host read: once per evaluation
    lengths = train_market.length.cpu().tolist()  # host read: once per evaluation
    trained = _naive_times([ts[s:n] for ts, s, n in zip(train_market.timestamps, starts, lengths)])
    traded = _naive_times([t[1:] for res in results for t in res.timestamps])
    shown = _naive_times([t for res in results for t in res.timestamps])
    lo, hi = trained.min(), trained.max()
    inside = int(((traded >= lo) & (traded <= hi)).sum())
    info = {
        "checked": True,
        "training_period": [_show_time(lo), _show_time(hi)],
        "evaluated_period": [_show_time(shown.min()), _show_time(shown.max())],
        "evaluated_bars": int(len(traded)),
        "overlapping_bars": inside,
    }
    if not inside:
        return info, None
    return info, (f"the evaluated period {info['evaluated_period'][0]} .. {info['evaluated_period'][1]} overlaps "
                  f"the run's training period {info['training_period'][0]} .. {info['training_period'][1]} "
                  f"({inside} of {len(traded)} evaluated bars inside it): these results are partly in sample")


def _train_segment_market(settings: dict, train_market=None):
    """The run's training market for the overlap check: ``train_market`` when given, None for
    synthetic data (no timestamps), else rebuilt from the run's data settings."""
    if (settings.get("data") or {}).get("source", "synthetic") not in ("csv", "parquet"):
        return None
    if train_market is not None:
        return train_market
    return _training_market(settings)


def write_series(results: dict, out_dir: Path) -> tuple[dict[str, dict[str, str]], dict]:
    """Write ``bars_<segment>.csv`` and ``portfolio_<segment>.csv`` (and ``.parquet`` when pyarrow
    is installed) of every result; returns (segment -> kind -> path, segment -> portfolio table)."""
    from rl_zerosync.evaluation.backtest import bar_table, portfolio_table

    parquet = importlib.util.find_spec("pyarrow") is not None
    outputs, portfolios = {}, {}
    for segment, res in results.items():
        paths = {}
        portfolios[segment] = portfolio_table(res)
        for kind, table in (("bars", bar_table(res)), ("portfolio", portfolios[segment])):
            path = out_dir / f"{kind}_{segment}.csv"
            # The walk's per-bar values are float32: written at that precision (0.15, not
            # 0.15000000596); equity curves (compounded in float64) in full.
            f32 = {c: np.float32 for c in table.columns if table[c].dtype == np.float64 and "equity" not in c}
            table.astype(f32).to_csv(path, index=False)
            paths[f"{kind}_csv"] = str(path)
            if parquet:
                path = out_dir / f"{kind}_{segment}.parquet"
                table.to_parquet(path, index=False)
                paths[f"{kind}_parquet"] = str(path)
        outputs[segment] = paths
    return outputs, portfolios


def _x(stamps, bars):
    """x values of a curve: dates when the data has timestamps, else bar indices."""
    if stamps is None:
        return np.asarray(bars)
    import pandas as pd

    return pd.to_datetime(np.asarray(stamps))


def _drawdown(eq: np.ndarray) -> np.ndarray:
    eq = np.asarray(eq, dtype=np.float64)
    peak = np.maximum.accumulate(eq)
    return 1.0 - eq / np.where(peak > 0, peak, 1.0)


def _plot(results: dict, portfolios: dict, path: Path) -> None:
    """The report figure (see the module doc): one column per segment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    segments = list(results)
    ncol = len(segments)
    fig = plt.figure(figsize=(7.5 * max(ncol, 2), 13))
    grid = fig.add_gridspec(4, 2, height_ratios=[3.0, 1.3, 1.3, 1.7])
    palette = plt.get_cmap("tab10")
    styles = {"momentum": ":", "mean_reversion": "-."}
    for c, segment in enumerate(segments):
        res, port = results[segment], portfolios[segment]
        col = slice(None) if ncol == 1 else c
        ax_eq = fig.add_subplot(grid[0, col])
        ax_pos = fig.add_subplot(grid[1, col], sharex=ax_eq)
        ax_dd = fig.add_subplot(grid[2, col], sharex=ax_eq)
        dated = all(t is not None for t in res.timestamps)
        many = len(res.assets) > 1
        few = many and len(res.assets) <= 8  # per-asset lines (one asset: the portfolio is the asset)
        for a, name in enumerate(res.assets if many else []):
            x = _x(res.timestamps[a], res.bars[a])
            color = palette((a + 1) % 10)
            ax_eq.plot(x, res.equity[a], lw=0.8, alpha=0.7, color=color, label=f"agent {name}" if few else None)
            pos = np.concatenate(([0.0], res.records[a]["position"]))
            if few:
                ax_pos.step(x, pos, where="pre", lw=0.7, alpha=0.6, color=color, label=name)
                ax_dd.plot(x, _drawdown(res.equity[a]), lw=0.6, alpha=0.5, color=color)
        if "timestamp" in port:
            px = _x(port["timestamp"].to_numpy(), None)
        else:  # undated: steps from the first tradable bar, on the bars of the longest asset
            longest = int(np.argmax([len(b) for b in res.bars]))
            px = np.asarray(res.bars[longest][0] + port["step"].to_numpy())
        label = "agent equal-weight portfolio" if many else f"agent {res.assets[0]}"
        ax_eq.plot(px, port["equity"], lw=2.0, color="tab:blue", label=label)
        if np.isfinite(port["benchmark_equity"]).all():
            ax_eq.plot(px, port["benchmark_equity"], lw=1.8, ls="--", color="k",
                       label="buy & hold" + (" equal-weight portfolio" if many else ""))
            ax_dd.plot(px, _drawdown(port["benchmark_equity"].to_numpy()), lw=1.2, ls="--", color="k",
                       label="buy & hold")
        for rule, nets in res.baseline_net.items():
            if rule == "buy_and_hold":
                continue
            curve = _rule_portfolio(res, nets)
            if curve is not None:
                name = res.baselines.get(rule, {}).get("variant", rule)
                ax_eq.plot(px, curve, lw=1.0, ls=styles.get(rule, ":"), color="0.45", label=name)
        ax_eq.axhline(1.0, color="0.7", lw=0.6)
        m = res.metrics["mean"]
        ax_eq.set_title(f"{segment}: equity (Sharpe {m['sharpe']:+.2f}, equity return "
                        f"{100 * m['total_return']:+.2f}%{' mean of assets' if many else ''})", fontsize=10)
        ax_eq.legend(fontsize=7, ncol=2, loc="best")
        ax_pos.step(px, port["position"], where="pre", lw=1.6, color="tab:blue",
                    label="portfolio (mean)" if many else None)
        ax_pos.set_ylim(-1.1, 1.1)
        ax_pos.axhline(0.0, color="0.7", lw=0.6)
        ax_pos.set_title("position (exposure held over each bar)", fontsize=9)
        if few:
            ax_pos.legend(fontsize=7, ncol=4, loc="upper left")
        ax_dd.fill_between(px, 0.0, _drawdown(port["equity"].to_numpy()), color="tab:blue", alpha=0.3,
                           label="agent" + (" portfolio" if many else ""))
        ax_dd.invert_yaxis()
        ax_dd.set_title("drawdown", fontsize=9)
        ax_dd.legend(fontsize=7, loc="lower left")
        for ax in (ax_eq, ax_pos):
            ax.tick_params(labelbottom=False)
        if dated:
            locator = mdates.AutoDateLocator()
            ax_dd.xaxis.set_major_locator(locator)
            ax_dd.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        else:
            ax_dd.set_xlabel("bar")
    ax_exp = fig.add_subplot(grid[3, 0])
    ax_route = fig.add_subplot(grid[3, 1])
    width = 0.8 / ncol
    for c, segment in enumerate(segments):
        counts = results[segment].action_counts
        total = max(counts.sum(), 1.0)
        exposure = [counts[e * 9:(e + 1) * 9].sum() / total for e in range(NUM_EXPOSURES)]
        ax_exp.bar(np.arange(NUM_EXPOSURES) + (c - (ncol - 1) / 2) * width, exposure, width, label=segment)
        labels, values = [], []
        for o, oname in enumerate(("MKT", "LMT", "PAS")):
            for u, uname in enumerate(("low", "norm", "high")):
                labels.append(f"{oname}\n{uname}")
                values.append(sum(counts[e * 9 + o * 3 + u] for e in range(NUM_EXPOSURES)) / total)
        ax_route.bar(np.arange(len(values)) + (c - (ncol - 1) / 2) * width, values, width, label=segment)
    ax_exp.set_xticks(np.arange(NUM_EXPOSURES), ["-1", "-0.5", "0", "+0.5", "+1"])
    ax_exp.set_title("exposure mix", fontsize=9)
    ax_route.set_xticks(np.arange(len(labels)), labels, fontsize=7)
    ax_route.set_title("routing mix (order type x urgency)", fontsize=9)
    if ncol > 1:
        ax_exp.legend(fontsize=7)
        ax_route.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _rule_portfolio(res, nets: list[np.ndarray]) -> np.ndarray | None:
    """Equity of the equal-weight portfolio of a rule's per-asset net returns (the bars of
    :func:`~rl_zerosync.evaluation.backtest.portfolio_table`)."""
    from dataclasses import replace

    from rl_zerosync.evaluation.backtest import portfolio_table

    as_bench = replace(res, baseline_net={"buy_and_hold": nets})
    return portfolio_table(as_bench)["benchmark_equity"].to_numpy()


def _json_value(value: Any) -> Any:
    """numpy numbers as floats; anything else not JSON-able (a date in a data setting) as text."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def evaluate_checkpoint(checkpoint: str | Path, data: str | None = None,
                        out_dir: str | Path | None = None, which: str = "best",
                        device: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint (a run directory: its best-validation checkpoint, or the last with
    ``which="last"``); returns the JSON report (also written to ``out_dir`` with the per-bar series
    and the figure; see the module doc).

    The rules' variants are chosen on the validation segment and frozen for the test segment
    (with ``data``: chosen on that file, in sample, and marked so). ``overrides``: ``--set
    data.KEY=VALUE`` items for the evaluated data (any other section: ``SettingsError``)."""
    from rl_zerosync.rundir.checkpoints import SETTINGS_FILE, read_run_state, verified_checkpoint, warn
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.data.data_settings import check_data_keys
    from rl_zerosync.evaluation.backtest import best_rule, evaluate_policy, portfolio_metrics
    from rl_zerosync.evaluation.validation import routing_thresholds

    data_overrides({}, overrides)  # a bad key fails before anything is loaded
    ckpt = verified_checkpoint(checkpoint, which)  # CheckpointError naming the first damaged file
    settings = yaml.safe_load((ckpt / SETTINGS_FILE).read_text())
    data_cfg, segments = _data_cfg(settings, data, overrides)
    check_data_keys(data_cfg)  # an unknown data key (e.g. a mistyped --set) before the module loads
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    module = load_module(ckpt).to(dev)
    mode = settings["model"]["action_mode"]
    params = EnvParams.from_dict(settings.get("env"))
    routing = routing_thresholds(settings.get("runner"))
    policy = greedy_policy(module)
    out_dir = Path(out_dir) if out_dir else ckpt.parent / "evaluation"
    out_dir.mkdir(parents=True, exist_ok=True)
    run_state = read_run_state(ckpt)
    report = {"checkpoint": str(ckpt), "checkpoint_iteration": run_state.get("iteration"),
              "selected_by": run_state.get("best"), "action_mode": mode, "segments": {},
              "rule_choice_source": "validation" if data is None else "in_sample",
              "data": data_cfg, "overrides": list(overrides or [])}
    results, choice = {}, None
    for segment in segments:
        market = make_market(data_cfg, segment)
        res = evaluate_policy(policy, market, params, device=dev, route_exposure=(mode == "routed"),
                              routing=routing, rule_choice=choice, graph_key="agent")
        choice = res.rule_choice  # chosen on validation, frozen for test
        results[segment] = res
        report["segments"][segment] = res.summary()
        report["segments"][segment]["periods_per_year"] = float(market.periods_per_year)
        if getattr(market, "source_info", None):
            report["segments"][segment]["data_info"] = dict(market.source_info)
    outputs, portfolios = write_series(results, out_dir)
    for segment, res in results.items():
        report["segments"][segment]["portfolio"] = portfolio_metrics(portfolios[segment], res.periods_per_year)
    last = results[segments[-1]]
    train_sharpe, train_market = None, None
    if data is None:
        # The greedy policy on the data it trained on (the overfitting gap), no rules.
        train_market = _training_market({**settings, "data": data_cfg})
        train = evaluate_policy(policy, train_market, params, device=dev, route_exposure=(mode == "routed"),
                                routing=routing, baselines=False, graph_key="agent")
        report["segments"]["train"] = train.summary()
        train_sharpe = train.metrics["mean"]["sharpe"]
    warnings: list[str] = []
    try:
        same = data is None and not overrides  # the train segment above is the run's own
        overlap, warning = training_overlap(
            list(results.values()), _train_segment_market(settings, train_market if same else None))
    except (OSError, ValueError) as err:  # the run's training files moved or changed
        overlap = {"checked": False, "reason": f"the run's training data could not be rebuilt: {err}"}
        warning = f"could not check the overlap with the run's training period: {err}"
    if warning is not None:
        warnings.append(warning)
    report["overlap"] = overlap
    report["warnings"] = warnings
    for w in warnings:
        warn(w)
    png = out_dir / "report.png"
    _plot(results, portfolios, png)
    report["outputs"] = {"metrics_json": str(out_dir / "metrics.json"), "report_png": str(png), **outputs}
    m = last.metrics["mean"]
    b = last.baselines
    # The best rule is the one with the highest Sharpe on the segment that chose the variants.
    chooser = results[segments[0]]
    best = best_rule(chooser.baselines)
    best_label = b[best].get("variant", best)
    rules = {r: b[r]["mean"]["sharpe"] for r in b}
    port = report["segments"][last.segment]["portfolio"]
    bh_return = b["buy_and_hold"]["mean"]["total_return"]
    report["summary"] = {
        "segment": last.segment,
        "sharpe": m["sharpe"],
        "total_return": m["total_return"],
        "total_return_pct": 100.0 * m["total_return"],
        "buy_and_hold_total_return": bh_return,
        "portfolio_sharpe": port["agent"]["sharpe"],
        "portfolio_total_return": port["agent"]["total_return"],
        "max_drawdown": m["max_drawdown"],
        "turnover_per_bar": m["turnover_per_bar"],
        "flat_sharpe": 0.0,
        "buy_and_hold_sharpe": b["buy_and_hold"]["mean"]["sharpe"],
        "rules": rules,
        "rule_variants": {r: b[r]["variant"] for r in b if "variant" in b[r]},
        "best_rule": best_label,
        "best_rule_sharpe": b[best]["mean"]["sharpe"],
        "best_rule_validation_sharpe": chooser.baselines[best]["mean"]["sharpe"],
        "agent_minus_best_rule": m["sharpe"] - b[best]["mean"]["sharpe"],
        "checkpoint_iteration": run_state.get("iteration"),
        "beats_flat_and_buy_and_hold": bool(m["sharpe"] > 0.0 and m["sharpe"] > b["buy_and_hold"]["mean"]["sharpe"]),
        "periods_per_year": last.periods_per_year,
        "warnings": len(warnings),
    }
    if train_sharpe is not None:
        report["summary"]["train_sharpe"] = train_sharpe
        report["summary"]["train_minus_test_sharpe"] = train_sharpe - m["sharpe"]
    if "validation" in results:
        report["summary"]["validation_sharpe"] = results["validation"].metrics["mean"]["sharpe"]
    it = run_state.get("iteration")
    which_txt = f"{ckpt.name} (iteration {it})" if it is not None else ckpt.name
    n_assets = len(last.assets)
    if n_assets > 1:
        returns = (f"equity return {100 * m['total_return']:+.2f}% mean of {n_assets} assets (buy&hold "
                   f"{100 * bh_return:+.2f}%), equal-weight portfolio {100 * port['agent']['total_return']:+.2f}%")
        if "buy_and_hold" in port:
            returns += f" (buy&hold {100 * port['buy_and_hold']['total_return']:+.2f}%)"
    else:
        returns = f"equity return {100 * m['total_return']:+.2f}% (buy&hold {100 * bh_return:+.2f}%)"
    report["summary_line"] = (
        f"{last.segment}: sharpe {m['sharpe']:+.2f} (flat +0.00, buy&hold {rules['buy_and_hold']:+.2f}, "
        f"best rule: {best_label} {b[best]['mean']['sharpe']:+.2f}) | {returns} | "
        f"max drawdown {100 * m['max_drawdown']:.2f}% | {which_txt} | report {png}"
        + (f" | {len(warnings)} warning(s): see stderr / metrics.json" if warnings else "")
    )
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=_json_value))
    return report
