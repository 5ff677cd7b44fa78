"""Result lines that cannot mislead (CPU, no training): the rule on the printed line is the one chosen
on validation, named so, never the best on test; means over the assets and the equal-weight
portfolio are labelled apart; every evaluation, walk-forward and population ends with one verdict
line read from the calibrated intervals."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from benchmarks.report_png import synthetic_walk
from rl_zerosync.evaluation.verdict import compare, verdict


def _iv(low: float, high: float) -> dict:
    return {"estimate": (low + high) / 2, "low": low, "high": high}


@pytest.mark.parametrize("low, high, word", [(0.1, 0.4, "beats"), (-0.21, -0.02, "below"), (-0.3, 0.2, "no edge over"),
                                             (0.0, 0.5, "no edge over")])
def test_compare_reads_only_the_interval(low, high, word):
    text = compare(_iv(low, high), "buy-and-hold")
    assert text == f"{word} buy-and-hold, interval [{low:+.2f}, {high:+.2f}]"


def test_verdict_names_the_rule_chosen_on_validation_then_buy_and_hold():
    evidence = {"level": 0.95, "segment": "test", "intervals": {
        "agent_minus_best_rule": {"best_rule": "momentum", **_iv(-0.21, -0.02)},
        "agent_minus_buy_and_hold": _iv(-0.3, 0.4)}}
    line = verdict(evidence, rule="momentum(64,1)")
    assert line == ("verdict on test (agent's Sharpe minus theirs, 95% intervals): below the rule chosen on "
                    "validation (momentum(64,1)), interval [-0.21, -0.02]; no edge over buy-and-hold, "
                    "interval [-0.30, +0.40]")
    assert "best" not in line
    assert verdict({"value": None, "reason": "20 bars"}) == "verdict on test: none (20 bars)"
    assert verdict(None, segment="all").startswith("verdict on all: none (")
    nan = {"intervals": {"agent_minus_best_rule": _iv(float("nan"), 1.0)}}
    assert "no interval for the agent minus the rule chosen on validation" in verdict(nan)


def _evaluation_with_another_rule_best_on_test():
    """Validation chooses mean reversion; on test momentum does better: the line must name the former."""
    from rl_zerosync.evaluation.backtest import best_rule, portfolio_metrics

    val, _ = synthetic_walk(4, 300, "validation", seed=1)
    test, test_port = synthetic_walk(4, 300, "test", seed=2, rule_choice=val.rule_choice)
    val.baselines["mean_reversion"]["mean"]["sharpe"] = 3.0
    val.baselines["momentum"]["mean"]["sharpe"] = 0.5
    test.baselines["mean_reversion"]["mean"]["sharpe"] = -0.7
    test.baselines["momentum"]["mean"]["sharpe"] = 2.5
    assert best_rule(val.baselines) == "mean_reversion" and best_rule(test.baselines) == "momentum"
    ev = types.SimpleNamespace(segments=["validation", "test"], run_state={"iteration": 7},
                               data_cfg={"source": "synthetic"}, ckpt=Path("run/checkpoint_best"))
    report = {"segments": {"test": {"portfolio": portfolio_metrics(test_port, 252.0)}}, "warnings": []}
    return ev, {"validation": val, "test": test}, report


def test_the_result_line_never_calls_a_test_chosen_rule_best():
    from rl_zerosync.evaluation.evaluate import _summary, _summary_line

    ev, results, report = _evaluation_with_another_rule_best_on_test()
    report["summary"] = s = _summary(ev, results, report, None)
    chosen = results["validation"].baselines["mean_reversion"]["variant"]
    assert s["rule_chosen_on_validation"] == s["best_rule"] == chosen and s["rule_chosen_on"] == "validation"
    assert s["best_rule_sharpe"] == -0.7  # the chosen rule's test Sharpe, not the best one on test
    line = _summary_line(ev, results["test"], report, Path("run/evaluation/report.png"))
    assert f"rule chosen on validation: {chosen} (test -0.70)" in line
    assert "best" not in line.replace("checkpoint_best", "") and "momentum(" not in line.split("|")[0]
    # means over the assets and the equal-weight portfolio, each labelled
    port = report["segments"]["test"]["portfolio"]
    assert line.startswith(f"test, mean of 4 assets: sharpe {s['sharpe']:+.2f} (")
    assert f"| equal-weight portfolio: sharpe {port['agent']['sharpe']:+.2f}, equity return " in line
    assert s["portfolio_sharpe"] == port["agent"]["sharpe"] and s["assets"] == 4


def test_walk_forward_lines_name_the_rules_chosen_on_validation():
    from rl_zerosync.run.walkforward import fold_line, pool, pooled_line

    summary = {"segment": "test", "sharpe": 0.4, "total_return": 0.1, "max_drawdown": 0.05, "buy_and_hold_sharpe": 1.0,
               "best_rule": "momentum(32,1.5)", "best_rule_sharpe": 0.7}
    line = fold_line({"fold": 0, "window": [0.0, 0.5], "summary": summary, "segments": {}})
    assert "rule chosen on validation: momentum(32,1.5) (test +0.70)" in line and "best" not in line
    pooled = {**pool([summary]), "pooled_test_sharpe": 0.4, "test_sharpe_ci95": [0.1, 0.7],
              "agent_minus_best_rule_ci95": [-0.6, 0.1], "deflated_sharpe": 0.3, "trials": 12.0}
    text = pooled_line(pooled)
    assert "rules chosen on validation +0.70" in text and "vs rules chosen on validation [-0.60, +0.10]" in text
    assert "best rule" not in text


def test_the_seeds_line_names_the_rule_chosen_on_validation():
    from rl_zerosync.run.seeds import summary_line

    s = {"seeds": 2, "test_sharpe_mean": 0.5, "test_sharpe_seed_range": [0.4, 0.6], "best_rule_test_sharpe_mean": 0.7,
         "agent_minus_best_rule_mean": -0.2, "rules_test_sharpe_mean": {"flat": 0.0}}
    line = summary_line({"summary": s})
    assert "rule chosen on validation (test) +0.70" in line and "best" not in line
