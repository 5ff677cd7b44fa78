"""Named layouts of the flat device buffers shared by the kernels, their twins and the guard.

A :class:`Layout` names the fields of a flat buffer in order; each field has an offset and a width
(elements). It is the one description of that memory: the CUDA sources read it as generated
``#define`` lines (``ZS_ACCUM_LOSS_SUM 0`` ..., ``ZS_ACCUM_SIZE 6``; see ``compile.py``), the torch
twins (``reference.py``) and ``learner/training_guard.py`` index it by field name.

Buffers (all 1-D unless said otherwise):

* :data:`FLAGS` i32: the per-update guard decisions written by ``guard_check``.
* :data:`ACCUM` f64: the per-iteration guard accumulator (sums skip non-finite updates).
* :data:`QSTATS` f32: the ``qstats`` output; ``min`` / ``max`` / ``mean`` are of the row-max Q,
  ``all_mean`` the mean of all Q, ``nan_flag`` 1 if any Q is not finite (then the four are NaN).
* :data:`QAGG` f64: :data:`QSTATS` folded over an iteration's updates by ``guard_record``
  (``fmin`` / ``fmax``; the sums and ``count`` take only updates whose Q was all finite).
* :data:`RECORD` f64: one first-trigger record row; :data:`CHECK` names the rows of the records
  buffer ``f64[CHECK.size, RECORD.size]``.
* :data:`PACK` f64: the guard's one-readback-per-iteration buffer (host side only).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple, TypeVar, Union

T = TypeVar("T")

INT32_MAX = 2**31 - 1
"""Largest int32: where the divergence counter saturates (``ZS_INT32_MAX`` in CUDA)."""


class Layout:
    """Ordered named fields of a flat buffer.

    Args:
        prefix: Macro prefix of the generated CUDA defines (``"ZS_ACCUM"``).
        fields: Field names in memory order; ``(name, width)`` for a field wider than one element.
    """

    def __init__(self, prefix: str, fields: Sequence[Union[str, Tuple[str, int]]]) -> None:
        self.prefix = prefix
        self._offsets: Dict[str, int] = {}
        self._widths: Dict[str, int] = {}
        at = 0
        for f in fields:
            name, width = (f, 1) if isinstance(f, str) else f
            if name in self._offsets or name == "size" or not name.isidentifier() or width < 1:
                raise ValueError(f"{prefix}: bad or repeated field {name!r} (width {width})")
            self._offsets[name], self._widths[name] = at, width
            at += width
        self.size = at
        """Elements in the buffer."""
        self.names: Tuple[str, ...] = tuple(self._offsets)
        """Field names in memory order."""

    def __repr__(self) -> str:
        return f"Layout({self.prefix!r}, {list(self.names)})"

    def offset(self, name: str) -> int:
        """Offset of field ``name``."""
        try:
            return self._offsets[name]
        except KeyError:
            raise KeyError(f"{self.prefix} has no field {name!r}; fields: {list(self.names)}") from None

    def span(self, *names: str) -> slice:
        """The slice covering the adjacent fields ``names`` (any order); ValueError if not adjacent."""
        first, *rest = sorted(names, key=self.offset)
        stop = self.offset(first) + self._widths[first]
        for name in rest:
            if self.offset(name) != stop:
                raise ValueError(f"{self.prefix}: fields {list(names)} are not adjacent")
            stop += self._widths[name]
        return slice(self.offset(first), stop)

    def ordered(self, parts: Mapping[str, T]) -> List[T]:
        """The values of ``parts`` (adjacent fields, by name) in memory order, e.g. for ``torch.cat``."""
        self.span(*parts)
        return [parts[name] for name in sorted(parts, key=self.offset)]

    def split(self, values: Sequence[T]) -> Dict[str, Union[T, List[T]]]:
        """Named reads of a host copy of the buffer: field -> value (a list for a wider field)."""
        if len(values) != self.size:
            raise ValueError(f"{self.prefix}: expected {self.size} values, got {len(values)}")
        out: Dict[str, Union[T, List[T]]] = {}
        for name in self.names:
            at, width = self._offsets[name], self._widths[name]
            out[name] = values[at] if width == 1 else list(values[at:at + width])
        return out

    def defines(self) -> Dict[str, int]:
        """CUDA macros: ``{PREFIX}_{FIELD}`` = offset of each field, ``{PREFIX}_SIZE`` = size."""
        out = {f"{self.prefix}_{name.upper()}": at for name, at in self._offsets.items()}
        out[f"{self.prefix}_SIZE"] = self.size
        return out


FLAGS = Layout("ZS_FLAG", ("nonfinite", "loss_clipped", "grad_collapse"))
ACCUM = Layout("ZS_ACCUM", ("loss_sum", "grad_norm_sum", "updates", "nonfinite", "clipped", "collapse"))
QSTATS = Layout("ZS_QSTATS", ("min", "max", "mean", "all_mean", "nan_flag"))
QAGG = Layout("ZS_QAGG", ("min", "max", "mean_sum", "all_mean_sum", "count"))
RECORD = Layout("ZS_RECORD", ("seen", "update_index", "loss", "grad_norm", "q_min", "q_max"))
CHECK = Layout("ZS_CHECK", ("nonfinite", "grad_collapse", "divergence"))
PACK = Layout("ZS_PACK", (("accum", ACCUM.size), ("qagg", QAGG.size), "div_counter", "div_flag",
                          ("records", CHECK.size * RECORD.size), "update_index"))

LAYOUTS = (FLAGS, ACCUM, QSTATS, QAGG, RECORD, CHECK, PACK)
"""Every shared layout (their defines go into every CUDA source)."""
