"""Teardown at exit: ``rl-zerosync train`` shuts down the Ray instance it started before it returns,
so the process never reaches interpreter shutdown with Ray's core worker (its gRPC and IO threads,
its raylet/GCS children) still connected; a Ray the caller started stays the caller's. CPU, a tiny
one-iteration run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tiny_run import tiny_raw
from rl_zerosync import cli

ROOT = Path(__file__).resolve().parents[1]

EXIT_PROBE = """
import atexit, sys
import ray
# registered after Ray's own atexit hook, so it runs first: the state the interpreter exits with
atexit.register(lambda: print("ray initialized at exit:", ray.is_initialized(), flush=True))
from rl_zerosync.cli import main
sys.exit(main(["train", "--config", sys.argv[1]]))
"""


def _config(tmp_path: Path) -> Path:
    raw = tiny_raw({"iterations": 1, "checkpoint_every": 1, "evaluate": False, "dir": str(tmp_path), "name": "r"})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_train_shuts_down_the_ray_it_started(tmp_path):
    import ray

    assert not ray.is_initialized(), "a Ray left running by an earlier test"
    try:
        assert cli.main(["train", "--config", str(_config(tmp_path))]) == 0
        assert not ray.is_initialized(), "train returned with its Ray instance still running"
    finally:
        ray.shutdown()  # no-op when the command already did it
    assert (tmp_path / "r" / "checkpoint").is_dir()


def test_train_leaves_a_running_ray_to_its_owner(tmp_path, ray_instance):
    import ray

    with ray_instance(address="local", num_cpus=2):
        assert cli.main(["train", "--config", str(_config(tmp_path))]) == 0
        assert ray.is_initialized()  # the caller's instance: still there for the caller
    assert not ray.is_initialized()


@pytest.mark.slow
def test_the_command_exits_0_with_ray_already_shut_down(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a private local instance
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", EXIT_PROBE, str(_config(tmp_path))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    assert "ray initialized at exit: False" in proc.stdout, proc.stdout[-2000:]


def test_owned_ray_stops_only_what_the_block_started(monkeypatch):
    from rl_zerosync.run.ray_session import owned_ray, ray_is_running

    state = {"running": False, "shutdowns": 0}
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: state["running"])
    monkeypatch.setattr(ray, "shutdown", lambda: state.update(running=False, shutdowns=state["shutdowns"] + 1))
    with pytest.raises(RuntimeError):
        with owned_ray():
            state["running"] = True  # started inside the block, then the block fails
            raise RuntimeError
    assert state == {"running": False, "shutdowns": 1}
    state["running"] = True  # already running on entry: left alone
    with owned_ray():
        pass
    assert state == {"running": True, "shutdowns": 1} and ray_is_running()


LEAKY_TEST = """
import atexit
import ray


def test_starts_ray_and_leaves_it_running():
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    # registered after Ray's own atexit hook, so it runs first: the state the interpreter exits with
    atexit.register(lambda: print("ray initialized at exit:", ray.is_initialized(), flush=True))
"""


def test_a_pytest_session_never_exits_with_ray_running(tmp_path):
    """This suite's conftest as a plugin around a test that leaks a Ray instance: the session's end
    shuts it down, the interpreter exits with Ray stopped, and pytest exits 0."""
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "pytest", "-q", "-s", "-p", "conftest",
                           "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_leaky.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    assert "1 passed" in proc.stdout and "a test left Ray running" in proc.stdout, proc.stdout[-2000:]
    assert "ray initialized at exit: False" in proc.stdout, proc.stdout[-2000:]
