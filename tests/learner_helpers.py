"""Shared by the learner tests: a random columnar rollout and a snapshot of the learner's parameters
and optimizer state."""
from __future__ import annotations

import copy

import torch

OBS_DIM = 5


def rollout(t_len=6, n_envs=4, *, reward=None, seed=0, n_actions=45):
    """A columnar rollout [T, N] with random obs and actions; rewards random or all ``reward``."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(t_len, n_envs, generator=g) if reward is None else torch.full((t_len, n_envs), reward)
    return {
        "obs": torch.randn(t_len, n_envs, OBS_DIM, generator=g),
        "next_obs": torch.randn(t_len, n_envs, OBS_DIM, generator=g),
        "actions": torch.randint(0, n_actions, (t_len, n_envs), generator=g),
        "factored_actions": torch.randint(0, 45, (t_len, n_envs), generator=g),
        "rewards": rewards,
        "terminateds": torch.zeros(t_len, n_envs, dtype=torch.bool),
        "truncateds": torch.zeros(t_len, n_envs, dtype=torch.bool),
    }


def snapshot(learner):
    """(parameter copies, deep copy of the optimizer state)."""
    params = [p.detach().clone() for p in learner.params]
    return params, copy.deepcopy(learner.optimizer.state_dict()["state"])
