"""Run directories are owned: the lock held for a run's life (a second run refused before Ray
starts, a stale lock taken over), a finished run never appended to without --resume (or cleared
with --overwrite), and a resume after a kill at any point leaves iterations 1..N exactly once."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_zerosync.rundir.checkpoints import CHECKPOINT_DIR, read_run_state
from rl_zerosync.rundir.lock import LOCK_FILE, RunDirError, RunLock, _proc_start
from rl_zerosync.rundir.run_dir import RunDir
from tiny_run import tiny_raw

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "smoke.yaml"


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    return env


REFUSED_S = 30.0
"""A refusal comes before Ray starts: a fresh interpreter's imports and the preflight (~4 s of CPU on
an idle 2-core machine, more while the suite's other worker runs); a run that started Ray and
trained takes minutes."""


def _train(tmp_path, name, *extra, timeout=120):
    cmd = [sys.executable, "-m", "rl_zerosync", "train", "--config", str(SMOKE), "--set", f"run.dir={tmp_path}",
           "--set", f"run.name={name}", *extra]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=timeout)
    return out, time.perf_counter() - t0


def _iterations(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x)["iteration"] for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


# ---- the lock ----------------------------------------------------------------------------------

def test_a_second_train_of_a_held_run_dir_is_refused_before_ray_starts(tmp_path):
    run_dir = tmp_path / "r"
    with RunLock(run_dir) as lock:
        held = lock.path.read_text()
        out, wall = _train(tmp_path, "r")
        assert lock.path.read_text() == held  # untouched
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    line = _error_line(out.stderr)
    info = json.loads(held)
    assert "is in use by another run" in line
    for part in (f"pid {os.getpid()}", f"host {socket.gethostname()}", f"started {info['started']}"):
        assert part in line, line
    assert wall < REFUSED_S, f"refused after {wall:.1f} s"
    assert "Started a local Ray instance" not in out.stderr + out.stdout
    assert sorted(p.name for p in run_dir.iterdir()) == []  # lock released, nothing written
    # The same through --seeds: the parent directory is held.
    with RunLock(run_dir):
        out, wall = _train(tmp_path, "r", "--seeds", "0,1")
    assert out.returncode == 2 and "is in use by another run" in _error_line(out.stderr) and wall < REFUSED_S


def test_the_lock_file_names_its_holder_and_goes_with_the_run(tmp_path):
    lock = RunLock(tmp_path / "r").acquire()
    info = json.loads((tmp_path / "r" / LOCK_FILE).read_text())
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert info["started"] and info["pid_start"] == _proc_start(os.getpid())
    with pytest.raises(RunDirError, match=f"in use by another run: pid {os.getpid()} on host"):
        RunLock(tmp_path / "r").acquire()
    lock.release()
    assert not (tmp_path / "r" / LOCK_FILE).exists()
    lock.release()  # twice is fine


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path, capsys):
    path = tmp_path / "r" / LOCK_FILE
    path.parent.mkdir()
    host = socket.gethostname()
    stale = [
        {"pid": _dead_pid(), "host": host, "started": "2020-01-01T00:00:00+00:00"},  # pid gone
        {"pid": os.getpid(), "host": host, "started": "x", "pid_start": "-1"},  # pid reused since
    ]
    for holder in stale:
        path.write_text(json.dumps(holder))
        with RunLock(path.parent) as lock:
            assert json.loads(path.read_text())["pid"] == os.getpid() and lock.info["pid"] == os.getpid()
            err = capsys.readouterr().err
            assert f"taking over the stale lock {path}" in err and f"pid {holder['pid']} on host {host}" in err
        assert not path.exists()
    path.write_text("")  # its writer died between creating and writing it
    with RunLock(path.parent):
        assert "unreadable lock" in capsys.readouterr().err
    # Another host's lock cannot be checked from here: refused.
    path.write_text(json.dumps({"pid": _dead_pid(), "host": host + "-elsewhere", "started": "s"}))
    with pytest.raises(RunDirError, match=f"pid .* on host {host}-elsewhere, started s"):
        RunLock(path.parent).acquire()


# ---- finished runs: --resume or --overwrite ------------------------------------------------------

def _finished(run_dir: Path) -> None:
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "rllib_checkpoint.json").write_text("{}")
    (run_dir / "metrics.jsonl").write_text('{"iteration": 1}\n')


def test_a_finished_run_is_refused_without_resume_or_overwrite(tmp_path):
    run_dir = tmp_path / "r"
    _finished(run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    out, wall = _train(tmp_path, "r")
    assert out.returncode == 2 and wall < REFUSED_S
    line = _error_line(out.stderr)
    assert f"{run_dir} already holds a run (metrics.jsonl, checkpoint/)" in line
    assert "--resume" in line and "--overwrite" in line
    # the exact commands, this one's arguments with the flag added
    same = f"rl-zerosync train --config {SMOKE} --set run.dir={tmp_path} --set run.name=r"
    assert f"  continue it:                        {same} --resume {run_dir}\n" in out.stderr
    assert f"  start again (its outputs removed):  {same} --overwrite\n" in out.stderr
    assert (run_dir / "metrics.jsonl").read_text() == before and not (run_dir / LOCK_FILE).exists()
    out, _ = _train(tmp_path, "r", "--resume", str(run_dir), "--overwrite")
    assert out.returncode == 2 and "cannot be combined" in _error_line(out.stderr)
    # --seeds as processes: each seed's directory is checked before any seed starts.
    _finished(tmp_path / "s" / "seed1")
    out, wall = _train(tmp_path, "s", "--seeds", "0,1", "--processes")
    assert out.returncode == 2 and wall < REFUSED_S
    assert "seed1 already holds a run" in _error_line(out.stderr) and "--overwrite" in out.stderr
    assert "continue it:" not in out.stderr  # seeds are not resumed: only the --overwrite command
    assert "start again (its outputs removed):  rl-zerosync train --config" in out.stderr
    assert not (tmp_path / "s" / "seed0").exists() or not RunDir(tmp_path / "s" / "seed0").outputs()


def test_what_counts_as_a_run_and_what_overwrite_clears(tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("")  # killed before its first iteration: not a run
    (run_dir / "train.log").write_text("log")
    assert RunDir(run_dir).outputs() == []
    RunDir.claim(run_dir).close()
    for name in ("checkpoint.1", "checkpoint_best", "checkpoint.tmp", "tensorboard", "evaluation"):
        (run_dir / name).mkdir()
    for name in ("checkpoint.1", "checkpoint_best"):
        (run_dir / name / "rllib_checkpoint.json").write_text("{}")
    (run_dir / "settings.yaml").write_text("run: {}\n")
    (run_dir / "notes.txt").write_text("mine")
    assert RunDir(run_dir).outputs() == ["checkpoint_best/", "checkpoint.1/"]
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir.claim(run_dir)
    with RunDir.claim(run_dir, resume=True):  # continued as it is
        assert (run_dir / "checkpoint.1").is_dir()
    with RunDir.claim(run_dir, overwrite=True) as claimed:
        assert claimed.lock.path.is_file()
        assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt", LOCK_FILE, "train.log"]
    assert "overwrite: removed" in capsys.readouterr().out
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt", "train.log"]
    assert RunDir(tmp_path / "none").clear() == []


def test_metrics_are_cut_back_to_the_resumed_iteration(tmp_path):
    rows = [{"iteration": i, "x": i} for i in (1, 2, 3, 2, 3, 4, 5)]  # an old duplicate resume, then more
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 6, "x"'  # torn by a kill
    (tmp_path / "metrics.jsonl").write_text(text)
    assert RunDir(tmp_path).truncate_metrics(3) == 5  # 4, 5, the torn line and two older copies of 2, 3
    kept = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kept == [{"iteration": 1, "x": 1}, {"iteration": 2, "x": 2}, {"iteration": 3, "x": 3}]
    assert not (tmp_path / "metrics.jsonl.tmp").exists()
    assert RunDir(tmp_path / "nothing").truncate_metrics(3) == 0


# ---- a real kill -9 (before the in-process Ray instance below starts) ---------------------------

@pytest.mark.slow
def test_kill_9_mid_run_then_resume(tmp_path):
    run_dir = tmp_path / "k"
    sets = ["--set", "run.iterations=24", "--set", "run.checkpoint_every=4", "--set", "run.evaluate=false"]
    cmd = [sys.executable, "-m", "rl_zerosync", "train", "--config", str(SMOKE), "--set", f"run.dir={tmp_path}",
           "--set", "run.name=k", *sets]
    log = tmp_path / "first.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.time() + 240
        # Kill between two checkpoints, so metrics.jsonl has rows after the last checkpoint.
        while time.time() < deadline and not (len(_iterations(run_dir)) >= 6 and len(_iterations(run_dir)) % 4):
            time.sleep(0.05)
            assert proc.poll() is None, log.read_text()[-3000:]
        assert len(_iterations(run_dir)) >= 6, "run did not reach iteration 6 in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (run_dir / LOCK_FILE).is_file()  # left behind by the killed run
    refused, _ = _train(tmp_path, "k", *sets)  # takes the dead run's lock over, then refuses
    assert refused.returncode == 2 and "already holds a run" in _error_line(refused.stderr)
    assert "taking over the stale lock" in refused.stderr and not (run_dir / LOCK_FILE).exists()
    out, _ = _train(tmp_path, "k", *sets, "--resume", str(run_dir), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resumed from" in out.stdout
    assert _iterations(run_dir) == list(range(1, 25))
    assert not (run_dir / LOCK_FILE).exists()


# ---- resume after a kill at several points (in process) ------------------------------------------

BASE = tiny_raw({"iterations": 4, "checkpoint_every": 2, "eval_every": 0, "evaluate": False})


def _settings(tmp, iterations):
    from rl_zerosync.config.settings import from_dict

    raw = json.loads(json.dumps(BASE))
    raw["run"].update(dir=str(tmp), name="run", iterations=iterations, eval_every=iterations)
    return from_dict(raw)


@pytest.fixture(scope="module")
def four_iterations(ray_local, tmp_path_factory):
    """A run of 4 iterations with checkpoints at 2 and 4 (checkpoint.1/ and checkpoint/)."""
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("four")
    train(_settings(tmp, 4))
    return tmp / "run"


def _row(run_dir: Path, iteration: int) -> str:
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    return json.dumps({**last, "iteration": iteration}) + "\n"


def _append(run_dir: Path, text: str) -> None:
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(text)


def _after_rows(run_dir):  # killed after iteration 5's row, before its checkpoint; 6 half written
    _append(run_dir, _row(run_dir, 5) + _row(run_dir, 6)[:25])


def _during_checkpoint_write(run_dir):  # killed while checkpoint.tmp was being written
    _append(run_dir, _row(run_dir, 5) + _row(run_dir, 6))
    shutil.copytree(run_dir / "checkpoint", run_dir / "checkpoint.tmp")
    (run_dir / "checkpoint.tmp" / "manifest.json").unlink()
    (run_dir / "checkpoint.tmp" / "algorithm_state.pkl").write_bytes(b"half")


def _between_renames(run_dir):  # checkpoint/ already moved to checkpoint.1/, checkpoint.tmp/ not yet in
    _append(run_dir, _row(run_dir, 5) + _row(run_dir, 6))
    shutil.rmtree(run_dir / "checkpoint.1")
    os.replace(run_dir / "checkpoint", run_dir / "checkpoint.1")
    shutil.copytree(run_dir / "checkpoint.1", run_dir / "checkpoint.tmp")


def _during_metrics_rewrite(run_dir):  # killed while a resume rewrote metrics.jsonl
    _append(run_dir, _row(run_dir, 5))
    (run_dir / "metrics.jsonl.tmp").write_text(_row(run_dir, 1)[:10])


KILLS = {"after_rows": _after_rows, "during_checkpoint_write": _during_checkpoint_write,
         "between_renames": _between_renames, "during_metrics_rewrite": _during_metrics_rewrite}


def _tb_events(path: Path):
    """The events of a TensorBoard event file (TFRecord framing: length, crc, data, crc)."""
    from tensorboardX.proto import event_pb2

    data, i = path.read_bytes(), 0
    while i + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        ev = event_pb2.Event()
        ev.ParseFromString(data[i + 12:i + 12 + n])
        yield ev
        i += 12 + n + 4


@pytest.mark.parametrize("kill", KILLS)
def test_resume_after_a_kill_leaves_every_iteration_once(four_iterations, tmp_path, kill, capsys):
    from tensorboardX.proto import event_pb2

    from rl_zerosync.run.train import train

    run_dir = tmp_path / "run"
    shutil.copytree(four_iterations, run_dir)
    KILLS[kill](run_dir)
    (run_dir / LOCK_FILE).write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "started": "s"}))
    before = set((run_dir / "tensorboard").iterdir())
    result = train(_settings(tmp_path, 7), resume=str(run_dir))
    out = capsys.readouterr()
    assert "taking over the stale lock" in out.err
    assert result["training_iteration"] == 7
    assert _iterations(run_dir) == [1, 2, 3, 4, 5, 6, 7], kill
    assert read_run_state(run_dir / CHECKPOINT_DIR)["iteration"] == 7
    assert not (run_dir / "checkpoint.tmp").exists() and not (run_dir / LOCK_FILE).exists()
    # TensorBoard: the new event file starts a session at the resumed step, purging the later events.
    (events,) = set((run_dir / "tensorboard").iterdir()) - before
    starts = [e.step for e in _tb_events(events) if e.HasField("session_log")
              and e.session_log.status == event_pb2.SessionLog.START]
    assert starts == [5], starts
    steps = {e.step for e in _tb_events(events) if e.HasField("summary")}
    assert steps == {5, 6, 7}
