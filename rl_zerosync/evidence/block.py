"""The ``evidence`` block of an evaluation: how much of the result is sample noise and selection.

From the walked segments of :func:`rl_zerosync.evaluation.evaluate.evaluate_checkpoint` (the first
segment chose the rules' variants and, during training, the checkpoint: ``validation``; the last is
the report's, ``test`` normally) and the rule chosen on validation, :func:`evidence_block` gives,
every statistic from :mod:`rl_zerosync.evidence.calibrated` (intervals calibrated on the market they
are used on):

* ``intervals``: the agent's, each rule's and buy-and-hold's Sharpe on the report segment (the mean
  over series of per-series Sharpes, as ``summary["sharpe"]``) and the paired differences agent -
  best rule (the rule chosen on validation) and agent - buy-and-hold, by
  :func:`~rl_zerosync.evidence.calibrated.panel_interval`: independent synthetic series resampled
  as whole clusters, series on one calendar by a block bootstrap over bars with the block rule.
* ``deflated_sharpe``: the DSR where the selection happened, on the selected checkpoint's
  *validation* Sharpe, against the expected best of the effective number of checkpoints compared on
  validation (their per-pass validation returns, :data:`VALIDATION_RETURNS_DIR`), their null spread
  the calibrated standard error of a validation Sharpe; ``N``, ``V`` and ``E[max]`` reported.
* ``psr``: ``P[true test Sharpe > 0]`` from the calibrated standard error of the test Sharpe.
* ``spa``: Hansen's SPA of "some candidate beats the rule chosen on validation": the agent and every
  other rule variant against it, on the report segment (:mod:`rl_zerosync.evidence.resample`).
* ``pbo``: probability of backtest overfitting by CSCV over the rule variants and over the agent's
  own selection (its validation passes x validation blocks).
* ``power``: per segment the calibrated standard error of the agent's Sharpe and whether it can
  tell Sharpe 1 from 0 (``2 * se < 1``).

Every bootstrap is seeded (``seed``), so a report is reproducible on one kind of device.

A walked segment is read duck-typed, as the fields of an
:class:`~rl_zerosync.evaluation.backtest.EvalResult`: ``records`` (per asset ``net`` and ``position``),
``baseline_net`` (per walked rule its per-asset net returns), ``rule_grid`` / ``rule_grid_net`` (every
rule variant walked: its mean metrics / its per-asset net returns), ``rule_choice``, ``timestamps``,
``segment``, ``periods_per_year`` (and ``oracle``, ``assets`` on synthetic data). The report around the
block (its summary keys, the returns file, the printed text) is
:mod:`rl_zerosync.evaluation.evidence_report`'s.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from rl_zerosync.evidence.calibrated import (
    LEVEL, MIN_CLUSTERS, REPS, block_rule, deflated_sharpe, effective_trials, expected_max_z, panel_interval,
    psr_calibrated)
from rl_zerosync.evidence.overfitting import pbo_cscv
from rl_zerosync.evidence.resample import (
    chunks, cluster_counts, generator, kernel_variance, spa_pvalues, stationary_counts, stats_device)
from rl_zerosync.evidence.sharpe import sharpe_ratio

SPA_REPS = 1000
"""Bootstrap replications of the SPA test."""
PBO_BLOCKS = 16
"""CSCV time blocks (all C(16, 8) = 12870 splits)."""
VALIDATION_RETURNS_DIR = "validation_returns"
"""In a run directory: one ``<iteration>.npz`` per validation pass (per asset the pass's net returns),
the candidates of the checkpoint selection (the DSR's trials, the agent's PBO)."""


def independent_series(result) -> bool:
    """Whether the segment's series are independent draws (no timestamps: the synthetic source's
    held-out series) rather than assets on one calendar."""
    return all(ts is None for ts in result.timestamps)


def interval(a, b, result, p: float, seed: int, positions=None) -> dict[str, Any]:
    """:func:`panel_interval` of ``a`` (or ``a - b``) on ``result``'s series."""
    return panel_interval(a, b, p, independent_series=independent_series(result), positions=positions, seed=seed)


