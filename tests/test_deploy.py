"""The deployment decision (``rl_zerosync.evaluation.deploy``): made on validation only (a planted
edge deploys the agent, noise deploys the best baseline, reversed or poisoned test returns leave the
decision as it was), recorded in the report and its file, and per walk-forward fold with the pooled
deployed-policy line."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from rl_zerosync.evaluation.deploy import (
    DEFAULT_MARGIN, DEPLOY_FILE, SUMMARY_KEYS, attach_deployment, check_margin, decide, deployment_block,
    read_deployment_returns, walk_forward_deployment)
from rl_zerosync.evaluation.rules import RULES
from rl_zerosync.evidence.calibrated import panel_interval

P = 252.0
BARS, ASSETS = 500, 2


@dataclass
class Walked:
    """The parts of an ``EvalResult`` the decision and the test numbers read."""

    segment: str
    records: list
    baseline_net: dict
    baselines: dict
    timestamps: list
    periods_per_year: float = P
    rule_choice: dict = field(default_factory=dict)


def _sharpe(x: np.ndarray) -> float:
    sd = x.std(ddof=1)
    return float(x.mean() / sd * np.sqrt(P)) if sd > 0 else 0.0


def walked(segment: str, agent, rules, dated: bool = True) -> Walked:
    """A segment walk: the agent's per-asset returns and positions, each rule's per-asset returns."""
    baselines = {"flat": {"mean": {"sharpe": 0.0}}}
    for name, nets in rules.items():
        baselines[name] = {"mean": {"sharpe": float(np.mean([_sharpe(n) for n in nets]))}}
        if name != "buy_and_hold":
            baselines[name]["variant"] = f"{name}(16,1)"
    stamps = [np.arange(len(a)) if dated else None for a in agent]
    return Walked(segment, [{"net": np.asarray(a), "position": np.sign(np.asarray(a))} for a in agent],
                  {k: [np.asarray(n) for n in v] for k, v in rules.items()}, baselines, stamps)


def market(seed: int, agent_drift: float, agent_noise: float = 0.004):
    """Validation and test walks of ``ASSETS`` assets on one calendar: buy-and-hold drifts up, the
    rules lose a little, the agent is buy-and-hold plus ``agent_drift`` per bar plus noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for segment in ("validation", "test"):
        bench = [rng.normal(0.0008, 0.01, BARS) for _ in range(ASSETS)]
        rules = {"buy_and_hold": bench,
                 "momentum": [rng.normal(-0.0004, 0.01, BARS) for _ in range(ASSETS)],
                 "mean_reversion": [rng.normal(-0.0004, 0.01, BARS) for _ in range(ASSETS)]}
        agent = [b + rng.normal(agent_drift, agent_noise, BARS) for b in bench]
        out[segment] = walked(segment, agent, rules)
    return out


SEGMENTS = ["validation", "test"]


def test_a_planted_edge_deploys_the_agent():
    res = market(0, agent_drift=0.002)
    block = deployment_block(res, SEGMENTS)
    edge = block["validation"]["agent_minus_baseline"]
    assert block["deployed"] == block["deployed_label"] == "agent" and block["decided_on"] == "validation"
    assert edge["low"] > DEFAULT_MARGIN and "above the margin +0.00" in block["reason"]
    assert block["validation"]["baseline"] == "buy_and_hold"  # the best baseline on validation
    assert edge["design"] == "bar blocks"  # assets on one calendar
    # The deployed policy's test numbers: the agent's test returns, and the agent minus buy-and-hold.
    t = res["test"]
    ref = panel_interval([r["net"] for r in t.records], None, P, independent_series=False,
                         positions=[r["position"] for r in t.records])
    assert block["test"]["sharpe"]["estimate"] == pytest.approx(ref["estimate"])
    assert block["test"]["sharpe"]["low"] == pytest.approx(ref["low"]) and block["test"]["policy"] == "agent"
    assert block["test"]["deployed_minus_buy_and_hold"]["estimate"] > 0


def test_noise_deploys_the_best_baseline_on_validation():
    for seed in range(3):
        res = market(seed, agent_drift=-0.0003, agent_noise=0.01)  # an agent that only adds noise
        block = deployment_block(res, SEGMENTS)
        assert block["deployed"] == "buy_and_hold" and block["deployed_label"] == "buy_and_hold", block["reason"]
        assert "not above the margin" in block["reason"]
        bh = panel_interval(res["test"].baseline_net["buy_and_hold"], None, P, independent_series=False)
        assert block["test"]["sharpe"]["estimate"] == pytest.approx(bh["estimate"])
        d = block["test"]["deployed_minus_buy_and_hold"]
        assert d["estimate"] == d["low"] == d["high"] == 0.0


