"""TD losses vs an independent float64 reference, and the learner's gradient vs autograd of it."""
from __future__ import annotations

import copy
import zlib

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.learner.loss import td_loss
from rl_zerosync.module import (
    BRANCH_QF_NEXT_PREDS,
    BRANCH_QF_PREDS,
    BRANCH_QF_TARGET_NEXT_PREDS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
    make_module_spec,
)

B = 11


def huber(x):
    return np.where(np.abs(x) <= 1.0, 0.5 * x * x, np.abs(x) - 0.5)


def reference(q, qn, qt, a, r, disc, term, w, *, branching, double_q, loss):
    """Per-sample loop in float64. q/qn/qt: [B, A] arrays or lists of per-branch arrays."""
    lf = huber if loss == "huber" else (lambda x: x * x)
    per_branch_losses, tds = [], []
    for i in range(len(r)):
        boot = disc[i] * (1.0 - term[i])
        if not branching:
            sel = qn[i] if double_q else qt[i]
            y = r[i] + boot * qt[i][int(np.argmax(sel))]
            td = q[i][a[i]] - y
            per_branch_losses.append([w[i] * lf(td)])
            tds.append(abs(td))
        else:
            sub = (a[i] // 9, (a[i] // 3) % 3, a[i] % 3)
            vals = [qt[b][i][int(np.argmax((qn if double_q else qt)[b][i]))] for b in range(3)]
            y = r[i] + boot * np.mean(vals)
            td_b = [q[b][i][sub[b]] - y for b in range(3)]
            per_branch_losses.append([w[i] * lf(t) for t in td_b])
            tds.append(np.mean(np.abs(td_b)))
    arr = np.array(per_branch_losses)  # [B, branches]
    return arr.mean(axis=0).mean(), np.array(tds)


def random_case(branching: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, 5), (B, 3), (B, 3)] if branching else [(B, 45)]
    def qs():
        return [torch.randn(s, generator=g) * 2 for s in shapes]
    q, qn, qt = qs(), qs(), qs()
    batch = {
        Columns.ACTIONS: torch.randint(0, 45, (B,), generator=g),
        Columns.REWARDS: torch.randn(B, generator=g),
        Columns.TERMINATEDS: torch.rand(B, generator=g) < 0.3,
        "weights": torch.rand(B, generator=g) + 0.5,
    }
    return q, qn, qt, batch


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
@pytest.mark.parametrize("loss", ["huber", "mse"])
@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("discount_col", ["discounts", "n_step"])
def test_td_loss_matches_reference(mode, loss, double_q, discount_col):
    branching = mode == "branching"
    q, qn, qt, batch = random_case(branching, seed=zlib.crc32(repr((mode, loss, double_q, discount_col)).encode()))
    if mode == "routed":
        q, qn, qt = [[x[0][:, :5]] for x in (q, qn, qt)]
        batch[Columns.ACTIONS] = batch[Columns.ACTIONS] % 5
    gamma = 0.93
    n_step = torch.randint(1, 4, (B,))
    if discount_col == "discounts":
        batch["discounts"] = gamma ** n_step.float()
    else:
        batch["n_step"] = n_step
    if branching:
        fwd = {BRANCH_QF_PREDS: tuple(q), BRANCH_QF_NEXT_PREDS: tuple(qn), BRANCH_QF_TARGET_NEXT_PREDS: tuple(qt)}
    else:
        fwd = {QF_PREDS: q[0], QF_NEXT_PREDS: qn[0], QF_TARGET_NEXT_PREDS: qt[0]}
    out = td_loss(fwd_out=fwd, batch=batch, branching=branching, gamma=gamma, double_q=double_q, loss_type=loss)

    np64 = lambda xs: [x.double().numpy() for x in xs]  # noqa: E731
    args = (np64(q), np64(qn), np64(qt)) if branching else (np64(q)[0], np64(qn)[0], np64(qt)[0])
    ref_loss, ref_td = reference(
        *args, batch[Columns.ACTIONS].numpy(), batch[Columns.REWARDS].double().numpy(),
        gamma ** n_step.double().numpy(), batch[Columns.TERMINATEDS].double().numpy(),
        batch["weights"].double().numpy(), branching=branching, double_q=double_q, loss=loss,
    )
    assert out.loss.dim() == 0
    np.testing.assert_allclose(out.loss.item(), ref_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.td_abs.numpy(), ref_td, rtol=1e-5, atol=1e-5)
    assert out.q.is_contiguous() and out.q.shape == (B, 5 if mode == "routed" else 45)
    if branching:  # joint Q of the factored action = mean of its branch values
        a = 2 * 9 + 1 * 3 + 2
        np.testing.assert_allclose(out.q[:, a].numpy(), ((q[0][:, 2] + q[1][:, 1] + q[2][:, 2]) / 3).numpy(),
                                   rtol=1e-6)