# ---------------------------------------------------------------------------------- segment returns
def agent_nets(result) -> list[np.ndarray]:
    """Per asset the agent's per-bar net returns of an :class:`~rl_zerosync.evaluation.backtest.EvalResult`."""
    return [np.asarray(rec["net"], dtype=np.float64) for rec in result.records]


def rule_nets(result, rule: str) -> list[np.ndarray]:
    """Per asset the net returns of ``rule`` (its chosen variant; ``flat``: zeros on the agent's bars)."""
    if rule == "flat":
        return [np.zeros(len(rec["net"])) for rec in result.records]
    if rule not in result.baseline_net:
        raise ValueError(f"rule: expected one of flat, {', '.join(result.baseline_net)}, got {rule!r}")
    return list(result.baseline_net[rule])


def variant_nets(result) -> dict[str, list[np.ndarray]]:
    """Per rule variant label (every variant walked on the segment: the keys of ``result.rule_grid``,
    in their order) the per-asset net returns walked."""
    labels = list(getattr(result, "rule_grid", None) or {})
    if not labels:
        raise ValueError(f"result {result.segment!r}: expected the rule variants walked with baselines "
                         "(rule_grid), found none")
    grid = getattr(result, "rule_grid_net", None) or {}
    missing = [label for label in labels if label not in grid]
    if missing:
        raise ValueError(f"result {result.segment!r}: expected the net returns of every rule variant "
                         f"(walked with baselines), missing {len(missing)} (first {missing[0]!r})")
    return {label: [np.asarray(n, dtype=np.float64) for n in grid[label]] for label in labels}


def pooled(nets: Sequence[np.ndarray]) -> np.ndarray:
    """Per-asset returns pooled: the assets' bars one after the other."""
    return np.concatenate([np.asarray(n, dtype=np.float64) for n in nets])


# ---------------------------------------------------------------------------------------- trials
def checkpoint_history(run_dir: Path | None, metric: str) -> tuple[list[float], str]:
    """Validation Sharpes of the checkpoints compared during training (the run's metrics rows with
    ``eval/validation_<metric>``: its ``metrics.jsonl``, or a population member's rows of the population's
    table, :func:`~rl_zerosync.rundir.metrics_table.read_metrics`) and where they came from; none found:
    ``[]`` and why."""
    from rl_zerosync.rundir.metrics_table import member_of, read_metrics

    try:
        rows = read_metrics(run_dir) if run_dir is not None else None
    except FileNotFoundError:
        rows = None
    if rows is None:
        return [], f"no validation history (no metrics.jsonl in {run_dir})"
    sharpes = [float(row.get("eval/validation_sharpe", math.nan)) for row in rows
               if f"eval/validation_{metric}" in row]
    member = None if (Path(run_dir) / "metrics.jsonl").is_file() else member_of(run_dir)
    where = "metrics.jsonl" if member is None else f"the population's metrics.jsonl (member {member})"
    return sharpes, f"{len(sharpes)} validation passes in {where}"


def save_validation_returns(run_dir: Path, iteration: int, nets: Sequence[np.ndarray]) -> Path:
    """One validation pass's per-asset net returns into ``<run_dir>/validation_returns/<iteration>.npz``."""
    folder = Path(run_dir) / VALIDATION_RETURNS_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"{int(iteration):08d}.npz"
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **{f"asset_{i}": np.asarray(n, dtype=np.float32) for i, n in enumerate(nets)})
    tmp.replace(path)
    return path


def validation_passes(run_dir: Path | None) -> np.ndarray | None:
    """The run's validation passes as ``[bars, passes]`` (assets pooled: bars one after the other),
    in iteration order; None when the run kept none (:func:`save_validation_returns`)."""
    folder = Path(run_dir) / VALIDATION_RETURNS_DIR if run_dir is not None else None
    files = sorted(folder.glob("*[0-9].npz")) if folder is not None and folder.is_dir() else []
    cols = []
    for f in files:
        with np.load(f) as z:
            cols.append(np.concatenate([z[f"asset_{i}"] for i in range(len(z.files))]).astype(np.float64))
    if not cols or len({c.size for c in cols}) != 1:
        return None
    return np.column_stack(cols)


