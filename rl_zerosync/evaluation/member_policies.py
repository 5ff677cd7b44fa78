"""The greedy policies of P population members acting on one walk of P replicas.

Replica k of the walk (:class:`~rl_zerosync.evaluation.walk.SegmentWalk` with ``replicas=P`` and
``replica_ids=True``) is member k's: its envs' observations go to member k's Q network. Two ways:

* each member's own module on its replica's rows (``batched=False``): bit for bit the one-member
  validation pass of :meth:`~rl_zerosync.evaluation.validation.Validator.validate`;
* one batched forward of all members (``batched=True``, :func:`rl_zerosync.kernels.member_ops.mlp_forward`
  on the members' weights stacked with a member dimension): the same Q to float32 rounding, one
  GEMM per layer instead of P. Needs the plain Linear/[LayerNorm]/ReLU network of routed / flat actions.
"""
from __future__ import annotations

from typing import List

import torch

from rl_zerosync.evaluation.walk import SegmentWalk, WalkState
from rl_zerosync.learner.stacked_q import StackedQ


class MemberPolicies:
    """P members' inference modules and the ``act`` of their walk (see the module docstring).

    Args:
        modules: One inference module per member (weights loaded by the caller, then :meth:`refresh`).
        walk: The walk of ``len(modules)`` replicas.
        batched: One batched forward of all members (else each member's own).
    """

    def __init__(self, modules: List[torch.nn.Module], walk: SegmentWalk, *, batched: bool) -> None:
        if walk.replicas != len(modules):
            raise ValueError(f"MemberPolicies: the walk has {walk.replicas} replicas for {len(modules)} members")
        self.modules, self.walk, self.size, self.batched = list(modules), walk, len(modules), bool(batched)
        self._stacked = StackedQ(self.modules) if self.batched else None

    def refresh(self) -> None:
        """After the members' weights were loaded into their modules: copy them into the stacked buffers
        (in place, so a captured walk graph stays valid)."""
        if self._stacked is not None:
            self._stacked.refresh()

    def act(self, obs: torch.Tensor, state: WalkState) -> torch.Tensor:
        """Greedy actions of every replica's envs: ``obs [P * E_k, D]`` -> ``[P * E_k]``."""
        x = obs.view(self.size, -1, obs.shape[-1])
        with torch.inference_mode():
            if self._stacked is not None:
                q = self._stacked.q_values(x)
                q = q.reshape(-1, q.shape[-1])
            else:
                q = torch.cat([module.q_values(x[k]) for k, module in enumerate(self.modules)])
            return self.modules[0].greedy_actions(q)
