"""Target-network update as one foreach launch over all (online, target) parameter pairs."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import nn

__all__ = ["TargetUpdater"]


class TargetUpdater:
    """Hard copy (``tau == 1``) or Polyak ``target += tau * (online - target)`` (``tau < 1``).

    Issued by the host (no host read): every ``target_network_update_freq`` updates in ``train()``.
    Floating-point buffers are copied like parameters (lerped when ``tau < 1``); others are copied.

    Args:
        pairs: ``(online_net, target_net)`` modules, as ``TargetNetworkAPI.get_target_network_pairs``.
        tau: Update weight in (0, 1].
    """

    def __init__(self, *, pairs: Sequence[Tuple[nn.Module, nn.Module]], tau: float) -> None:
        if not 0.0 < float(tau) <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau!r}")
        self.tau = float(tau)
        self.online: List[torch.Tensor] = []
        self.target: List[torch.Tensor] = []
        self.online_other: List[torch.Tensor] = []
        self.target_other: List[torch.Tensor] = []
        for online, target in pairs:
            src = list(online.parameters()) + [b for b in online.buffers() if b.is_floating_point()]
            dst = list(target.parameters()) + [b for b in target.buffers() if b.is_floating_point()]
            if len(src) != len(dst) or any(a.shape != b.shape for a, b in zip(src, dst)):
                raise ValueError("target network pairs must have matching parameter shapes")
            self.online += [t.detach() for t in src]
            self.target += [t.detach() for t in dst]
            self.online_other += [b for b in online.buffers() if not b.is_floating_point()]
            self.target_other += [b for b in target.buffers() if not b.is_floating_point()]

    @torch.no_grad()
    def update(self) -> None:
        """Apply the update (kernel launches only)."""
        if not self.target:
            return
        if self.tau == 1.0:
            torch._foreach_copy_(self.target, self.online)
        else:
            torch._foreach_lerp_(self.target, self.online, self.tau)
        if self.target_other:
            torch._foreach_copy_(self.target_other, self.online_other)
