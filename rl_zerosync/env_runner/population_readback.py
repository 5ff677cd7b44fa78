"""One readback for the rollouts of every member of a population.

Each member's :class:`~rl_zerosync.env_runner.gpu_env_runner.GPUEnvRunner` launches its rollout
(``start_device_sample``: enqueued, no wait); then :meth:`PopulationReadback.read` copies every
rollout's leading part (actions, rewards, flags, episode and env metrics) into one device staging
buffer, reads it to pinned host memory with one non-blocking copy and one event wait, and hands each
member its row (``finish_device_sample(host_leading=row)``). P rollouts, one host wait: the device
runs them back to back instead of stopping for a read after each. With the members' envs stepped
together (:class:`~rl_zerosync.env_runner.population_rollout.PopulationRollout`) the rollouts'
leading parts are the members' rows of its one buffer, and the device runs one rollout for all.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from rl_zerosync.kernels import AsyncReadback

ROW_ALIGN = 256
"""Each member's row starts at a multiple of this many bytes (the packed columns' own alignment)."""


class PopulationReadback:
    """The staging buffer and the one readback of P same-shaped rollouts (see the module docstring).

    Args:
        rollouts: Every member's :class:`~rl_zerosync.env_runner.rollout.DeviceRollout`, one device,
            one layout (same envs, steps and action mode).
    """

    def __init__(self, rollouts: Sequence) -> None:
        if not rollouts:
            raise ValueError("PopulationReadback: no rollouts")
        self.rollouts = list(rollouts)
        sizes = {ro.leading_nbytes for ro in self.rollouts}
        devices = {ro.device for ro in self.rollouts}
        if len(sizes) != 1 or len(devices) != 1:
            raise ValueError(f"PopulationReadback: the members' rollouts differ (leading bytes {sorted(sizes)}, "
                             f"devices {sorted(map(str, devices))}); one population shares one layout")
        self.nbytes = sizes.pop()
        self.row_bytes = -(-self.nbytes // ROW_ALIGN) * ROW_ALIGN
        self.device = devices.pop()
        self._staging = torch.zeros((len(self.rollouts), self.row_bytes), dtype=torch.uint8, device=self.device)
        self._readback = AsyncReadback(self._staging.numel(), torch.uint8, self.device)

    def read(self) -> List[torch.Tensor]:
        """After every member's rollout was launched: the one readback; member k's host bytes (row k)."""
        rows = self._staging[:, : self.nbytes]
        torch._foreach_copy_(list(rows.unbind(0)), [ro.leading_bytes for ro in self.rollouts])
        self._readback.start(self._staging.view(-1))
        host = self._readback.wait()  # host read: the one readback of the population's rollouts
        return [host[k * self.row_bytes: k * self.row_bytes + self.nbytes] for k in range(len(self.rollouts))]
