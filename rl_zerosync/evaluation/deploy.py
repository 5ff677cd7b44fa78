"""Which policy to deploy, decided on validation only: the agent, or the best baseline on validation
(the rule chosen there, buy-and-hold or flat).

**The candidates.** The agent (its checkpoint selected on validation) and the best baseline on
validation: :func:`~rl_zerosync.evaluation.backtest.best_rule` over flat, buy-and-hold and the tuned
rules at their variants chosen on validation (the report's "best rule").

**The rule** (:func:`decide`). On the validation segment, ``edge`` = agent - baseline: the mean over
series of per-series annualized Sharpe differences (paired, the same bars), with its calibrated 95%
interval (:func:`~rl_zerosync.evidence.calibrated.panel_interval`: independent held-out series as
whole clusters, series on one calendar (file data) by bar blocks). The agent is deployed only when
``edge > margin`` and the interval's lower bound ``> margin``; otherwise the baseline is deployed.
:data:`DEFAULT_MARGIN` is 0.0 Sharpe: the agent must beat the best baseline on validation beyond
sample noise. The agent's validation Sharpe is that of the checkpoint chosen on these bars (the best
of the passes compared: biased upward), as is the baseline's (the best of 51 rule variants); a
positive ``margin`` asks for more than noise.

**Never reads test.** :func:`decide` is given validation returns only; the deployed policy's test
numbers are computed after it (``test``: its Sharpe with the calibrated interval and deployed -
buy-and-hold paired). ``tests/test_deploy.py`` reverses and poisons the test returns and checks the
decision is the same.

**Where it goes.** :func:`attach_deployment` (called from the evaluation's evidence step) writes
``report["deployment"]`` (``deployed``, ``deployed_label``, ``reason``, ``margin``, ``rule``,
``validation``, ``test``), four ``summary`` keys (:data:`SUMMARY_KEYS`) and :data:`DEPLOY_FILE` (the
returns behind it). A walk-forward (:func:`walk_forward_deployment`) decides each fold (and seed)
again from that file with its margin and stitches the deployed policies' test returns per asset:
the pooled deployed-policy Sharpe with its interval, deployed - buy-and-hold and how many folds
deployed the agent.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.evidence.calibrated import panel_interval

DEFAULT_MARGIN = 0.0
"""Sharpe (annualized) by which the agent must beat the best baseline on validation, point estimate and
the lower bound of the calibrated 95% interval both."""
DEPLOY_FILE = "returns_deployment.npz"
"""In an evaluation directory: per series the validation returns the decision read (agent, baseline,
the agent's positions) and the test returns of both candidates and buy-and-hold."""
RULE = ("deploy the agent when agent - best baseline on validation (mean per-series Sharpe difference, "
        "paired) and the lower bound of its calibrated 95% interval are both above the margin; else deploy "
        "the best baseline on validation")
SUMMARY_KEYS = ("deployed", "deployed_test_sharpe", "deployed_test_sharpe_ci95", "deployed_minus_buy_and_hold_ci95")
"""What :func:`attach_deployment` adds to ``report["summary"]`` (None when no decision was made)."""


def check_margin(margin: Any) -> float:
    """``margin`` as a finite float (ValueError naming it otherwise)."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(float(margin)):
        raise ValueError(f"deploy margin: expected a finite Sharpe difference (e.g. 0.0), got {margin!r}")
    return float(margin)


def _triple(iv: Mapping[str, Any]) -> list[float]:
    return [iv["estimate"], iv["low"], iv["high"]]


def decide(agent: Sequence[np.ndarray], baseline: Sequence[np.ndarray], baseline_name: str, periods_per_year: float,
           *, independent_series: bool, positions: Sequence[np.ndarray] | None = None,
           margin: float = DEFAULT_MARGIN, seed: int = 0) -> dict[str, Any]:
    """The decision (module doc) from the *validation* per-series net returns of the agent and of the
    best baseline ``baseline_name``; ``positions``: the agent's (the block rule). Nothing else is read."""
    margin = check_margin(margin)
    kw = {"independent_series": independent_series, "seed": seed}
    edge = panel_interval(agent, baseline, periods_per_year, positions=positions, **kw)
    own = panel_interval(agent, None, periods_per_year, positions=positions, **kw)
    agent_wins = edge["estimate"] > margin and edge["low"] > margin
    shown = (f"agent - {baseline_name} on validation {edge['estimate']:+.2f} "
             f"[{edge['low']:+.2f}, {edge['high']:+.2f}]")
    if agent_wins:
        reason = f"{shown}: estimate and lower bound above the margin {margin:+.2f}"
    elif edge["estimate"] <= margin:
        reason = f"{shown}: estimate not above the margin {margin:+.2f}"
    else:
        reason = f"{shown}: lower bound not above the margin {margin:+.2f} (not beyond sample noise)"
    return {"deployed": "agent" if agent_wins else baseline_name, "reason": reason, "margin": margin, "rule": RULE,
            "decided_on": "validation",
            "validation": {"agent_sharpe": own["estimate"], "agent_sharpe_ci95": [own["low"], own["high"]],
                           "baseline": baseline_name, "baseline_sharpe": own["estimate"] - edge["estimate"],
                           "agent_minus_baseline": edge}}


def deployed_numbers(deployed: Sequence[np.ndarray], bench: Sequence[np.ndarray], periods_per_year: float, *,
                     independent_series: bool, positions: Sequence[np.ndarray] | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """The deployed policy's Sharpe on its test returns with the calibrated interval, and deployed -
    buy-and-hold paired (``deployed``, ``bench``: per series, or ``[seed][series]`` panels)."""
    kw = {"independent_series": independent_series, "positions": positions, "seed": seed}
    return {"sharpe": panel_interval(deployed, None, periods_per_year, **kw),
            "deployed_minus_buy_and_hold": panel_interval(deployed, bench, periods_per_year, **kw)}


# ------------------------------------------------------------------------------- one evaluation
def _records(result, column: str) -> list[np.ndarray]:
    """Per asset the agent's per-bar ``column`` (``net``, ``position``) of an ``EvalResult``."""
    return [np.asarray(rec[column], dtype=np.float64) for rec in result.records]


def _rule(result, rule: str) -> list[np.ndarray]:
    """Per asset the net returns of ``rule`` at its variant of the walk (flat: zeros on the agent's bars)."""
    if rule == "flat":
        return [np.zeros(len(rec["net"])) for rec in result.records]
    return [np.asarray(n, dtype=np.float64) for n in result.baseline_net[rule]]


def deployment_block(results: Mapping[str, Any], segments: Sequence[str], *, margin: float = DEFAULT_MARGIN,
                     seed: int = 0, out_dir: Path | None = None) -> dict[str, Any]:
    """The decision on ``results[segments[0]]`` (validation), then the deployed policy's numbers on
    ``results[segments[-1]]`` (test); ``out_dir``: where :data:`DEPLOY_FILE` goes."""
    from rl_zerosync.evaluation.backtest import best_rule

    first, last = segments[0], segments[-1]
    if first == last:
        return {"deployed": None, "reason": f"one segment evaluated ({first}): no validation segment apart from "
                                            "the reported one to decide on"}
    if first not in results or last not in results:
        return {"deployed": None, "reason": f"segments {first!r} and {last!r} were not both walked"}
    chooser, report_seg = results[first], results[last]
    best = best_rule(chooser.baselines)
    label = chooser.baselines[best].get("variant", best)
    val = {"agent": _records(chooser, "net"), "baseline": _rule(chooser, best),
           "position": _records(chooser, "position")}
    ind = all(ts is None for ts in chooser.timestamps)  # independent held-out series, else one calendar
    out = decide(val["agent"], val["baseline"], best, float(chooser.periods_per_year), independent_series=ind,
                 positions=val["position"], margin=margin, seed=seed)
    out["validation"]["baseline_label"] = label
    out["validation"]["baselines"] = {r: chooser.baselines[r]["mean"]["sharpe"] for r in chooser.baselines}
    out["deployed_label"] = "agent" if out["deployed"] == "agent" else label
    test = {"agent": _records(report_seg, "net"), "baseline": _rule(report_seg, best),
            "buy_and_hold": _rule(report_seg, "buy_and_hold"), "position": _records(report_seg, "position")}
    agent_deployed = out["deployed"] == "agent"
    try:  # after the decision: test numbers that cannot be computed leave it as it is
        numbers = deployed_numbers(test["agent"] if agent_deployed else test["baseline"], test["buy_and_hold"],
                                   float(report_seg.periods_per_year), independent_series=ind,
                                   positions=test["position"] if agent_deployed else None, seed=seed)
    except ValueError as err:
        numbers = {"value": None, "reason": f"no test numbers for the deployed policy: {err}"}
    out["test"] = {"segment": report_seg.segment, "policy": out["deployed_label"], **numbers}
    if out_dir is not None:
        write_deployment_returns(Path(out_dir), val, test, best, label, float(chooser.periods_per_year),
                                 float(report_seg.periods_per_year), ind)
        out["file"] = DEPLOY_FILE
    return out


def attach_deployment(report: dict, results: Mapping[str, Any], segments: Sequence[str],
                      out_dir: Path | None = None, margin: float = DEFAULT_MARGIN) -> None:
    """``report["deployment"]`` (:func:`deployment_block`) and its :data:`SUMMARY_KEYS` in
    ``report["summary"]``; a segment the statistics cannot take gives ``deployed: None`` with the reason."""
    try:
        block = deployment_block(results, segments, margin=margin, out_dir=out_dir)
    except ValueError as err:
        block = {"deployed": None, "reason": f"no deployment decision: {err}"}
    report["deployment"] = block
    summary = report.setdefault("summary", {})
    summary.update(dict.fromkeys(SUMMARY_KEYS))
    if block.get("deployed") is not None and "sharpe" in block["test"]:
        t = block["test"]
        summary.update({"deployed": block["deployed_label"], "deployed_test_sharpe": t["sharpe"]["estimate"],
                        "deployed_test_sharpe_ci95": [t["sharpe"]["low"], t["sharpe"]["high"]],
                        "deployed_minus_buy_and_hold_ci95": [t["deployed_minus_buy_and_hold"]["low"],
                                                             t["deployed_minus_buy_and_hold"]["high"]]})


# ----------------------------------------------------------------------------------- the file
def write_deployment_returns(out_dir: Path, val: Mapping[str, Sequence[np.ndarray]],
                             test: Mapping[str, Sequence[np.ndarray]], baseline: str, label: str,
                             p_validation: float, p_test: float, independent: bool) -> Path:
    """:data:`DEPLOY_FILE`: arrays ``validation_<side>_<i>`` and ``test_<side>_<i>`` per series ``i``."""
    arrays = {f"{segment}_{side}_{i}": np.asarray(x, dtype=np.float64)
              for segment, sides in (("validation", val), ("test", test))
              for side, series in sides.items() for i, x in enumerate(series)}
    path = Path(out_dir) / DEPLOY_FILE
    np.savez(path, baseline=np.array(baseline), baseline_label=np.array(label),
             periods_per_year=np.array([p_validation, p_test]), independent=np.array(bool(independent)), **arrays)
    return path


_SIDES = {"validation": ("agent", "baseline", "position"), "test": ("agent", "baseline", "buy_and_hold", "position")}


def _count(files: Sequence[str], prefix: str) -> int:
    return sum(1 for k in files if k.startswith(prefix + "_") and k[len(prefix) + 1:].isdigit())


def read_deployment_returns(eval_dir: Path) -> dict[str, Any]:
    """What :func:`write_deployment_returns` wrote: ``validation`` and ``test`` (side -> per-series
    arrays), ``baseline``, ``baseline_label``, ``periods_per_year`` (validation, test), ``independent``."""
    path = Path(eval_dir) / DEPLOY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no deployment returns (written by evaluate since the deployment "
                                "decision; evaluate the run again)")
    with np.load(path) as z:
        out: dict[str, Any] = {
            segment: {side: [z[f"{segment}_{side}_{i}"] for i in range(_count(z.files, f"{segment}_{side}"))]
                      for side in sides} for segment, sides in _SIDES.items()}
        out.update(baseline=str(z["baseline"]), baseline_label=str(z["baseline_label"]),
                   periods_per_year=tuple(float(v) for v in z["periods_per_year"]),
                   independent=bool(z["independent"]))
    return out


# ---------------------------------------------------------------------------------- walk-forward
def walk_forward_deployment(folds: Sequence[Mapping[str, Any]], margin: float = DEFAULT_MARGIN,
                            seed: int = 0) -> dict[str, Any]:
    """Per fold (and seed) the decision on its validation returns (:data:`DEPLOY_FILE` of
    ``<run_dir>/evaluation``), then per seed each asset's deployed test returns stitched over the
    folds: the pooled deployed-policy Sharpe and deployed - buy-and-hold with calibrated intervals
    (seeds drawn with replacement when there are several). Folds without the file: ``{"value":
    None, "reason": ...}``."""
    margin = check_margin(margin)
    try:
        runs = [read_deployment_returns(Path(f["run_dir"]) / "evaluation") for f in folds]
    except FileNotFoundError as err:
        return {"value": None, "reason": str(err), "margin": margin}
    per_fold, by_seed = [], {}
    for fold, run in zip(folds, runs):
        v = run["validation"]
        d = decide(v["agent"], v["baseline"], run["baseline"], run["periods_per_year"][0],
                   independent_series=run["independent"], positions=v["position"], margin=margin, seed=seed)
        agent = d["deployed"] == "agent"
        t = run["test"]
        by_seed.setdefault(fold.get("seed"), []).append(
            (t["agent"] if agent else t["baseline"], t["buy_and_hold"], t["position"] if agent else None))
        per_fold.append({"fold": fold["fold"], **({"seed": fold["seed"]} if "seed" in fold else {}),
                         "deployed": "agent" if agent else run["baseline_label"], "reason": d["reason"],
                         "validation_agent_minus_baseline": _triple(d["validation"]["agent_minus_baseline"])})
    deployed, bench, all_agent = [], [], all(f["deployed"] == "agent" for f in per_fold)
    for parts in by_seed.values():
        assets = len(parts[0][0])
        deployed.append([np.concatenate([p[0][a] for p in parts]) for a in range(assets)])
        bench.append([np.concatenate([p[1][a] for p in parts]) for a in range(assets)])
    first = next(iter(by_seed.values()))
    positions = ([np.concatenate([p[2][a] for p in first]) for a in range(len(first[0][0]))] if all_agent else None)
    pooled = deployed_numbers(deployed, bench, runs[0]["periods_per_year"][1],
                              independent_series=runs[0]["independent"], positions=positions, seed=seed)
    n_agent = sum(f["deployed"] == "agent" for f in per_fold)
    return {"margin": margin, "rule": RULE, "decided_on": "validation", "folds": per_fold,
            "folds_deploying_agent": n_agent, "decisions": len(per_fold), "pooled": pooled,
            "series": (f"{len(by_seed)} seed(s) x {len(deployed[0])} asset(s), each the deployed policies' test "
                       f"returns of {len(first)} folds stitched in time")}


def pooled_summary(dep: Mapping[str, Any]) -> dict[str, Any]:
    """``walk_forward.json``'s ``pooled`` share of :func:`walk_forward_deployment` (empty without it)."""
    if dep.get("pooled") is None:
        return {}
    s, d = dep["pooled"]["sharpe"], dep["pooled"]["deployed_minus_buy_and_hold"]
    return {"deployed_test_sharpe": s["estimate"], "deployed_test_sharpe_ci95": [s["low"], s["high"]],
            "deployed_minus_buy_and_hold": d["estimate"], "deployed_minus_buy_and_hold_ci95": [d["low"], d["high"]],
            "folds_deploying_agent": dep["folds_deploying_agent"], "deploy_decisions": dep["decisions"],
            "deploy_margin": dep["margin"]}


def deployment_line(dep: Mapping[str, Any]) -> str:
    """The walk-forward's deployed-policy line."""
    if dep.get("pooled") is None:
        return f"deployed policy: no decision ({dep.get('reason')})"
    s, d = dep["pooled"]["sharpe"], dep["pooled"]["deployed_minus_buy_and_hold"]
    chosen = ", ".join(f"{f['fold']}" + (f"/s{f['seed']}" if "seed" in f else "") + f": {f['deployed']}"
                       for f in dep["folds"])
    return (f"deployed policy (decided on validation, margin {dep['margin']:+.2f}): pooled test sharpe "
            f"{s['estimate']:+.2f} 95% CI [{s['low']:+.2f}, {s['high']:+.2f}], minus buy&hold {d['estimate']:+.2f} "
            f"[{d['low']:+.2f}, {d['high']:+.2f}] | agent deployed in {dep['folds_deploying_agent']}/"
            f"{dep['decisions']} folds ({chosen})")


def add_walk_forward_deployment(report: dict) -> None:
    """Into a walk-forward's ``report`` (its ``folds`` done, ``deploy_margin``): ``deployment``
    (:func:`walk_forward_deployment`), each fold's decision as ``folds[i]["deployment"]``, the
    :func:`pooled_summary` keys in ``pooled`` and, when the folds kept their returns, :func:`deployment_line`
    last in ``lines``."""
    if not report.get("folds"):
        return
    dep = walk_forward_deployment(report["folds"], report.get("deploy_margin", DEFAULT_MARGIN))
    report["deployment"] = dep
    for fold, decision in zip(report["folds"], dep.get("folds") or []):
        fold["deployment"] = decision
    report["pooled"].update(pooled_summary(dep))
    if dep.get("pooled") is not None:
        report.setdefault("lines", []).append(deployment_line(dep))
