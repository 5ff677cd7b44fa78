"""Guard semantics of the zero-sync update on CPU: skip, loss clip, collapse, divergence, settings."""
from __future__ import annotations

import copy
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.kernels.layouts import QAGG
from rl_zerosync.learner import LearnerSettings, TrainingHalted, ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec

from learner_helpers import OBS_DIM, rollout, snapshot  # noqa: E402


def build_learner(*, mode: str = "flat", batch: int = 8, grad_clip=40.0, layernorm: bool = False,
                  **zs) -> ZeroSyncDQNTorchLearner:
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=1, grad_clip=grad_clip, train_batch_size_per_learner=batch,
                  target_network_update_freq=1000)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[16, 16], layernorm=layernorm))
        .learners(learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 24, **zs}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(n))}
    return cfg.build_learner(spaces=spaces)


def assert_bit_identical(before, after):
    for a, b in zip(before[0], after[0]):
        assert torch.equal(a, b)
    assert before[1].keys() == after[1].keys()
    for k in before[1]:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(before[1][k][name], after[1][k][name]), (k, name)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_batch_is_skipped_and_counted(bad):
    learner = build_learner(mode="branching")
    learner.replay.add(rollout())
    learner.train(3)
    learner.collect_metrics()
    before = snapshot(learner)
    learner.replay.add(rollout(reward=bad))  # overwrites all 24 rows
    learner.train(2)
    assert_bit_identical(before, snapshot(learner))
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (2.0, 2.0)
    assert np.isnan(m["loss_mean"])  # no finite update in this iteration
    learner.replay.add(rollout(seed=1))
    learner.train(2)
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (2.0, 0.0) and np.isfinite(m["loss_mean"])
    assert any(not torch.equal(a, b) for a, b in zip(before[0], snapshot(learner)[0]))


def test_nonfinite_halt_policy_raises():
    learner = build_learner(nonfinite_policy="halt")
    learner.replay.add(rollout(reward=float("nan")))
    learner.train(1)
    with pytest.raises(TrainingHalted, match="nonfinite check at update 0"):
        learner.collect_metrics()


def test_loss_spike_is_clipped_and_counted():
    """A single stored transition (capacity 1): the batch is B copies of it, so the raw loss and
    gradient are known independently; the applied gradient must be raw * loss_clip / loss."""
    learner = build_learner(grad_clip=None, replay_capacity=1, loss_clip=10.0)
    ro = rollout(1, 1, reward=1e4)
    learner.replay.add(ro)
    module = learner.module["default_policy"]
    net, tgt = copy.deepcopy(module.q_net), copy.deepcopy(module.target_q_net)
    a = int(ro["actions"][0, 0])
    q = net(ro["obs"][0])[0, a]
    with torch.no_grad():
        a_star = int(net(ro["next_obs"][0])[0].argmax())
        y = 1e4 + 0.9 * tgt(ro["next_obs"][0])[0, a_star]
    raw = torch.nn.functional.huber_loss(q, y)
    raw.backward()
    learner.train(1)
    scale = 10.0 / raw.item()
    assert float(learner.guard.loss_scale) == pytest.approx(scale, rel=1e-5)
    beta1 = learner.optimizer.param_groups[0]["betas"][0]
    for p, ref in zip(module.q_net.parameters(), net.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-9)  # raw gradient
        # adam_step applied raw * scale: after one step exp_avg = (1 - beta1) * applied gradient.
        applied = learner.optimizer.state[p]["exp_avg"].numpy() / (1.0 - beta1)
        np.testing.assert_allclose(applied, ref.grad.numpy() * scale, rtol=1e-4, atol=1e-9)
    m = learner.collect_metrics()
    assert (m["clip_events"], m["skipped"], m["updates"]) == (1.0, 0.0, 1.0)
    assert m["loss_mean"] == pytest.approx(10.0)


