"""P members' plain Q networks with their weights stacked with a member dimension: one batched forward
of all members (:func:`rl_zerosync.kernels.member_ops.mlp_forward`), for a population's rollouts
(:mod:`rl_zerosync.env_runner.population_rollout`) and validation walks
(:mod:`rl_zerosync.evaluation.member_policies`)."""
from __future__ import annotations

from typing import List

import torch

from rl_zerosync.kernels import member_ops as M
from rl_zerosync.learner.mlp import mlp_kernel_blocker, plain_layers


class StackedQ:
    """P members' plain Q networks (Linear/[LayerNorm]/ReLU of routed / flat actions) with their weights
    copied into buffers with a member dimension, for one batched forward of all members.

    Args:
        modules: One inference module per member (the shapes agree).
    """

    def __init__(self, modules: List[torch.nn.Module]) -> None:
        reason = mlp_kernel_blocker(modules[0], target=False)
        if reason is not None:
            raise ValueError(f"a batched forward of the members cannot run this module: {reason}")
        self.layers: List[M.MemberLayer] = []
        self._stacked: List[tuple] = []  # (stacked [P, ...] buffer, the members' own tensors)
        per_member = [plain_layers(m.q_net) for m in modules]

        def stack(get) -> torch.Tensor:
            own = [get(layers) for layers in per_member]
            buf = torch.stack([t.detach() for t in own])
            self._stacked.append((buf, own))
            return buf

        for i, (lin, norm) in enumerate(per_member[0]):
            self.layers.append(M.MemberLayer(
                stack(lambda ls, i=i: ls[i][0].weight), stack(lambda ls, i=i: ls[i][0].bias),
                None if norm is None else stack(lambda ls, i=i: ls[i][1].weight),
                None if norm is None else stack(lambda ls, i=i: ls[i][1].bias),
                1e-5 if norm is None else float(norm.eps)))

    def refresh(self) -> None:
        """After the members' weights were loaded into their modules: copy them into the stacked buffers
        (in place, so a captured graph stays valid)."""
        with torch.no_grad():
            for buf, own in self._stacked:
                torch._foreach_copy_(list(buf.unbind(0)), [t.detach() for t in own])

    def q_values(self, x: torch.Tensor) -> torch.Tensor:
        """``x [P, E, D]`` -> every member's Q values ``[P, E, A]`` (member k's network on ``x[k]``)."""
        with torch.inference_mode():
            return M.mlp_forward(self.layers, x)
