"""Remote env runners that fail in their constructors: the setup error names the runners' root
cause (:mod:`rl_zerosync.env_runner.runner_errors`), not RLlib's ``IndexError`` from ``get_spaces``."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from rl_zerosync.env_runner.runner_errors import root_cause
from rl_zerosync.config.settings import load, to_rllib_config

SMOKE = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"

REMOTE_TRACEBACK = """The actor died because of an error raised in its creation task, ray::GPUEnvRunner.__init__()
Traceback (most recent call last):
  File "/x/rl_zerosync/env_runner/runner_settings.py", line 53, in normalize_epsilon_schedule
    raise ValueError(f"{field}[0] step must be 0, got {out[0][0]}")
ValueError: epsilon[0] step must be 0, got 10"""


def test_root_cause_is_the_last_exception_line():
    assert root_cause(REMOTE_TRACEBACK) == ("ValueError", "epsilon[0] step must be 0, got 10")
    assert root_cause("ray.exceptions.RayActorError: died\nFileNotFoundError: [Errno 2] x.csv")[0] == \
        "FileNotFoundError"
    assert root_cause("something odd happened\nmore") == ("", "something odd happened")


def test_two_remote_runners_failing_name_the_root_cause(ray_instance):
    with ray_instance(address="local", num_cpus=2):
        # A settings file refuses this schedule at load; set through the config, the runners meet it.
        settings = load(SMOKE, ["algo.num_env_runners=2"])
        t0 = time.perf_counter()
        with pytest.raises(ValueError) as info:
            to_rllib_config(settings).training(epsilon=[(10, 1.0), (100, 0.1)]).build_algo()
        assert time.perf_counter() - t0 < 120
    msg = str(info.value)
    assert msg.startswith("remote env runner failed to start: ValueError: epsilon[0] step must be 0, got 10")
    assert "2 env runners failed the same way" in msg
    assert isinstance(info.value.__cause__, IndexError)  # RLlib's own error, kept as the cause