def selection_trials(chooser, run_dir: Path | None, metric: str, seed: int = 0,
                     passes: np.ndarray | None = None) -> dict[str, Any]:
    """The checkpoint selection behind the report: the selected checkpoint's validation Sharpe
    (``chooser``, the validation walk) with its calibrated standard error, and the effective number
    of checkpoints compared (:func:`~rl_zerosync.evidence.calibrated.effective_trials` over the
    run's validation passes; without them every pass in ``metrics.jsonl`` counts as independent, the
    conservative count). ``passes``: the candidates' returns when they come from elsewhere (several
    runs' passes side by side)."""
    p = float(chooser.periods_per_year)
    iv = interval(agent_nets(chooser), None, chooser, p, seed, positions=agent_positions(chooser))
    passes = validation_passes(run_dir) if passes is None else passes
    if passes is not None:
        n, counted = effective_trials(passes)
        candidates = passes.shape[1]
    else:
        history, source = checkpoint_history(run_dir, metric)
        candidates = max(len(history), 1)
        n, counted = float(candidates), (f"{candidates} checkpoint(s) compared on validation ({source}), counted as "
                                         "independent: the run kept no per-pass validation returns (conservative)")
    return {"n": n, "candidates": candidates, "counted": counted, "selected_validation_sharpe": iv["estimate"],
            "se": iv["se"], "segment": chooser.segment}


def deflate(selections: Sequence[Mapping[str, Any]], se_of_mean: float | None = None) -> dict[str, Any]:
    """The DSR of one selection, or of the mean of several selections (seeds, folds, each its own):
    ``Phi((mean SR_sel - mean SR0) / se)`` with ``SR0 = se_trial * E[max of N standard normals]`` per
    selection (:func:`~rl_zerosync.evidence.calibrated.deflated_sharpe`: ``V = se_trial**2``, the
    null spread of a validation Sharpe); ``se_of_mean``: the calibrated standard error of the mean of
    the selected Sharpes (one selection: its own)."""
    if len(selections) == 1 and se_of_mean is None:
        t = selections[0]
        out = deflated_sharpe(t["selected_validation_sharpe"], t["se"], t["n"])
    else:
        sharpe = float(np.mean([t["selected_validation_sharpe"] for t in selections]))
        sr0 = float(np.mean([t["se"] * expected_max_z(t["n"]) for t in selections]))
        se = float(se_of_mean if se_of_mean is not None else selections[0]["se"])
        out = {"value": psr_calibrated(sharpe, se, sr0), "sharpe": sharpe, "expected_max": sr0,
               "variance": float(np.mean([t["se"] ** 2 for t in selections])),
               "trials": float(np.mean([t["n"] for t in selections])), "se": se}
    out["selections"] = len(selections)
    out["segment"] = selections[0].get("segment", "validation")
    out["trials_counted"] = "; ".join(dict.fromkeys(str(t["counted"]) for t in selections))
    return out


def agent_positions(result) -> list[np.ndarray]:
    """Per asset the agent's position on each bar (the block rule's position time)."""
    return [np.asarray(rec["position"], dtype=np.float64) for rec in result.records]


