"""End to end through the CLI: smoke training, settings errors, SIGKILL + resume, ray job submit."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "smoke.yaml"
BIN = Path(sys.executable).parent


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("RAY_ADDRESS", None)
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rl_zerosync", *args]


def _iterations(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.strip()]


def test_settings_error_names_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo:\n  batch_sise: 32\n")
    out = subprocess.run(_cli("train", "--config", str(bad)), capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert "batch_sise" in out.stderr and "bad.yaml" in out.stderr and "batch_size" in out.stderr


@pytest.mark.slow
def test_kill_and_resume(tmp_path):
    """SIGKILL a run mid-way, resume it: iterations and env steps continue."""
    run = ["--set", f"run.dir={tmp_path}", "--set", "run.name=r", "--set", "run.iterations=40",
           "--set", "run.checkpoint_every=1", "--set", "run.evaluate=false"]
    run_dir = tmp_path / "r"
    proc = subprocess.Popen(_cli("train", "--config", str(SMOKE), *run), env=_env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(_iterations(run_dir)) < 3:
            time.sleep(0.5)
            assert proc.poll() is None, proc.stdout.read()
        assert len(_iterations(run_dir)) >= 3, "run did not reach iteration 3 in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = _iterations(run_dir)
    assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
    assert len(done_before) < 40
    out = subprocess.run(_cli("train", "--config", str(SMOKE), *run, "--resume", str(run_dir)),
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resumed from" in out.stdout
    its = _iterations(run_dir)
    assert its[-1] == 40
    resumed = its[len(done_before):]
    # The resumed run continues from the checkpointed iteration, not from 1.
    assert resumed[0] > 1 and resumed == list(range(resumed[0], 41))
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r.get("env_runners/num_env_steps_sampled_lifetime", 0) for r in rows]
    first_resumed = rows[len(done_before)]
    # Env-step count continues from the checkpoint (not from zero), and so does the epsilon schedule.
    assert first_resumed["env_runners/num_env_steps_sampled_lifetime"] > steps[0]
    assert first_resumed["env_runners/epsilon"] < rows[0]["env_runners/epsilon"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_ctrl_c_writes_a_checkpoint_and_exits_128_plus_signal(tmp_path, sig):
    run = ["--set", f"run.dir={tmp_path}", "--set", "run.name=c", "--set", "run.iterations=100000",
           "--set", "run.checkpoint_every=0"]
    run_dir = tmp_path / "c"
    proc = subprocess.Popen(_cli("train", "--config", str(SMOKE), *run), env=_env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(_iterations(run_dir)) < 2:
            time.sleep(0.5)
            assert proc.poll() is None, proc.stdout.read()
        assert not (run_dir / "checkpoint").exists()  # checkpoint_every=0: only at the end
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, output[-3000:]  # 130 / 143: a scheduler sees an unfinished run
    assert f"interrupt ({sig.name}): finishing this iteration" in output
    assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
    assert 2 <= len(_iterations(run_dir)) < 100000


@pytest.mark.slow
def test_ctrl_c_after_the_reader_of_stdout_went_away_still_checkpoints(tmp_path):
    """``rl-zerosync train ... | tee log`` and Ctrl-C: the same SIGINT ends ``tee`` first, so the run's
    stdout is a pipe without a reader. Its writes are silenced, not raised: the checkpoint is written
    and the run exits 130, without a BrokenPipeError traceback."""
    run = ["--set", f"run.dir={tmp_path}", "--set", "run.name=p", "--set", "run.iterations=100000",
           "--set", "run.checkpoint_every=0"]
    run_dir = tmp_path / "p"
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(_cli("train", "--config", str(SMOKE), *run), env=_env(), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            deadline = time.time() + 240
            while time.time() < deadline and len(_iterations(run_dir)) < 2:
                time.sleep(0.5)
                assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            proc.stdout.close()  # the reader is gone (tee ended by the same Ctrl-C)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 130, stderr[-3000:]
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
    assert 2 <= len(_iterations(run_dir)) < 100000


@pytest.mark.slow
def test_remote_env_runners_and_ddp_learners(tmp_path):
    """Scale-out path: 2 remote GPUEnvRunner actors + 2 learners (DDP over gloo on the CPU)."""
    sets = ["--set", f"run.dir={tmp_path}", "--set", "run.name=scale", "--set", "run.iterations=3",
            "--set", "algo.num_env_runners=2", "--set", "algo.num_learners=2", "--set", "run.num_cpus=5",
            "--set", "run.evaluate=false"]
    out = subprocess.run(_cli("train", "--config", str(SMOKE), *sets), capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "scale" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    # Two runners x 16 envs x 32 steps per iteration.
    assert rows[-1]["env_runners/num_env_steps_sampled_lifetime"] == 3 * 2 * 16 * 32
    assert rows[-1]["learners/default_policy/zerosync/updates_lifetime"] > 0
    assert rows[-1]["learners/default_policy/zerosync/skipped"] == 0
    # replay_ratio counts the transitions of both learners: K = ratio * steps / (batch * 2).
    from rl_zerosync.algorithm import updates_for
    from rl_zerosync.config.settings import load

    algo = load(SMOKE).algo
    assert rows[-1]["num_updates_per_iteration"] == updates_for(2 * 16 * 32, algo.replay_ratio, algo.batch_size * 2)
    # The rollouts travelled runner -> object store -> learner; the phases are reported per iteration.
    for phase in ("sample", "add", "train", "sync_weights", "rollout_fetch_timer", "replay_add_timer"):
        assert rows[-1][f"phase_s/{phase}"] >= 0.0
    assert rows[-1]["env_runners/rollout_put_timer"] > 0.0
    # The console: a header line, then "it n/N" progress lines with elapsed time.
    header = next(line for line in out.stdout.splitlines() if line.startswith("run: "))
    assert "16 envs x 32 steps x 2 runner(s) = 1,024 env steps/iteration" in header
    assert f"K = {rows[-1]['num_updates_per_iteration']:.0f} updates/iteration" in header
    assert "it 3/3 | 0:" in out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (a ``ray start --block`` head and everything it started)
    and the processes below it in their own sessions; no other Ray on this host is touched."""
    below = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        below.append((int(entry.parent.name), int(fields[1])))
    kids, todo = set(), [proc.pid]
    while todo:
        parent = todo.pop()
        for pid, ppid in below:
            if ppid == parent and pid not in kids:
                kids.add(pid)
                todo.append(pid)
    for pid in [proc.pid, *kids]:
        try:
            if pid == proc.pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=60)


