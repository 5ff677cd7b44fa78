"""ZeroSyncQModule: heads of the three modes, targets, exploration, validation."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns

from rl_zerosync.module import (
    BRANCH_QF_NEXT_PREDS,
    BRANCH_QF_PREDS,
    BRANCH_QF_TARGET_NEXT_PREDS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
    ZeroSyncQModule,
    make_module_spec,
)

OBS = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)


def build(mode: str, *, inference_only: bool = False, **cfg) -> ZeroSyncQModule:
    spec = make_module_spec(action_mode=mode, hidden=cfg.pop("hidden", [16, 8]), observation_space=OBS, **cfg)
    spec.inference_only = inference_only
    module = spec.build()
    if not inference_only:
        module.make_target_networks()
    return module


def manual_head(module: ZeroSyncQModule, obs: torch.Tensor) -> torch.Tensor:
    """Torso + head by hand, with numpy, float64."""
    x = obs.double().numpy()
    for layer in module.q_net.torso:
        if isinstance(layer, torch.nn.Linear):
            x = np.maximum(x @ layer.weight.double().detach().numpy().T + layer.bias.double().detach().numpy(), 0)
    head = module.q_net.head
    return x @ head.weight.double().detach().numpy().T + head.bias.double().detach().numpy()


@pytest.mark.parametrize("mode,n", [("routed", 5), ("flat", 45)])
def test_plain_and_dueling_heads(mode, n):
    obs = torch.randn(6, 7)
    plain = build(mode)
    assert plain.q_values(obs).shape == (6, n)
    np.testing.assert_allclose(plain.q_values(obs).numpy(), manual_head(plain, obs), rtol=1e-5, atol=1e-6)
    duel = build(mode, dueling=True)
    raw = manual_head(duel, obs)
    v, a = raw[:, :1], raw[:, 1:]
    np.testing.assert_allclose(duel.q_values(obs).numpy(), v + a - a.mean(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_branching_head_and_greedy():
    m = build("branching")
    obs = torch.randn(9, 7)
    raw = manual_head(m, obs)
    v, adv = raw[:, :1], raw[:, 1:]
    expect = np.concatenate(
        [v + a - a.mean(1, keepdims=True) for a in np.split(adv, [5, 8], axis=1)], axis=1
    )
    q5, qo, qu = m.branch_q(obs)
    assert (q5.shape, qo.shape, qu.shape) == ((9, 5), (9, 3), (9, 3))
    np.testing.assert_allclose(torch.cat([q5, qo, qu], 1).numpy(), expect, rtol=1e-5, atol=1e-6)
    greedy = m.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
    e, o, u = (expect[:, :5].argmax(1), expect[:, 5:8].argmax(1), expect[:, 8:].argmax(1))
    assert greedy.tolist() == (e * 9 + o * 3 + u).tolist()


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_forward_train_keys_and_targets(mode):
    m = build(mode)
    obs, nxt = torch.randn(4, 7), torch.randn(4, 7)
    out = m.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: nxt})
    if mode == "branching":
        assert set(out) == {BRANCH_QF_PREDS, BRANCH_QF_NEXT_PREDS, BRANCH_QF_TARGET_NEXT_PREDS}
        assert [t.shape[1] for t in out[BRANCH_QF_PREDS]] == [5, 3, 3]
        target_next = torch.cat(out[BRANCH_QF_TARGET_NEXT_PREDS], 1)
        online_next = torch.cat(out[BRANCH_QF_NEXT_PREDS], 1)
    else:
        assert set(out) == {QF_PREDS, QF_NEXT_PREDS, QF_TARGET_NEXT_PREDS}
        target_next, online_next = out[QF_TARGET_NEXT_PREDS], out[QF_NEXT_PREDS]
    # Targets start as copies of the online net and carry no gradient.
    torch.testing.assert_close(target_next, online_next.detach())
    assert not target_next.requires_grad
    assert [(a, b) for a, b in m.get_target_network_pairs()] == [(m.q_net, m.target_q_net)]
    no_double = build(mode, double_q=False)
    out = no_double.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: nxt})
    assert QF_NEXT_PREDS not in out and BRANCH_QF_NEXT_PREDS not in out


def test_inference_only_strips_targets():
    learner_copy = build("flat")
    runner_copy = build("flat", inference_only=True)
    assert not hasattr(runner_copy, "target_q_net")
    state = learner_copy.get_state(inference_only=True)
    assert state and not any(k.startswith("_target_q_net") for k in state)
    runner_copy.set_state(state)
    obs = torch.randn(3, 7)
    torch.testing.assert_close(runner_copy.q_values(obs), learner_copy.q_values(obs))


@pytest.mark.parametrize("mode,n", [("routed", 5), ("flat", 45), ("branching", 45)])
def test_exploration_epsilon(mode, n):
    torch.manual_seed(0)
    obs = torch.randn(4000, 7)
    greedy_module = build(mode, epsilon=0.0)
    greedy = greedy_module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
    assert torch.equal(greedy_module.forward_exploration({Columns.OBS: obs}, t=0)[Columns.ACTIONS], greedy)
    # A schedule from 1.0 at t=0 to 0.2 at t=100: at t=100, ~ 0.2 * (n - 1) / n of actions differ.
    sched = build(mode, epsilon=[(0, 1.0), (100, 0.2)])
    sched.load_state_dict(greedy_module.state_dict())
    acts = sched.forward_exploration({Columns.OBS: obs}, t=100)[Columns.ACTIONS]
    frac = (acts != greedy).double().mean().item()
    assert abs(frac - 0.2 * (n - 1) / n) < 0.03
    acts = sched.forward_exploration({Columns.OBS: obs}, t=0)[Columns.ACTIONS]
    assert torch.bincount(acts, minlength=n).min().item() > 0  # epsilon 1: every action occurs
    assert int(acts.max()) < n


def test_validation_errors_name_the_field():
    with pytest.raises(ValueError, match="action_mode"):
        make_module_spec(action_mode="joint")
    with pytest.raises(ValueError, match="Discrete\\(5\\)"):
        make_module_spec(action_mode="routed", observation_space=OBS, action_space=gym.spaces.Discrete(45)).build()
    with pytest.raises(ValueError, match="hidden"):
        make_module_spec(action_mode="flat", hidden=[16, 0], observation_space=OBS).build()
    with pytest.raises(ValueError, match="num_atoms"):
        make_module_spec(action_mode="flat", observation_space=OBS, num_atoms=5).build()
    with pytest.raises(ValueError, match="branch_q"):
        build("flat").branch_q(torch.randn(2, 7))


def test_mode_inferred_from_action_space():
    spec = make_module_spec(action_mode="routed", observation_space=OBS)
    spec.model_config.pop("action_mode")
    assert spec.build().action_mode == "routed"
