"""The zero-sync learner swapped into stock RLlib DQN (new API stack) on CartPole-v1."""
from __future__ import annotations

import numpy as np
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.utils.metrics import LEARNER_RESULTS

from rl_zerosync.algorithm import local_learner_of
from rl_zerosync.learner import ZeroSyncDQNTorchLearner


RAY_INIT = {"num_cpus": 1, "ignore_reinit_error": True}  # conftest's ray_local


def test_stock_dqn_with_zero_sync_learner(ray_local):
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=32)
        .training(
            lr=1e-3,
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=32,
            target_network_update_freq=32,
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 1000},
        )
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .learners(learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 64}})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        learner = local_learner_of(algo.learner_group)
        assert isinstance(learner, ZeroSyncDQNTorchLearner)
        before = [p.detach().clone() for p in learner.params]
        for _ in range(2):
            results = algo.train()
        zs = results[LEARNER_RESULTS]["default_policy"]["zerosync"]
        assert zs["updates"] == 1.0 and zs["skipped"] == 0.0
        assert np.isfinite(zs["loss_mean"]) and np.isfinite(zs["q_max"])
        assert zs["updates_lifetime"] >= 2.0
        assert any(not (a == p.detach()).all() for a, p in zip(before, learner.params))
    finally:
        algo.stop()
