"""``guard.cu``: declarations of ``guard_check``, ``guard_accumulate`` and ``guard_record``.

Twins: ``reference.guard_check`` / ``guard_accumulate`` / ``guard_record``. The buffers follow the
layouts of ``layouts.py`` (:data:`FLAGS`, :data:`ACCUM`, :data:`QSTATS`, :data:`QAGG`, records
``[CHECK.size, RECORD.size]``); one thread does the work (``grid=SCALAR_GRID, block=SCALAR_BLOCK``).
``guard_check``'s ``warmup_done`` is a device f32[1] or a host float.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import SCALAR_BLOCK, SCALAR_GRID, f32
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, QAGG, QSTATS, RECORD
from rl_zerosync.kernels.validate import expect_finite

SOURCE = CudaSource("guard.cu", ("zs_guard_check", "zs_guard_accumulate", "zs_guard_record"))


def _check_options(b: Bound) -> None:
    expect_finite("loss_clip", b.loss_clip, minimum=0.0, strict=True)
    expect_finite("collapse_threshold", b.collapse_threshold, minimum=0.0)


guard_check = Kernel("guard_check", SOURCE, (
    Tensor("loss", torch.float32, (1,)),
    Tensor("grad_norm", torch.float32, (1,)),
    Tensor("warmup_done", torch.float32, (1,), or_float=True),
    Tensor("flags", torch.int32, (FLAGS.size,)),
    Tensor("clipped_loss", torch.float32, (1,)),
    Tensor("loss_scale", torch.float32, (1,)),
    Tensor("found_inf", torch.float32, (1,)),
    Value("loss_clip", f32),
    Value("collapse_threshold", f32),
), rule=_check_options, cuda=Launch("zs_guard_check", SCALAR_GRID, SCALAR_BLOCK))

guard_accumulate = Kernel("guard_accumulate", SOURCE, (
    Tensor("clipped_loss", torch.float32, (1,)),
    Tensor("grad_norm", torch.float32, (1,)),
    Tensor("flags", torch.int32, (FLAGS.size,)),
    Tensor("accum", torch.float64, (ACCUM.size,)),
), cuda=Launch("zs_guard_accumulate", SCALAR_GRID, SCALAR_BLOCK))

guard_record = Kernel("guard_record", SOURCE, (
    Tensor("clipped_loss", torch.float32, (1,)),
    Tensor("loss", torch.float32, (1,)),
    Tensor("grad_norm", torch.float32, (1,)),
    Tensor("flags", torch.int32, (FLAGS.size,)),
    Tensor("qstats_out", torch.float32, (QSTATS.size,)),
    Tensor("div_flag", torch.int32, (1,)),
    Tensor("accum", torch.float64, (ACCUM.size,)),
    Tensor("qagg", torch.float64, (QAGG.size,)),
    Tensor("records", torch.float64, (CHECK.size, RECORD.size)),
    Tensor("update_index", torch.float64, (1,)),
), cuda=Launch("zs_guard_record", SCALAR_GRID, SCALAR_BLOCK))
