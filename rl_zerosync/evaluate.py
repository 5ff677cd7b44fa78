"""``rl-zerosync evaluate``: the greedy policy of a checkpoint on held-out data -> JSON + PNG report.

Loads the Q module from the checkpoint (by default the run's best-validation checkpoint; no Ray
needed), rebuilds the run's data from the checkpoint's ``settings.yaml`` and walks the validation
and test segments once per asset with :func:`rl_zerosync.envs.evaluate.evaluate_policy` (or the
whole of ``--data FILE``), beside the rule baselines (variants chosen on validation, frozen for
test). Writes ``metrics.json`` (policy and rule metrics, which checkpoint and iteration, action
and routing mix) and ``report.png`` (equity curves vs the rules, drawdown, action and routing mix).
"""
from __future__ import annotations

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


def _data_cfg(settings: dict, data_file: str | None) -> tuple[dict, list[str]]:
    cfg = dict(settings.get("data") or {})
    if data_file is None:
        return cfg, ["validation", "test"]
    suffix = Path(data_file).suffix.lower()
    source = "parquet" if suffix in (".parquet", ".pq") else "csv"
    file_cfg = {"source": source, "paths": [data_file]}
    for key in ("columns", "asset_column", "spread_source", "spread_bps", "features", "periods_per_year",
                "max_abs_log_return"):
        if key in cfg and cfg.get("source") in ("csv", "parquet"):
            file_cfg[key] = cfg[key]
    return file_cfg, ["all"]


def _training_market(settings: dict):
    """What the run trained on: its ``train`` segment, or with ``data.regenerate_every`` the first
    fresh series of the local env runner."""
    from rl_zerosync.envs import make_market
    from rl_zerosync.envs.fresh import build_training_market, regenerate_every, training_seed

    data_cfg = dict(settings.get("data") or {})
    if not regenerate_every(data_cfg):
        return make_market(data_cfg, "train")
    runner_seed = (settings.get("runner") or {}).get("seed")
    run_seed = runner_seed if runner_seed is not None else settings["run"]["seed"]
    return build_training_market(data_cfg, training_seed(data_cfg.get("seed", 0), run_seed, 0, 0))


