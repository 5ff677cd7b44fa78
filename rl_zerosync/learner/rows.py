"""Moving an object's device buffers into rows of a population's stacked buffers (one place for the check)."""
from __future__ import annotations

from typing import Dict, Sequence

import torch


def move_into_rows(owner: object, rows: Dict[str, torch.Tensor], names: Sequence[str], who: str) -> None:
    """For every buffer attribute ``names`` of ``owner``: check that ``rows[name]`` has its shape, dtype
    and device and is contiguous, copy the buffer's values there and make the row the attribute
    (ValueError naming ``who``, the buffer and what was expected)."""
    if set(rows) != set(names):
        raise ValueError(f"{who}: expected rows for {sorted(names)}, got {sorted(rows)}")
    for name, row in rows.items():
        own = getattr(owner, name)
        if row.shape != own.shape or row.dtype != own.dtype or row.device != own.device:
            raise ValueError(f"{who}: {name} must be {own.dtype} {list(own.shape)} on {own.device}, got "
                             f"{row.dtype} {list(row.shape)} on {row.device}")
        if not row.is_contiguous():
            raise ValueError(f"{who}: {name} must be contiguous")
        row.copy_(own)
        setattr(owner, name, row)
