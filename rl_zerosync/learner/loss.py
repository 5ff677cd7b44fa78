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

A batch without ``weights`` means ``w = 1`` and skips the multiply. For routed / flat the mean is
then taken by the loss op itself (``reduction="mean"``): the loss is the returned scalar, so its
incoming gradient is exactly 1 and the loss op's backward (``(1/B) * dL``) gives the same gradient
bits as ``mean``'s backward followed by ``dL`` with one kernel fewer. Branching keeps ``mean(L)``
(its branch losses get a gradient of 1/3, where the two orders round differently). A bool
``terminateds`` column gives ``d`` with one ``where`` (``d = 0`` where terminated).
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence

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
    td_abs: Optional[torch.Tensor]
    """|TD error| per transition [B] (detached), for priorities and RLlib's ``td_error``; None when
    :func:`td_loss` was called with ``need_td_abs=False``."""
    q: torch.Tensor
    """Detached, contiguous Q [B, A] of the batch's observations for the Q-stats kernel."""


def _elementwise(pred: torch.Tensor, target: torch.Tensor, loss_type: str, reduction: str = "none") -> torch.Tensor:
    if loss_type == "huber":
        return F.huber_loss(pred, target, reduction=reduction, delta=1.0)
    return F.mse_loss(pred, target, reduction=reduction)


def _weighted_mean(
    pred: torch.Tensor, target: torch.Tensor, w: Optional[torch.Tensor], loss_type: str, *, root: bool
) -> torch.Tensor:
    """``mean_i(w_i * L(pred_i, target_i))``; ``w`` None means all ones.

    ``root``: the result is the loss that ``backward()`` starts from (incoming gradient exactly 1),
    so without weights the loss op may reduce itself (see the module docstring).
    """
    if w is None:
        if root:
            return _elementwise(pred, target, loss_type, reduction="mean")
        return torch.mean(_elementwise(pred, target, loss_type))
    return torch.mean(w * _elementwise(pred, target, loss_type))


def bootstrap_factor(batch: Dict[str, Any], gamma: float) -> torch.Tensor:
    """``discount * (1 - terminated)`` per transition; discount from ``discounts`` or ``gamma**n_step``."""
    term = batch[Columns.TERMINATEDS]
    if DISCOUNTS in batch:
        discount = batch[DISCOUNTS].to(torch.float32)
    elif "n_step" in batch:
        discount = torch.pow(gamma, batch["n_step"].to(torch.float32))
    else:
        discount = torch.full_like(batch[Columns.REWARDS], gamma, dtype=torch.float32)
    if term.dtype == torch.bool:
        return torch.where(term, 0.0, discount)  # == discount * (1 - term) for the finite discounts >= 0
    return discount * (1.0 - term.to(torch.float32))


def _weights(batch: Dict[str, Any]) -> Optional[torch.Tensor]:
    """float32 importance weights, or None when the batch has none (all ones)."""
    w = batch.get(WEIGHTS)
    return None if w is None else w.to(torch.float32)


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
    need_td_abs: bool = True,
) -> TDLoss:
    """Loss, |TD| and Q for stats of one batch (see the module docstring for the formulas).

    ``need_td_abs=False`` skips the |TD| kernels (uniform replay does not use them); ``td_abs`` is None then.
    """
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
        loss = _weighted_mean(q_sa, y, w, loss_type, root=True)
        td_abs = (q_sa.detach() - y).abs() if need_td_abs else None
        return TDLoss(loss, td_abs, q.detach().contiguous())
    qs = fwd_out[BRANCH_QF_PREDS]
    q_target_next = fwd_out[BRANCH_QF_TARGET_NEXT_PREDS]
    q_select = fwd_out[BRANCH_QF_NEXT_PREDS] if double_q else q_target_next
    sub = (actions // (BRANCH_SIZES[1] * BRANCH_SIZES[2]), (actions // BRANCH_SIZES[2]) % BRANCH_SIZES[1],
           actions % BRANCH_SIZES[2])
    with torch.no_grad():
        next_vals = [_gather(qt, torch.argmax(qsel, dim=1)) for qt, qsel in zip(q_target_next, q_select)]
        y = rewards + boot * torch.stack(next_vals, dim=0).mean(dim=0)
    q_sa = [_gather(qb, ab) for qb, ab in zip(qs, sub)]
    losses = [_weighted_mean(qb, y, w, loss_type, root=False) for qb in q_sa]
    loss = torch.stack(losses).mean()
    td_abs = torch.stack([(qb.detach() - y).abs() for qb in q_sa], dim=0).mean(dim=0) if need_td_abs else None
    return TDLoss(loss, td_abs, joint_branch_q([qb.detach() for qb in qs]))
