"""A run written by an earlier version (``tests/data/run_v0_1``: 4 tiny CPU iterations of
``tests/tiny_run.py``'s config, written before the package's folders were arranged by role) still
evaluates to the same numbers and resumes training.

RLlib pickles the classes of ``rl_zerosync.algorithm``, ``rl_zerosync.module``, ``rl_zerosync.learner.*``
and ``rl_zerosync.env_runner.*`` (and the gymnasium id ``rl_zerosync.envs:...``) into a checkpoint;
these tests fail if one of those paths moves."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

RUN = Path(__file__).resolve().parent / "data" / "run_v0_1"
pytestmark = pytest.mark.usefixtures("ray_local")  # one Ray instance (conftest) for the module


@pytest.fixture()
def old_run(tmp_path) -> Path:
    run = tmp_path / "runs" / "pre_move"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("evaluation_before_move.json"))
    return run


def _plain(value):
    """The report as its JSON file holds it (tuples as lists, floats round-tripped)."""
    return json.loads(json.dumps(value))


def test_a_checkpoint_written_before_the_move_evaluates_to_the_same_numbers(old_run, tmp_path):
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

    expected = json.loads((RUN / "evaluation_before_move.json").read_text())
    report = evaluate_checkpoint(old_run, out_dir=tmp_path / "eval")
    summary = _plain(report["summary"])
    assert {k: summary[k] for k in expected["summary"]} == expected["summary"]  # new keys (evidence) beside
    got = _plain(report["segments"])  # keys added since (the oracle) beside the ones recorded then
    assert {seg: {k: got[seg][k] for k in rec} for seg, rec in expected["segments"].items()} == expected["segments"]
    # its settings.yaml has no env.execution_lag: evaluated under the same-close model it was trained under
    settings = report["execution"]["settings"]
    assert settings["execution_lag"] == 0 and settings["execution_lag_source"].startswith("not in settings.yaml")
    assert report["execution"]["sensitivity"]["policy_sharpe"]["cost_x1"] == pytest.approx(
        expected["summary"]["sharpe"], rel=1e-9)


def test_a_run_written_before_the_move_resumes(old_run, monkeypatch):
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import train

    monkeypatch.chdir(old_run.parents[1])
    raw = yaml.safe_load((old_run / "settings.yaml").read_text())
    raw["run"]["iterations"] = 5
    result = train(from_dict(raw), resume=str(old_run))
    assert result["training_iteration"] == 5
    rows = [json.loads(line) for line in (old_run / "metrics.jsonl").read_text().splitlines() if line]
    assert [row["training_iteration"] for row in rows] == [1, 2, 3, 4, 5]
