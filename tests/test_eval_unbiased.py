"""Evaluation by episodes and by timesteps: the mean return over complete episodes does not depend
on their lengths (an env whose short episodes have low returns and long ones high); ``algo.evaluate()``
without an evaluation config. CPU."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_zerosync.algorithm import ZeroSyncDQNConfig
from rl_zerosync.env_runner.eval_window import EvalWindow
from rl_zerosync.envs import BatchedEnv
from rl_zerosync.kernels.rng import uniform24

SHORT, LONG = 2, 38
"""Episode lengths, each with probability 1/2; return = length, so the true mean return is 20."""
TRUE_MEAN, SD = (SHORT + LONG) / 2, (LONG - SHORT) / 2


class ShortOrLong(BatchedEnv):
    """Reward 1 per step; each episode lasts SHORT or LONG steps (a counter-based coin per episode)."""

    def __init__(self, env_config, num_envs, device, seed):
        self.num_envs, self.device, self.seed = num_envs, torch.device(device), int(seed or 0)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        z = lambda dtype: torch.zeros(num_envs, dtype=dtype, device=self.device)  # noqa: E731
        self.idx, self.t, self.length, self.episode = z(torch.int64), z(torch.int64), z(torch.int64), z(torch.int64)
        self.idx.copy_(torch.arange(num_envs))
        self.obs, self.final_obs = torch.zeros(num_envs, 2), torch.zeros(num_envs, 2)
        self.reset()

    def _new(self, mask):
        coin = uniform24(self.seed, self.episode, 0, self.idx) < 0.5
        self.length.copy_(torch.where(mask, torch.where(coin, SHORT, LONG), self.length))
        self.t.mul_((~mask).long())

    def _observe(self, out):
        out.copy_(torch.stack([self.t / LONG, self.length / LONG], 1).float())

    def reset(self, seed=None):
        self.episode.zero_()
        self._new(torch.ones(self.num_envs, dtype=torch.bool))
        self._observe(self.obs)
        return self.obs

    def step(self, actions):
        self.t.add_(1)
        done = self.t >= self.length
        self._observe(self.final_obs)
        self.episode.add_(done.long())
        self._new(done)
        self._observe(self.obs)
        return self.obs, torch.ones(self.num_envs), torch.zeros_like(done), done, self.final_obs


def _evaluate(unit: str, duration: int, num_envs: int = 32, T: int = 8) -> dict:
    config = (ZeroSyncDQNConfig()
              .environment(ShortOrLong, env_config={"runner": {"device": "cpu"}})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs, rollout_fragment_length=T)
              .learners(num_learners=0, num_gpus_per_learner=0, learner_config_dict={"zerosync": {"graph": False}})
              .rl_module(model_config={"action_mode": "flat", "hidden": [8]})
              .evaluation(evaluation_interval=1, evaluation_num_env_runners=0, evaluation_duration_unit=unit,
                          evaluation_duration=duration)
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        return algo.evaluate()["env_runners"]
    finally:
        algo.stop()


@pytest.mark.parametrize("unit, duration", [("episodes", 256), ("episodes", 20), ("timesteps", 32 * 8 * 12)])
def test_mean_return_is_the_true_mean(ray_local, unit, duration):
    ev = _evaluate(unit, duration)
    n = int(ev["num_episodes"])
    if unit == "episodes":
        assert n == duration
    else:
        assert n >= 32 * 2  # every episode started in the 96-step window, finished
    tolerance = 4 * SD / np.sqrt(n)
    assert abs(ev["episode_return_mean"] - TRUE_MEAN) < tolerance, (ev["episode_return_mean"], n)
    assert ev["episode_len_mean"] == pytest.approx(ev["episode_return_mean"])  # return = length here


def test_window_rules():
    w = EvalWindow(3, num_episodes=4)  # quotas 2, 1, 1
    assert list(w.quota) == [2, 1, 1]
    ones = np.ones((1, 3), np.float32)
    w.add(ones, np.array([[True, False, False]]))  # env 0's running episode ends: not counted
    assert w.episodes == [] and not w.finished
    w.add(np.full((1, 3), 5.0, np.float32), np.array([[True, True, True]]))
    assert [e[1:] for e in w.episodes] == [(0, 5.0, 1)]  # env 0's first counted episode
    w.add(ones, np.array([[True, True, True]]))
    w.add(ones, np.array([[False, False, False]]))
    assert w.finished and len(w.counted()) == 4
    t = EvalWindow(2, window_steps=2)
    t.add(np.ones((2, 2), np.float32), np.array([[True, False], [False, False]]))
    assert not t.finished  # env 0's episode started at step 1 (< 2) is running
    t.add(np.ones((1, 2), np.float32), np.array([[True, True]]))  # env 1's next one starts after the window
    assert t.finished and t.counted() == [(2.0, 2)]
    with pytest.raises(ValueError, match="exactly one"):
        EvalWindow(2)


def test_evaluate_without_evaluation_config_says_what_to_configure(ray_local):
    config = (ZeroSyncDQNConfig()
              .environment(ShortOrLong, env_config={"runner": {"device": "cpu"}})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=8)
              .learners(num_learners=0, num_gpus_per_learner=0, learner_config_dict={"zerosync": {"graph": False}})
              .rl_module(model_config={"action_mode": "flat", "hidden": [8]}))
    algo = config.build_algo()
    try:
        with pytest.raises(ValueError, match=r"algo.evaluate\(\): no evaluation runners.*config.evaluation\("):
            algo.evaluate()
    finally:
        algo.stop()