def test_grad_collapse_counts_only_after_warmup():
    # capacity 24 -> warmup 0.2 * 24 = 4.8 -> 5 sampled transitions; batch 2: warm after update 3.
    learner = build_learner(batch=2, collapse_multiplier=1e9)  # threshold lr * 1e9: always "collapsed"
    learner.replay.add(rollout())
    learner.train(2)
    assert learner.collect_metrics()["collapse_events"] == 0.0
    learner.train(4)  # updates 3..6; the first counted is update 4 (6 transitions sampled before it)
    assert learner.collect_metrics()["collapse_events"] == 3.0

    halting = build_learner(batch=2, collapse_multiplier=1e9, collapse_policy="halt")
    halting.replay.add(rollout())
    halting.train(5)
    with pytest.raises(TrainingHalted, match="grad_collapse check at update 3"):
        halting.collect_metrics()


def test_divergence_past_patience_halts_with_message():
    learner = build_learner(divergence_threshold=1e-9, divergence_patience=3)  # every batch "diverges"
    learner.replay.add(rollout())
    learner.train(2)
    m = learner.collect_metrics()
    assert (m["divergence_count"], m["divergence_flag"]) == (2.0, 0.0)
    learner.train(1)
    with pytest.raises(TrainingHalted) as info:
        learner.collect_metrics()
    err = info.value
    assert (err.check, err.update_index) == ("divergence", 2)
    assert np.isfinite(err.loss) and err.grad_norm > 0 and err.q_min <= err.q_max
    msg = str(err)
    assert msg.startswith("training halted by the divergence check at update 2: loss=")
    assert "grad_norm=" in msg and "Q range=[" in msg


def test_divergence_warn_policy_logs_and_rearms(caplog):
    learner = build_learner(divergence_threshold=1e-9, divergence_patience=2, divergence_policy="warn")
    learner.replay.add(rollout())
    learner.train(3)
    with caplog.at_level(logging.WARNING):
        m = learner.collect_metrics()
    assert m["divergence_flag"] == 1.0
    assert "guard warning from the divergence check at update 1" in caplog.text
    assert learner.collect_metrics()["divergence_flag"] == 0.0


def test_settings_validation_names_the_field():
    with pytest.raises(ValueError, match="loss must be one of"):
        LearnerSettings(loss="l1")
    with pytest.raises(ValueError, match="divergence_policy"):
        LearnerSettings(divergence_policy="ignore")
    with pytest.raises(ValueError, match="replay_capacity"):
        LearnerSettings(replay_capacity=0)
    for bad in (0, 1025, 2.0):
        with pytest.raises(ValueError, match=r"updates_per_graph must be an int in \[1, 1024\]"):
            LearnerSettings(updates_per_graph=bad)
    with pytest.raises(ValueError, match="lr must be a float"):
        LearnerSettings(lr=[[0, 1e-3], [100, 1e-4]])
    cfg = DQNConfig().learners(learner_config_dict={"zerosync": {"replay_capcity": 10}})
    with pytest.raises(ValueError, match="replay_capcity"):
        LearnerSettings.from_config(cfg)
    cfg = DQNConfig().learners(learner_config_dict={"zerosync": {"gamma": 0.5}})
    with pytest.raises(ValueError, match="DQNConfig"):
        LearnerSettings.from_config(cfg)
    with pytest.raises(ValueError, match="grad_clip_by"):
        LearnerSettings.from_config(DQNConfig().training(grad_clip_by="norm"))
    s = LearnerSettings.from_config(DQNConfig().training(lr=2e-3, gamma=0.5, td_error_loss_fn="mse"))
    assert (s.lr, s.gamma, s.loss, s.collapse_threshold) == (2e-3, 0.5, "mse", 2e-3)
    with pytest.raises(ValueError, match="lr must be a float"):
        build_learner_with_schedule()


def build_learner_with_schedule():
    cfg = (
        DQNConfig()
        .training(lr=[[0, 1e-3], [1000, 1e-4]])
        .rl_module(rl_module_spec=make_module_spec(action_mode="routed", hidden=[8]))
        .learners(learner_class=ZeroSyncDQNTorchLearner)
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(5))}
    return cfg.build_learner(spaces=spaces)


