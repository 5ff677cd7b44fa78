"""``check_batched_env``: each protocol violation is its own named error; the built-in envs pass;
the GPU env runner checks its envs when it builds them. CPU, plus one GPU test under sync-debug."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_zerosync.algorithm import ZeroSyncDQNConfig
from rl_zerosync.data import synthetic_market
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.envs import BatchedCartPole, BatchedEnv, BatchedTradingEnv, EnvParams
from rl_zerosync.envs.check import BatchedEnvCheckError, check_batched_env


class Walk(BatchedEnv):
    """A correct env: 3-wide obs, 3-step episodes, auto-reset; variants below break one rule each."""

    width = 3

    def __init__(self, env_config=None, num_envs=4, device="cpu", seed=0):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _obs(self):
        return torch.stack([self.t.float() / 3, self.t.float() * 0, self.t.float() * 0 + 1], 1)[:, :self.width]

    def reset(self, seed=None):
        self.t.zero_()
        return self._obs()

    def _flags(self, done):
        return done, torch.zeros_like(done)

    def step(self, actions):
        self.t.add_(1)
        final = self._obs()
        done = self.t >= 3
        self.t.mul_((~done).long())
        terminated, truncated = self._flags(done)
        return self._obs(), actions.float(), terminated, truncated, final


class WrongWidth(Walk):
    width = 2


class FloatDone(Walk):
    def _flags(self, done):
        return done.float(), torch.zeros_like(done, dtype=torch.float32)


class NoAutoReset(Walk):
    def step(self, actions):
        self.t.add_(1)
        done = self.t >= 3
        return self._obs(), actions.float(), done, torch.zeros_like(done), self._obs()


class Noisy(Walk):
    def reset(self, seed=None):
        self.t.copy_(torch.randint(0, 3, (self.num_envs,)))  # a global RNG: not reproducible
        return self._obs()


def test_a_correct_env_passes():
    check_batched_env(Walk())


@pytest.mark.parametrize("cls, match", [
    (WrongWidth, r"check_batched_env\(WrongWidth\): reset\(\) obs: expected shape \[4, 3\].*got \[4, 2\]"),
    (FloatDone, r"check_batched_env\(FloatDone\): step\(\) terminated: expected a torch.bool.*float done flags"),
    (NoAutoReset, r"check_batched_env\(NoAutoReset\): no auto-reset"),
    (Noisy, r"check_batched_env\(Noisy\): not deterministic"),
])
def test_each_violation_is_a_named_error(cls, match):
    with pytest.raises(BatchedEnvCheckError, match=match):
        check_batched_env(cls())


def test_wrong_reward_dtype_and_spaces():
    class IntReward(Walk):
        def step(self, actions):
            obs, reward, te, tr, final = super().step(actions)
            return obs, actions, te, tr, final

    with pytest.raises(BatchedEnvCheckError, match=r"step\(\) reward: expected dtype torch.float32, got torch.int64"):
        check_batched_env(IntReward())
    env = Walk()
    env.action_space = gym.spaces.Box(0, 1, (1,))
    with pytest.raises(BatchedEnvCheckError, match="action_space: expected gymnasium.spaces.Discrete"):
        check_batched_env(env, name="my env")


def test_builtin_envs_pass():
    check_batched_env(BatchedCartPole({}, num_envs=16, seed=0), steps=40)
    market = synthetic_market(2, 300, seed=3, features=FeatureConfig(warmup=16, median_window=32))
    check_batched_env(BatchedTradingEnv(market, EnvParams(), 8, "cpu", seed=0))


def test_the_runner_checks_its_env_with_a_named_error():
    config = (ZeroSyncDQNConfig()
              .environment(FloatDone, env_config={"runner": {"device": "cpu"}})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=4)
              .rl_module(model_config={"action_mode": "flat", "hidden": [8]})
              .debugging(seed=0))
    from rl_zerosync.env_runner import GPUEnvRunner
    with pytest.raises(BatchedEnvCheckError, match=r"check_batched_env\(config.env FloatDone\): step\(\) terminated"):
        GPUEnvRunner(config=config)
    config.env_config["runner"]["check_env"] = False
    GPUEnvRunner(config=config).stop()


@pytest.mark.gpu
def test_no_host_sync_on_cuda():
    class Syncs(Walk):
        def step(self, actions):
            out = super().step(actions)
            if bool(out[2].any()):  # a host read of a device value
                pass
            return out

    check_batched_env(Walk(device="cuda"))
    check_batched_env(BatchedCartPole({}, num_envs=64, device="cuda", seed=0))
    with pytest.raises(BatchedEnvCheckError, match=r"step\(\) synchronized with the host"):
        check_batched_env(Syncs(device="cuda"))
