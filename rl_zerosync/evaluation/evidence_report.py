"""The evidence in an evaluation's report: the ``evidence`` block
(:func:`rl_zerosync.evidence.block.evidence_block`) put into ``metrics.json`` with its summary keys
(:data:`SUMMARY_KEYS`) and its words on the printed summary line (:func:`short_text`), and the per-bar
returns behind it, ``returns_<segment>.npz`` (:func:`write_returns`), which seeds, population members
and walk-forward folds pool (:func:`read_returns`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.evidence.block import (
    agent_nets, agent_positions, evidence_block, independent_series, rule_nets)


def add_evidence(report: dict, results: Mapping[str, Any], segments: Sequence[str], run_dir: Path | None,
                 metric: str = "sharpe", out_dir: Path | None = None) -> None:
    """``report["evidence"]`` (:func:`~rl_zerosync.evidence.block.evidence_block` against the
    rule chosen on validation, with its ``short`` text for the printed line),
    its :func:`summary_keys` into ``report["summary"]``, and (``out_dir``) the returns behind it
    (:func:`write_returns`). The power warning stays in ``evidence["power"]["warning"]``.

    A segment the statistics cannot take (e.g. fewer than 20 bars per asset) gives
    ``evidence = {"value": None, "reason": ...}``, the summary keys None and a warning on stderr;
    the rest of the report stands."""
    from rl_zerosync.data.data_settings import heldout_counts
    from rl_zerosync.evaluation.backtest import best_rule
    from rl_zerosync.evaluation.deploy import attach_deployment
    from rl_zerosync.rundir.checkpoints import warn

    report["summary"]["heldout_test_series"] = heldout_counts(report.get("data"))["heldout_test_series"]
    attach_deployment(report, results, segments, out_dir)  # decided on validation: evaluation/deploy.py
    chooser, last = results[segments[0]], results[segments[-1]]
    best = best_rule(chooser.baselines)
    try:
        evidence = evidence_block(results, segments, run_dir, best, metric)
    except ValueError as err:
        report["evidence"] = {"value": None, "reason": f"no evidence for this evaluation: {err}"}
        report["summary"].update(dict.fromkeys(SUMMARY_KEYS))
        warn(report["evidence"]["reason"])
        return
    evidence["short"] = short_text(evidence)
    if out_dir is not None:
        path = write_returns(out_dir, last, best, evidence["trials"], chooser)
        report.setdefault("outputs", {})[f"returns_{last.segment}"] = str(path)
    report["evidence"] = evidence
    report["summary"].update(summary_keys(evidence))


def _interval_text(iv: Mapping[str, Any]) -> list[float]:
    return [iv["low"], iv["high"]]


def summary_keys(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The report summary's share of the evidence: ``test_sharpe_ci95``, ``agent_minus_best_rule_ci95``,
    ``deflated_sharpe`` with ``dsr_trials``, ``dsr_variance``, ``dsr_expected_max``, ``trials``,
    ``ci_method`` (and ``psr``, ``pbo``, ``pbo_agent``, ``spa_pvalue``)."""
    iv, dsr = evidence["intervals"], evidence["deflated_sharpe"]
    return {"test_sharpe_ci95": _interval_text(iv["agent"]),
            "agent_minus_best_rule_ci95": _interval_text(iv["agent_minus_best_rule"]),
            "deflated_sharpe": dsr["value"], "dsr_trials": dsr["trials"], "dsr_variance": dsr["variance"],
            "dsr_expected_max": dsr["expected_max"], "dsr_sharpe": dsr["sharpe"],
            "psr": evidence["psr"]["value"],
            "trials": dsr["trials"],
            "pbo": evidence["pbo"]["value"],
            "pbo_agent": evidence.get("pbo_agent", {}).get("value"),
            "spa_pvalue": evidence["spa"]["pvalue_consistent"],
            "oracle_sharpe_ci95": _interval_text(iv["oracle"]) if "oracle" in iv else None,
            "efficiency_ci95": _interval_text(iv["efficiency"]) if iv.get("efficiency", {}).get("estimate") is not None
            else None,
            "ci_method": evidence["ci_method"]}


