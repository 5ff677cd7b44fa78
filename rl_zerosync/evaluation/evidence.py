"""The ``evidence`` block of an evaluation: how much of the test result is sample noise and selection.

From the walked segments of :func:`rl_zerosync.evaluation.evaluate.evaluate_checkpoint` (the first
segment chose the rules' variants and, during training, the checkpoint; the last is the report's,
``test`` normally), :func:`evidence_block` gives:

* ``intervals``: the agent's, each rule's and buy-and-hold's Sharpe on the report segment (the mean
  over assets of per-asset Sharpes, as ``summary["sharpe"]``) with a percentile block-bootstrap
  interval, and the paired differences agent - best rule and agent - buy-and-hold (the same
  resampled bars for both sides; :func:`mean_sharpe_interval`).
* ``psr`` / ``deflated_sharpe``: probabilistic and deflated Sharpe ratio of the agent's test returns
  (pooled over assets: their bars one after the other), the DSR with ``N`` = the trials actually
  made: every rule variant searched on the choosing segment (:func:`rl_zerosync.evaluation.rules.variants`)
  plus every checkpoint compared on validation (the run's ``metrics.jsonl`` history), the trials'
  Sharpe variance from their validation Sharpes; ``trials`` says what ``N`` counts.
* ``spa``: Hansen's SPA of "the best of the agent and the tuned rule variants beats buy-and-hold"
  on the report segment.
* ``pbo``: probability of backtest overfitting by CSCV over the rule variants, candidates x
  time-blocks of the choosing and the report segment together.
* ``power``: the standard error of an annualized Sharpe on each segment (bars pooled over assets)
  and whether the choosing segment can tell Sharpe 1 from 0 (:func:`power_block`).

Every bootstrap is seeded (``seed``), so a report is reproducible.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from arch.bootstrap import StationaryBootstrap

from rl_zerosync.evaluation.metrics import sharpe_ratio
from rl_zerosync.evaluation.overfitting import dsr_from_moments, pbo_cscv, psr_from_moments, spa_test
from rl_zerosync.evaluation.rules import TUNED_RULES, variants
from rl_zerosync.evaluation.significance import (
    MIN_BARS, block_length_for, check_level, check_periods_per_year, check_reps, make_rng, sharpe_power_check,
    sharpe_standard_error)

LEVEL = 0.95
"""Nominal coverage of every interval of the block."""
REPS = 2000
"""Bootstrap replications of the intervals."""
SPA_REPS = 1000
"""Bootstrap replications of the SPA test."""
PBO_BLOCKS = 16
"""CSCV time blocks (all C(16, 8) = 12870 splits)."""


# ------------------------------------------------------------------------------------- intervals
def _sharpes(x: np.ndarray, p: float) -> np.ndarray:
    """:func:`sharpe_ratio` of every column of ``x`` (bars on axis 0), 0 where a column is constant."""
    sd = x.std(axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, x.mean(axis=0) / sd * math.sqrt(p), 0.0)


def _check_side(nets: Sequence[np.ndarray], name: str) -> list[np.ndarray]:
    out = [np.asarray(n, dtype=np.float64) for n in nets]
    if not out:
        raise ValueError(f"{name}: expected per-asset net returns (at least one asset), got none")
    for i, r in enumerate(out):
        if r.ndim != 1 or r.size < MIN_BARS or not np.isfinite(r).all():
            raise ValueError(f"{name}[{i}]: expected a 1-D array of at least {MIN_BARS} finite per-bar returns, "
                             f"got shape {r.shape}")
    return out


def mean_sharpe_interval(a: Sequence[np.ndarray], b: Sequence[np.ndarray] | None, periods_per_year: float, *,
                         level: float = LEVEL, reps: int = REPS, seed: int = 0,
                         resample_series: bool = False) -> dict[str, Any]:
    """Interval of the mean over assets of per-asset Sharpes of ``a`` (or, given ``b``, of
    ``mean SR(a) - mean SR(b)``, paired: asset ``i`` of ``a`` and of ``b`` cover the same bars).

    Stationary block bootstrap over bars (:mod:`arch.bootstrap`), block length the largest
    Politis-White estimate over the columns (:func:`rl_zerosync.evaluation.significance.block_length_for`).
    Assets of one length (one period) share one draw of bar indices, which keeps their
    cross-correlation; assets of different lengths are drawn independently. With one asset this is
    :func:`~rl_zerosync.evaluation.significance.sharpe_interval` (or ``paired_difference_interval``).
    ``resample_series``: also draw the series (seeds x assets) with replacement in every replicate,
    after the bars (two-stage, as ``multi_series_sharpe_interval``'s ``series_and_bars``): the spread
    between seeds enters beside the bar noise.
    """
    xa = _check_side(a, "a")
    xb = _check_side(b, "b") if b is not None else None
    if xb is not None and [r.size for r in xa] != [r.size for r in xb]:
        raise ValueError(f"a, b: expected the same bars per asset (paired), got lengths {[r.size for r in xa]} "
                         f"and {[r.size for r in xb]}")
    p = check_periods_per_year(periods_per_year)
    level, reps = check_level(level), check_reps(reps)
    rng = make_rng(seed)
    m = len(xa)
    groups = [list(range(m))] if len({r.size for r in xa}) == 1 else [[i] for i in range(m)]
    per_asset = np.zeros((reps, m))
    blocks = []
    for g in groups:
        cols = [xa[i] for i in g] + ([xb[i] for i in g] if xb is not None else [])
        data = np.column_stack(cols)
        block, how = block_length_for(data)
        blocks.append((block, how))
        stats = StationaryBootstrap(block, data, seed=rng).apply(lambda z: _sharpes(z, p), reps)
        k = len(g)
        per_asset[:, g] = stats[:, :k] - (stats[:, k:] if xb is not None else 0.0)
    if resample_series:
        draws = rng.integers(0, m, size=(reps, m))
        reps_stat = np.take_along_axis(per_asset, draws, axis=1).mean(axis=1)
    else:
        reps_stat = per_asset.mean(axis=1)
    estimate = float(np.mean([sharpe_ratio(r, p) for r in xa]))
    if xb is not None:
        estimate -= float(np.mean([sharpe_ratio(r, p) for r in xb]))
    low, high = np.quantile(reps_stat, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    sizes = sorted({f"{bl:.1f}" for bl, _ in blocks}, key=float)
    shared = "one shared bar draw for all assets" if len(groups) == 1 else "independent bar draws per asset"
    stage = f"series drawn with replacement ({m} series), then " if resample_series else ""
    method = (f"{stage}{'paired ' if xb is not None else ''}stationary block bootstrap over bars"
              f"{' (the same resampled bars for both sides)' if xb is not None else ''}, {shared}, "
              f"block {'..'.join(dict.fromkeys([sizes[0], sizes[-1]]))} ({blocks[0][1]}), {reps} reps; "
              f"statistic: mean over {m} {'series' if resample_series else 'asset(s)'} of per-series Sharpe")
    return {"estimate": estimate, "low": float(low), "high": float(high), "level": level, "method": method,
            "bars": int(sum(r.size for r in xa)), "assets": m}


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
    """Per rule variant label (all of :func:`variants`) the per-asset net returns walked on the segment."""
    grid = getattr(result, "rule_grid_net", None) or {}
    missing = [x.label for x in variants() if x.label not in grid]
    if missing:
        raise ValueError(f"result {result.segment!r}: expected the net returns of every rule variant "
                         f"(walked with baselines), missing {len(missing)} (first {missing[0]!r})")
    return {x.label: [np.asarray(n, dtype=np.float64) for n in grid[x.label]] for x in variants()}


def pooled(nets: Sequence[np.ndarray]) -> np.ndarray:
    """Per-asset returns pooled: the assets' bars one after the other."""
    return np.concatenate([np.asarray(n, dtype=np.float64) for n in nets])


# ---------------------------------------------------------------------------------------- trials
def checkpoint_history(run_dir: Path | None, metric: str) -> tuple[list[float], str]:
    """Validation Sharpes of the checkpoints compared during training (``metrics.jsonl`` rows with
    ``eval/validation_<metric>``) and where they came from; none found: ``[]`` and why."""
    path = Path(run_dir) / "metrics.jsonl" if run_dir is not None else None
    if path is None or not path.is_file():
        return [], f"no validation history (no metrics.jsonl in {run_dir})"
    sharpes = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if f"eval/validation_{metric}" in row:
            sharpes.append(float(row.get("eval/validation_sharpe", math.nan)))
    return sharpes, f"{len(sharpes)} validation passes in {path.name}"


def count_trials(chooser, run_dir: Path | None, metric: str) -> dict[str, Any]:
    """The trials behind the report: rule variants searched on ``chooser`` and checkpoints compared
    on validation, with their validation Sharpes (for the DSR's variance)."""
    rule_sharpes = [float(chooser.rule_grid[x.label]["sharpe"]) for x in variants()]
    ckpt_sharpes, source = checkpoint_history(run_dir, metric)
    ckpt_sharpes = [s for s in ckpt_sharpes if math.isfinite(s)]
    n_ckpt = max(len(ckpt_sharpes), 1)
    counted = (f"{len(rule_sharpes)} rule variants searched on {chooser.segment} + {n_ckpt} checkpoint(s) "
               f"compared on validation ({source}{'; counted as 1' if not ckpt_sharpes else ''})")
    return {"n": len(rule_sharpes) + n_ckpt, "rule_variants": len(rule_sharpes), "checkpoints": n_ckpt,
            "counted": counted, "sharpes": rule_sharpes + ckpt_sharpes}


# -------------------------------------------------------------------------------------- PSR and DSR
def _moments(r: np.ndarray, p: float) -> tuple[float, float, float] | None:
    from scipy import stats

    if not r.std(ddof=1) > 0:
        return None
    return sharpe_ratio(r, p), float(stats.skew(r)), float(stats.kurtosis(r, fisher=False))


def psr_dsr(nets: Sequence[np.ndarray], p: float, trials: Mapping[str, Any]) -> tuple[dict, dict]:
    """PSR (against 0) and DSR (against the expected best of ``trials["n"]`` zero-skill trials) of the
    pooled ``nets``; both undefined (with the reason) when the returns are constant."""
    r = pooled(nets)
    mom = _moments(r, p)
    if mom is None:
        why = "undefined: the agent's returns are constant on this segment (it stayed flat)"
        return {"value": None, "reason": why}, {"value": None, "reason": why, "trials": trials["n"],
                                                 "trials_counted": trials["counted"]}
    sr, g3, g4 = mom
    psr = psr_from_moments(sharpe=sr, n_bars=int(r.size), skew=g3, kurtosis=g4, periods_per_year=p)
    variance = float(np.var(trials["sharpes"], ddof=1)) if len(trials["sharpes"]) > 1 else 0.0
    dsr = dsr_from_moments(sharpe=sr, n_bars=int(r.size), skew=g3, kurtosis=g4, periods_per_year=p,
                           n_trials=int(trials["n"]), trials_sharpe_variance=variance,
                           trials_counted=trials["counted"])
    base = {"sharpe_pooled": sr, "bars": int(r.size), "skew": g3, "kurtosis": g4}
    return ({"value": psr, "benchmark_sharpe": 0.0, **base},
            {"value": dsr.dsr, "expected_max_sharpe": dsr.expected_max_sharpe, "trials": dsr.n_trials,
             "trials_sharpe_variance": variance, "trials_counted": dsr.trials_counted, **base})


# --------------------------------------------------------------------------------------- SPA and PBO
def spa_block(result, seed: int = 0) -> dict[str, Any]:
    """Hansen's SPA on ``result``'s bars: candidates the agent and every tuned rule variant, benchmark
    buy-and-hold, all pooled over assets."""
    grid = variant_nets(result)
    labels = ["agent"] + [x.label for x in variants() if x.rule in TUNED_RULES]
    cand = np.column_stack([pooled(agent_nets(result))] + [pooled(grid[k]) for k in labels[1:]])
    res = spa_test(pooled(grid["buy_and_hold"]), cand, reps=SPA_REPS, seed=seed)
    return {"hypothesis": "H0: no candidate (the agent, the tuned rule variants) has a higher mean per-bar net "
                          "return than buy-and-hold", "segment": result.segment,
            "pvalue_consistent": res.pvalue_consistent, "pvalue_lower": res.pvalue_lower,
            "pvalue_upper": res.pvalue_upper, "rejects_at_5pct": res.rejects(0.05),
            "best_candidate": labels[res.best_candidate], "candidates": res.n_candidates, "bars": res.n_bars,
            "method": res.method + "; assets pooled (bars one after the other)"}


def pbo_block(results: Sequence[Any], p: float, seed: int = 0) -> dict[str, Any]:
    """PBO by CSCV over the rule variants: candidates x time-blocks of ``results``' segments
    together (in order, assets pooled within each)."""
    labels = [x.label for x in variants()]
    per = [variant_nets(res) for res in results]
    matrix = np.column_stack([np.concatenate([pooled(g[k]) for g in per]) for k in labels])
    segments = "+".join(res.segment for res in results)
    if len(matrix) < 2 * PBO_BLOCKS:
        return {"value": None, "segments": segments,
                "reason": f"{len(matrix)} bars: CSCV over {PBO_BLOCKS} blocks needs at least {2 * PBO_BLOCKS}"}
    res = pbo_cscv(matrix, p, n_blocks=PBO_BLOCKS, seed=seed)
    return {"value": res.pbo, "prob_oos_loss": res.prob_oos_loss, "candidates": res.n_candidates,
            "splits": res.n_combinations, "bars": res.n_bars, "segments": segments,
            "method": res.method + "; candidates: the rule variants; assets pooled within each segment"}


# ---------------------------------------------------------------------------------------- power
def power_block(bars_by_segment: Mapping[str, Sequence[int]], p: float, chooser: str) -> dict[str, Any]:
    """Per segment the standard error of an annualized Sharpe (at Sharpe 0, bars pooled over
    assets) and its power check; ``warning``: the chooser's message when it cannot tell Sharpe 1
    from 0, else None."""
    out: dict[str, Any] = {}
    for segment, bars in bars_by_segment.items():
        check = sharpe_power_check(list(bars), p)
        out[segment] = {"bars": check.bars, "assets": len(bars), "standard_error": sharpe_standard_error(list(bars), p),
                        "can_tell_sharpe_1_from_0": check.ok, "bars_needed": check.bars_needed,
                        "message": check.message.replace("validation", segment, 1)}
    chosen = out.get(chooser)
    out["warning"] = None if chosen is None or chosen["can_tell_sharpe_1_from_0"] else chosen["message"]
    return out


# ---------------------------------------------------------------------------------------- the block
def _interval_text(iv: Mapping[str, Any]) -> list[float]:
    return [iv["low"], iv["high"]]


def evidence_block(results: Mapping[str, Any], segments: Sequence[str], run_dir: Path | None, metric: str = "sharpe",
                   seed: int = 0) -> dict[str, Any]:
    """The ``evidence`` of a report (module doc). ``results``: segment -> walked
    :class:`~rl_zerosync.evaluation.backtest.EvalResult`; ``segments[0]`` chose, ``segments[-1]`` is
    reported; ``run_dir`` holds the run's ``metrics.jsonl`` (checkpoints compared)."""
    from rl_zerosync.evaluation.backtest import best_rule

    chooser, last = results[segments[0]], results[segments[-1]]
    p = float(last.periods_per_year)
    agent = agent_nets(last)
    best = best_rule(chooser.baselines)
    intervals = {"agent": mean_sharpe_interval(agent, None, p, seed=seed)}
    for rule in ("buy_and_hold", *TUNED_RULES):
        intervals[rule] = mean_sharpe_interval(rule_nets(last, rule), None, p, seed=seed)
    intervals["agent_minus_best_rule"] = {
        "best_rule": best, **mean_sharpe_interval(agent, rule_nets(last, best), p, seed=seed)}
    intervals["agent_minus_buy_and_hold"] = mean_sharpe_interval(agent, rule_nets(last, "buy_and_hold"), p, seed=seed)
    trials = count_trials(chooser, run_dir, metric)
    psr, dsr = psr_dsr(agent, p, trials)
    bars = {seg: [len(rec["net"]) for rec in results[seg].records] for seg in segments}
    power = power_block(bars, p, segments[0])
    picked = [results[s] for s in dict.fromkeys(segments)]
    return {
        "segment": last.segment, "chosen_on": chooser.segment, "level": LEVEL,
        "ci_method": intervals["agent"]["method"],
        "intervals": intervals,
        "psr": psr,
        "deflated_sharpe": dsr,
        "trials": {k: v for k, v in trials.items() if k != "sharpes"},
        "spa": spa_block(last, seed=seed),
        "pbo": pbo_block(picked, p, seed=seed),
        "power": power,
    }


def summary_keys(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The report summary's share of the evidence: ``test_sharpe_ci95``, ``agent_minus_best_rule_ci95``,
    ``deflated_sharpe``, ``trials``, ``ci_method`` (and ``psr``, ``pbo``, ``spa_pvalue``)."""
    iv = evidence["intervals"]
    return {"test_sharpe_ci95": _interval_text(iv["agent"]),
            "agent_minus_best_rule_ci95": _interval_text(iv["agent_minus_best_rule"]),
            "deflated_sharpe": evidence["deflated_sharpe"]["value"],
            "psr": evidence["psr"]["value"],
            "trials": evidence["trials"]["n"],
            "pbo": evidence["pbo"]["value"],
            "spa_pvalue": evidence["spa"]["pvalue_consistent"],
            "ci_method": evidence["ci_method"]}


def short_text(evidence: Mapping[str, Any]) -> str:
    """A few words for the printed summary line: the agent's interval, the edge's and the DSR."""
    iv = evidence["intervals"]
    a, d = iv["agent"], iv["agent_minus_best_rule"]
    dsr = evidence["deflated_sharpe"]["value"]
    dsr_txt = f"DSR {dsr:.2f}" if dsr is not None else "DSR n/a"
    return (f"95% CI [{a['low']:+.2f}, {a['high']:+.2f}], vs best rule {d['estimate']:+.2f} "
            f"[{d['low']:+.2f}, {d['high']:+.2f}], {dsr_txt} over {evidence['trials']['n']} trials")


RETURNS_FILE = "returns_{segment}.npz"
"""Per-bar net returns behind the evidence (agent, best rule, buy-and-hold per asset, the trials'
validation Sharpes), for pooling over seeds and walk-forward folds."""


def write_returns(out_dir: Path, result, best: str, trials: Mapping[str, Any]) -> Path:
    """``returns_<segment>.npz`` of ``result`` (:data:`RETURNS_FILE`): arrays ``agent_<i>``,
    ``best_rule_<i>``, ``buy_and_hold_<i>`` per asset ``i``, ``trial_sharpes``, ``trials``,
    ``periods_per_year``."""
    arrays: dict[str, np.ndarray] = {}
    for side, nets in (("agent", agent_nets(result)), ("best_rule", rule_nets(result, best)),
                       ("buy_and_hold", rule_nets(result, "buy_and_hold"))):
        for i, n in enumerate(nets):
            arrays[f"{side}_{i}"] = np.asarray(n, dtype=np.float64)
    path = Path(out_dir) / RETURNS_FILE.format(segment=result.segment)
    np.savez(path, trial_sharpes=np.asarray(trials["sharpes"], dtype=np.float64),
             trials=np.array([trials["rule_variants"], trials["checkpoints"]]),
             periods_per_year=np.array(float(result.periods_per_year)), **arrays)
    return path


def read_returns(eval_dir: Path, segment: str = "test") -> dict[str, Any]:
    """What :func:`write_returns` wrote into ``eval_dir``: per side the per-asset arrays, the trials."""
    path = Path(eval_dir) / RETURNS_FILE.format(segment=segment)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-bar returns of the {segment} segment (written by evaluate "
                                "since the evidence block; evaluate the run again)")
    with np.load(path) as z:
        n = sum(1 for k in z.files if k.startswith("agent_"))
        out: dict[str, Any] = {side: [z[f"{side}_{i}"] for i in range(n)]
                               for side in ("agent", "best_rule", "buy_and_hold")}
        out["trial_sharpes"] = list(z["trial_sharpes"])
        out["rule_variants"], out["checkpoints"] = (int(x) for x in z["trials"])
        out["periods_per_year"] = float(z["periods_per_year"])
    return out


def pooled_evidence(agent: Sequence[np.ndarray], best: Sequence[np.ndarray], bench: Sequence[np.ndarray],
                    periods_per_year: float, trials: Mapping[str, Any], *, resample_series: bool,
                    seed: int = 0) -> dict[str, Any]:
    """Evidence over several series (seeds x assets, or walk-forward folds stitched per asset):
    the agent's mean Sharpe, agent - best rule and agent - buy-and-hold (paired), PSR and DSR of
    all the agent's bars pooled; ``trials`` as :func:`count_trials` gives it."""
    p = float(periods_per_year)
    intervals = {
        "agent": mean_sharpe_interval(agent, None, p, seed=seed, resample_series=resample_series),
        "agent_minus_best_rule": mean_sharpe_interval(agent, best, p, seed=seed, resample_series=resample_series),
        "agent_minus_buy_and_hold": mean_sharpe_interval(agent, bench, p, seed=seed,
                                                         resample_series=resample_series),
        "buy_and_hold": mean_sharpe_interval(bench, None, p, seed=seed, resample_series=resample_series),
    }
    psr, dsr = psr_dsr(agent, p, trials)
    return {"level": LEVEL, "ci_method": intervals["agent"]["method"], "intervals": intervals, "psr": psr,
            "deflated_sharpe": dsr, "trials": {k: v for k, v in trials.items() if k != "sharpes"}}


def add_evidence(report: dict, results: Mapping[str, Any], segments: Sequence[str], run_dir: Path | None,
                 metric: str = "sharpe", out_dir: Path | None = None) -> None:
    """``report["evidence"]`` (:func:`evidence_block`, with its ``short`` text for the printed line),
    its :func:`summary_keys` into ``report["summary"]``, and (``out_dir``) the returns behind it
    (:func:`write_returns`). The power warning stays in ``evidence["power"]["warning"]`` (preflight
    prints it before training; ``report["warnings"]`` keeps to problems of the evaluated data).

    A segment the statistics cannot take (e.g. fewer than 20 bars per asset) gives
    ``evidence = {"value": None, "reason": ...}``, the summary keys None and a warning on stderr;
    the rest of the report stands."""
    from rl_zerosync.data.data_settings import heldout_counts
    from rl_zerosync.evaluation.backtest import best_rule
    from rl_zerosync.rundir.checkpoints import warn

    report["summary"]["heldout_test_series"] = heldout_counts(report.get("data"))["heldout_test_series"]
    try:
        evidence = evidence_block(results, segments, run_dir, metric)
    except ValueError as err:
        report["evidence"] = {"value": None, "reason": f"no evidence for this evaluation: {err}"}
        report["summary"].update(dict.fromkeys(("test_sharpe_ci95", "agent_minus_best_rule_ci95", "deflated_sharpe",
                                                "psr", "trials", "pbo", "spa_pvalue", "ci_method")))
        warn(report["evidence"]["reason"])
        return
    evidence["short"] = short_text(evidence)
    if out_dir is not None:
        last = results[segments[-1]]
        trials = count_trials(results[segments[0]], run_dir, metric)
        path = write_returns(out_dir, last, best_rule(results[segments[0]].baselines), trials)
        report.setdefault("outputs", {})[f"returns_{last.segment}"] = str(path)
    report["evidence"] = evidence
    report["summary"].update(summary_keys(evidence))
