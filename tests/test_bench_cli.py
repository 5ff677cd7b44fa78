"""``rl-zerosync bench`` runs the benchmark modules of the checkout (``python -m benchmarks.<name>``)."""
from __future__ import annotations

import json
import subprocess
import sys


def test_bench_runs_a_benchmark_module_from_any_directory(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rl_zerosync", "bench", "--quick", "--only", "learner",
                          "--out-dir", str(tmp_path / "results")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "-m benchmarks.learner" in out.stdout
    result = json.loads((tmp_path / "results" / "learner.json").read_text())
    assert result["config"]["quick"] is True and result["results"]
