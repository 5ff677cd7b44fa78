"""Graceful stops through the real command line: SIGHUP (a closed terminal) stops a run like SIGTERM
(checkpoint, lock released, exit 129); a SIGTERM during the end-of-run evaluation is the project's
stop (a line, exit 143, no half evaluation); RLlib's log folder goes inside the run directory, not
``~/ray_results/<timestamp>/``; an interrupted ``--seeds`` sweep is resumed with ``--resume`` (a
finished seed read back, not retrained)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "smoke.yaml"

# The command line with the end-of-run evaluation interrupted by SIGTERM as it starts.
SIGTERM_IN_EVALUATION = r'''
import os, signal, sys, time
import rl_zerosync.evaluation.evaluate as E
from rl_zerosync.cli import main
real = E.evaluate_checkpoint
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises here
    return real(*args, **kwargs)
E.evaluate_checkpoint = interrupted
sys.exit(main(sys.argv[1:]))
'''


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", **extra)
    env.pop("RAY_ADDRESS", None)
    return env


def _train(tmp_path: Path, name: str, *sets: str) -> list[str]:
    args = ["train", "--config", str(SMOKE), "--set", f"run.dir={tmp_path}", "--set", f"run.name={name}"]
    for s in sets:
        args += ["--set", s]
    return args


def _rows(path: Path) -> list[int]:
    if not path.is_file():
        return []
    return [json.loads(x)["iteration"] for x in path.read_text().splitlines() if x.strip()]


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_sighup_stops_with_a_checkpoint_exit_129_and_rllib_logs_in_the_run(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run_dir = tmp_path / "h"
    proc = subprocess.Popen([sys.executable, "-m", "rl_zerosync",
                             *_train(tmp_path, "h", "run.iterations=100000", "run.checkpoint_every=0")],
                            env=_env(HOME=str(home)), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(_rows(run_dir / "metrics.jsonl")) < 2:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=180)
    finally:
        _kill_session(proc.pid)
    assert proc.returncode == 128 + signal.SIGHUP, err[-3000:]
    assert "interrupt (SIGHUP)" in out and "exits with 129" in out
    assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
    assert not (run_dir / "run.lock").exists()
    assert (run_dir / "rllib").is_dir()  # RLlib's log folder inside the run ...
    assert "rllib" in json.loads((run_dir / "run_files.json").read_text())  # ... which --overwrite removes
    assert not list((home / "ray_results").glob("20*")) if (home / "ray_results").is_dir() else True


@pytest.mark.slow
def test_sigterm_in_the_end_of_run_evaluation_exits_143_with_a_line(tmp_path):
    run_dir = tmp_path / "e"
    args = _train(tmp_path, "e", "run.iterations=2", "run.evaluate=true")
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_EVALUATION, *args],
                          env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=600,
                          start_new_session=True)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "interrupt (SIGTERM) during the end-of-run evaluation: no evaluation written" in proc.stderr
    assert f"rl-zerosync evaluate --checkpoint {run_dir}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
    assert not (run_dir / "evaluation").exists() and not (run_dir / "evaluation.tmp").exists()
    assert not (run_dir / "run.lock").exists()


@pytest.mark.slow
def test_a_seeds_sweep_resumes_reading_finished_seeds_back(tmp_path):
    base = [sys.executable, "-m", "rl_zerosync", *_train(tmp_path, "s", "run.iterations=2", "run.evaluate=true")]
    first = subprocess.run([*base, "--seeds", "0", "--processes"], env=_env(), cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    seed0 = tmp_path / "s" / "seed0"
    stamp = (seed0 / "metrics.jsonl").stat().st_mtime_ns
    plain = subprocess.run([*base, "--seeds", "0,1", "--processes"], env=_env(), cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 2 and f"--resume {tmp_path / 's'}" in plain.stderr  # named, nothing trained
    again = subprocess.run([*base, "--seeds", "0,1", "--resume", str(tmp_path / "s")], env=_env(), cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "seed 0: reused (finished:" in again.stdout and "seed 1: trained" in again.stdout
    assert (seed0 / "metrics.jsonl").stat().st_mtime_ns == stamp  # not retrained
    report = json.loads((tmp_path / "s" / "seeds.json").read_text())
    assert report["partial"] is False and sorted(report["per_seed"]) == ["0", "1"]
    assert _rows(tmp_path / "s" / "seed1" / "metrics.jsonl") == [1, 2]
