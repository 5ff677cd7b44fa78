"""``python -m benchmarks.reliability --quick``: the JSON it writes and its verdicts on the quick subset
(a few bad inputs through the real CLI, and a second run of a run name another run holds)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = {"bad_inputs_tried", "bad_inputs_named_error", "faults_tried", "faults_survived_or_named",
                "rows_lost_or_duplicated", "files_deleted_outside_run", "files_changed_outside_run",
                "failed_or_interrupted_runs", "failed_or_interrupted_runs_nonzero", "bad_inputs_named_over_time_limit"}


@pytest.mark.slow
def test_quick_reliability_benchmark(tmp_path):
    out = tmp_path / "reliability.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.reliability", "--quick", "--out", str(out),
                           "--work-dir", str(tmp_path / "work")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=90)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("date", "hardware", "versions", "config", "bad_inputs", "faults", "summary"):
        assert key in result
    assert {"cpu", "cores"} <= set(result["hardware"])
    assert {"python", "torch", "ray"} <= set(result["versions"])
    summary = result["summary"]
    assert set(summary) == SUMMARY_KEYS
    assert summary["bad_inputs_tried"] == len(result["bad_inputs"]) >= 8
    assert summary["faults_tried"] == len(result["faults"]) >= 1
    failed = [c for c in result["bad_inputs"] if not c["named_error"]]
    assert summary["bad_inputs_named_error"] == summary["bad_inputs_tried"], failed
    assert summary["faults_survived_or_named"] == summary["faults_tried"], result["faults"]
    assert summary["rows_lost_or_duplicated"] == 0
    assert summary["files_deleted_outside_run"] == 0 and summary["files_changed_outside_run"] == 0
    assert summary["failed_or_interrupted_runs_nonzero"] == summary["failed_or_interrupted_runs"] >= 8
