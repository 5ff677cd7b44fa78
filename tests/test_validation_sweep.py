"""A selection sweep reads validation only: ``train_seeds(..., test=False)`` runs end without their
evaluation (no test segment read, no ``evaluation/``), seeds.json holds validation numbers only, and
``benchmarks.learning``'s ``--from-sweep`` picks the variant with the highest mean best-validation
Sharpe, refuses a sweep that read test, and counts the sweep's validation passes as DSR trials."""
from __future__ import annotations

import json

import pytest
import yaml
from bench_module import bench_module
from tiny_run import tiny_raw

from rl_zerosync.run.seeds import seeds_evidence, summary_line, train_seeds

learning = bench_module("learning")


def test_validation_only_seeds_read_no_test(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    raw = tiny_raw({"iterations": 2, "checkpoint_every": 1, "eval_every": 1, "dir": str(tmp_path), "name": "s"},
                   data={"heldout_validation_series": 2, "heldout_test_series": 3, "heldout_bars": 400})
    cfg.write_text(yaml.safe_dump(raw))
    report = train_seeds(str(cfg), [], [0], test=False)
    assert "run.evaluate=false" in report["overrides"]
    rec = report["per_seed"][0]
    assert set(rec) == {"checkpoint_iteration", "best_validation_sharpe", "validation_passes", "iterations",
                        "validation_curve", "wall_s"}
    assert rec["validation_passes"] == 2 and rec["best_validation_sharpe"] == max(v for _, v in rec["validation_curve"])
    assert report["summary"]["test_read"] is False and "test_sharpe_mean" not in report["summary"]
    assert not (tmp_path / "s" / "seed0" / "evaluation").exists()  # the test segment was never scored
    assert json.loads((tmp_path / "s" / "seeds.json").read_text())["summary"]["test_read"] is False


def test_seeds_of_runs_without_evaluation_report_validation_only(tmp_path):
    """``--seeds`` with ``run.evaluate=false`` in the settings (not a selection sweep): the report is the
    validation-only one instead of an error after training about evaluations never written."""
    cfg = tmp_path / "tiny.yaml"
    raw = tiny_raw({"iterations": 2, "checkpoint_every": 1, "eval_every": 1, "dir": str(tmp_path), "name": "e",
                    "evaluate": False},
                   data={"heldout_validation_series": 2, "heldout_test_series": 3, "heldout_bars": 400})
    cfg.write_text(yaml.safe_dump(raw))
    report = train_seeds(str(cfg), [], [0])
    assert report["summary"]["test_read"] is False and "test_sharpe_mean" not in report["summary"]
    assert report["per_seed"][0]["validation_passes"] == 2
    assert not (tmp_path / "e" / "seed0" / "evaluation").exists()
    assert "test not read" in summary_line(report) and "best validation sharpe" in summary_line(report)


def _sweep(path, variants):
    path.write_text(json.dumps({"sweep": {
        name: {"overrides": [f"algo.lr={lr}"], "summary": {"best_validation_sharpe_mean": v, "test_read": False},
               "per_seed": {"0": {"validation_curve": [[1, v - 0.5], [2, v]]}}}
        for name, (lr, v) in variants.items()}}))
    return str(path)


def test_from_sweep_takes_the_best_validation_and_counts_its_trials(tmp_path):
    choice = learning.sweep_choice(_sweep(tmp_path / "s.json", {"a": (0.1, 1.2), "b": (0.2, 1.7), "c": (0.3, 1.5)}))
    assert choice["chosen"] == "b" and choice["overrides"] == ["algo.lr=0.2"]
    assert choice["trials"]["n"] == 6 and sorted(choice["trials"]["sharpes"]) == [0.7, 1.0, 1.2, 1.2, 1.5, 1.7]
    assert "6 validation passes of the 3 config variants" in choice["trials"]["counted"]


def test_from_sweep_refuses_a_sweep_that_read_test(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"sweep": {"a": {"overrides": [], "summary": {"best_validation_sharpe_mean": 1.0},
                                             "per_seed": {}}}}))
    with pytest.raises(SystemExit, match="expected a validation-only sweep"):
        learning.sweep_choice(str(p))


def test_extra_trials_raise_the_dsr_count():
    import numpy as np

    rng = np.random.default_rng(0)
    nets = [rng.standard_normal(500) * 0.01 + 0.001 for _ in range(8)]
    ret = {"agent": nets, "best_rule": [n * 0.5 for n in nets], "buy_and_hold": [n * 0.2 for n in nets],
           "position": [np.ones(500)] * 8, "validation": [n[::-1].copy() for n in nets],
           "trials": {"n": 5.0, "candidates": 5, "selected_validation_sharpe": 1.2, "se": 0.5,
                      "counted": "5 candidates", "segment": "validation"},
           "independent": True, "periods_per_year": 252}
    base = seeds_evidence([ret])
    more = seeds_evidence([ret], extra_trials={"n": 40, "sharpes": list(np.linspace(-1, 2, 40)), "counted": "40 more"})
    assert base["trials"]["n"] == 5 and more["trials"]["n"] == 45
    assert more["trials"]["counted"].endswith("+ 40 more")
    assert more["deflated_sharpe"]["expected_max"] > base["deflated_sharpe"]["expected_max"]
    assert more["deflated_sharpe"]["value"] < base["deflated_sharpe"]["value"]
    assert more["intervals"] == base["intervals"]  # the trials change the DSR only
