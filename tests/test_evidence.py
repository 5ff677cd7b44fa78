"""The ``evidence`` block of an evaluation (``rl_zerosync.evaluation.evidence``): intervals with
sample noise that contain their estimates, paired differences, PSR / DSR with the trials counted
from the rule grid and the run's validation history, SPA, PBO and the validation power check."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rl_zerosync.evaluation.evidence import checkpoint_history, mean_sharpe_interval
from rl_zerosync.evaluation.rules import variants
from rl_zerosync.evaluation.significance import paired_difference_interval, sharpe_interval

RUN = Path(__file__).resolve().parent / "data" / "run_v0_1"


def test_one_asset_is_the_library_interval_and_the_paired_difference():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.001, 0.01, 400), rng.normal(0.0, 0.01, 400)
    one = mean_sharpe_interval([a], None, 252.0, reps=500, seed=7)
    lib = sharpe_interval(a, 252.0, reps=500, seed=7)
    assert (one["estimate"], one["low"], one["high"]) == pytest.approx((lib.estimate, lib.low, lib.high))
    diff = mean_sharpe_interval([a], [b], 252.0, reps=500, seed=7)
    lib = paired_difference_interval(a, b, 252.0, reps=500, seed=7)
    assert (diff["estimate"], diff["low"], diff["high"]) == pytest.approx((lib.estimate, lib.low, lib.high))
    same = mean_sharpe_interval([a, b], [a, b], 252.0, reps=200)
    assert same["low"] == same["high"] == same["estimate"] == 0.0  # paired: what is common cancels


def test_several_assets_mean_of_sharpes_and_bad_input_named():
    rng = np.random.default_rng(4)
    nets = [rng.normal(0.0005, 0.01, 300) for _ in range(3)]
    iv = mean_sharpe_interval(nets, None, 252.0, reps=300)
    per = [x.mean() / x.std(ddof=1) * np.sqrt(252.0) for x in nets]
    assert iv["estimate"] == pytest.approx(np.mean(per)) and iv["low"] <= iv["estimate"] <= iv["high"]
    assert "one shared bar draw" in iv["method"] and iv["assets"] == 3 and iv["bars"] == 900
    uneven = mean_sharpe_interval([nets[0], nets[1][:200]], None, 252.0, reps=300)
    assert "independent bar draws per asset" in uneven["method"]
    with pytest.raises(ValueError, match=r"a, b: expected the same bars per asset"):
        mean_sharpe_interval(nets, [n[:-1] for n in nets], 252.0)
    with pytest.raises(ValueError, match=r"a\[0\]: expected a 1-D array of at least 20 finite"):
        mean_sharpe_interval([np.array([0.1, np.nan] * 20)], None, 252.0)


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
    assert s["trials"] == ev["trials"]["n"] == len(variants()) + 4  # 51 rule variants + 4 validation passes
    assert "51 rule variants" in ev["deflated_sharpe"]["trials_counted"]
    assert 0.0 <= s["deflated_sharpe"] <= s["psr"] <= 1.0
    assert s["ci_method"].startswith("stationary block bootstrap over bars")
    assert 0.0 <= ev["pbo"]["value"] <= 1.0 and ev["pbo"]["candidates"] == len(variants())
    assert ev["pbo"]["segments"] == "validation+test"
    assert 0.0 <= ev["spa"]["pvalue_consistent"] <= 1.0 and ev["spa"]["candidates"] == len(variants())
    assert ev["power"]["warning"].startswith("validation cannot tell annualized Sharpe 1 from 0")
    assert "95% CI [" in report["summary_line"] and "trials" in report["summary_line"]


def test_a_segment_too_short_for_the_statistics_leaves_the_report_with_the_reason(monkeypatch, capsys):
    import rl_zerosync.evaluation.evidence as evidence

    def too_short(*a, **k):
        return mean_sharpe_interval([np.zeros(10)], None, 252.0)  # the real error: fewer than 20 bars

    monkeypatch.setattr(evidence, "evidence_block", too_short)
    report = {"summary": {"sharpe": 0.1}, "data": {"source": "synthetic"}}
    evidence.add_evidence(report, {}, ["validation", "test"], None)
    assert report["evidence"]["value"] is None
    assert "a[0]: expected a 1-D array of at least 20 finite per-bar returns" in report["evidence"]["reason"]
    assert report["summary"]["test_sharpe_ci95"] is None and report["summary"]["sharpe"] == 0.1
    assert "warning: no evidence for this evaluation" in capsys.readouterr().err
