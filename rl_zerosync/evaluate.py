"""``rl-zerosync evaluate``: the greedy policy of a checkpoint on held-out data -> JSON + PNG report.

Loads the Q module from the checkpoint (no Ray needed), rebuilds the run's data from the
checkpoint's ``settings.yaml`` and walks the validation and test segments once per asset with
:func:`rl_zerosync.envs.evaluate.evaluate_policy` (or the whole of ``--data FILE``). Writes
``metrics.json`` (policy, flat and buy-and-hold metrics, action and routing mix) and
``report.png`` (equity curve vs buy-and-hold, drawdown, action and routing mix).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from rl_zerosync.actions import NUM_EXPOSURES, OrderType, Urgency, encode

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
    for key in ("columns", "asset_column", "spread_source", "spread_bps", "features", "periods_per_year"):
        if key in cfg and cfg.get("source") in ("csv", "parquet"):
            file_cfg[key] = cfg[key]
    return file_cfg, ["all"]


def _plot(res, hold_equity: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    ax_eq, ax_dd, ax_exp, ax_route = axes.ravel()
    for name, eq in zip(res.assets, res.equity):
        ax_eq.plot(eq, lw=1.0, label=f"agent {name}")
        peak = np.maximum.accumulate(eq)
        ax_dd.plot(1.0 - eq / np.where(peak > 0, peak, 1.0), lw=1.0, label=name)
    for name, eq in zip(res.assets, hold_equity):
        ax_eq.plot(eq, lw=0.8, ls="--", alpha=0.7, label=f"buy & hold {name}")
    ax_eq.set_title(f"equity on the {res.segment} segment (agent vs buy and hold)")
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
                        out_dir: str | Path | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint; returns the JSON report (also written to ``out_dir``)."""
    from rl_zerosync.envs import EnvParams, make_market
    from rl_zerosync.envs.evaluate import evaluate_policy
    from rl_zerosync.train import SETTINGS_FILE, find_checkpoint

    ckpt = find_checkpoint(checkpoint)
    settings = yaml.safe_load((ckpt / SETTINGS_FILE).read_text())
    module = load_module(ckpt)
    mode = settings["model"]["action_mode"]
    params = EnvParams.from_dict(settings.get("env"))
    routing = {k: v for k, v in (settings.get("runner") or {}).items() if k in ("wide", "high_vol", "low_vol")}
    data_cfg, segments = _data_cfg(settings, data)
    policy = greedy_policy(module)
    out_dir = Path(out_dir) if out_dir else ckpt.parent / "evaluation"
    out_dir.mkdir(parents=True, exist_ok=True)
    results, report = {}, {"checkpoint": str(ckpt), "action_mode": mode, "segments": {}}
    for segment in segments:
        market = make_market(data_cfg, segment)
        res = evaluate_policy(policy, market, params, device="cpu",
                              route_exposure=(mode == "routed"), routing=routing)
        results[segment] = res
        report["segments"][segment] = res.summary()
    last = results[segments[-1]]
    # Buy-and-hold equity curves for the plot (same bars as the agent, same execution model).
    hold_action = encode(int(np.argmax(params.exposure_levels)), OrderType.MARKET, Urgency.NORMAL)
    hold = evaluate_policy(lambda obs: torch.full((obs.shape[0],), hold_action, dtype=torch.int64),
                           make_market(data_cfg, segments[-1]), params, device="cpu", baselines=False)
    _plot(last, hold.equity, out_dir / "report.png")
    m = last.metrics["mean"]
    bh = last.baselines["buy_and_hold"]["mean"]
    report["summary"] = {
        "segment": last.segment,
        "sharpe": m["sharpe"],
        "total_return": m["total_return"],
        "max_drawdown": m["max_drawdown"],
        "flat_sharpe": 0.0,
        "buy_and_hold_sharpe": bh["sharpe"],
        "beats_flat_and_buy_and_hold": bool(m["sharpe"] > 0.0 and m["sharpe"] > bh["sharpe"]),
    }
    report["summary_line"] = (
        f"{last.segment}: sharpe {m['sharpe']:+.2f} (flat +0.00, buy&hold {bh['sharpe']:+.2f}) | "
        f"return {m['total_return']:+.2%} | max drawdown {m['max_drawdown']:.2%} | "
        f"report {out_dir / 'report.png'}"
    )
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=float))
    return report
