"""Every script in examples/ runs with --quick (CPU-sized) and prints what it promises."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str, timeout: float = 180, tmpdir: Path | None = None) -> str:
    """stdout of ``script --quick args``; ``tmpdir``: its temporary directories go there (TMPDIR)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if tmpdir is not None:  # Ray's own session files stay where they were (its socket paths are short)
        env.update(TMPDIR=str(tmpdir), RAY_TMPDIR=os.environ.get("RAY_TMPDIR", tempfile.gettempdir()))
    env.pop("RAY_ADDRESS", None)  # each example starts its own local Ray instance
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--quick", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-4000:]}"
    return proc.stdout


def test_builder_api(tmp_path):
    out = _run("builder_api.py", "--out", str(tmp_path / "ckpt"))
    assert re.search(r"^\s+6\s+3072\s", out, re.M), out  # 6 iterations of 16 envs x 32 steps
    assert f"checkpoint saved: {tmp_path / 'ckpt'}" in out
    assert (tmp_path / "ckpt" / "rllib_checkpoint.json").is_file()


def test_own_env_learns(tmp_path):
    out = _run("own_env.py")
    m = re.search(r"greedy return: before training ([-+.\d]+) -> after ([-+.\d]+)", out)
    assert m, out
    before, after = float(m.group(1)), float(m.group(2))
    assert after > before + 0.5 and after > 0.5, out


@pytest.mark.slow
def test_tune_sweep(tmp_path):
    out = _run("tune_sweep.py", "--storage", str(tmp_path))
    assert len(re.findall(r"^lr \S+\s+replay_ratio \S+\s+episode_return_mean", out, re.M)) == 4, out
    assert re.search(r"^best trial: lr=\S+ replay_ratio=\S+ env_runners/episode_return_mean=[\d.]+", out, re.M), out


@pytest.mark.slow
def test_export_policy(tmp_path):
    out = _run("export_policy.py", tmpdir=tmp_path)  # the default run directory: temporary
    assert not list(tmp_path.glob("zerosync_*")), "the example left its temporary run directory"
    assert re.search(r"^exported torchscript: .*\.pt ", out, re.M), out
    rows = re.findall(r"^\s*\d+\s+[0-4]\s+[-\d.]+\s+(MARKET|LIMIT|PASSIVE)\s+\w+$", out, re.M)
    assert len(rows) == 5, out
    assert "policy acted on" in out