# --------------------------------------------------------------------------------------- SPA and PBO
def spa_test_panel(bench: Sequence[np.ndarray], cands: Sequence[Sequence[np.ndarray]], labels: Sequence[str],
                   independent: bool, *, reps: int = SPA_REPS, seed: int = 0, studentize: bool = True,
                   positions: Sequence[np.ndarray] | None = None,
                   device: torch.device | str | None = None) -> dict[str, Any]:
    """Hansen's SPA of ``H0: no candidate has a higher mean per-bar net return than the benchmark``,
    per-series returns pooled. Independent series (at least :data:`MIN_CLUSTERS`): whole series
    drawn with replacement, the variance of the means from the replicates; else a stationary
    bootstrap over the pooled bars with the block rule, Hansen's kernel variance."""
    dev = stats_device(device)
    gen = generator(seed, dev)
    lengths = [len(b) for b in bench]
    d_host = np.column_stack([pooled(c) for c in cands]) - pooled(bench)[:, None]
    d = torch.as_tensor(d_host, dtype=torch.float64, device=dev)
    t, k = d.shape
    mean = d_host.mean(axis=0)
    clusters = independent and len(bench) >= MIN_CLUSTERS
    if clusters:
        owner = torch.repeat_interleave(torch.arange(len(lengths), device=dev),
                                        torch.as_tensor(lengths, device=dev))
        sums = torch.zeros((len(lengths), k), dtype=torch.float64, device=dev).index_add_(0, owner, d)
        n_i = torch.as_tensor(lengths, dtype=torch.float64, device=dev)
        c = cluster_counts(len(lengths), reps, gen)
        replicated = (c @ sums) / (c @ n_i)[:, None]
        variance = (replicated.var(dim=0) * t).cpu().numpy()  # host read: k variances
        how = f"whole series drawn with replacement ({len(lengths)} independent series)"
    else:
        block, rule = block_rule([d_host[:, j] for j in range(k)], positions)
        parts = [(stationary_counts(t, block, size, gen) @ d) / t for size in chunks(reps, t)]
        replicated = torch.cat(parts)
        variance = kernel_variance(d_host, block)
        how = f"stationary bootstrap over the pooled bars, block {block:.1f} ({rule}), Hansen's kernel variance"
    pv = spa_pvalues(mean, replicated, variance, t, studentize=studentize)
    best = int(np.argmax(mean))
    return {"pvalue_lower": pv["lower"], "pvalue_consistent": pv["consistent"], "pvalue_upper": pv["upper"],
            "rejects_at_5pct": pv["consistent"] < 0.05, "best_candidate": labels[best],
            "best_mean_excess": float(mean[best]), "candidates": k, "bars": t,
            "method": f"Hansen SPA on mean per-bar net return, {how}, {reps} reps, "
                      f"{'studentized' if studentize else 'not studentized'}"}


def spa_block(result, benchmark: str, seed: int = 0) -> dict[str, Any]:
    """Hansen's SPA on ``result``'s bars: benchmark the rule chosen on validation (``benchmark``, its
    chosen variant), candidates the agent and every other rule variant (and flat when it is not the
    benchmark)."""
    grid = variant_nets(result)
    chosen = result.rule_choice.get(benchmark, benchmark) if benchmark != "flat" else "flat"
    labels = ["agent"] + [x for x in grid if x != chosen] + (["flat"] if chosen != "flat" else [])
    cands = [agent_nets(result)] + [grid[x] if x != "flat" else rule_nets(result, "flat") for x in labels[1:]]
    res = spa_test_panel(rule_nets(result, benchmark), cands, labels, independent_series(result), seed=seed,
                         positions=agent_positions(result))
    return {"hypothesis": f"H0: no candidate (the agent, the other rule variants) has a higher mean per-bar net "
                          f"return than the rule chosen on validation ({benchmark}: {chosen})",
            "benchmark": chosen, "segment": result.segment, **res}


def pbo_block(results: Sequence[Any], p: float, seed: int = 0) -> dict[str, Any]:
    """PBO by CSCV over the rule variants: candidates x time-blocks of ``results``' segments
    together (in order, assets pooled within each)."""
    per = [variant_nets(res) for res in results]
    labels = list(per[0])
    if any(list(g) != labels for g in per[1:]):
        raise ValueError(f"results {'+'.join(res.segment for res in results)}: expected the same rule variants "
                         "walked on every segment")
    matrix = np.column_stack([np.concatenate([pooled(g[k]) for g in per]) for k in labels])
    segments = "+".join(res.segment for res in results)
    return _pbo(matrix, p, seed, segments, "the rule variants")


