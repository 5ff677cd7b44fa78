"""``adam.cu``: declaration of ``adam_step`` (twin: ``reference.adam_step``).

One Adam / AdamW step (``torch.optim.Adam`` / ``AdamW`` semantics) over flat f32 buffers, the
gradient scaled by the guard's ``loss_scale`` and a global-norm clip, skipped on the device when
``found_inf`` is set. One thread per element (``grid=grid_for(n), block=ELEMENTWISE_BLOCK``); the
block that finishes last advances ``step`` and resets the ``blocks_done`` counter to 0.

The constants derived from the hyperparameters (``1 - beta1``, ``1 - beta2``, ``1 - lr *
weight_decay``) are computed on the host in double and rounded to float32 once, as torch's
optimizer does; the twin uses the same values.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32, grid_for, i32
from rl_zerosync.kernels.validate import expect_finite, expect_rows

CLIP_EPS = float(np.float32(1e-6))
"""Added to ``grad_norm * loss_scale`` before the clip ratio (``ZS_ADAM_CLIP_EPS`` in CUDA): 1e-6
rounded to float32, so that the generated CUDA literal is exact."""

SOURCE = CudaSource("adam.cu", ("zs_adam_step",), defines={"ZS_ADAM_CLIP_EPS": CLIP_EPS})


def _as_f32(value: float) -> float:
    return float(torch.tensor(float(value), dtype=torch.float32))


def _expect_hyper(name: str, value: float, *, minimum: float, strict: bool = False,
                  below: Optional[float] = None) -> float:
    """``expect_finite`` for a kernel ``float`` argument, whose float32 rounding must be in range too."""
    v = expect_finite(name, value, minimum=minimum, strict=strict)
    v32 = _as_f32(v)
    if not abs(v32) < float("inf"):
        raise ValueError(f"{name} must be finite in float32, got {value!r}")
    if strict and v32 <= minimum:
        raise ValueError(f"{name} must be > {minimum} in float32, got {value!r} (float32 {v32!r})")
    if below is not None and not (v < below and v32 < below):
        raise ValueError(f"{name} must be < {below} in float32, got {value!r} (float32 {v32!r})")
    return v


def derived_constants(lr: float, beta1: float, beta2: float, weight_decay: float) -> tuple[float, float, float]:
    """``(1 - beta1, 1 - beta2, decay)`` in double (the kernel gets them rounded to float32);
    ``decay = 1 - lr * weight_decay``, exactly 1 for plain Adam (``weight_decay == 0``)."""
    decay = 1.0 - lr * weight_decay if weight_decay != 0 else 1.0
    return 1.0 - beta1, 1.0 - beta2, decay


def _check_params(b: Bound) -> None:
    if b.N < 1:
        raise ValueError("params must have at least one element, got 0")
    expect_rows("params", b.N)


def _check_hyperparameters(b: Bound) -> None:
    _expect_hyper("lr", b.lr, minimum=0.0, strict=True)
    _expect_hyper("beta1", b.beta1, minimum=0.0, below=1.0)
    _expect_hyper("beta2", b.beta2, minimum=0.0, below=1.0)
    _expect_hyper("eps", b.eps, minimum=0.0, strict=True)
    _expect_hyper("weight_decay", b.weight_decay, minimum=0.0)
    if b.grad_clip is not None:
        _expect_hyper("grad_clip", b.grad_clip, minimum=0.0, strict=True)
    decay = derived_constants(b.lr, b.beta1, b.beta2, b.weight_decay)[2]
    if not abs(_as_f32(decay)) < float("inf"):
        raise ValueError(f"weight_decay: 1 - lr * weight_decay must be finite in float32, got {decay!r}")


def _derived_args(b: Bound) -> tuple:
    """``c1, c2, decay, clip, use_clip`` of ``zs_adam_step``."""
    c1, c2, decay = derived_constants(b.lr, b.beta1, b.beta2, b.weight_decay)
    return f32(c1), f32(c2), f32(decay), f32(0.0 if b.grad_clip is None else b.grad_clip), i32(b.grad_clip is not None)


adam_step = Kernel("adam_step", SOURCE, (
    Tensor("params", torch.float32, ("N",), rule=_check_params),
    Tensor("grads", torch.float32, ("N",)),
    Tensor("exp_avg", torch.float32, ("N",)),
    Tensor("exp_avg_sq", torch.float32, ("N",)),
    Tensor("step", torch.float32, (1,)),
    Tensor("found_inf", torch.float32, (1,)),
    Tensor("loss_scale", torch.float32, (1,)),
    Tensor("grad_norm", torch.float32, (1,)),
    Tensor("blocks_done", torch.int32, (1,)),
    Value("lr", f32),
    Value("beta1", f32),
    Value("beta2", f32),
    Value("eps", f32),
    Value("weight_decay"),
    Value("grad_clip"),
), rule=_check_hyperparameters, cuda=Launch(
    "zs_adam_step", lambda b: grid_for(b.N), ELEMENTWISE_BLOCK,
    ("params", "grads", "exp_avg", "exp_avg_sq", "step", "found_inf", "loss_scale", "grad_norm", "blocks_done",
     "N:i64", "lr", "beta1", "beta2", "eps", _derived_args),
))
