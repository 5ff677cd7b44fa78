"""Regularization knobs: LayerNorm and dropout in the Q network, decoupled weight decay (AdamW in adam_step).

CPU only. The AdamW tests check the zero-sync guarantee: a guarded (non-finite) step leaves the
parameters and all optimizer moments bit-identical, weight decay included.
"""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.columns import Columns

from rl_zerosync.learner import LearnerSettings, ZeroSyncDQNTorchLearner
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
from rl_zerosync.config.settings import SettingsError, from_dict, to_rllib_config

from learner_helpers import OBS_DIM, rollout, snapshot  # noqa: E402
OBS = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
LR = 1e-3


# ---- module ------------------------------------------------------------------------------------
def build_module(mode: str = "flat", **cfg) -> ZeroSyncQModule:
    spec = make_module_spec(action_mode=mode, hidden=cfg.pop("hidden", [16, 8]), observation_space=OBS, **cfg)
    module = spec.build()
    module.make_target_networks()
    return module


def train_batch(b: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {Columns.OBS: torch.randn(b, OBS_DIM, generator=g), Columns.NEXT_OBS: torch.randn(b, OBS_DIM, generator=g)}


def test_default_state_dict_layout_unchanged():
    """layernorm=False, dropout=0: exactly the plain Linear+ReLU stack (old checkpoints load)."""
    m = build_module("routed", dueling=True)
    assert [type(x) for x in m.q_net.torso] == [torch.nn.Linear, torch.nn.ReLU] * 2
    keys = [k for k in m.state_dict() if k.startswith("q_net.")]
    assert keys == [
        "q_net.torso.0.weight", "q_net.torso.0.bias", "q_net.torso.2.weight", "q_net.torso.2.bias",
        "q_net.head.weight", "q_net.head.bias",
    ]
    # Dropout adds no module: a dropout module has the same keys and loads with strict=True.
    assert [k for k in build_module("routed", dueling=True, dropout=0.3).state_dict()] == list(m.state_dict())
    d = build_module("routed", dueling=True, dropout=0.3)
    d.load_state_dict(m.state_dict(), strict=True)
    obs = torch.randn(4, OBS_DIM)
    assert torch.equal(d.q_values(obs), m.q_values(obs))


@pytest.mark.parametrize("mode,n_out", [("routed", 5), ("flat", 45), ("branching", 11)])
def test_layernorm_present_and_forward(mode, n_out):
    m = build_module(mode, layernorm=True)
    kinds = [type(x) for x in m.q_net.torso]
    assert kinds == [torch.nn.Linear, torch.nn.LayerNorm, torch.nn.ReLU] * 2
    assert m.uses_layernorm and m.q_net.layernorm
    for ln in (x for x in m.q_net.torso if isinstance(x, torch.nn.LayerNorm)):  # non-trivial affine
        torch.nn.init.normal_(ln.weight)
        torch.nn.init.normal_(ln.bias)
    obs = torch.randn(7, OBS_DIM)
    q = m.q_values(obs)
    assert q.shape == (7, n_out)
    # By hand: Linear -> layer_norm -> ReLU per hidden layer, then the head (non-dueling for routed/flat).
    x = obs
    layers = list(m.q_net.torso)
    for lin, ln in ((layers[0], layers[1]), (layers[3], layers[4])):
        x = torch.relu(F.layer_norm(lin(x), ln.normalized_shape, ln.weight, ln.bias, ln.eps))
    raw = m.q_net.head(x)
    if mode != "branching":
        torch.testing.assert_close(q, raw.detach())
    out = m.forward_train(train_batch())
    key = BRANCH_QF_PREDS if mode == "branching" else QF_PREDS
    got = torch.cat(out[key], dim=1) if mode == "branching" else out[key]
    assert got.shape == (6, n_out)
    # The target copy has the LayerNorms too (matching parameter lists for the target update).
    assert [type(x) for x in m.target_q_net.torso] == kinds
    absent = build_module(mode)
    assert not any(isinstance(x, torch.nn.LayerNorm) for x in absent.q_net.torso)


@pytest.fixture()
def one_thread():
    """One intra-op thread for the block: the test compares, bit for bit, rows of a 2B-row matmul with
    the same rows of a B-row one, which holds when both sum in the same order (with more threads
    the BLAS may split the two batch sizes differently)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("mode", ["flat", "branching"])
def test_dropout_only_in_train_mode_online_current_obs(mode, one_thread):
    torch.manual_seed(0)
    m = build_module(mode, dropout=0.5, hidden=[64, 64])
    assert [type(x) for x in m.q_net.torso] == [torch.nn.Linear, torch.nn.ReLU] * 2
    assert m.dropout == 0.5 and m.q_net.dropout == 0.5
    branching = mode == "branching"
    k_cur, k_next, k_tgt = (
        (BRANCH_QF_PREDS, BRANCH_QF_NEXT_PREDS, BRANCH_QF_TARGET_NEXT_PREDS) if branching
        else (QF_PREDS, QF_NEXT_PREDS, QF_TARGET_NEXT_PREDS)
    )

    def get(out, key):
        return torch.cat(out[key], dim=1) if branching else out[key]

    batch = train_batch()
    assert m.training  # a freshly built module (and the learner's copy) is in train mode
    a, b = m.forward_train(batch), m.forward_train(batch)
    assert not torch.equal(get(a, k_cur), get(b, k_cur))  # dropout masks differ
    # Deterministic even in train mode: target, double-Q next-obs pick, acting forwards.
    assert torch.equal(get(a, k_next), get(b, k_next))
    assert torch.equal(get(a, k_tgt), get(b, k_tgt))
    obs = batch[Columns.OBS]
    assert torch.equal(m.q_values(obs), m.q_values(obs))
    assert torch.equal(m.forward_inference({Columns.OBS: obs})[Columns.ACTIONS],
                       m.forward_inference({Columns.OBS: obs})[Columns.ACTIONS])
    assert torch.equal(m.compute_q_values({Columns.OBS: obs})[QF_PREDS], m.q_values(obs))
    assert torch.equal(m.forward_target({Columns.OBS: obs})[QF_PREDS], m.target_q_net(obs))

    # RLlib's TorchRLModule.forward_train always switches to train mode (and forward_inference /
    # forward_exploration to eval mode); the module's own _forward_train follows self.training.
    m.eval()
    c, d = m._forward_train(batch), m._forward_train(batch)
    assert torch.equal(get(c, k_cur), get(d, k_cur))
    assert torch.equal(get(c, k_cur), m.q_values(obs))
    assert torch.equal(get(c, k_next), get(a, k_next))
    assert torch.equal(get(c, k_tgt), get(a, k_tgt))
    # Eval mode of a dropout net == the same weights without dropout.
    plain = build_module(mode, hidden=[64, 64])
    plain.load_state_dict(m.state_dict())
    torch.testing.assert_close(get(plain.forward_train(batch), k_cur), get(c, k_cur), rtol=0, atol=1e-6)
    e = m.forward_train(batch)  # back in train mode: dropout again
    assert m.training and not torch.equal(get(e, k_cur), get(c, k_cur))

    # Gradients flow through the dropped-out forward only.
    m.train()
    m.zero_grad()
    get(m.forward_train(batch), k_cur).sum().backward()
    assert all(p.grad is not None for p in m.q_net.parameters())
    assert all(p.grad is None for p in m.target_q_net.parameters())


def test_dropout_without_double_q():
    m = build_module("routed", dropout=0.5, hidden=[64], double_q=False)
    out = m.forward_train(train_batch())
    assert QF_NEXT_PREDS not in out and out[QF_PREDS].shape == (6, 5)


@pytest.mark.parametrize(
    "cfg,needle",
    [
        ({"layernorm": "yes"}, r"model_config\['layernorm'\] must be a bool"),
        ({"layernorm": 1}, r"model_config\['layernorm'\] must be a bool"),
        ({"dropout": 1.0}, r"model_config\['dropout'\] must be a float in \[0, 1\)"),
        ({"dropout": -0.1}, r"model_config\['dropout'\]"),
        ({"dropout": True}, r"model_config\['dropout'\]"),
        ({"dropout": "0.1"}, r"model_config\['dropout'\]"),
    ],
)
def test_module_validation_names_the_key(cfg, needle):
    with pytest.raises(ValueError, match=needle):
        build_module("routed", **cfg)


# ---- settings ----------------------------------------------------------------------------------
def test_settings_carry_the_knobs_to_module_and_learner():
    s = from_dict(
        {"model": {"layernorm": True, "dropout": 0.25, "hidden": [8]}, "algo": {"weight_decay": 0.01, "lr": 2e-3}},
        source="t.yaml",
    )
    config = to_rllib_config(s)
    assert config.model_config["layernorm"] is True
    assert config.model_config["dropout"] == 0.25
    assert config.learner_config_dict["zerosync"]["weight_decay"] == 0.01
    ls = LearnerSettings.from_config(config)
    assert (ls.weight_decay, ls.lr) == (0.01, 2e-3)
    spec = config.get_rl_module_spec(env=None, spaces={"default_policy": (OBS, gym.spaces.Discrete(5))})
    module = spec.build()
    assert module.uses_layernorm and module.dropout == 0.25
    assert [type(x) for x in module.q_net.torso] == [torch.nn.Linear, torch.nn.LayerNorm, torch.nn.ReLU]

    default = to_rllib_config(from_dict({}, source="d.yaml"))
    assert default.model_config["layernorm"] is False and default.model_config["dropout"] == 0.0
    assert LearnerSettings.from_config(default).weight_decay == 0.0


def test_settings_weight_decay_errors():
    with pytest.raises(SettingsError, match="algo.weight_decay: must be >= 0"):
        from_dict({"algo": {"weight_decay": -1.0}}, source="t.yaml")
    with pytest.raises(SettingsError, match="model.dropout"):
        from_dict({"model": {"dropout": 1.0}}, source="t.yaml")
    with pytest.raises(SettingsError, match="learner.weight_decay: conflicts with algo.weight_decay"):
        from_dict({"algo": {"weight_decay": 0.1}, "learner": {"weight_decay": 0.2}}, source="t.yaml")
    with pytest.raises(SettingsError, match="learner.weight_decay: must be >= 0"):
        from_dict({"learner": {"weight_decay": -0.5}}, source="t.yaml")
    with pytest.raises(ValueError, match="weight_decay must be a finite number"):
        LearnerSettings(weight_decay=float("nan"))
    # The learner section alone also works (the drop-in spelling); algo wins when both agree.
    s = from_dict({"learner": {"weight_decay": 0.05}}, source="t.yaml")
    assert to_rllib_config(s).learner_config_dict["zerosync"]["weight_decay"] == 0.05


# ---- learner: AdamW and the device-side skip ----------------------------------------------------
def build_learner(*, weight_decay: float = 0.0, mode: str = "flat", batch: int = 8, **model) -> ZeroSyncDQNTorchLearner:
    n = 5 if mode == "routed" else 45
    zs = {"replay_capacity": 24}
    if weight_decay:
        zs["weight_decay"] = weight_decay
    cfg = (
        DQNConfig()
        .training(lr=LR, gamma=0.9, n_step=1, grad_clip=40.0, train_batch_size_per_learner=batch,
                  target_network_update_freq=1000)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[16, 16], **model))
        .learners(learner_class=ZeroSyncDQNTorchLearner, learner_config_dict={"zerosync": zs})
    )
    return cfg.build_learner(spaces={"default_policy": (OBS, gym.spaces.Discrete(n))})


MOMENTS = ("step", "exp_avg", "exp_avg_sq")


def assert_bit_identical(before, after):
    for a, b in zip(before[0], after[0]):
        assert torch.equal(a, b)
    assert before[1].keys() == after[1].keys() and before[1]
    for k in before[1]:
        for name in MOMENTS:
            assert torch.equal(before[1][k][name], after[1][k][name]), (k, name)


def assert_flat(learner):
    """Parameters and the optimizer's moments are views of the flat buffers adam_step steps."""
    flat = learner.flat_adam
    for p in learner.params:
        st = learner.optimizer.state[p]
        for t, buf in ((p, flat.flat_params), (st["exp_avg"], flat.exp_avg), (st["exp_avg_sq"], flat.exp_avg_sq)):
            assert t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
        assert st["step"].data_ptr() == flat.step_count.data_ptr()


def test_zero_weight_decay_keeps_adam():
    learner = build_learner()
    opt = learner.optimizer
    assert type(opt) is torch.optim.Adam  # not AdamW (a subclass of Adam in torch >= 2.x)
    group = opt.param_groups[0]
    assert group["weight_decay"] == 0 and group["lr"] == LR
    assert_flat(learner)


def test_weight_decay_builds_adamw_on_the_flat_buffers():
    learner = build_learner(weight_decay=0.05)
    opt = learner.optimizer
    assert type(opt) is torch.optim.AdamW
    group = opt.param_groups[0]
    assert group["weight_decay"] == 0.05 and group["lr"] == LR
    assert group["decoupled_weight_decay"]
    assert len(opt.param_groups) == 1
    assert len(learner.params) == len(list(learner.module["default_policy"].q_net.parameters()))
    assert_flat(learner)


def applied_grads(learner):
    """The last update's gradients as adam_step applied them: times the guard's loss scale and the clip."""
    g = learner.guard
    ls, gn, clip = float(g.loss_scale), float(g.grad_norm), learner.settings.grad_clip
    scale = ls * min(1.0, clip / (gn * ls + 1e-6)) if clip is not None else ls
    return [p.grad.detach() * scale for p in learner.params]


def reference_step(before, grads, *, weight_decay: float, decoupled: bool):
    """One unfused, single-tensor Adam(W) step from ``before`` (params, state) with ``grads``."""
    params = [p.clone().requires_grad_(True) for p in before[0]]
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls(params, lr=LR, weight_decay=weight_decay, foreach=False)
    # The learner's parameters share one step count; torch's reference Adam steps each its own.
    state = {k: {**v, "step": v["step"].clone()} for k, v in copy.deepcopy(before[1]).items()}
    opt.load_state_dict({"state": state,
                         "param_groups": [{**opt.param_groups[0], "params": list(range(len(params)))}]})
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    return [p.detach() for p in params], opt.state_dict()["state"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("mode,model", [("flat", {}), ("branching", {"layernorm": True, "dropout": 0.1})])
def test_adamw_guarded_step_is_skipped_bit_identically(bad, mode, model):
    wd = 10.0  # large, so lr * wd * p (1% of p) is far above the tolerance of the reference check
    learner = build_learner(weight_decay=wd, mode=mode, **model)
    learner.replay.add(rollout())
    learner.train(3)
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (3.0, 0.0)
    before = snapshot(learner)
    assert all(float(s["step"]) == 3.0 for s in before[1].values())

    learner.replay.add(rollout(reward=bad))  # overwrites all 24 rows: every batch is non-finite
    learner.train(2)
    after_skip = snapshot(learner)
    assert_bit_identical(before, after_skip)  # params, exp_avg, exp_avg_sq, step: no decay either
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (2.0, 2.0)

    # A good update after the skips moves everything, with the decoupled decay applied.
    learner.replay.add(rollout(seed=1))
    learner.train(1)
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (1.0, 0.0)
    after = snapshot(learner)
    assert any(not torch.equal(a, b) for a, b in zip(before[0], after[0]))
    for k in before[1]:
        assert float(after[1][k]["step"]) == 4.0
        assert not torch.equal(before[1][k]["exp_avg"], after[1][k]["exp_avg"])
        assert not torch.equal(before[1][k]["exp_avg_sq"], after[1][k]["exp_avg_sq"])
    grads = applied_grads(learner)
    want, want_state = reference_step(before, grads, weight_decay=wd, decoupled=True)
    for got, ref in zip(after[0], want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    for k in before[1]:
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(after[1][k][name], want_state[k][name], rtol=1e-5, atol=1e-8)
    # Without the decay the step would land elsewhere: p_adam - p_adamw == lr * wd * p_before.
    no_decay, _ = reference_step(before, grads, weight_decay=0.0, decoupled=True)
    for p0, got, nd in zip(before[0], after[0], no_decay):
        torch.testing.assert_close(nd - got, LR * wd * p0, rtol=1e-3, atol=1e-6)
    assert any(float((LR * wd * p0).abs().max()) > 1e-3 for p0 in before[0])


def test_zero_weight_decay_matches_plain_adam_reference():
    """Default runs: Adam, no decay term (the reference Adam step reproduces the update)."""
    learner = build_learner()
    learner.replay.add(rollout())
    learner.train(2)
    before = snapshot(learner)
    learner.train(1)
    after = snapshot(learner)
    grads = applied_grads(learner)
    want, _ = reference_step(before, grads, weight_decay=0.0, decoupled=False)
    for got, ref in zip(after[0], want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-7)


def test_adamw_state_round_trip():
    a = build_learner(weight_decay=0.05, layernorm=True, dropout=0.2)
    a.replay.add(rollout())
    a.train(3)
    a.collect_metrics()
    b = build_learner(weight_decay=0.05, layernorm=True, dropout=0.2)
    b.set_state(a.get_state())
    assert type(b.optimizer) is torch.optim.AdamW and b.optimizer.param_groups[0]["weight_decay"] == 0.05
    assert_flat(b)
    assert_bit_identical(snapshot(a), snapshot(b))
    assert b.module["default_policy"].training  # the learner's module trains with dropout on