def _plot(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    ax_eq, ax_dd, ax_exp, ax_route = axes.ravel()
    for name, eq in zip(res.assets, res.equity):
        ax_eq.plot(eq, lw=1.0, label=f"agent {name}")
        peak = np.maximum.accumulate(eq)
        ax_dd.plot(1.0 - eq / np.where(peak > 0, peak, 1.0), lw=1.0, label=name)
    styles = {"buy_and_hold": "--", "momentum": ":", "mean_reversion": "-."}
    for rule, curves in res.baseline_equity.items():
        label = res.baselines[rule].get("variant", rule)
        mean_curve = np.mean([c[: min(map(len, curves))] for c in curves], axis=0)
        ax_eq.plot(mean_curve, lw=1.6, ls=styles.get(rule, "--"), color="k", alpha=0.7,
                   label=f"{label} (mean of assets)")
    ax_eq.set_title(f"equity on the {res.segment} segment (agent per asset vs rules)")
    ax_eq.legend(fontsize=7, ncol=2)
    ax_dd.set_title("agent drawdown")
    counts = res.action_counts
    total = max(counts.sum(), 1.0)
    exposure = [counts[e * 9:(e + 1) * 9].sum() / total for e in range(NUM_EXPOSURES)]
    ax_exp.bar(["-1", "-0.5", "0", "+0.5", "+1"], exposure)
    ax_exp.set_title("exposure mix")
    labels, values = [], []
    for o, oname in enumerate(("MKT", "LMT", "PAS")):
        for u, uname in enumerate(("low", "norm", "high")):
            labels.append(f"{oname}\n{uname}")
            values.append(sum(counts[e * 9 + o * 3 + u] for e in range(NUM_EXPOSURES)) / total)
    ax_route.bar(labels, values)
    ax_route.set_title("routing mix (order type x urgency)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evaluate_checkpoint(checkpoint: str | Path, data: str | None = None,
                        out_dir: str | Path | None = None, which: str = "best",
                        device: str | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint (a run directory: its best-validation checkpoint, or the last with
    ``which="last"``); returns the JSON report (also written to ``out_dir``).

    The rules' variants are chosen on the validation segment and frozen for the test segment
    (with ``data``: chosen on that file, in sample, and marked so)."""
    from rl_zerosync.checkpoints import SETTINGS_FILE, read_run_state, verified_checkpoint
    from rl_zerosync.envs import EnvParams, make_market
    from rl_zerosync.envs.evaluate import best_rule, evaluate_policy
    from rl_zerosync.validation import routing_thresholds

    ckpt = verified_checkpoint(checkpoint, which)  # CheckpointError naming the first damaged file
    settings = yaml.safe_load((ckpt / SETTINGS_FILE).read_text())
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    module = load_module(ckpt).to(dev)
    mode = settings["model"]["action_mode"]
    params = EnvParams.from_dict(settings.get("env"))
    routing = routing_thresholds(settings.get("runner"))
    data_cfg, segments = _data_cfg(settings, data)
    policy = greedy_policy(module)
    out_dir = Path(out_dir) if out_dir else ckpt.parent / "evaluation"
    out_dir.mkdir(parents=True, exist_ok=True)
    run_state = read_run_state(ckpt)
    report = {"checkpoint": str(ckpt), "checkpoint_iteration": run_state.get("iteration"),
              "selected_by": run_state.get("best"), "action_mode": mode, "segments": {},
              "rule_choice_source": "validation" if data is None else "in_sample"}
    results, choice = {}, None
    for segment in segments:
        market = make_market(data_cfg, segment)
        res = evaluate_policy(policy, market, params, device=dev, route_exposure=(mode == "routed"),
                              routing=routing, rule_choice=choice, graph_key="agent")
        choice = res.rule_choice  # chosen on validation, frozen for test
        results[segment] = res
        report["segments"][segment] = res.summary()
    last = results[segments[-1]]
    train_sharpe = None
    if data is None:
        # The greedy policy on the data it trained on (the overfitting gap), no rules.
        train_market = _training_market(settings)
        train = evaluate_policy(policy, train_market, params, device=dev, route_exposure=(mode == "routed"),
                                routing=routing, baselines=False, graph_key="agent")
        report["segments"]["train"] = train.summary()
        train_sharpe = train.metrics["mean"]["sharpe"]
    _plot(last, out_dir / "report.png")
    m = last.metrics["mean"]
    b = last.baselines
    # The best rule is the one with the highest Sharpe on the segment that chose the variants.
    chooser = results[segments[0]]
    best = best_rule(chooser.baselines)
    best_label = b[best].get("variant", best)
    rules = {r: b[r]["mean"]["sharpe"] for r in b}
    report["summary"] = {
        "segment": last.segment,
        "sharpe": m["sharpe"],
        "total_return": m["total_return"],
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
    }
    if train_sharpe is not None:
        report["summary"]["train_sharpe"] = train_sharpe
        report["summary"]["train_minus_test_sharpe"] = train_sharpe - m["sharpe"]
    if "validation" in results:
        report["summary"]["validation_sharpe"] = results["validation"].metrics["mean"]["sharpe"]
    it = run_state.get("iteration")
    which_txt = f"{ckpt.name} (iteration {it})" if it is not None else ckpt.name
    report["summary_line"] = (
        f"{last.segment}: sharpe {m['sharpe']:+.2f} (flat +0.00, buy&hold {rules['buy_and_hold']:+.2f}, "
        f"best rule: {best_label} {b[best]['mean']['sharpe']:+.2f}) | return {m['total_return']:+.2%} | "
        f"max drawdown {m['max_drawdown']:.2%} | {which_txt} | report {out_dir / 'report.png'}"
    )
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=float))
    return report
