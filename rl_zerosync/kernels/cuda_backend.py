"""The CUDA backend: the ``.cu`` kernels launched through their thin wrappers.

Same methods and semantics as :class:`~rl_zerosync.kernels.reference.TorchKernels`. Call
:meth:`CudaKernels.warmup` (or launch each kernel once) before ``torch.cuda.graph`` capture: the
first launch on a device compiles with NVRTC and loads the module.
"""
from __future__ import annotations

from typing import Union

import torch

from rl_zerosync.kernels import divergence as _divergence
from rl_zerosync.kernels import guard as _guard
from rl_zerosync.kernels import qstats as _qstats
from rl_zerosync.kernels import route as _route
from rl_zerosync.kernels import select as _select
from rl_zerosync.kernels.api import Kernels
from rl_zerosync.kernels.compile import compile_all


class CudaKernels(Kernels):
    """NVRTC-compiled kernels on one CUDA device, launched on torch's current stream."""

    backend = "cuda"

    def __init__(self, device: Union[str, torch.device]) -> None:
        super().__init__(device)
        if self.device.type != "cuda" or self.device.index is None:
            raise ValueError(f"device must be an indexed CUDA device, got {self.device}")
        self.index = self.device.index

    def warmup(self) -> None:
        """Compile and load every kernel on this device now."""
        compile_all(self.index)

    def guard_check(self, loss, grad_norm, warmup_done, flags, clipped_loss, loss_scale, found_inf, *,
                    loss_clip, collapse_threshold) -> None:
        _guard.guard_check(self.index, loss, grad_norm, warmup_done, flags, clipped_loss, loss_scale, found_inf,
                           loss_clip=loss_clip, collapse_threshold=collapse_threshold)

    def guard_accumulate(self, clipped_loss, grad_norm, flags, accum) -> None:
        _guard.guard_accumulate(self.index, clipped_loss, grad_norm, flags, accum)

    def guard_record(self, clipped_loss, loss, grad_norm, flags, qstats_out, div_flag, accum, qagg, records,
                     update_index) -> None:
        _guard.guard_record(self.index, clipped_loss, loss, grad_norm, flags, qstats_out, div_flag, accum, qagg,
                            records, update_index)

    def qstats(self, q, out, scratch) -> None:
        _qstats.qstats(self.index, q, out, scratch)

    def divergence(self, qstats_out, counter, flag, *, threshold, patience) -> None:
        _divergence.divergence(self.index, qstats_out, counter, flag, threshold=threshold, patience=patience)

    def epsilon_greedy(self, q, epsilon, step, actions, *, seed) -> None:
        _select.epsilon_greedy(self.index, q, epsilon, step, actions, seed=seed)

    def branching_select(self, q_exposure, q_order, q_urgency, epsilon, step, actions, *, seed) -> None:
        _select.branching_select(self.index, q_exposure, q_order, q_urgency, epsilon, step, actions, seed=seed)

    def route(self, exposure, spread, median_spread, vol, median_vol, actions, *, wide=1.5, high_vol=1.5,
              low_vol=0.75) -> None:
        _route.route(self.index, exposure, spread, median_spread, vol, median_vol, actions,
                     wide=wide, high_vol=high_vol, low_vol=low_vol)
