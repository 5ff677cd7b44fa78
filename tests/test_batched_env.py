"""The batched-env protocol: CartPole through ZeroSyncDQN, any Discrete(n) in flat mode, named
errors for envs the GPU runner cannot step, staggered starts. CPU (torch twins, no graphs)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_zerosync.algorithm import ZeroSyncDQNConfig
from rl_zerosync.envs import BatchedCartPole, BatchedEnv, register_batched_env
from rl_zerosync.envs.registry import CARTPOLE_ENV_ID, resolve_batched_env


def _config(env, *, num_envs=32, T=16, model=None, **training):
    train = dict(lr=1e-3, gamma=0.99, n_step=3, train_batch_size_per_learner=128, replay_ratio=4.0,
                 num_steps_sampled_before_learning_starts=2000, target_network_update_freq=250,
                 epsilon=[(0, 1.0), (10000, 0.02)])
    train.update(training)
    return (ZeroSyncDQNConfig()
            .environment(env, env_config={"runner": {"device": "cpu"}})
            .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs, rollout_fragment_length=T)
            .learners(num_learners=0, num_gpus_per_learner=0,
                      learner_config_dict={"zerosync": {"graph": False, "replay_capacity": 100_000}})
            .training(**train)
            .rl_module(model_config=model or {"hidden": [64, 64]})
            .debugging(seed=0))


def test_cartpole_dynamics_match_gymnasium():
    ref = gym.make("CartPole-v1").unwrapped
    env = BatchedCartPole({"stagger": False}, num_envs=1, seed=3)
    rng = np.random.default_rng(0)
    compared = 0
    for _ in range(20):
        ref.reset(seed=int(rng.integers(1 << 30)))
        ref.state = env.state[0].double().numpy().copy()  # same start state
        while True:
            a = int(rng.integers(2))
            obs_ref, r_ref, term_ref, _, _ = ref.step(a)
            obs, r, term, trunc, final = env.step(torch.tensor([a]))
            assert np.allclose(final[0].numpy(), obs_ref, atol=1e-4), (final, obs_ref)
            assert bool(term[0]) == term_ref and float(r[0]) == r_ref == 1.0
            compared += 1
            if term_ref:
                assert not torch.equal(obs, final)  # auto-reset: obs is the next episode's start
                assert float(obs.abs().max()) < 0.05
                break
    assert compared > 100


def test_stagger_spreads_the_first_truncations():
    env = BatchedCartPole({}, num_envs=256, seed=0)
    starts = env.steps.numpy()
    assert len(np.unique(starts)) > 150 and starts.min() >= 0 and starts.max() < 500
    flat = BatchedCartPole({"stagger": False}, num_envs=8, seed=0)
    assert int(flat.steps.abs().sum()) == 0


def test_unsupported_env_is_a_named_error():
    with pytest.raises(ValueError, match=r"config.env 'CartPole-v1'.*rl_zerosync/CartPole-v1"):
        resolve_batched_env("CartPole-v1")
    with pytest.raises(ValueError, match="config.env 'CartPole-v1'"):
        _config("CartPole-v1").validate()

    class NotBatched:  # a gymnasium-style class is not a batched env
        pass

    with pytest.raises(ValueError, match="config.env NotBatched"):
        resolve_batched_env(NotBatched)
    assert resolve_batched_env(CARTPOLE_ENV_ID) is BatchedCartPole


class GuessEnv(BatchedEnv):
    """Discrete(n): reward 1 when the action equals the env's step count mod n; 8-step episodes."""

    def __init__(self, env_config, num_envs, device, seed):
        self.n = int(env_config.get("n", 2))
        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(self.n)
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.obs = torch.zeros(num_envs, 3, device=self.device)
        self.final = torch.zeros(num_envs, 3, device=self.device)

    def _observe(self, out):
        out[:, 0] = self.t.float() / 8
        out[:, 1] = (self.t % self.n).float() / self.n
        out[:, 2] = 1.0

    def reset(self, seed=None):
        self.t.zero_()
        self._observe(self.obs)
        return self.obs

    def step(self, actions):
        reward = (actions == self.t % self.n).float()
        self.t.add_(1)
        self._observe(self.final)
        truncated = self.t >= 8
        self.t.mul_((~truncated).long())
        self._observe(self.obs)
        return self.obs, reward, torch.zeros_like(truncated), truncated, self.final


@pytest.mark.parametrize("n", [2, 3, 17, 64])
def test_any_discrete_action_space_runs_in_flat_mode(ray_local, n):
    register_batched_env("test/Guess-v0", GuessEnv)
    config = _config("test/Guess-v0", num_envs=8, T=8, num_steps_sampled_before_learning_starts=64,
                     train_batch_size_per_learner=32)
    config.env_config["n"] = n
    algo = config.build_algo()
    try:
        assert algo.get_module().action_space == gym.spaces.Discrete(n)
        for _ in range(3):
            result = algo.train()
        assert result["num_updates_per_iteration"] > 0
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] == 3 * 64
        actions = algo.env_runner.sample()["actions"]
        assert int(actions.min()) >= 0 and int(actions.max()) < n
    finally:
        algo.stop()


def test_routed_mode_needs_the_trading_env(ray_local):
    with pytest.raises(ValueError, match="action_mode 'routed' needs the trading env"):
        _config(CARTPOLE_ENV_ID, model={"action_mode": "routed"}).build_algo()


def test_zerosync_dqn_learns_cartpole(ray_local):
    algo = _config(CARTPOLE_ENV_ID).build_algo()
    lengths = []
    try:
        for _ in range(60):
            result = algo.train()
            lengths.append(result["env_runners"].get("episode_len_mean", float("nan")))
            if lengths[-1] > 150:
                break
    finally:
        algo.stop()
    assert max(v for v in lengths if v == v) > 150, lengths
    assert lengths[0] < 40  # random start: CartPole episodes of ~20 steps