@pytest.mark.skipif(shutil.which("ray", path=str(BIN)) is None, reason="ray CLI not installed")
@pytest.mark.slow
def test_ray_job_submit(tmp_path):
    """Start a private Ray head (its own temp dir and process group), submit the smoke config as a job
    with the default relative ``run.dir``: SUCCEEDED, and the outputs are in the persistent storage
    path the header names ($RL_ZEROSYNC_STORAGE), not in Ray's temporary copy of the working directory.
    Only the processes of this head are stopped."""
    import tempfile

    env = _env()
    env["RAY_AUTH_MODE"] = "token"
    gcs, dash = _free_port(), _free_port()
    ray = str(BIN / "ray")
    temp = Path(tempfile.mkdtemp(prefix="rzs-job-", dir="/tmp"))  # short: Ray's socket paths live below it
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen(
        [ray, "start", "--head", "--block", f"--port={gcs}", "--node-ip-address=127.0.0.1",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--include-dashboard=true",
         f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={temp}",
         "--num-cpus=2", "--disable-usage-stats"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    storage = tmp_path / "storage"
    try:
        address = f"--address=http://127.0.0.1:{dash}"
        job_id = f"smoke-{dash}"
        runtime_env = {"excludes": [".venv", "runs", ".git", ".device"],
                       "env_vars": {"RL_ZEROSYNC_STORAGE": str(storage)}}
        cmd = [ray, "job", "submit", address, f"--submission-id={job_id}", "--working-dir", str(ROOT),
               "--runtime-env-json", json.dumps(runtime_env),
               "--", "rl-zerosync", "train", "--config", "configs/smoke.yaml",
               "--set", "run.name=job", "--set", "run.iterations=2"]
        deadline = time.time() + 180
        while True:  # right after `ray start` the head's job agent may not be up yet
            assert head.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            text = out.stdout + out.stderr
            if out.returncode == 0 or not any(s in text for s in ("No available agent", "Failed to connect",
                                                                   "Connection refused", "ConnectionError")):
                break
            assert time.time() < deadline, "the head's job agent did not come up in 180 s: " + text[-2000:]
            time.sleep(3)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        status = subprocess.run([ray, "job", "status", address, job_id], capture_output=True, text=True,
                                env=env, timeout=120)
        # `ray job status` prints "Job '<id>' succeeded" for JobStatus.SUCCEEDED.
        assert f"Job '{job_id}' succeeded" in status.stdout + status.stderr, status.stdout + status.stderr
        run_dir = storage / "runs" / "job"
        assert f"run: {run_dir} |" in out.stdout, out.stdout[-4000:]  # the header names where outputs go
        assert (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file()
        assert (run_dir / "evaluation" / "metrics.json").is_file() and (run_dir / "metrics.jsonl").is_file()
        assert not (ROOT / "runs" / "job").exists()  # nothing went to the working directory either
    finally:
        _kill_group(head)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_relative_run_dir_inside_a_job_resolves_against_the_storage_path(tmp_path, monkeypatch):
    from rl_zerosync.config.settings import load
    from rl_zerosync.config.storage import DEFAULT_STORAGE, JOB_ENV, STORAGE_ENV

    monkeypatch.delenv(JOB_ENV, raising=False)
    assert load(SMOKE).run.dir == "runs"  # outside a job: as given
    monkeypatch.setenv(JOB_ENV, "{}")
    monkeypatch.setenv(STORAGE_ENV, str(tmp_path))
    assert load(SMOKE).run_dir == tmp_path / "runs" / "smoke"
    assert load(SMOKE, [f"run.dir={tmp_path / 'abs'}"]).run.dir == str(tmp_path / "abs")  # absolute: as given
    monkeypatch.delenv(STORAGE_ENV)
    assert load(SMOKE).run_dir == Path(DEFAULT_STORAGE).expanduser().resolve() / "runs" / "smoke"


@pytest.mark.slow
def test_evaluate_on_a_user_csv(tmp_path):
    """`evaluate --data FILE` on a real market CSV (the GOOGL file shipped in gym-anytrading)."""
    gym_anytrading = pytest.importorskip("gym_anytrading")
    csv = Path(gym_anytrading.__file__).parent / "datasets" / "data" / "STOCKS_GOOGL.csv"
    sets = ["--set", f"run.dir={tmp_path}", "--set", "run.name=e", "--set", "run.iterations=1",
            "--set", "run.evaluate=false"]
    out = subprocess.run(_cli("train", "--config", str(SMOKE), *sets), capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ev = subprocess.run(_cli("evaluate", "--checkpoint", str(tmp_path / "e"), "--data", str(csv),
                             "--out", str(tmp_path / "ev")), capture_output=True, text=True,
                        env=_env(), cwd=ROOT, timeout=300)
    assert ev.returncode == 0, ev.stdout[-3000:] + ev.stderr[-3000:]
    report = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    seg = report["segments"]["all"]
    assert seg["assets"] == ["STOCKS_GOOGL"]
    metrics = seg["metrics"]["mean"]
    assert metrics["bars"] > 2000
    assert all(isinstance(v, float) and v == v for v in metrics.values())  # finite, no NaN
    assert (tmp_path / "ev" / "report.png").stat().st_size > 10_000
