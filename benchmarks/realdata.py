"""Real markets: the agent and the policy deployed on validation, on GOOGL daily (walk-forward) and a
10-stock daily panel (one sealed split), each beside buy-and-hold and the rule chosen on validation.

How to run (from the repository root; a GPU is used when there is one)::

    python -m benchmarks.realdata                                # as configured: GOOGL 4 folds x 40, panel 60
    python -m benchmarks.realdata --iterations 20 --panel-iterations 30   # reduced (what the CPU record ran)
    python -m benchmarks.realdata --quick                        # smoke: 2 folds x 3 iterations, panel 3 -> temp JSON

Each case runs the command line a user would (``rl-zerosync evaluate --walk-forward K`` on
``configs/walkforward_googl.yaml``; ``rl-zerosync train`` on ``configs/panel.yaml``, whose end-of-run
evaluation reads the 2015-2022 test once) and reads its outputs back: ``walk_forward.json``, the
panel's ``evaluation/metrics.json``. Per dataset: the agent's pooled test Sharpe with its calibrated
95% interval, the deployed policy's (decided per fold on validation only,
:mod:`rl_zerosync.evaluation.deploy`) with its interval and deployed - buy-and-hold, buy-and-hold's and
the rule chosen on validation's test Sharpe, turnover, the train / validation / test Sharpes and how
many folds deployed the agent. Writes ``benchmarks/results/realdata.json`` (``--out``).

Results to expect: on data this short the agent's intervals span zero and buy-and-hold is hard to
beat; the decision on validation then deploys a baseline in most folds, so the deployed policy's test
Sharpe sits near the baseline's rather than below it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, write_json

ROOT = Path(__file__).resolve().parents[1]
GOOGL = "configs/walkforward_googl.yaml"
PANEL = "configs/panel.yaml"


def _cli(args: list[str], log: Path) -> tuple[int, float]:
    """``python -m rl_zerosync <args>`` from the repository root, its output into ``log``: (exit code, seconds)."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.call([sys.executable, "-m", "rl_zerosync", *args], cwd=ROOT, stdout=out,
                             stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - t0


def _pair(iv: dict | None) -> list[float] | None:
    return None if not iv or iv.get("low") is None else [iv["low"], iv["high"]]


def googl(runs: Path, folds: int, iterations: int | None, seed: int, logs: Path) -> dict[str, Any]:
    """The GOOGL walk-forward: pooled agent, deployed policy and baselines from ``walk_forward.json``."""
    sets = ["--set", f"run.dir={runs}", "--set", f"run.seed={seed}", "--set", "run.num_cpus=1"]
    if iterations is not None:
        sets += ["--set", f"run.iterations={iterations}"]
    rc, wall = _cli(["evaluate", "--walk-forward", str(folds), "--config", GOOGL, *sets, "--overwrite"],
                    logs / "realdata_googl.log")
    report = json.loads((runs / "walkforward_googl" / "walk_forward.json").read_text())
    p, ev = report["pooled"], report.get("evidence") or {}
    iv = ev.get("intervals") or {}
    agent = iv.get("agent", {}).get("estimate")
    edge = iv.get("agent_minus_best_rule", {}).get("estimate")
    return {
        "command": f"rl-zerosync evaluate --walk-forward {folds} --config {GOOGL} " + " ".join(sets[1::2]),
        "exit_code": rc, "wall_s": wall, "complete": report.get("complete"), "folds": p.get("folds"),
        "agent_test_sharpe": agent, "agent_test_sharpe_ci95": p.get("test_sharpe_ci95"),
        "agent_minus_buy_and_hold_ci95": _pair(iv.get("agent_minus_buy_and_hold")),
        "deployed_test_sharpe": p.get("deployed_test_sharpe"),
        "deployed_test_sharpe_ci95": p.get("deployed_test_sharpe_ci95"),
        "deployed_minus_buy_and_hold": p.get("deployed_minus_buy_and_hold"),
        "deployed_minus_buy_and_hold_ci95": p.get("deployed_minus_buy_and_hold_ci95"),
        "folds_deploying_agent": p.get("folds_deploying_agent"),
        "deployed_per_fold": [f.get("deployment", {}).get("deployed") for f in report["folds"]],
        "buy_and_hold_test_sharpe": iv.get("buy_and_hold", {}).get("estimate"),
        "buy_and_hold_test_sharpe_ci95": _pair(iv.get("buy_and_hold")),
        "best_rule_test_sharpe": None if agent is None or edge is None else agent - edge,
        "best_rule_per_fold": [f["summary"].get("best_rule") for f in report["folds"]],
        "mean_fold_test_sharpe": p.get("mean_sharpe"), "mean_train_sharpe": p.get("mean_train_sharpe"),
        "mean_validation_sharpe": p.get("mean_validation_sharpe"), "turnover_per_bar": p.get("mean_turnover_per_bar"),
        "deflated_sharpe": p.get("deflated_sharpe"), "trials": p.get("trials"),
        "ci_method": p.get("ci_method"), "lines": report.get("lines"),
    }