def test_the_best_baseline_is_the_rule_chosen_on_validation_with_its_variant():
    rng = np.random.default_rng(5)
    res = market(1, agent_drift=0.0)
    res["validation"] = walked("validation", [r["net"] for r in res["validation"].records],
                               {**res["validation"].baseline_net,
                                "momentum": [rng.normal(0.002, 0.01, BARS) for _ in range(ASSETS)]})
    block = deployment_block(res, SEGMENTS)
    assert block["deployed"] == "momentum" and block["deployed_label"] == "momentum(16,1)"
    assert block["validation"]["baseline_label"] == "momentum(16,1)"
    assert set(block["validation"]["baselines"]) == set(RULES)
    mom = panel_interval(res["test"].baseline_net["momentum"], None, P, independent_series=False)
    assert block["test"]["sharpe"]["estimate"] == pytest.approx(mom["estimate"])


def test_a_margin_asks_for_more():
    res = market(0, agent_drift=0.002)
    edge = deployment_block(res, SEGMENTS)["validation"]["agent_minus_baseline"]
    above = deployment_block(res, SEGMENTS, margin=edge["low"] + 0.01)
    assert above["deployed"] == "buy_and_hold" and "lower bound not above the margin" in above["reason"]
    assert above["margin"] == pytest.approx(edge["low"] + 0.01)
    assert deployment_block(res, SEGMENTS, margin=edge["low"] - 0.01)["deployed"] == "agent"
    for bad in (float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="deploy margin"):
            check_margin(bad)


def _poisoned(res, how: str):
    t = res["test"]
    if how == "reversed":  # the test returns reversed in time and negated: other test numbers
        change = lambda x: -np.asarray(x)[::-1]  # noqa: E731
    else:  # NaN: no test number can be computed
        change = lambda x: np.full(len(x), np.nan)  # noqa: E731
    rules = {k: [change(n) for n in v] for k, v in t.baseline_net.items()}
    out = walked("test", [change(r["net"]) for r in t.records], rules)
    out.baselines = t.baselines
    return {"validation": res["validation"], "test": out}


@pytest.mark.parametrize("drift", [0.002, -0.0003])
def test_the_decision_never_reads_test(drift):
    res = market(2, agent_drift=drift, agent_noise=0.004 if drift > 0 else 0.01)
    before = deployment_block(res, SEGMENTS)
    for how in ("reversed", "nan"):
        after = deployment_block(_poisoned(res, how), SEGMENTS)
        for key in ("deployed", "deployed_label", "reason", "margin", "validation"):
            assert after[key] == before[key], (how, key)
    rev = deployment_block(_poisoned(res, "reversed"), SEGMENTS)["test"]
    assert rev["sharpe"]["estimate"] == pytest.approx(-before["test"]["sharpe"]["estimate"])
    nan = deployment_block(_poisoned(res, "nan"), SEGMENTS)["test"]
    assert nan["value"] is None and "finite" in nan["reason"]


def test_attach_records_the_decision_its_summary_keys_and_the_file(tmp_path):
    res = market(0, agent_drift=0.002)
    report = {"summary": {"sharpe": 1.0}}
    attach_deployment(report, res, SEGMENTS, tmp_path)
    dep, s = report["deployment"], report["summary"]
    assert dep["deployed"] == s["deployed"] == "agent" and dep["file"] == DEPLOY_FILE
    assert s["deployed_test_sharpe"] == dep["test"]["sharpe"]["estimate"]
    assert s["deployed_test_sharpe_ci95"] == [dep["test"]["sharpe"]["low"], dep["test"]["sharpe"]["high"]]
    json.dumps(report)  # JSON-able as written into metrics.json
    back = read_deployment_returns(tmp_path)
    assert back["baseline"] == "buy_and_hold" and back["independent"] is False
    assert len(back["validation"]["agent"]) == ASSETS and len(back["test"]["buy_and_hold"]) == ASSETS
    np.testing.assert_array_equal(back["validation"]["agent"][1], res["validation"].records[1]["net"])
    again = decide(back["validation"]["agent"], back["validation"]["baseline"], back["baseline"], P,
                   independent_series=False, positions=back["validation"]["position"])
    assert again["reason"] == dep["reason"]  # the file holds what the decision read
    # One segment (evaluate --data) or missing walks: no decision, said why; the summary keys None.
    one = {"summary": {}}
    attach_deployment(one, {"all": res["test"]}, ["all"])
    assert one["deployment"]["deployed"] is None and "one segment evaluated" in one["deployment"]["reason"]
    assert all(one["summary"][k] is None for k in SUMMARY_KEYS)
    empty = {"summary": {}}
    attach_deployment(empty, {}, SEGMENTS)
    assert empty["deployment"]["deployed"] is None


def _fold_file(run_dir: Path, seed: int, drift: float) -> None:
    out = Path(run_dir) / "evaluation"
    out.mkdir(parents=True)
    attach_deployment({"summary": {}}, market(seed, agent_drift=drift, agent_noise=0.004 if drift > 0 else 0.01),
                      SEGMENTS, out)


