"""Two learners (DDP over gloo on CPU): the guard decides the same on every rank, weights stay equal.

Each rank samples different data, and the loss is clipped (loss_clip below every raw loss), so the
gradient scale ``loss_clip / loss`` would differ per rank if the loss were not averaged over the
ranks before the guard: identical weights after training prove the decision is global.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec


RAY_INIT = {"num_cpus": 2, "ignore_reinit_error": True}  # conftest's ray_local


def test_two_learners_stay_identical(ray_local):
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=1, train_batch_size_per_learner=8, target_network_update_freq=3)
        .rl_module(rl_module_spec=make_module_spec(action_mode="branching", hidden=[16, 16]))
        .learners(num_learners=2, num_cpus_per_learner=1, learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 64, "loss_clip": 0.05}})
        .debugging(seed=0)
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (5,), np.float32), gym.spaces.Discrete(45))}

    # Defined here so Ray ships it by value to the learner actors.
    def train_on_rank_data(learner: ZeroSyncDQNTorchLearner):
        rank = torch.distributed.get_rank()
        g = torch.Generator().manual_seed(100 + rank)
        learner.replay.add({
            "obs": torch.randn(4, 8, 5, generator=g),
            "next_obs": torch.randn(4, 8, 5, generator=g),
            "actions": torch.randint(0, 45, (4, 8), generator=g),
            "rewards": 3.0 * torch.randn(4, 8, generator=g),
            "terminateds": torch.zeros(4, 8, dtype=torch.bool),
            "truncateds": torch.zeros(4, 8, dtype=torch.bool),
        })
        learner.train(6)
        return rank, learner.collect_metrics(), [p.detach().clone() for p in learner.params]

    group = cfg.build_learner_group(spaces=spaces)
    try:
        results = [r.get() if hasattr(r, "get") else r for r in group.foreach_learner(train_on_rank_data)]
    finally:
        group.shutdown()
    (rank_a, m_a, p_a), (rank_b, m_b, p_b) = results
    assert {rank_a, rank_b} == {0, 1}
    assert m_a["clip_events"] == m_b["clip_events"] == 6.0
    assert m_a["loss_mean"] == m_b["loss_mean"] == pytest.approx(0.05)
    assert m_a["grad_norm_mean"] == m_b["grad_norm_mean"]  # all-reduced gradients: one global norm
    for a, b in zip(p_a, p_b):
        assert torch.equal(a, b)


def test_nan_on_one_rank_is_skipped_on_both(ray_local):
    """100 updates over gloo with NaN rewards on rank 1 for one update: both ranks skip it."""
    from ddp_helpers import SPACES, check_nan_run, ddp_learner_config, run_with_nan_on_one_rank

    group = ddp_learner_config(num_gpus_per_learner=0).build_learner_group(spaces=SPACES)
    try:
        results = [r.get() for r in group.foreach_learner(run_with_nan_on_one_rank)]
    finally:
        group.shutdown()
    check_nan_run(results)
