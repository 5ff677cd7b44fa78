"""Bind-time validation of kernel buffers (shapes, dtypes, devices, options).

The kernel launches themselves check nothing; call the matching ``bind_*`` once when the buffers are
created (``Kernels.bind_*`` does it and returns a zero-argument launcher). Every failure is a
ValueError naming the argument and what was expected.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from rl_zerosync.kernels.rng import seed_key

QSTATS_BLOCK = 256
"""Threads per block of the Q-stats pass 1 (one row per thread, grid-stride)."""
QSTATS_MAX_BLOCKS = 1024
"""Most pass-1 blocks; pass 2 reduces one partial per block."""
QSTATS_FIELDS = 5
"""Partials per pass-1 block: min row-max, max row-max, sum row-max, sum of Q, non-finite count."""
MAX_ROWS = 2**31 - 1
GUARD_CHECKS = 3
"""Rows of ``guard_record``'s first-trigger records: nonfinite, grad collapse, divergence."""
GUARD_RECORD_FIELDS = 6
"""Fields of one record row: seen, update index, loss, grad norm, q min, q max."""


def qstats_num_blocks(num_rows: int) -> int:
    """Pass-1 grid size for ``num_rows`` rows."""
    return max(1, min(QSTATS_MAX_BLOCKS, -(-int(num_rows) // QSTATS_BLOCK)))


def qstats_scratch_numel(num_rows: int) -> int:
    """Length of the f32 scratch buffer that ``qstats`` needs for ``num_rows`` rows."""
    if int(num_rows) < 1:
        raise ValueError(f"qstats: num_rows must be >= 1, got {num_rows}")
    return QSTATS_FIELDS * qstats_num_blocks(num_rows)


def check_tensor(
    name: str,
    t: object,
    *,
    dtype: torch.dtype,
    shape: Sequence[Optional[int]],
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Check that ``t`` is a contiguous ``dtype`` tensor of ``shape`` (None = any) on ``device``."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on device {device}, got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t


def _finite(name: str, value: float, *, minimum: Optional[float] = None, strict: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite float, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite float, got {value!r}")
    if minimum is not None and (v <= minimum if strict else v < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return v


def _device(t: object, name: str) -> torch.device:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t.device


def bind_guard_check(
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    warmup_done: Union[torch.Tensor, float],
    flags: torch.Tensor,
    clipped_loss: torch.Tensor,
    loss_scale: torch.Tensor,
    found_inf: torch.Tensor,
    *,
    loss_clip: float,
    collapse_threshold: float,
) -> None:
    """Validate the buffers and options of ``guard_check``."""
    dev = _device(loss, "loss")
    for name, t in (("loss", loss), ("grad_norm", grad_norm), ("clipped_loss", clipped_loss),
                    ("loss_scale", loss_scale), ("found_inf", found_inf)):
        check_tensor(name, t, dtype=torch.float32, shape=(1,), device=dev)
    if isinstance(warmup_done, torch.Tensor):
        check_tensor("warmup_done", warmup_done, dtype=torch.float32, shape=(1,), device=dev)
    else:
        _finite("warmup_done", warmup_done)
    check_tensor("flags", flags, dtype=torch.int32, shape=(3,), device=dev)
    _finite("loss_clip", loss_clip, minimum=0.0, strict=True)
    _finite("collapse_threshold", collapse_threshold, minimum=0.0)


def bind_guard_accumulate(
    clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Validate the buffers of ``guard_accumulate``."""
    dev = _device(clipped_loss, "clipped_loss")
    check_tensor("clipped_loss", clipped_loss, dtype=torch.float32, shape=(1,), device=dev)
    check_tensor("grad_norm", grad_norm, dtype=torch.float32, shape=(1,), device=dev)
    check_tensor("flags", flags, dtype=torch.int32, shape=(3,), device=dev)
    check_tensor("accum", accum, dtype=torch.float64, shape=(6,), device=dev)


def bind_guard_record(
    clipped_loss: torch.Tensor,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    flags: torch.Tensor,
    qstats_out: torch.Tensor,
    div_flag: torch.Tensor,
    accum: torch.Tensor,
    qagg: torch.Tensor,
    records: torch.Tensor,
    update_index: torch.Tensor,
) -> None:
    """Validate the buffers of ``guard_record``."""
    dev = _device(clipped_loss, "clipped_loss")
    for name, t in (("clipped_loss", clipped_loss), ("loss", loss), ("grad_norm", grad_norm)):
        check_tensor(name, t, dtype=torch.float32, shape=(1,), device=dev)
    check_tensor("flags", flags, dtype=torch.int32, shape=(3,), device=dev)
    check_tensor("qstats_out", qstats_out, dtype=torch.float32, shape=(5,), device=dev)
    check_tensor("div_flag", div_flag, dtype=torch.int32, shape=(1,), device=dev)
    check_tensor("accum", accum, dtype=torch.float64, shape=(6,), device=dev)
    check_tensor("qagg", qagg, dtype=torch.float64, shape=(5,), device=dev)
    check_tensor("records", records, dtype=torch.float64, shape=(GUARD_CHECKS, GUARD_RECORD_FIELDS), device=dev)
    check_tensor("update_index", update_index, dtype=torch.float64, shape=(1,), device=dev)


def bind_qstats(q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Validate the buffers of ``qstats`` (q f32[B, A] with B, A >= 1)."""
    dev = _device(q, "q")
    check_tensor("q", q, dtype=torch.float32, shape=(None, None), device=dev)
    b, a = q.shape
    if b < 1 or a < 1:
        raise ValueError(f"q must have at least one row and one column, got shape {list(q.shape)}")
    if b > MAX_ROWS:
        raise ValueError(f"q must have at most {MAX_ROWS} rows, got {b}")
    check_tensor("out", out, dtype=torch.float32, shape=(5,), device=dev)
    check_tensor("scratch", scratch, dtype=torch.float32, shape=(None,), device=dev)
    need = qstats_scratch_numel(b)
    if scratch.numel() < need:
        raise ValueError(f"scratch must have at least qstats_scratch_numel({b}) = {need} elements, "
                         f"got {scratch.numel()}")


def bind_divergence(
    qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: float, patience: int
) -> None:
    """Validate the buffers and options of ``divergence``."""
    dev = _device(qstats_out, "qstats_out")
    check_tensor("qstats_out", qstats_out, dtype=torch.float32, shape=(5,), device=dev)
    check_tensor("counter", counter, dtype=torch.int32, shape=(1,), device=dev)
    check_tensor("flag", flag, dtype=torch.int32, shape=(1,), device=dev)
    _finite("threshold", threshold, minimum=0.0)
    if isinstance(patience, bool) or not isinstance(patience, int) or not 1 <= patience <= MAX_ROWS:
        raise ValueError(f"patience must be an int in [1, 2**31 - 1], got {patience!r}")


def _check_select_common(
    epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, n: int, dev: torch.device, seed: int
) -> None:
    check_tensor("epsilon", epsilon, dtype=torch.float32, shape=(1,), device=dev)
    check_tensor("step", step, dtype=torch.int64, shape=(1,), device=dev)
    check_tensor("actions", actions, dtype=torch.int64, shape=(n,), device=dev)
    if n > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows are supported, got {n}")
    seed_key(seed)


def bind_epsilon_greedy(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *, seed: int
) -> None:
    """Validate the buffers of ``epsilon_greedy`` (q f32[N, A], A >= 1, N >= 0)."""
    dev = _device(q, "q")
    check_tensor("q", q, dtype=torch.float32, shape=(None, None), device=dev)
    if q.shape[1] < 1:
        raise ValueError(f"q must have at least one action column, got shape {list(q.shape)}")
    _check_select_common(epsilon, step, actions, q.shape[0], dev, seed)


def bind_branching_select(
    q_exposure: torch.Tensor,
    q_order: torch.Tensor,
    q_urgency: torch.Tensor,
    epsilon: torch.Tensor,
    step: torch.Tensor,
    actions: torch.Tensor,
    *,
    seed: int,
) -> None:
    """Validate the buffers of ``branching_select`` (f32[N, 5], [N, 3], [N, 3])."""
    dev = _device(q_exposure, "q_exposure")
    check_tensor("q_exposure", q_exposure, dtype=torch.float32, shape=(None, 5), device=dev)
    n = q_exposure.shape[0]
    check_tensor("q_order", q_order, dtype=torch.float32, shape=(n, 3), device=dev)
    check_tensor("q_urgency", q_urgency, dtype=torch.float32, shape=(n, 3), device=dev)
    _check_select_common(epsilon, step, actions, n, dev, seed)


def bind_route(
    exposure: torch.Tensor,
    spread: torch.Tensor,
    median_spread: torch.Tensor,
    vol: torch.Tensor,
    median_vol: torch.Tensor,
    actions: torch.Tensor,
    *,
    wide: float = 1.5,
    high_vol: float = 1.5,
    low_vol: float = 0.75,
) -> None:
    """Validate the buffers and thresholds of ``route``."""
    dev = _device(exposure, "exposure")
    check_tensor("exposure", exposure, dtype=torch.int64, shape=(None,), device=dev)
    n = exposure.shape[0]
    if n > MAX_ROWS:
        raise ValueError(f"exposure must have at most {MAX_ROWS} rows, got {n}")
    for name, t in (("spread", spread), ("median_spread", median_spread), ("vol", vol),
                    ("median_vol", median_vol)):
        check_tensor(name, t, dtype=torch.float32, shape=(n,), device=dev)
    check_tensor("actions", actions, dtype=torch.int64, shape=(n,), device=dev)
    _finite("wide", wide)
    _finite("high_vol", high_vol)
    _finite("low_vol", low_vol)
