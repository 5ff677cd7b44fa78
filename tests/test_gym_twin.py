"""Gymnasium twin: env_checker, registration, routed mode and use from an RLlib EnvRunner (CPU)."""
from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rl_zerosync.envs  # noqa: F401  (registers the gymnasium id)
from rl_zerosync.envs import ENV_ID, ENV_ID_IMPORTABLE, TradingGymEnv

DATA = {"num_assets": 2, "num_bars": 1500, "seed": 1, "features": {"warmup": 32, "median_window": 64}}
ENV = {"episode_len": 32, "window": 8}


def _has_route() -> bool:
    try:
        from rl_zerosync.kernels import get_kernels

        return hasattr(get_kernels("cpu"), "route")
    except Exception:  # the routing twin is not available in this checkout
        return False


needs_route = pytest.mark.skipif(not _has_route(), reason="rl_zerosync.kernels routing twin not available")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_check_env_flat():
    env = TradingGymEnv({"data": DATA, "env": ENV})
    check_env(env, skip_render_check=True)
    assert env.action_space == gym.spaces.Discrete(45)
    assert env.observation_space.shape == (12,) and env.observation_space.dtype == np.float32


@needs_route
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_check_env_routed_and_actions_are_routed():
    from rl_zerosync.envs.core import route_inputs

    env = TradingGymEnv({"data": DATA, "env": ENV, "action_mode": "routed"})
    check_env(env, skip_render_check=True)
    assert env.action_space == gym.spaces.Discrete(5)
    env.reset(seed=0)
    for e in [4, 0, 2, 3, 1] * 4:
        s, ms, v, mv = (float(x[0]) for x in route_inputs(env.data, env._state))
        rs = s / ms if ms > 0 else 1.0
        rv = v / mv if mv > 0 else 1.0
        if rv >= 1.5:
            o, u = (1, 2) if rs >= 1.5 else (0, 2)
        else:
            o, u = (2 if rs >= 1.5 else 1), (0 if rv <= 0.75 else 1)
        _, _, _, _, info = env.step(e)
        assert info["action"] == e * 9 + o * 3 + u


def test_registered_id_makes_the_twin_with_kwargs():
    env = gym.make(ENV_ID, data=DATA, env=ENV, runner={"num_steps": 4})
    obs, info = env.reset(seed=3)
    assert obs.shape == (12,) and obs.dtype == np.float32
    obs2, *_ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs2)
    env.close()


def test_seeded_resets_repeat_and_unseeded_copies_differ():
    a = TradingGymEnv(data=DATA, env=ENV)
    b = TradingGymEnv(data=DATA, env=ENV)
    assert np.array_equal(a.reset(seed=9)[0], b.reset(seed=9)[0])
    starts = {TradingGymEnv(data=DATA, env=ENV).reset()[1]["bar"] for _ in range(6)}
    assert len(starts) > 1


def test_bad_config_and_actions_raise():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['dat'\]"):
        TradingGymEnv({"dat": DATA})
    with pytest.raises(ValueError, match="action_mode"):
        TradingGymEnv({"data": DATA, "env": ENV, "action_mode": "branching"})
    env = TradingGymEnv({"data": DATA, "env": ENV})
    with pytest.raises(ValueError, match="before reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"0\.\.44"):
        env.step(45)


def test_importable_id_works_in_a_fresh_process():
    code = (
        "import gymnasium as gym; "
        f"v = gym.make_vec({ENV_ID_IMPORTABLE!r}, num_envs=2, vectorization_mode='sync', data={DATA!r}, env={ENV!r}); "
        "o, _ = v.reset(seed=[1, 2]); assert o.shape == (2, 12) and (o[0] != o[1]).any(); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_rllib_env_runner_resolves_the_string_id():
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = (
        DQNConfig()
        .environment("rl_zerosync/Trading-v0", env_config={"data": DATA, "env": ENV, "runner": {}})
        .env_runners(num_envs_per_env_runner=2)
    )
    runner = SingleAgentEnvRunner(config=config)
    episodes = runner.sample(num_timesteps=80, random_actions=True)
    steps = sum(len(e) for e in episodes)
    assert steps >= 80
    assert runner.env.single_observation_space.shape == (12,)
    runner.stop()
