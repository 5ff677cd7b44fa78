"""The ``evidence`` block of an evaluation (``rl_zerosync.evidence.block``, put into the report by
``rl_zerosync.evaluation.evidence_report``): intervals with sample noise that contain their
estimates, paired differences, PSR / DSR with the trials counted from the rule grid and the run's
validation history, SPA, PBO and the validation power check."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rl_zerosync.evaluation.evidence_report import add_evidence
from rl_zerosync.evaluation.rules import RULES, variants
from rl_zerosync.evidence.calibrated import expected_max_z, panel_interval
from rl_zerosync.evidence.block import (
    checkpoint_history, oracle_intervals, pbo_block, save_validation_returns, selection_trials, validation_passes,
    variant_nets)

RUN = Path(__file__).resolve().parent / "data" / "run_v0_1"


def test_validation_passes_round_trip_and_count_as_effective_trials(tmp_path):
    rng = np.random.default_rng(3)
    base = [rng.normal(0.0, 0.01, 300) for _ in range(2)]
    for it in (5, 10, 15):  # three near-identical checkpoints, then an unrelated one
        save_validation_returns(tmp_path, it, [b + 0.001 * rng.normal(size=300) for b in base])
    save_validation_returns(tmp_path, 20, [rng.normal(0.0, 0.01, 300) for _ in range(2)])
    passes = validation_passes(tmp_path)
    assert passes.shape == (600, 4) and passes.dtype == np.float64
    assert validation_passes(tmp_path / "none") is None

    class Chooser:  # a validation walk: two independent series
        records = [{"net": b, "position": np.ones(300)} for b in base]
        timestamps = [None, None]
        periods_per_year, segment = 252.0, "validation"

    t = selection_trials(Chooser, tmp_path, "sharpe")
    # eigenvalues ~[3, 1, 0, 0]: participation ratio 4**2 / (9 + 1) = 1.6 (between 1 and 2 trials)
    assert 1.5 < t["n"] < 1.75 and t["candidates"] == 4 and "effective" in t["counted"]
    ref = panel_interval([r["net"] for r in Chooser.records], None, 252.0, independent_series=True,
                         positions=[np.ones(300)] * 2)
    assert t["se"] == pytest.approx(ref["se"]) and t["selected_validation_sharpe"] == pytest.approx(ref["estimate"])
    old = selection_trials(Chooser, RUN, "sharpe")  # a run that kept no per-pass returns: every pass counts
    assert old["n"] == 4 and "counted as independent" in old["counted"]


def test_checkpoint_history_counts_validation_passes(tmp_path):
    sharpes, source = checkpoint_history(RUN, "sharpe")
    assert len(sharpes) == 4 and "4 validation passes" in source
    assert sharpes[-1] == pytest.approx(0.4332353815903708)
    assert checkpoint_history(tmp_path, "sharpe")[0] == []


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

    tmp = tmp_path_factory.mktemp("evidence")
    run = tmp / "runs" / "pre_move"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("evaluation_before_move.json"))
    return evaluate_checkpoint(run, out_dir=tmp / "eval", device="cpu")


def test_evidence_block_is_consistent(report):
    ev, s = report["evidence"], report["summary"]
    on_disk = json.loads(Path(report["outputs"]["metrics_json"]).read_text())
    assert on_disk["evidence"]["intervals"]["agent"]["estimate"] == pytest.approx(s["sharpe"])
    iv = ev["intervals"]
    assert iv["agent"]["estimate"] == pytest.approx(s["sharpe"])
    assert iv["buy_and_hold"]["estimate"] == pytest.approx(s["buy_and_hold_sharpe"])
    assert iv["agent_minus_best_rule"]["estimate"] == pytest.approx(s["agent_minus_best_rule"])
    for k in ("agent", "buy_and_hold", "momentum", "mean_reversion", "agent_minus_best_rule",
              "agent_minus_buy_and_hold"):
        assert iv[k]["low"] <= iv[k]["estimate"] <= iv[k]["high"], k
    assert s["test_sharpe_ci95"] == [iv["agent"]["low"], iv["agent"]["high"]]
    assert s["agent_minus_best_rule_ci95"] == [iv["agent_minus_best_rule"]["low"], iv["agent_minus_best_rule"]["high"]]
    # The DSR is where the selection happened: the selected checkpoint's validation Sharpe against the
    # 4 checkpoints this run compared (no rule variants in the family), its null spread the
    # calibrated standard error of a validation Sharpe.
    dsr = ev["deflated_sharpe"]
    assert s["trials"] == s["dsr_trials"] == ev["trials"]["n"] == 4 and "rule" not in dsr["trials_counted"]
    assert dsr["sharpe"] == pytest.approx(report["selected_by"]["value"], abs=0.05) and dsr["segment"] == "validation"
    assert s["dsr_variance"] == pytest.approx(ev["trials"]["se"] ** 2)
    assert s["dsr_expected_max"] == pytest.approx(ev["trials"]["se"] * expected_max_z(4))  # E[max of 4 N(0, se)]
    assert 0.0 <= s["deflated_sharpe"] <= 1.0 and 0.0 <= s["psr"] <= 1.0
    assert s["ci_method"].startswith("stationary block bootstrap over bars (2 independent series (fewer than 8)")
    assert "position autocorrelation time" in s["ci_method"] and ev["ci_design"] == "bar blocks"
    assert 0.0 <= ev["pbo"]["value"] <= 1.0 and ev["pbo"]["candidates"] == len(variants())
    assert ev["pbo"]["segments"] == "validation+test"
    assert ev["pbo_agent"]["value"] is None and "no per-pass validation returns" in ev["pbo_agent"]["reason"]
    spa = ev["spa"]  # against the rule chosen on validation, the other variants and the agent as candidates
    assert spa["benchmark"] == report["segments"]["validation"]["rule_choice"]["momentum"]
    assert 0.0 <= spa["pvalue_consistent"] <= 1.0 and spa["candidates"] == len(variants()) - 1 + 1 + 1
    assert ev["power"]["warning"].startswith("validation cannot tell annualized Sharpe 1 from 0")
    assert ev["power"]["validation"]["standard_error"] == pytest.approx(ev["trials"]["se"])
    assert "95% CI [" in report["summary_line"] and "effective trials" in report["summary_line"]
    # the oracle's efficiency needs 8 independent series for its cluster interval: 2 here, so the reason
    assert "at least 8" in ev["intervals"]["efficiency"]["reason"] and s["efficiency_ci95"] is None


def short_walk(segment: str, bars: int = 10, labels=("buy_and_hold", "momentum(4,0)")) -> SimpleNamespace:
    """The fields of an ``EvalResult`` the evidence reads: two independent series of ``bars`` bars."""
    nets = [np.zeros(bars), np.linspace(-0.01, 0.01, bars)]
    return SimpleNamespace(
        segment=segment, records=[{"net": n, "position": np.ones(bars)} for n in nets], timestamps=[None, None],
        baseline_net={r: nets for r in ("buy_and_hold", "momentum", "mean_reversion")},
        baselines={r: {"mean": {"sharpe": 0.0}} for r in RULES}, rule_choice={},
        rule_grid={x: {} for x in labels}, rule_grid_net={x: nets for x in labels}, periods_per_year=252.0)


def test_a_segment_too_short_for_the_statistics_leaves_the_report_with_the_reason(capsys):
    report = {"summary": {"sharpe": 0.1}, "data": {"source": "synthetic"}}
    add_evidence(report, {"validation": short_walk("validation"), "test": short_walk("test")},
                 ["validation", "test"], None)
    assert report["evidence"]["value"] is None
    assert "a[0][0]: expected a 1-D array of at least 20 finite per-bar returns" in report["evidence"]["reason"]
    assert report["summary"]["test_sharpe_ci95"] is None and report["summary"]["sharpe"] == 0.1
    assert report["summary"]["dsr_trials"] is None
    assert "warning: no evidence for this evaluation" in capsys.readouterr().err


def test_rule_variants_are_the_ones_walked_and_a_missing_walk_is_named():
    walk = short_walk("test", bars=64, labels=("buy_and_hold", "momentum(4,0)", "momentum(8,0)"))
    assert list(variant_nets(walk)) == ["buy_and_hold", "momentum(4,0)", "momentum(8,0)"]
    assert pbo_block([walk, walk], 252.0)["candidates"] == 3
    other = short_walk("validation", bars=64)
    with pytest.raises(ValueError, match="results validation\\+test: expected the same rule variants"):
        pbo_block([other, walk], 252.0)
    del walk.rule_grid_net["momentum(8,0)"]
    with pytest.raises(ValueError, match="result 'test': expected the net returns of every rule variant .*"
                                         "missing 1 \\(first 'momentum\\(8,0\\)'\\)"):
        variant_nets(walk)
    walk.rule_grid = {}
    with pytest.raises(ValueError, match="result 'test': expected the rule variants walked with baselines"):
        variant_nets(walk)


def test_oracle_and_efficiency_intervals_over_independent_series():
    rng = np.random.default_rng(11)

    class Result:
        assets = [f"test{i}" for i in range(12)]
        records = [{"net": rng.normal(0.0006, 0.01, 800)} for _ in range(12)]
        oracle = {"available": True, "label": "oracle (knows the generator)", "variant": "x",
                  **{f"test{i}": {"sharpe": 2.0 + 0.1 * i} for i in range(12)}}

    out = oracle_intervals(Result, 252.0)
    o = np.array([2.0 + 0.1 * i for i in range(12)])
    a = np.array([r["net"].mean() / r["net"].std(ddof=1) * np.sqrt(252.0) for r in Result.records])
    assert out["oracle"]["estimate"] == pytest.approx(o.mean()) and out["oracle"]["low"] < o.mean() < out["oracle"]["high"]
    assert out["efficiency"]["estimate"] == pytest.approx(a.mean() / o.mean())
    assert out["efficiency"]["low"] < out["efficiency"]["estimate"] < out["efficiency"]["high"]
    Result.oracle = {"available": False, "reason": "file data"}
    assert oracle_intervals(Result, 252.0) == {}
