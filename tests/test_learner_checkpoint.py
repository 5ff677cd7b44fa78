"""Learner state round trip: module, optimizer, replay buffer and counters."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import COMPONENT_ZEROSYNC, ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec


def build_learner() -> ZeroSyncDQNTorchLearner:
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=3, train_batch_size_per_learner=8, target_network_update_freq=4)
        .rl_module(rl_module_spec=make_module_spec(action_mode="routed", hidden=[16, 16]))
        .learners(learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 30, "prioritized": True, "seed": 4}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(5))}
    return cfg.build_learner(spaces=spaces)


def rollout(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(5, 8, 4, generator=g),
        "next_obs": torch.randn(5, 8, 4, generator=g),
        "actions": torch.randint(0, 5, (5, 8), generator=g),
        "factored_actions": torch.randint(0, 45, (5, 8), generator=g),
        "rewards": torch.randn(5, 8, generator=g),
        "terminateds": torch.rand(5, 8, generator=g) < 0.2,
        "truncateds": torch.zeros(5, 8, dtype=torch.bool),
    }


def params(learner):
    return [p.detach().clone() for p in learner.module["default_policy"].parameters()]


def check_same(a: ZeroSyncDQNTorchLearner, b: ZeroSyncDQNTorchLearner) -> None:
    for x, y in zip(params(a), params(b)):
        assert torch.equal(x, y)
    for k in a.replay.storage:
        assert torch.equal(a.replay.storage[k], b.replay.storage[k])
    assert torch.equal(a.replay.priorities, b.replay.priorities)
    assert (a.replay.size, a.replay.ptr) == (b.replay.size, b.replay.ptr)


def test_state_round_trip_then_identical_training(tmp_path):
    a = build_learner()
    a.replay.add(rollout(0))  # 40 rows into 30: wraps
    a.train(6)
    a.collect_metrics()
    state = a.get_state()
    assert COMPONENT_ZEROSYNC in state
    b = build_learner()
    b.set_state(state)
    check_same(a, b)
    assert b.updates == 6 and b.target_updates == 1
    opt_a, opt_b = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    for k in opt_a:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_a[k][name].cpu(), opt_b[k][name].cpu())
    # Same future: same samples, same updates, same target syncs, same priorities.
    for learner in (a, b):
        learner.replay.add(rollout(1))
        learner.train(7)
    check_same(a, b)
    assert a.collect_metrics() == b.collect_metrics()

    # Through the checkpoint files as well.
    a.save_to_path(str(tmp_path / "ckpt"))
    c = build_learner()
    c.restore_from_path(str(tmp_path / "ckpt"))
    check_same(a, c)


def test_weight_sync_state_excludes_replay():
    learner = build_learner()
    learner.replay.add(rollout(0))
    state = learner.get_state(components="rl_module/default_policy", inference_only=True)
    assert COMPONENT_ZEROSYNC not in state
    assert not any("_target" in k for k in state["rl_module"]["default_policy"])