def test_record_takes_q_of_a_bound_shape_without_a_copy():
    learner = build_learner(batch=8)
    learner.replay.add(rollout())
    learner.train(1)  # binds Q stats for [8, 45]
    guard = learner.guard
    q = torch.randn(8, 45)
    q[3, 7] = 50.0
    before = guard.qagg.clone()
    guard.record(q)  # stats of this Q (not of a stale static copy) reach the aggregate
    max_, count = QAGG.offset("max"), QAGG.offset("count")
    assert float(guard.qagg[max_]) == 50.0 and float(guard.qagg[count]) == float(before[count]) + 1.0
    with pytest.raises(ValueError, match="bound with bind_q"):
        guard.record(torch.randn(7, 45))
    with pytest.raises(ValueError, match="contiguous float32"):
        guard.record(torch.randn(45, 8).t())
    with pytest.raises(ValueError, match="contiguous float32"):
        guard.record(q.double())


@pytest.mark.parametrize("mode", ["flat", "routed"])
def test_td_loss_update_equals_the_torch_loss_update(mode, monkeypatch):
    """The td_loss path (loss and dL/dQ from the kernel, backward from the whole double-Q output)
    gives the torch-loss path's update bit for bit on the CPU twins."""
    fused, plain = build_learner(mode=mode), build_learner(mode=mode)
    plain.module.set_state(fused.module.get_state())
    assert fused.td_kernel and fused.mlp_kernel
    fused.mlp_kernel = False  # torch's forward and autograd's backward from dL/dQ
    plain.td_kernel = False
    assert not plain.mlp_kernel
    n = 5 if mode == "routed" else 45
    for learner in (fused, plain):
        learner.replay.add(rollout(n_actions=n))
    roots = []
    real_backward = torch.autograd.backward
    monkeypatch.setattr(torch.autograd, "backward",
                        lambda t, *args, **kw: (roots.append(tuple(t.shape)), real_backward(t, *args, **kw))[1])
    fused.train(3)
    monkeypatch.undo()
    assert roots == [(16, n)] * 3  # [2B, A]: the whole cat([obs, next_obs]) forward, no split backward
    plain.train(3)
    for a, b in zip(fused.params, plain.params):
        assert torch.equal(a, b)
    mf, mp = fused.collect_metrics(), plain.collect_metrics()
    for key in ("loss_mean", "grad_norm_mean", "q_mean", "q_max", "q_min"):
        assert mf[key] == mp[key], key


@pytest.mark.parametrize("mode,layernorm", [("flat", False), ("routed", False), ("routed", True)])
def test_linear_kernels_update_matches_autograd(mode, layernorm):
    """The linear kernels' forward and backward (torch twins on CPU) give autograd's update: the raw
    gradients of the first update in .grad (flat slots), parameters and guard metrics after a few
    updates, to float32 rounding (the twins sum the bias gradient over B rows, autograd over 2B)."""
    kern, auto = build_learner(mode=mode, layernorm=layernorm), build_learner(mode=mode, layernorm=layernorm)
    auto.module.set_state(kern.module.get_state())
    auto.mlp_kernel = False
    assert kern.mlp_kernel and not auto.mlp_kernel
    n = 5 if mode == "routed" else 45
    for learner in (kern, auto):
        learner.replay.add(rollout(n_actions=n))
        learner.train(1)
    for a, b in zip(kern.params, auto.params):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)
    assert any(float(p.grad.abs().max()) > 0 for p in kern.params)
    for learner in (kern, auto):
        learner.train(4)
    for a, b in zip(kern.params, auto.params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    mk, ma = kern.collect_metrics(), auto.collect_metrics()
    for key in ("loss_mean", "grad_norm_mean", "q_mean", "q_max", "q_min"):
        assert mk[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), key


def test_linear_kernels_refuse_what_they_do_not_cover():
    dueling = build_learner(mode="flat")
    with pytest.raises(ValueError, match="td_kernel is off"):
        dueling.td_kernel = False
        dueling.mlp_kernel = True
    for zs, match in (({"compile": True}, "learner.compile"), ({"tf32": True}, "learner.tf32")):
        learner = build_learner(mode="flat", **zs)
        assert not learner.mlp_kernel
        with pytest.raises(ValueError, match=match):
            learner.mlp_kernel = True
