"""A population's evaluation in one pass (:mod:`rl_zerosync.evaluation.population_pass`, CPU): every
member's numbers equal its own ``rl-zerosync evaluate``; lean members get metrics and evidence only.

Two tiny runs (seeds 0 and 1, synthetic data, 2 iterations each, in process) stand for two members."""
from __future__ import annotations

import json

import pytest

from tiny_run import tiny_raw


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_instance):
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("pop_pass")
    dirs = []
    with ray_instance(address="local", num_cpus=2):
        for seed in (0, 1):
            raw = tiny_raw({"iterations": 2, "eval_every": 1, "checkpoint_every": 0, "evaluate": False,
                            "dir": str(tmp), "name": f"m{seed}", "seed": seed},
                           data={"heldout_validation_series": 2, "heldout_test_series": 4, "heldout_bars": 400})
            train(from_dict(raw))
            dirs.append(tmp / f"m{seed}")
    return dirs


def _own(run_dir, tmp):
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(run_dir, out_dir=tmp / f"own_{run_dir.name}", quiet=True)


def test_one_pass_equals_each_members_own_evaluation(runs, tmp_path):
    from rl_zerosync.evaluation.population_pass import LEAN, evaluate_members

    seen = []
    reports = evaluate_members(runs, ["best", "best"], full=[True, False], on_report=lambda k, r: seen.append(k))
    assert seen == [0, 1]
    for k, (run_dir, report) in enumerate(zip(runs, reports)):
        own = _own(run_dir, tmp_path)
        for segment in ("validation", "test"):
            mine, theirs = report["segments"][segment], own["segments"][segment]
            assert mine["metrics"] == theirs["metrics"]  # bit for bit: the member's own walk
            assert mine["baselines"] == theirs["baselines"] and mine["rule_choice"] == theirs["rule_choice"]
            assert mine["oracle"] == theirs["oracle"]
            assert mine["portfolio"] == theirs["portfolio"]
        assert report["evidence"]["intervals"] == own["evidence"]["intervals"]
        assert report["evidence"]["deflated_sharpe"] == own["evidence"]["deflated_sharpe"]
        for key in ("sharpe", "best_rule", "agent_minus_best_rule", "test_sharpe_ci95", "agent_minus_best_rule_ci95"):
            assert report["summary"][key] == own["summary"][key]
        written = json.loads((run_dir / "evaluation" / "metrics.json").read_text())
        assert written["summary"]["sharpe"] == report["summary"]["sharpe"]
        files = {p.name for p in (run_dir / "evaluation").iterdir()}
        if k == 0:  # the whole evaluation
            assert "lean" not in report and "report.png" in files and "bars_test.csv" in files
            assert report["segments"]["train"] == own["segments"]["train"]
            assert report["execution"] == own["execution"]
            assert report["summary_line"].replace(str(run_dir / "evaluation"), "X") == \
                own["summary_line"].replace(str(tmp_path / f"own_{run_dir.name}"), "X")
        else:  # lean: metrics, evidence and its returns only
            assert report["lean"] == LEAN
            assert "report.png" not in files and "bars_test.csv" not in files and "train" not in report["segments"]
            assert "execution" not in report and "report" not in report["summary_line"].split("|")[-1]
            assert any(name.startswith("returns_") for name in files)


def test_members_that_walk_apart_are_grouped(runs, tmp_path):
    """Members walk together only when their data, env, routing, action mode and device agree."""
    from dataclasses import replace

    from rl_zerosync.evaluation.evaluate import _load
    from rl_zerosync.evaluation.population_pass import _groups

    evs = [_load(d, None, tmp_path / f"e{k}", "best", "cpu", None) for k, d in enumerate([*runs, runs[0]])]
    assert _groups(evs) == [[0, 1, 2]]
    evs[1].params = replace(evs[1].params, fee=evs[1].params.fee * 2)
    assert _groups(evs) == [[0, 2], [1]]
    evs[2].data_cfg = {**evs[2].data_cfg, "seed": 5}
    assert _groups(evs) == [[0], [1], [2]]


def test_mismatched_arguments_are_refused(runs):
    from rl_zerosync.evaluation.population_pass import evaluate_members

    with pytest.raises(ValueError, match="one of each per member"):
        evaluate_members(runs, ["best"], full=[True, True])
