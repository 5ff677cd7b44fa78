"""TD losses of the three action modes (pure tensor functions; no host read).

Shared definitions (``B`` transitions, importance weights ``w``, bootstrap factor
``d = discount * (1 - terminated)`` with ``discount = gamma**k`` from the replay or
``gamma**n_step`` from RLlib's batch):

* routed / flat (double DQN): ``a* = argmax_a Q_online(s', a)`` (``argmax Q_target`` without
  double-Q); ``y = r + d * Q_target(s', a*)``; ``td = Q(s, a) - y``;
  ``loss = mean_i(w_i * L(td_i))``.
* branching (BDQ, Tavakoli et al. 2018): the factored action ``a = e*9 + o*3 + u`` is split into
  its branches; ``a*_b = argmax Q_online_b(s')`` per branch;
  ``y = r + d * mean_b Q_target_b(s', a*_b)`` (one target shared by the branches);
  ``td_b = Q_b(s, a_b) - y``; ``loss = mean_b mean_i(w_i * L(td_b,i))``; the TD error used for
  priorities is ``mean_b |td_b|``.

``L`` is the Huber loss with delta 1 (``"huber"``) or the squared error (``"mse"``), as RLlib's
``nn.HuberLoss`` / ``nn.MSELoss``. Ties in the argmax go to the lowest index (``torch.argmax``).
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from ray.rllib.core.columns import Columns

from rl_zerosync.actions import BRANCH_SIZES
from rl_zerosync.learner.replay import DISCOUNTS, WEIGHTS
from rl_zerosync.module import (
    BRANCH_QF_NEXT_PREDS,
    BRANCH_QF_PREDS,
    BRANCH_QF_TARGET_NEXT_PREDS,
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
)

__all__ = ["TDLoss", "bootstrap_factor", "td_loss", "joint_branch_q"]


class TDLoss(NamedTuple):
    """Output of :func:`td_loss`."""

    loss: torch.Tensor
    """Scalar (0-d) weighted loss that carries the gradient."""
    td_abs: torch.Tensor
    """|TD error| per transition [B] (detached), for priorities and RLlib's ``td_error``."""
    q: torch.Tensor
    """Detached, contiguous Q [B, A] of the batch's observations for the Q-stats kernel."""


def _elementwise(pred: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    if loss_type == "huber":
        return F.huber_loss(pred, target, reduction="none", delta=1.0)
    return F.mse_loss(pred, target, reduction="none")


def bootstrap_factor(batch: Dict[str, Any], gamma: float) -> torch.Tensor:
    """``discount * (1 - terminated)`` per transition; discount from ``discounts`` or ``gamma**n_step``."""
    term = batch[Columns.TERMINATEDS]
    if DISCOUNTS in batch:
        discount = batch[DISCOUNTS].to(torch.float32)
    elif "n_step" in batch:
        discount = torch.pow(gamma, batch["n_step"].to(torch.float32))
    else:
        discount = torch.full_like(batch[Columns.REWARDS], gamma, dtype=torch.float32)
    return discount * (1.0 - term.to(torch.float32))


def _weights(batch: Dict[str, Any]) -> torch.Tensor:
    w = batch.get(WEIGHTS)
    return torch.ones_like(batch[Columns.REWARDS], dtype=torch.float32) if w is None else w.to(torch.float32)


def _gather(q: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return q.gather(1, idx.long().unsqueeze(1)).squeeze(1)


def joint_branch_q(qs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Q of every factored action, ``(Q_e + Q_o + Q_u) / 3``, as a contiguous [B, 45] tensor."""
    q5, qo, qu = qs
    joint = q5[:, :, None, None] + qo[:, None, :, None] + qu[:, None, None, :]
    return (joint / 3.0).reshape(q5.shape[0], -1)


def td_loss(
    *,
    fwd_out: Dict[str, Any],
    batch: Dict[str, Any],
    branching: bool,
    gamma: float,
    double_q: bool,
    loss_type: str,
) -> TDLoss:
    """Loss, |TD| and Q for stats of one batch (see the module docstring for the formulas)."""
    rewards = batch[Columns.REWARDS].to(torch.float32)
    boot = bootstrap_factor(batch, gamma)
    w = _weights(batch)
    actions = batch[Columns.ACTIONS]
    if not branching:
        q, q_target_next = fwd_out[QF_PREDS], fwd_out[QF_TARGET_NEXT_PREDS]
        q_select = fwd_out[QF_NEXT_PREDS] if double_q else q_target_next
        with torch.no_grad():
            y = rewards + boot * _gather(q_target_next, torch.argmax(q_select, dim=1))
        q_sa = _gather(q, actions)
        loss = torch.mean(w * _elementwise(q_sa, y, loss_type))
        return TDLoss(loss, (q_sa.detach() - y).abs(), q.detach().contiguous())
    qs = fwd_out[BRANCH_QF_PREDS]
    q_target_next = fwd_out[BRANCH_QF_TARGET_NEXT_PREDS]
    q_select = fwd_out[BRANCH_QF_NEXT_PREDS] if double_q else q_target_next
    sub = (actions // (BRANCH_SIZES[1] * BRANCH_SIZES[2]), (actions // BRANCH_SIZES[2]) % BRANCH_SIZES[1],
           actions % BRANCH_SIZES[2])
    with torch.no_grad():
        next_vals = [_gather(qt, torch.argmax(qsel, dim=1)) for qt, qsel in zip(q_target_next, q_select)]
        y = rewards + boot * torch.stack(next_vals, dim=0).mean(dim=0)
    q_sa = [_gather(qb, ab) for qb, ab in zip(qs, sub)]
    losses = [torch.mean(w * _elementwise(qb, y, loss_type)) for qb in q_sa]
    loss = torch.stack(losses).mean()
    td_abs = torch.stack([(qb.detach() - y).abs() for qb in q_sa], dim=0).mean(dim=0)
    return TDLoss(loss, td_abs, joint_branch_q([qb.detach() for qb in qs]))