def build_learner(mode: str, **zs):
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=2, grad_clip=None, train_batch_size_per_learner=B,
                  target_network_update_freq=1000)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[16, 16]))
        .learners(learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 64, **zs}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (5,), np.float32), gym.spaces.Discrete(n))}
    return cfg.build_learner(spaces=spaces)


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_learner_gradient_matches_float64_autograd(mode):
    """The gradient the learner applies equals autograd of a float64 reference loss."""
    learner = build_learner(mode)
    module = learner.module["default_policy"]
    net64 = copy.deepcopy(module.q_net).double()
    tgt64 = copy.deepcopy(module.target_q_net).double()
    g = torch.Generator().manual_seed(1)
    n = 5 if mode == "routed" else 45
    batch = {
        Columns.OBS: torch.randn(B, 5, generator=g),
        Columns.NEXT_OBS: torch.randn(B, 5, generator=g),
        Columns.ACTIONS: torch.randint(0, n, (B,), generator=g),
        Columns.REWARDS: torch.randn(B, generator=g),
        Columns.TERMINATEDS: torch.rand(B, generator=g) < 0.3,
        "n_step": torch.randint(1, 3, (B,), generator=g),
        "weights": torch.rand(B, generator=g) + 0.5,
    }
    learner.update(batch=MultiAgentBatch({"default_policy": SampleBatch(batch)}, env_steps=B),
                   timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: 0})

    # Independent float64 reference (double DQN, Huber, n-step discount, importance weights).
    a = batch[Columns.ACTIONS]
    boot = 0.9 ** batch["n_step"].double() * (1 - batch[Columns.TERMINATEDS].double())
    q = net64(batch[Columns.OBS].double())
    with torch.no_grad():
        qn, qt = net64(batch[Columns.NEXT_OBS].double()), tgt64(batch[Columns.NEXT_OBS].double())
    splits = [5, 3, 3] if mode == "branching" else [q.shape[1]]
    subs = [a // 9, (a // 3) % 3, a % 3] if mode == "branching" else [a]
    q_b, qn_b, qt_b = (x.split(splits, 1) for x in (q, qn, qt))
    nxt = torch.stack([t.gather(1, o.argmax(1, keepdim=True)).squeeze(1) for t, o in zip(qt_b, qn_b)]).mean(0)
    y = batch[Columns.REWARDS].double() + boot * nxt
    losses = [(batch["weights"].double() * torch.nn.functional.huber_loss(
        qb.gather(1, s.unsqueeze(1)).squeeze(1), y, reduction="none")).mean() for qb, s in zip(q_b, subs)]
    torch.stack(losses).mean().backward()
    for p, p64 in zip(module.q_net.parameters(), net64.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), p64.grad.numpy(), rtol=1e-4, atol=1e-6)


def _loss_and_grads(fwd, batch, branching, loss, **kw):
    leaves = [t for v in fwd.values() for t in (v if isinstance(v, tuple) else (v,)) if t.requires_grad]
    for t in leaves:
        t.grad = None
    out = td_loss(fwd_out=fwd, batch=batch, branching=branching, gamma=0.93, double_q=True, loss_type=loss, **kw)
    out.loss.backward()
    return out, [t.grad.clone() for t in leaves]


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
@pytest.mark.parametrize("loss", ["huber", "mse"])
@pytest.mark.parametrize("b", [11, 13, 256])
def test_batch_without_weights_is_bitwise_weights_of_one(mode, loss, b):
    """No ``weights`` column (uniform replay) gives the very bits of weights = 1: loss, |TD|, gradient."""
    branching = mode == "branching"
    g = torch.Generator().manual_seed(b)
    shapes = [(b, 5), (b, 3), (b, 3)] if branching else [(b, 5 if mode == "routed" else 45)]
    q, qn, qt = ([(torch.randn(s, generator=g) * 3).requires_grad_(i == 0) for s in shapes] for i in range(3))
    fwd = ({BRANCH_QF_PREDS: tuple(q), BRANCH_QF_NEXT_PREDS: tuple(qn), BRANCH_QF_TARGET_NEXT_PREDS: tuple(qt)}
           if branching else {QF_PREDS: q[0], QF_NEXT_PREDS: qn[0], QF_TARGET_NEXT_PREDS: qt[0]})
    batch = {
        Columns.ACTIONS: torch.randint(0, 45 if mode != "routed" else 5, (b,), generator=g),
        Columns.REWARDS: torch.randn(b, generator=g) * 2,
        Columns.TERMINATEDS: torch.rand(b, generator=g) < 0.3,
        "discounts": 0.93 ** torch.randint(1, 4, (b,), generator=g).float(),
    }
    ref, ref_grads = _loss_and_grads(fwd, {**batch, "weights": torch.ones(b)}, branching, loss)
    out, grads = _loss_and_grads(fwd, batch, branching, loss)
    assert torch.equal(out.loss, ref.loss) and torch.equal(out.td_abs, ref.td_abs) and torch.equal(out.q, ref.q)
    for x, y in zip(grads, ref_grads):
        assert torch.equal(x, y)
    # float terminateds take the multiply path: same bootstrap bits as the bool where
    flt, _ = _loss_and_grads(fwd, {**batch, Columns.TERMINATEDS: batch[Columns.TERMINATEDS].float()}, branching, loss)
    assert torch.equal(flt.loss, out.loss) and torch.equal(flt.td_abs, out.td_abs)
    lean, lean_grads = _loss_and_grads(fwd, batch, branching, loss, need_td_abs=False)
    assert lean.td_abs is None and torch.equal(lean.loss, out.loss)
    for x, y in zip(lean_grads, grads):
        assert torch.equal(x, y)