def panel(runs: Path, iterations: int | None, seed: int, logs: Path) -> dict[str, Any]:
    """The panel's one training run and its end-of-run evaluation (the sealed 2015-2022 test read once)."""
    sets = ["--set", f"run.dir={runs}", "--set", f"run.seed={seed}", "--set", "run.num_cpus=1"]
    if iterations is not None:
        sets += ["--set", f"run.iterations={iterations}"]
    rc, wall = _cli(["train", "--config", PANEL, *sets, "--overwrite"], logs / "realdata_panel.log")
    report = json.loads((runs / "panel" / "evaluation" / "metrics.json").read_text())
    s, dep = report["summary"], report.get("deployment") or {}
    iv = (report.get("evidence") or {}).get("intervals") or {}
    return {
        "command": f"rl-zerosync train --config {PANEL} " + " ".join(sets[1::2]),
        "exit_code": rc, "wall_s": wall, "folds": 1, "assets": len(report["segments"]["test"]["assets"]),
        "agent_test_sharpe": s.get("sharpe"), "agent_test_sharpe_ci95": s.get("test_sharpe_ci95"),
        "agent_minus_buy_and_hold_ci95": _pair(iv.get("agent_minus_buy_and_hold")),
        "deployed": s.get("deployed"), "deployed_test_sharpe": s.get("deployed_test_sharpe"),
        "deployed_test_sharpe_ci95": s.get("deployed_test_sharpe_ci95"),
        "deployed_minus_buy_and_hold": (dep.get("test") or {}).get("deployed_minus_buy_and_hold", {}).get("estimate"),
        "deployed_minus_buy_and_hold_ci95": s.get("deployed_minus_buy_and_hold_ci95"),
        "folds_deploying_agent": int(s.get("deployed") == "agent"), "deployment_reason": dep.get("reason"),
        "buy_and_hold_test_sharpe": s.get("buy_and_hold_sharpe"),
        "buy_and_hold_test_sharpe_ci95": _pair(iv.get("buy_and_hold")),
        "best_rule": s.get("best_rule"), "best_rule_test_sharpe": s.get("best_rule_sharpe"),
        "train_sharpe": s.get("train_sharpe"), "validation_sharpe": s.get("validation_sharpe"),
        "test_sharpe": s.get("sharpe"), "turnover_per_bar": s.get("turnover_per_bar"),
        "deflated_sharpe": s.get("deflated_sharpe"), "trials": s.get("trials"), "ci_method": s.get("ci_method"),
        "checkpoint_iteration": s.get("checkpoint_iteration"), "summary_line": report.get("summary_line"),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, out=results_path("realdata"), quick="smoke: 2 folds x 3 iterations, panel 3 (temp JSON)")
    p.add_argument("--folds", type=int, default=4, help="GOOGL walk-forward folds (default 4)")
    p.add_argument("--iterations", type=int, default=None, help="GOOGL iterations per fold (default: the config's 40)")
    p.add_argument("--panel-iterations", type=int, default=None, help="panel iterations (default: the config's 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("googl", "panel"), default=None, help="run one dataset")
    p.add_argument("--runs", default=None, help="where the runs go (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.quick:
        args.folds, args.iterations, args.panel_iterations = 2, 3, 3
        args.out = args.out if args.out != results_path("realdata") else quick_path("realdata")
    runs = Path(args.runs or tempfile.mkdtemp(prefix="realdata_")).resolve()
    logs = Path(args.out).resolve().parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reduced = {"googl_iterations_per_fold": args.iterations or 40, "panel_iterations": args.panel_iterations or 60}
    result = result_header("realdata", device=device, config={
        "googl": GOOGL, "panel": PANEL, "folds": args.folds, "seed": args.seed, **reduced,
        "reduced": bool(args.iterations and args.iterations < 40) or bool(args.panel_iterations
                                                                             and args.panel_iterations < 60),
        "device": device.upper() if device == "cpu" else device})
    result["datasets"] = {}
    if args.only in (None, "googl"):
        result["datasets"]["googl"] = googl(runs, args.folds, args.iterations, args.seed, logs)
        write_json(result, args.out)  # the first dataset survives a stop in the second
    if args.only in (None, "panel"):
        result["datasets"]["panel"] = panel(runs, args.panel_iterations, args.seed, logs)
    cols = ("dataset", "folds", "agent", "agent CI", "deployed", "deployed CI", "agent folds", "buy&hold", "best rule")
    rows = [{"dataset": name, "folds": d["folds"], "agent": d["agent_test_sharpe"],
             "agent CI": _fmt_pair(d["agent_test_sharpe_ci95"]), "deployed": d["deployed_test_sharpe"],
             "deployed CI": _fmt_pair(d["deployed_test_sharpe_ci95"]), "agent folds": d["folds_deploying_agent"],
             "buy&hold": d["buy_and_hold_test_sharpe"], "best rule": d["best_rule_test_sharpe"]}
            for name, d in result["datasets"].items()]
    print_table(rows, cols, width=16, title="test Sharpe (pooled over folds; deployment decided on validation)")
    print_summary({name: {k: d[k] for k in ("exit_code", "wall_s")} for name, d in result["datasets"].items()})
    write_json(result, args.out)
    return max((d["exit_code"] for d in result["datasets"].values()), default=0)


def _fmt_pair(pair) -> str:
    return "-" if not pair else f"[{pair[0]:+.2f}, {pair[1]:+.2f}]"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