def _pbo(matrix: np.ndarray, p: float, seed: int, segments: str, what: str) -> dict[str, Any]:
    if matrix.shape[1] < 2:
        return {"value": None, "segments": segments, "reason": f"{matrix.shape[1]} candidate(s): CSCV needs 2"}
    if len(matrix) < 2 * PBO_BLOCKS:
        return {"value": None, "segments": segments,
                "reason": f"{len(matrix)} bars: CSCV over {PBO_BLOCKS} blocks needs at least {2 * PBO_BLOCKS}"}
    res = pbo_cscv(matrix, p, n_blocks=PBO_BLOCKS, seed=seed)
    return {"value": res.pbo, "prob_oos_loss": res.prob_oos_loss, "candidates": res.n_candidates,
            "splits": res.n_combinations, "bars": res.n_bars, "segments": segments,
            "method": res.method + f"; candidates: {what}; assets pooled within each segment"}


def agent_pbo(run_dir: Path | None, p: float, seed: int = 0) -> dict[str, Any]:
    """PBO by CSCV over the agent's own selection: its validation passes (checkpoints) x blocks of
    the validation segment."""
    passes = validation_passes(run_dir)
    if passes is None:
        return {"value": None, "segments": "validation", "reason": "the run kept no per-pass validation returns"}
    return _pbo(passes, p, seed, "validation", f"the agent's {passes.shape[1]} validation passes (checkpoints)")


# ---------------------------------------------------------------------------------------- power
def power_block(se_by_segment: Mapping[str, tuple[float, int]], chooser: str, target: float = 1.0,
                z: float = 2.0) -> dict[str, Any]:
    """Per segment the calibrated standard error of the agent's Sharpe (``se_by_segment``: segment ->
    (se, bars)) and whether it can tell Sharpe ``target`` from 0 (``z * se < target``); ``warning``:
    the chooser's message when it cannot, else None."""
    out: dict[str, Any] = {}
    for segment, (se, bars) in se_by_segment.items():
        ok = z * se < target
        out[segment] = {"standard_error": se, "bars": bars, "can_tell_sharpe_1_from_0": ok,
                        "message": (f"{segment} {'can' if ok else 'cannot'} tell annualized Sharpe {target:g} from 0: "
                                    f"{z:g}*SE = {z * se:.2f} {'<' if ok else '>='} {target:g} (calibrated SE over "
                                    f"{bars} bars){'' if ok else '; use longer segments, more series or more folds'}")}
    chosen = out.get(chooser)
    out["warning"] = None if chosen is None or chosen["can_tell_sharpe_1_from_0"] else chosen["message"]
    return out


def oracle_intervals(result, p: float, seed: int = 0) -> dict[str, Any]:
    """On synthetic data, the oracle reference's mean Sharpe (cluster interval over its per-series
    Sharpes) and the agent's efficiency ``agent / oracle`` with its interval
    (:func:`~rl_zerosync.evidence.calibrated.ratio_interval`); ``{}`` without an oracle, and the
    reason instead of an interval when the series are too few or the oracle's mean is not > 0."""
    from rl_zerosync.evidence.calibrated import ratio_interval

    oracle = getattr(result, "oracle", None) or {}
    if not oracle.get("available"):
        return {}
    o = np.array([float(oracle[name]["sharpe"]) for name in result.assets])
    a = np.array([sharpe_ratio(n, p) for n in agent_nets(result)])
    out: dict[str, Any] = {}
    try:
        level = ratio_interval(o, np.ones_like(o), seed=seed)  # mean(o) / 1: the oracle's mean Sharpe
        out["oracle"] = {**level, "method": level["method"].replace("mean(a) / mean(b)", "mean of per-series Sharpe"),
                         "label": oracle.get("label"), "variant": oracle.get("variant")}
        out["efficiency"] = ratio_interval(a, o, seed=seed)
    except ValueError as err:
        out["efficiency"] = {"estimate": None, "reason": str(err)}
    return out


