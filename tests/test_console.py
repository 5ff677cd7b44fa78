"""The console: ``it n/N`` with elapsed time and ETA, episode metrics as running means over the
last 100 episodes (shown on every line once episodes have ended), ``--version``."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

from rl_zerosync.rundir.progress import RUNNING_EPISODES, Progress


def _result(it, episodes, ret=None, length=None):
    er = {"num_episodes": episodes, "num_env_steps_sampled_lifetime": 1000 * it}
    if ret is not None:
        er.update(episode_return_mean=ret, episode_len_mean=length)
    return {"training_iteration": it, "env_runners": er}


def test_running_means_cover_the_last_100_episodes_and_fill_blank_iterations():
    out = io.StringIO()
    progress = Progress(total_iterations=5, stream=out)
    rows = [_result(1, 60, ret=1.0, length=10), _result(2, 0), _result(3, 60, ret=3.0, length=30),
            _result(4, 0), _result(5, 100, ret=5.0, length=50)]
    perf = []
    for r in rows:
        progress.add_perf(r)
        progress.show(r)
        perf.append(dict(r["perf"]))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("it 1/5 | 0:00:0") and "ETA" in lines[0]
    assert lines[-1].startswith("it 5/5 |") and "ETA" not in lines[-1]
    assert perf[0]["episode_return_running"] == 1.0
    assert perf[1]["episode_return_running"] == 1.0 and "reward/ep +1.0000" in lines[1]  # no episode ended
    # 60 episodes at 1.0 and 60 at 3.0: the last 100 are 40 x 1.0 + 60 x 3.0
    assert perf[2]["episode_return_running"] == pytest.approx((40 * 1.0 + 60 * 3.0) / 100)
    assert perf[2]["episode_len_running"] == pytest.approx((40 * 10 + 60 * 30) / 100)
    assert perf[4]["episode_return_running"] == 5.0  # 100 new episodes replace all older ones
    assert RUNNING_EPISODES == 100


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "rl_zerosync", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("rl-zerosync ")
