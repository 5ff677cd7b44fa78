"""The console: ``it n/N`` with elapsed time and ETA, episode metrics as running means over the
last 100 episodes (shown on every line once episodes have ended), ``--version``; Ray's repeated
notices once at debug level in our commands only; distinct names for distinct metrics."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

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


def test_ray_notices_once_at_debug_in_our_commands_only(caplog):
    import logging

    from rl_zerosync.rundir.ray_notices import DEBUG_LOGGER, NOTICES, OnceAtDebug, quiet_ray_notices

    # Importing the library (and RLlib through it) installs no filter: checked in a fresh process,
    # since our commands run earlier in this one may have installed theirs.
    code = ("import logging; import rl_zerosync.algorithm, rl_zerosync.run.train; "
            "from rl_zerosync.rundir.ray_notices import NOTICES, OnceAtDebug; "
            "print(any(isinstance(f, OnceAtDebug) for n in NOTICES for f in logging.getLogger(n).filters))")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0 and fresh.stdout.strip() == "False", fresh.stdout + fresh.stderr
    gputil = logging.getLogger("ray.tune.utils.util")
    for name in NOTICES:  # start from no filter in this process
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if isinstance(f, OnceAtDebug)]:
            logger.removeFilter(f)
    quiet_ray_notices()
    quiet_ray_notices()  # idempotent
    try:
        assert sum(isinstance(f, OnceAtDebug) for f in gputil.filters) == 1
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                gputil.warning("Install gputil for GPU system monitoring.")
            gputil.warning("something else")
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage() for r in warned] == ["something else"]
        debug = [r for r in caplog.records if r.name == DEBUG_LOGGER]
        assert len(debug) == 1 and "Install gputil" in debug[0].getMessage()
    finally:
        for name in NOTICES:
            logger = logging.getLogger(name)
            for f in [f for f in logger.filters if isinstance(f, OnceAtDebug)]:
                logger.removeFilter(f)


@pytest.mark.slow
def test_the_cli_prints_no_ray_notices(tmp_path):
    smoke = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")
    out = subprocess.run([sys.executable, "-m", "rl_zerosync", "train", "--config", smoke,
                          "--set", f"run.dir={tmp_path}", "--set", "run.iterations=1", "--set", "run.evaluate=false"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    for notice in ("DeprecationWarning", "new API stack", "Install gputil"):
        assert notice not in out.stderr, out.stderr


def test_distinct_metrics_have_distinct_names():
    from rl_zerosync.envs.episode_stats import METRICS_SIZE, summarize_metrics

    names = summarize_metrics([1.0] * METRICS_SIZE)
    assert "episode_equity_return_mean" in names
    assert "episode_return_mean" not in names  # RLlib's key (summed reward) stays RLlib's meaning


# ---- long steps after training, and a console whose reader went away -----------------------------------

def test_steps_print_one_line_per_step_to_a_file_or_pipe():
    import time

    from rl_zerosync.rundir.progress import Steps

    out = io.StringIO()  # not a terminal: no live line, one line per step when it ends
    steps = Steps("evaluate", total=3, stream=out)
    with steps.step("walk the agent on test"):
        time.sleep(0.01)
    with steps.step("oracle on test") as step:
        step.name += ": absent"
    with pytest.raises(ValueError), steps.step("draw report.png"):
        raise ValueError("boom")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()  # a step that raised: its error speaks, no line
    assert lines[0].startswith("evaluate 1/3 | 0:00:00 | walk the agent on test 0.0")
    assert lines[0].endswith(" s") and "ETA" not in lines[0]  # steps of an evaluation differ: no ETA
    assert lines[1].startswith("evaluate 2/3 | ") and "oracle on test: absent" in lines[1]


def test_alike_steps_show_an_eta_and_a_terminal_sees_them_live():
    import time

    from rl_zerosync.rundir.progress import Steps

    out = io.StringIO()
    steps = Steps("walk-forward", total=3, eta=True, stream=out, live=True, tick_s=0.01)
    for fold in range(3):
        with steps.step(f"fold {fold + 1}/3"):
            time.sleep(0.05)
    text = out.getvalue()
    finals = [part.split("\r\033[K")[-1] for part in text.split("\n") if part]
    assert [f.split(" |")[0] for f in finals] == ["walk-forward 1/3", "walk-forward 2/3", "walk-forward 3/3"]
    assert "ETA" in finals[0] and "ETA" in finals[1] and "ETA" not in finals[2]  # none after the last
    assert text.count(" ...") >= 3  # the running step rewritten in place while it runs
    quiet = io.StringIO()
    with Steps("evaluate", total=1, stream=quiet, quiet=True).step("x"):
        pass
    assert quiet.getvalue() == ""


def test_say_on_a_closed_pipe_silences_the_stream_instead_of_raising(tmp_path):
    # In a child process: its stdout is a pipe whose reader is closed before it writes.
    code = ("import sys; from rl_zerosync.rundir.progress import say, say_raw\n"
            "sys.stdin.read()\n"  # wait until the parent closed the reader
            "ok = say('first line')\n"
            "say_raw('from a signal handler\\n')\n"
            "print('a plain print after it', flush=True)\n"
            "sys.stderr.write(f'said {ok}\\n')\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate("", timeout=120)
    assert proc.returncode == 0, err
    assert err.strip() == "said False" and "BrokenPipeError" not in err


def test_the_python_api_quiets_the_notices_for_its_own_calls_only():
    # A fresh process: no command installed the filters for good.
    code = ("import logging, sys\n"
            "logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format='%(message)s')\n"
            "from rl_zerosync.rundir.ray_notices import NOTICES, OnceAtDebug, notices_quieted\n"
            "dep = logging.getLogger('ray._common.deprecation')\n"
            "with notices_quieted():\n"
            "    dep.warning('DeprecationWarning: RLModule(config=...) has been deprecated (inside)')\n"
            "    dep.warning('another warning (inside)')\n"
            "dep.warning('DeprecationWarning: RLModule(config=...) has been deprecated (after)')\n"
            "print(any(isinstance(f, OnceAtDebug) for n in NOTICES for f in logging.getLogger(n).filters))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # nothing left installed after the call
    assert "(inside)" in out.stderr and "deprecated (inside)" not in out.stderr
    assert "another warning (inside)" in out.stderr and "deprecated (after)" in out.stderr


def test_loading_a_checkpoints_module_runs_with_the_notices_quieted(monkeypatch):
    import logging

    from ray.rllib.core.rl_module.rl_module import RLModule

    from rl_zerosync.rundir import checkpoints
    from rl_zerosync.rundir.ray_notices import OnceAtDebug

    seen = []

    def fake_from_checkpoint(path):
        seen.append(any(isinstance(f, OnceAtDebug) for f in logging.getLogger("ray._common.deprecation").filters))
        raise RuntimeError("stop here")

    monkeypatch.setattr(RLModule, "from_checkpoint", staticmethod(fake_from_checkpoint))
    ckpt = Path(__file__).parent  # any folder with the module path below it
    monkeypatch.setattr(checkpoints, "MODULE_PATH", Path("."))
    with pytest.raises(RuntimeError, match="stop here"):
        checkpoints.load_module(ckpt)
    assert seen == [True]