# ---------------------------------------------------------------------------------------- the block
def evidence_block(results: Mapping[str, Any], segments: Sequence[str], run_dir: Path | None, best: str,
                   metric: str = "sharpe", seed: int = 0) -> dict[str, Any]:
    """The ``evidence`` of a report (module doc). ``results``: segment -> walked segment (an
    :class:`~rl_zerosync.evaluation.backtest.EvalResult`); ``segments[0]`` chose, ``segments[-1]`` is
    reported; ``run_dir`` holds the run's validation passes (the checkpoints compared); ``best``: the
    rule chosen on ``segments[0]`` (``flat`` or a key of ``baseline_net``; in an evaluation
    :func:`rl_zerosync.evaluation.backtest.best_rule`), the benchmark of the paired interval and the SPA."""
    chooser, last = results[segments[0]], results[segments[-1]]
    p = float(last.periods_per_year)
    agent, pos = agent_nets(last), agent_positions(last)
    intervals = {"agent": interval(agent, None, last, p, seed, pos)}
    for rule in last.baseline_net:  # buy-and-hold and each tuned rule at its variant chosen on validation
        intervals[rule] = interval(rule_nets(last, rule), None, last, p, seed)
    intervals["agent_minus_best_rule"] = {"best_rule": best, **interval(agent, rule_nets(last, best), last, p, seed, pos)}
    intervals["agent_minus_buy_and_hold"] = interval(agent, rule_nets(last, "buy_and_hold"), last, p, seed, pos)
    intervals.update(oracle_intervals(last, p, seed))
    trials = selection_trials(chooser, run_dir, metric, seed)
    dsr = deflate([trials])
    psr = {"value": psr_calibrated(intervals["agent"]["estimate"], intervals["agent"]["se"]),
           "benchmark_sharpe": 0.0, "segment": last.segment, "se": intervals["agent"]["se"]}
    se_by = {chooser.segment: (trials["se"], sum(len(n) for n in agent_nets(chooser))),
             last.segment: (intervals["agent"]["se"], intervals["agent"]["bars"])}
    picked = [results[s] for s in dict.fromkeys(segments)]
    return {
        "segment": last.segment, "chosen_on": chooser.segment, "level": LEVEL,
        "ci_method": intervals["agent"]["method"], "ci_design": intervals["agent"]["design"],
        "intervals": intervals,
        "psr": psr,
        "deflated_sharpe": dsr,
        "trials": trials,
        "spa": spa_block(last, best, seed=seed),
        "pbo": pbo_block(picked, p, seed=seed),
        "pbo_agent": agent_pbo(run_dir, p, seed=seed),
        "power": power_block(se_by, chooser.segment),
    }


def pooled_evidence(agent, best, bench, periods_per_year: float, *, independent: bool,
                    selections: Sequence[Mapping[str, Any]], se_of_mean: float | None = None,
                    positions: Sequence[np.ndarray] | None = None, seed: int = 0) -> dict[str, Any]:
    """Evidence over several runs: ``agent``, ``best``, ``bench`` as ``[seed][series]`` panels (seeds of
    one recipe on the same series; or folds stitched per series), every interval by
    :func:`~rl_zerosync.evidence.calibrated.panel_interval`; the DSR of the selections behind them
    (:func:`deflate`; ``se_of_mean``: the calibrated standard error of their mean validation Sharpe)."""
    p = float(periods_per_year)
    kw = {"independent_series": independent, "seed": seed}
    intervals = {
        "agent": panel_interval(agent, None, p, positions=positions, **kw),
        "agent_minus_best_rule": panel_interval(agent, best, p, positions=positions, **kw),
        "agent_minus_buy_and_hold": panel_interval(agent, bench, p, positions=positions, **kw),
        "buy_and_hold": panel_interval(bench, None, p, **kw),
    }
    dsr = deflate(selections, se_of_mean)
    psr = {"value": psr_calibrated(intervals["agent"]["estimate"], intervals["agent"]["se"]), "benchmark_sharpe": 0.0,
           "se": intervals["agent"]["se"]}
    trials = {"n": dsr["trials"], "selections": len(selections), "counted": dsr["trials_counted"]}
    return {"level": LEVEL, "ci_method": intervals["agent"]["method"], "ci_design": intervals["agent"]["design"],
            "intervals": intervals, "psr": psr, "deflated_sharpe": dsr, "trials": trials}
