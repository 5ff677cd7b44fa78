"""The stock RLlib baselines of the benchmarks are RLlib's own tuned settings (CPU, no Ray, no training).

* ``benchmarks.cartpole``'s stock learning config is RLlib 2.60's tuned CartPole DQN example
  (``rllib/tuned_examples/dqn/cartpole_dqn.py``), setting for setting, model included;
* with N remote env runners it keeps the example's replay ratio (N batches of 32 per round of 5 N
  sampled steps), where plain DQN would train N times less per env step;
* results record repository paths relative to the repository.
"""
from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.dqn.dqn import calculate_rr_weights
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from benchmarks import cartpole
from benchmarks.common import quick_path, repo_relative, results_path


def _tuned_example() -> DQNConfig:
    """``config`` of rllib/tuned_examples/dqn/cartpole_dqn.py (ray 2.60), as its script builds it with
    no command line options on a host without GPUs."""
    return (
        DQNConfig()
        .environment(env="CartPole-v1")
        .training(
            lr=0.0005 * 1 ** 0.5,
            train_batch_size_per_learner=32,
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50000, "alpha": 0.6,
                                  "beta": 0.4},
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (10000, 0.02)],
        )
        .rl_module(model_config=DefaultModelConfig(
            fcnet_hiddens=[256], fcnet_activation="tanh", fcnet_bias_initializer="zeros_",
            head_fcnet_bias_initializer="zeros_", head_fcnet_hiddens=[256]))
        .learners(num_gpus_per_learner=0)
    )


def _settings(cfg: DQNConfig) -> dict:
    d = cfg.to_dict()
    d.pop("seed")  # the benchmark fixes one; the example leaves it unset
    return {k: repr(v) for k, v in d.items()}


def test_stock_learning_config_is_the_tuned_example():
    ours, example = _settings(cartpole.stock_learning_config(0, gpu=False)), _settings(_tuned_example())
    assert ours.keys() == example.keys()
    assert {k: ours[k] for k in ours if ours[k] != example[k]} == {}


def test_stock_learning_config_keeps_the_example_defaults():
    cfg = cartpole.stock_learning_config(0, gpu=False)
    assert cfg.num_env_runners == 0 and cfg.num_envs_per_env_runner == 1
    assert cfg.get_rollout_fragment_length() == 5  # "auto": the largest n-step
    assert cfg.target_network_update_freq == 500 and cfg.num_steps_sampled_before_learning_starts == 1000
    assert cfg.training_intensity is None and calculate_rr_weights(cfg) == [1, 1]
    assert cfg.n_step == (2, 5) and cfg.double_q and cfg.dueling
    assert cfg.epsilon == [(0, 1.0), (10_000, 0.02)]


def test_stock_module_has_the_example_heads():
    cfg = cartpole.stock_learning_config(0, gpu=False)
    env = gym.make("CartPole-v1")
    spec = cfg.get_rl_module_spec(env=env)
    module = spec.build()
    linears = {name: m for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)}
    shapes = sorted((name.split(".")[0], m.in_features, m.out_features) for name, m in linears.items())
    assert shapes == [("af", 256, 2), ("af", 256, 256), ("encoder", 4, 256), ("vf", 256, 1), ("vf", 256, 256)]
    assert all(torch.count_nonzero(m.bias) == 0 for name, m in linears.items())


@pytest.mark.parametrize("runners", [1, 2, 7, 8, 15])
def test_remote_runners_keep_the_example_replay_ratio(runners):
    cfg = cartpole.stock_learning_config(runners, gpu=False)
    store, train = calculate_rr_weights(cfg)
    sampled_per_round = store * cfg.get_rollout_fragment_length() * cfg.num_envs_per_env_runner * runners
    assert (store, train) == (1, runners)
    assert train * cfg.train_batch_size_per_learner / sampled_per_round == pytest.approx(32 / 5)
    # the other settings stay the example's
    ours, example = _settings(cfg), _settings(_tuned_example())
    assert {k for k in ours if ours[k] != example[k]} == {"num_env_runners", "training_intensity"}


def test_plain_dqn_with_remote_runners_trains_less_per_env_step():
    """What the stock row used to run: 8 runners, one batch of 32 per 40 sampled steps."""
    cfg = cartpole.stock_learning_config(0, gpu=False).env_runners(num_env_runners=8)
    assert calculate_rr_weights(cfg) == [1, 1]
    assert cfg.train_batch_size_per_learner / (cfg.get_rollout_fragment_length() * 8) == pytest.approx(0.8)


def test_results_record_repository_paths_relative(tmp_path):
    assert repo_relative(results_path("env_runner")) == "benchmarks/results/env_runner.json"
    assert repo_relative(quick_path("cartpole")) == quick_path("cartpole")
    assert repo_relative(tmp_path / "x.json") == str(tmp_path / "x.json")
