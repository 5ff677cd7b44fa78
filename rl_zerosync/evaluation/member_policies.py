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
from rl_zerosync.kernels import member_ops as M
from rl_zerosync.learner.mlp import mlp_kernel_blocker, plain_layers


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
        self._layers: List[M.MemberLayer] = []
        self._stacked: List[tuple] = []  # (stacked [P, ...] buffer, the members' own tensors)
        if self.batched:
            reason = mlp_kernel_blocker(self.modules[0], target=False)
            if reason is not None:
                raise ValueError(f"MemberPolicies: a batched forward cannot run this module: {reason}")
            per_member = [plain_layers(m.q_net) for m in self.modules]

            def stack(get) -> torch.Tensor:
                own = [get(layers) for layers in per_member]
                buf = torch.stack([t.detach() for t in own])
                self._stacked.append((buf, own))
                return buf

            for i, (lin, norm) in enumerate(per_member[0]):
                self._layers.append(M.MemberLayer(
                    stack(lambda ls, i=i: ls[i][0].weight), stack(lambda ls, i=i: ls[i][0].bias),
                    None if norm is None else stack(lambda ls, i=i: ls[i][1].weight),
                    None if norm is None else stack(lambda ls, i=i: ls[i][1].bias),
                    1e-5 if norm is None else float(norm.eps)))

    def refresh(self) -> None:
        """After the members' weights were loaded into their modules: copy them into the stacked buffers
        (in place, so a captured walk graph stays valid)."""
        with torch.no_grad():
            for buf, own in self._stacked:
                torch._foreach_copy_(list(buf.unbind(0)), [t.detach() for t in own])

    def act(self, obs: torch.Tensor, state: WalkState) -> torch.Tensor:
        """Greedy actions of every replica's envs: ``obs [P * E_k, D]`` -> ``[P * E_k]``."""
        x = obs.view(self.size, -1, obs.shape[-1])
        with torch.inference_mode():
            if self.batched:
                q = M.mlp_forward(self._layers, x)
                q = q.reshape(-1, q.shape[-1])
            else:
                q = torch.cat([module.q_values(x[k]) for k, module in enumerate(self.modules)])
            return self.modules[0].greedy_actions(q)
