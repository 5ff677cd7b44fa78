"""Shared argument checks for the kernels' bind-time validation.

A kernel's check is derived from its declaration (``declare.py``: every tensor through
:func:`expect_tensor`) plus its rules, written with these helpers; ``Kernels.bind_<name>`` runs it
once. Every failure is a ValueError naming the argument and what was expected.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from rl_zerosync.kernels.layouts import CHECK, INT32_MAX, RECORD

MAX_ROWS = INT32_MAX
"""Most rows a kernel takes (row indices and RNG element indices are 32-bit)."""

# Aliases of the record layout's sizes (``layouts.CHECK.size`` / ``layouts.RECORD.size``) for
# callers that still import them from here.
GUARD_CHECKS = CHECK.size
GUARD_RECORD_FIELDS = RECORD.size


def expect_tensor(
    name: str,
    t: object,
    *,
    dtype: torch.dtype,
    shape: Sequence[Optional[int]],
    device: Optional[torch.device] = None,
    strided: bool = False,
) -> torch.Tensor:
    """Check that ``t`` is a ``dtype`` tensor of ``shape`` (None = any) on ``device``, contiguous (or, with
    ``strided``, laid out as :func:`expect_strided` says)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on device {device}, got {t.device}")
    if strided:
        expect_strided(name, t)
    elif not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t


def expect_strided(name: str, t: torch.Tensor) -> None:
    """A 1-D view of any positive stride, or a 2-D view of contiguous rows that do not overlap (the
    columns and row blocks of the replay's packed sample rows)."""
    if t.dim() == 1:
        if t.shape[0] > 1 and t.stride(0) < 1:
            raise ValueError(f"{name} must have a positive stride, got {t.stride(0)}")
        return
    cols = t.shape[1]
    if cols > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got strides {list(t.stride())}")
    if t.shape[0] > 1 and t.stride(0) < cols:
        raise ValueError(f"{name} must have a row stride >= {cols}, got strides {list(t.stride())}")


def expect_rows_and_columns(name: str, t: torch.Tensor) -> None:
    """A 2-D tensor with at least one row and one column, and at most :data:`MAX_ROWS` rows."""
    rows, cols = t.shape
    if rows < 1 or cols < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {list(t.shape)}")
    expect_rows(name, rows)


def expect_finite(name: str, value: float, *, minimum: Optional[float] = None, strict: bool = False) -> float:
    """Check that ``value`` is a finite float (``>= minimum``, or ``>`` with ``strict``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite float, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite float, got {value!r}")
    if minimum is not None and (v <= minimum if strict else v < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return v


def tensor_device(name: str, t: object) -> torch.device:
    """The device of ``t`` (the first buffer, which the others must share); ValueError if not a tensor."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t.device


def expect_rows(name: str, rows: int) -> None:
    """Check that a kernel's row count fits :data:`MAX_ROWS`."""
    if rows > MAX_ROWS:
        raise ValueError(f"{name} must have at most {MAX_ROWS} rows, got {rows}")


def _span(t: torch.Tensor) -> tuple:
    """[first, last] byte addresses a tensor's elements occupy."""
    last = sum((d - 1) * st for d, st in zip(t.shape, t.stride()) if d > 0)
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size() - 1


def expect_apart(out_name: str, out: torch.Tensor, **inputs: torch.Tensor) -> None:
    """An output may not share memory with the inputs the same launch reads."""
    lo, hi = _span(out)
    for name, t in inputs.items():
        a, b = _span(t)
        if a <= hi and lo <= b:
            raise ValueError(f"{out_name} must not overlap {name} (the launch reads {name} while it writes "
                             f"{out_name})")
