"""Typed column views carved out of one flat byte buffer.

The rollout columns (and the episode metrics) are written in place into views of a single
preallocated device buffer, so the end of a rollout needs exactly one device->host copy of one
contiguous range. The same layout applied to the pinned host copy gives the host views.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

import torch

ALIGN_BYTES = 256


@dataclass(frozen=True)
class Column:
    """One named typed column: dtype and shape of the whole column."""

    name: str
    dtype: torch.dtype
    shape: Tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes the column occupies."""
        numel = 1
        for s in self.shape:
            numel *= int(s)
        return numel * torch.empty((), dtype=self.dtype).element_size()


class PackedColumns:
    """A flat ``uint8`` buffer holding every column at an aligned offset, with typed views."""

    def __init__(
        self,
        columns: Sequence[Column],
        device: Union[str, torch.device],
        *,
        align: int = ALIGN_BYTES,
    ) -> None:
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise ValueError(f"columns must have unique names, got {names}")
        for c in columns:
            if any(int(s) < 0 for s in c.shape):
                raise ValueError(f"column {c.name!r} has a negative dimension: {c.shape}")
        self.columns: Tuple[Column, ...] = tuple(columns)
        self.offsets: Dict[str, int] = {}
        self.ends: Dict[str, int] = {}
        offset = 0
        for c in self.columns:
            offset = -(-offset // align) * align
            self.offsets[c.name] = offset
            offset += c.nbytes
            self.ends[c.name] = offset
        self.nbytes = offset
        self.device = torch.device(device)
        self.flat = torch.zeros(max(self.nbytes, 1), dtype=torch.uint8, device=self.device)
        self.views: Dict[str, torch.Tensor] = self.views_of(self.flat)

    def end_of(self, name: str) -> int:
        """Byte offset just after column ``name`` (the length of a readback prefix ending there)."""
        return self.ends[name]

    def views_of(
        self, flat: torch.Tensor, names: Optional[Iterable[str]] = None
    ) -> Dict[str, torch.Tensor]:
        """Typed views of the layout on ``flat`` (this buffer, or a host copy of (a prefix of) it).

        ``names``: the columns to view (default: all); each must lie inside ``flat``.
        """
        if flat.dtype != torch.uint8 or flat.dim() != 1:
            raise ValueError(f"flat must be a 1-D uint8 tensor, got {flat.dtype} {tuple(flat.shape)}")
        wanted = set(names) if names is not None else None
        out: Dict[str, torch.Tensor] = {}
        for c in self.columns:
            if wanted is not None and c.name not in wanted:
                continue
            start, end = self.offsets[c.name], self.ends[c.name]
            if end > flat.numel():
                raise ValueError(
                    f"column {c.name!r} ends at byte {end} but flat holds {flat.numel()} bytes"
                )
            out[c.name] = flat[start:end].view(c.dtype).view(c.shape)
        return out
