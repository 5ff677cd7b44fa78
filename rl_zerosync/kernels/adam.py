"""``adam.cu``: check and launch of ``adam_step`` (twin: ``reference.adam_step``).

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
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32, grid_for, i32, i64, launch, ptr
from rl_zerosync.kernels.validate import expect_finite, expect_rows, expect_tensor, tensor_device

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


def check_adam_step(
    params: torch.Tensor,
    grads: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    found_inf: torch.Tensor,
    loss_scale: torch.Tensor,
    grad_norm: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_clip: Optional[float],
) -> None:
    """Validate the buffers and hyperparameters of ``adam_step`` (four f32[N], N >= 1)."""
    dev = tensor_device("params", params)
    expect_tensor("params", params, dtype=torch.float32, shape=(None,), device=dev)
    n = params.shape[0]
    if n < 1:
        raise ValueError("params must have at least one element, got 0")
    expect_rows("params", n)
    for name, t in (("grads", grads), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        expect_tensor(name, t, dtype=torch.float32, shape=(n,), device=dev)
    for name, t in (("step", step), ("found_inf", found_inf), ("loss_scale", loss_scale), ("grad_norm", grad_norm)):
        expect_tensor(name, t, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("blocks_done", blocks_done, dtype=torch.int32, shape=(1,), device=dev)
    _expect_hyper("lr", lr, minimum=0.0, strict=True)
    _expect_hyper("beta1", beta1, minimum=0.0, below=1.0)
    _expect_hyper("beta2", beta2, minimum=0.0, below=1.0)
    _expect_hyper("eps", eps, minimum=0.0, strict=True)
    _expect_hyper("weight_decay", weight_decay, minimum=0.0)
    if grad_clip is not None:
        _expect_hyper("grad_clip", grad_clip, minimum=0.0, strict=True)
    decay = derived_constants(lr, beta1, beta2, weight_decay)[2]
    if not abs(_as_f32(decay)) < float("inf"):
        raise ValueError(f"weight_decay: 1 - lr * weight_decay must be finite in float32, got {decay!r}")


def adam_step(
    device_index: int,
    params: torch.Tensor,
    grads: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    found_inf: torch.Tensor,
    loss_scale: torch.Tensor,
    grad_norm: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_clip: Optional[float],
) -> None:
    """Enqueue ``zs_adam_step`` (one thread per element; ``blocks_done`` must be 0, and is left 0)."""
    n = params.shape[0]
    c1, c2, decay = derived_constants(lr, beta1, beta2, weight_decay)
    launch(
        SOURCE,
        "zs_adam_step",
        device_index=device_index,
        grid=grid_for(n),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(params), ptr(grads), ptr(exp_avg), ptr(exp_avg_sq), ptr(step), ptr(found_inf), ptr(loss_scale),
              ptr(grad_norm), ptr(blocks_done), i64(n), f32(lr), f32(beta1), f32(beta2), f32(eps), f32(c1),
              f32(c2), f32(decay), f32(0.0 if grad_clip is None else grad_clip), i32(grad_clip is not None)),
    )
