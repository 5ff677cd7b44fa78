"""Helpers for the DDP tests (CPU/gloo in CI, two GPUs/NCCL under the ``multigpu`` marker).

Ray ships these functions to the learner actors by value (``register_pickle_by_value`` below),
so the learner processes need not import the tests folder.
"""
from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import ray.cloudpickle
import torch
from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

OBS_DIM = 5
SPACES = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(45))}


def ddp_learner_config(*, num_gpus_per_learner: float, graph: bool = True, batch: int = 32,
                       action_mode: str = "branching", **zerosync) -> DQNConfig:
    """A 2-learner DQN config with the zero-sync learner (stock DQNConfig: the learner is the unit)."""
    zs = {"replay_capacity": 4096, "graph": graph, **zerosync}
    return (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=1, train_batch_size_per_learner=batch, target_network_update_freq=7)
        .rl_module(rl_module_spec=make_module_spec(action_mode=action_mode, hidden=[32, 32]))
        .learners(num_learners=2, num_cpus_per_learner=1, num_gpus_per_learner=num_gpus_per_learner,
                  learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": zs})
        .debugging(seed=0)
    )


def _flat_params(learner) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in learner.params])


def run_with_nan_on_one_rank(learner, *, updates: int = 100, nan_rank: int = 1, nan_at: int = 50,
                             warm_updates: int = 12) -> dict:
    """On every rank: rank-specific replay data, a warm-up iteration (graph capture on CUDA), then
    ``updates`` updates under ``set_sync_debug_mode("error")`` (CUDA) with the replay rewards of
    ``nan_rank`` set to NaN for update ``nan_at`` only; one metrics readback at the end."""
    import ray as _ray

    rank = torch.distributed.get_rank()
    dev = learner.device
    cuda = dev.type == "cuda"
    g = torch.Generator().manual_seed(100 + rank)
    t, n = 16, 64
    learner.replay.add({
        "obs": torch.randn(t, n, OBS_DIM, generator=g),
        "next_obs": torch.randn(t, n, OBS_DIM, generator=g),
        "actions": torch.randint(0, 45, (t, n), generator=g),
        "rewards": torch.randn(t, n, generator=g),
        "terminateds": torch.rand(t, n, generator=g) < 0.05,
        "truncateds": torch.zeros(t, n, dtype=torch.bool),
    })
    learner.train(warm_updates)
    warm_metrics = learner.collect_metrics()
    rewards = learner.replay.storage["rewards"]
    saved = rewards.clone()
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.set_sync_debug_mode("error")
    try:
        learner.train(nan_at)
        before = _flat_params(learner).clone()
        if rank == nan_rank:
            rewards.fill_(float("nan"))
        learner.train(1)
        after_nan = _flat_params(learner).clone()
        if rank == nan_rank:
            rewards.copy_(saved)
        learner.train(updates - nan_at - 1)
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    metrics = learner.collect_metrics()
    final = _flat_params(learner)
    return {
        "rank": rank,
        "device": str(dev),
        "gpu_ids": [str(i) for i in _ray.get_gpu_ids()],
        "graph_captured": bool(learner.graph_captured),
        "warm_metrics": warm_metrics,
        "metrics": metrics,
        "local_q": learner.guard.last_local_q,
        "nan_step_unchanged": bool(torch.equal(before, after_nan)),
        "moved": bool(not torch.equal(before, final)),
        "params": final.cpu(),
    }


def check_nan_run(results: list, *, updates: int = 100) -> None:
    """Assertions shared by the CPU and GPU versions of the test."""
    assert sorted(r["rank"] for r in results) == [0, 1]
    a, b = results
    for r in results:
        assert r["metrics"]["updates"] == float(updates)
        assert r["metrics"]["skipped"] == 1.0, r["metrics"]  # the NaN step, skipped on both ranks
        assert r["nan_step_unchanged"], "the NaN step changed the weights"
        assert r["moved"], "the weights did not move over the other updates"
        assert np.isfinite(r["metrics"]["loss_mean"])
    # Identical weights (bit for bit) and identical combined metrics on both ranks.
    assert torch.equal(a["params"], b["params"])
    assert a["metrics"] == b["metrics"] or all(
        (x == y) or (x != x and y != y) for x, y in zip(a["metrics"].values(), b["metrics"].values())
    )
    # The Q stats are combined over the ranks' own batches.
    q_min = min(r["local_q"]["q_min"] for r in results)
    q_max = max(r["local_q"]["q_max"] for r in results)
    assert a["metrics"]["q_min"] == q_min and a["metrics"]["q_max"] == q_max
    assert a["local_q"]["q_min"] != b["local_q"]["q_min"]  # different shards: the combine mattered