def test_walk_forward_decides_every_fold_on_validation_and_pools_the_deployed_policies(tmp_path):
    drifts = [0.002, -0.0003, 0.002]
    folds = []
    for i, drift in enumerate(drifts):
        _fold_file(tmp_path / f"fold{i}", i, drift)
        folds.append({"fold": i, "run_dir": str(tmp_path / f"fold{i}")})
    dep = walk_forward_deployment(folds)
    assert [f["deployed"] for f in dep["folds"]] == ["agent", "buy_and_hold", "agent"]
    assert dep["folds_deploying_agent"] == 2 and dep["decisions"] == 3 and dep["margin"] == 0.0
    # The deployed test returns stitched per asset: the agent's in folds 0 and 2, buy-and-hold's in 1.
    runs = [read_deployment_returns(Path(f["run_dir"]) / "evaluation") for f in folds]
    stitched = [np.concatenate([runs[0]["test"]["agent"][a], runs[1]["test"]["baseline"][a],
                                runs[2]["test"]["agent"][a]]) for a in range(ASSETS)]
    ref = panel_interval(stitched, None, P, independent_series=False)
    pooled = dep["pooled"]["sharpe"]
    assert pooled["estimate"] == pytest.approx(ref["estimate"]) and pooled["bars"] == 3 * BARS * ASSETS
    assert pooled["low"] <= pooled["estimate"] <= pooled["high"]
    # Poisoned test returns in every fold's file: the same decisions.
    for f in folds:
        path = Path(f["run_dir"]) / "evaluation" / DEPLOY_FILE
        with np.load(path) as z:
            arrays = {k: (-z[k][::-1] if k.startswith("test_") else z[k]) for k in z.files}
        np.savez(path, **arrays)
    again = walk_forward_deployment(folds)
    assert [f["deployed"] for f in again["folds"]] == [f["deployed"] for f in dep["folds"]]
    assert [f["reason"] for f in again["folds"]] == [f["reason"] for f in dep["folds"]]
    assert walk_forward_deployment(folds, margin=100.0)["folds_deploying_agent"] == 0
    missing = walk_forward_deployment(folds + [{"fold": 3, "run_dir": str(tmp_path / "none")}])
    assert missing["value"] is None and DEPLOY_FILE in missing["reason"]


def test_walk_forward_reports_each_fold_s_decision_and_the_deployed_line(tmp_path, monkeypatch):
    import yaml

    import rl_zerosync.run.train as train_module
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.walkforward import RESULT_FILE, walk_forward

    root = Path(__file__).resolve().parent.parent
    raw = yaml.safe_load((root / "configs" / "smoke.yaml").read_text())
    raw["run"].update({"dir": str(tmp_path), "name": "wf"})
    raw["data"] = {"source": "csv", "paths": [str(root / "benchmarks" / "data" / "STOCKS_GOOGL.csv")],
                   "features": {"warmup": 32, "median_window": 126}, "periods_per_year": 252}
    folds = iter([(0, -0.0003), (1, 0.002)])  # (market seed, agent drift): noise, then a planted edge

    def fake_train(s, **kw):  # a fold's evaluation: its summary and the deployment file
        _fold_file(s.run_dir, *next(folds))
        return {"evaluation": {"summary": {"segment": "test", "sharpe": 0.1, "buy_and_hold_sharpe": 1.0}}}

    monkeypatch.setattr(train_module, "train", fake_train)
    report = walk_forward(from_dict(raw, source="test"), 2, deploy_margin=0.05)
    dep = report["deployment"]
    assert report["deploy_margin"] == dep["margin"] == 0.05
    assert [f["deployment"]["deployed"] for f in report["folds"]] == ["buy_and_hold", "agent"]
    assert report["pooled"]["folds_deploying_agent"] == 1 and report["pooled"]["deploy_decisions"] == 2
    lo, hi = report["pooled"]["deployed_test_sharpe_ci95"]
    assert lo <= report["pooled"]["deployed_test_sharpe"] <= hi
    assert report["lines"][-1].startswith("deployed policy (decided on validation, margin +0.05): pooled test sharpe")
    assert "agent deployed in 1/2 folds (0: buy_and_hold, 1: agent)" in report["lines"][-1]
    on_disk = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert on_disk["pooled"]["deployed_test_sharpe_ci95"] == [lo, hi]
    with pytest.raises(ValueError, match="deploy margin"):
        walk_forward(from_dict(raw, source="test"), 2, deploy_margin=float("nan"), overwrite=True)


def test_the_file_is_one_an_evaluation_directory_may_hold():
    from rl_zerosync.evaluation.eval_dir import OUTPUT_NAME

    assert OUTPUT_NAME.match(DEPLOY_FILE)  # a second evaluation into the same --out replaces it
