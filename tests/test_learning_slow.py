"""Learning check (reduced CPU version of configs/local.yaml): the policy selected on validation
(checkpoint_best) must beat flat out of sample on the synthetic market; its difference to the rule chosen
on validation carries the calibrated paired interval (series clusters)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
def test_local_config_learns_positive_out_of_sample_sharpe(tmp_path, overlap):
    overrides = {
        "runner.overlap": str(overlap).lower(),
        "run.dir": str(tmp_path), "run.name": "learn", "run.iterations": 40, "run.checkpoint_every": 0,
        "algo.num_envs_per_runner": 256, "algo.rollout_length": 32, "algo.batch_size": 256,
        "algo.replay_ratio": 2.0, "algo.learning_starts": 10000,
        "algo.epsilon": "[[0,1.0],[150000,0.05]]", "learner.replay_capacity": 200000,
    }
    sets = [x for k, v in overrides.items() for x in ("--set", f"{k}={v}")]
    out = subprocess.run([sys.executable, "-m", "rl_zerosync", "train", "--config",
                          str(ROOT / "configs" / "local.yaml"), *sets],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "learn" / "evaluation" / "metrics.json").read_text())
    summary = report["summary"]
    assert summary["segment"] == "test"
    assert report["checkpoint"].endswith("checkpoint_best")  # selected on validation
    rows = [json.loads(x) for x in (tmp_path / "learn" / "metrics.jsonl").read_text().splitlines()]
    evals = {r["iteration"]: r["eval/validation_sharpe"] for r in rows if "eval/validation_sharpe" in r}
    assert summary["checkpoint_iteration"] == max(evals, key=lambda i: (evals[i], -i))
    assert summary["sharpe"] > 0.0, summary
    intervals = report["evidence"]["intervals"]
    best = intervals["agent_minus_best_rule"]["best_rule"]
    # Against the rule chosen on validation, by its calibrated paired interval: this reduced 40-iteration
    # run is below it (a miss, reported in docs/results.md), so the check is that the interval is the
    # calibrated one of the agent - rule difference, the estimate inside it, and the agent above flat.
    d = intervals["agent_minus_best_rule"]
    assert best in intervals and d["low"] <= d["estimate"] <= d["high"] and d["design"] == "series clusters"
    assert d["estimate"] == pytest.approx(summary["sharpe"] - intervals[best]["estimate"], abs=1e-9)
    assert (tmp_path / "learn" / "evaluation" / "report.png").stat().st_size > 10_000
    # Iteration metrics were logged as JSON lines and TensorBoard events.
    lines = (tmp_path / "learn" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 40 and json.loads(lines[-1])["iteration"] == 40
    assert any((tmp_path / "learn" / "tensorboard").iterdir())