SUMMARY_KEYS = ("test_sharpe_ci95", "agent_minus_best_rule_ci95", "deflated_sharpe", "dsr_trials", "dsr_variance",
                "dsr_expected_max", "dsr_sharpe", "psr", "trials", "pbo", "pbo_agent", "spa_pvalue", "oracle_sharpe_ci95",
                "efficiency_ci95", "ci_method")
"""The keys :func:`summary_keys` gives (None when the segment had no evidence)."""


def short_text(evidence: Mapping[str, Any]) -> str:
    """A few words for the printed summary line: the agent's interval, the edge's and the DSR."""
    iv = evidence["intervals"]
    a, d = iv["agent"], iv["agent_minus_best_rule"]
    dsr = evidence["deflated_sharpe"]
    dsr_txt = (f"DSR {dsr['value']:.2f} (validation Sharpe {dsr['sharpe']:+.2f} vs expected best "
               f"{dsr['expected_max']:+.2f} of {dsr['trials']:.1f} effective trials)")
    eff = iv.get("efficiency") or {}
    eff_txt = (f", efficiency vs the oracle {eff['estimate']:.2f} [{eff['low']:.2f}, {eff['high']:.2f}]"
               if eff.get("estimate") is not None else "")
    return (f"95% CI [{a['low']:+.2f}, {a['high']:+.2f}], vs rule chosen on validation ({d['best_rule']}) "
            f"{d['estimate']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}], {dsr_txt}{eff_txt}")


RETURNS_FILE = "returns_{segment}.npz"
"""Per-bar net returns behind the evidence (agent, rule chosen on validation, buy-and-hold per series,
the agent's positions and its validation returns, the selection's trials), for pooling over seeds,
population members and walk-forward folds."""
_TRIAL_KEYS = ("n", "candidates", "selected_validation_sharpe", "se")


def write_returns(out_dir: Path, result, best: str, trials: Mapping[str, Any], chooser) -> Path:
    """``returns_<segment>.npz`` of ``result`` (:data:`RETURNS_FILE`): per series ``i`` the arrays
    ``agent_<i>``, ``best_rule_<i>``, ``buy_and_hold_<i>``, ``position_<i>``, per validation series
    ``validation_<i>`` (the selected checkpoint on ``chooser``), the selection's trials, whether the
    series are independent and ``periods_per_year``."""
    arrays: dict[str, np.ndarray] = {}
    for side, nets in (("agent", agent_nets(result)), ("best_rule", rule_nets(result, best)),
                       ("buy_and_hold", rule_nets(result, "buy_and_hold")), ("position", agent_positions(result)),
                       ("validation", agent_nets(chooser))):
        for i, n in enumerate(nets):
            arrays[f"{side}_{i}"] = np.asarray(n, dtype=np.float64)
    path = Path(out_dir) / RETURNS_FILE.format(segment=result.segment)
    np.savez(path, trials=np.array([float(trials[k]) for k in _TRIAL_KEYS]),
             trials_counted=np.array(str(trials["counted"])), independent=np.array(independent_series(result)),
             periods_per_year=np.array(float(result.periods_per_year)), **arrays)
    return path


def read_returns(eval_dir: Path, segment: str = "test") -> dict[str, Any]:
    """What :func:`write_returns` wrote into ``eval_dir``: per side the per-series arrays, the trials."""
    path = Path(eval_dir) / RETURNS_FILE.format(segment=segment)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-bar returns of the {segment} segment (written by evaluate "
                                "since the evidence block; evaluate the run again)")
    with np.load(path) as z:
        if "trials_counted" not in z.files:
            raise FileNotFoundError(f"{path}: per-bar returns written before the calibrated evidence (no "
                                    "trials_counted); evaluate the run again")
        out: dict[str, Any] = {side: [z[f"{side}_{i}"] for i in range(_count(z.files, side))]
                               for side in ("agent", "best_rule", "buy_and_hold", "position", "validation")}
        out["trials"] = {**dict(zip(_TRIAL_KEYS, (float(x) for x in z["trials"]))),
                         "counted": str(z["trials_counted"]), "segment": "validation"}
        out["independent"] = bool(z["independent"])
        out["periods_per_year"] = float(z["periods_per_year"])
    return out


def _count(files: Sequence[str], side: str) -> int:
    return sum(1 for k in files if k.startswith(side + "_") and k[len(side) + 1:].isdigit())
