"""Kernel declarations: a kernel's arguments written once, its check and its CUDA launch derived from them.

A :class:`Kernel` declares one kernel beside its ``.cu``: its name, its source, its arguments in the
order of its Python signature (its twin's in ``reference.py``), its rules and its CUDA launches. It
gives :attr:`Kernel.signature`, the bind-time check ``kernel.check(*args, **kwargs)`` (ValueError
naming the argument) and the launch ``kernel.launch(device_index, *args, **kwargs)``.

Arguments:

* :class:`Tensor` ``(name, dtype, shape)``: ``shape`` holds sizes (int), dimension names (str: the
  first argument checked with that name sets its size, every later one must match it), sizes
  computed from the dimensions set so far (a function of ``b``, below) and None (any size). The
  tensor is contiguous; ``strided=True``: a 1-D view of any positive stride or a 2-D view of
  contiguous rows (:func:`~rl_zerosync.kernels.validate.expect_strided`). ``optional=True``: None is
  accepted. ``or_float=True``: a finite host float is accepted instead. CUDA gets its pointer (NULL
  for None), then its row stride as ``long long`` (0 for None) if strided; with ``or_float``, a
  pointer (NULL for a float) then a ``float`` (the float, 0 for a tensor).
* :class:`Value` ``(name, cast)``: keyword-only unless ``positional=True`` (the GEMM's ``jobs``),
  with an optional ``default``. The declaration does not check it (a rule does); CUDA gets
  ``cast(value)`` (``launch.f32`` / ``i32`` / ``i64`` / ``u32``, or any function of the value).

The check: the ``lead=True`` tensors first (they set the dimensions the others are read against),
then the others in order; the first tensor checked sets the device every other one must be on. A
rule ``rule(b)`` runs right after its argument (``Tensor(..., rule=f)``) or after all of them
(``Kernel(..., rule=f)``); ``b`` has the arguments, the dimensions known so far and ``device`` as
attributes. Rules say what a declaration cannot: value ranges, sizes computed from dimensions,
overlaps.

The launch: one :class:`Launch` ``(kernel, grid, block, args)`` per CUDA entry point, run in order.
``args`` is the entry point's parameter list: an argument's name (converted as above), ``"DIM:i64"``,
``"DIM:i32"`` or ``"DIM:u32"`` (a dimension), or a function ``f(b)`` returning a value or a tuple of
values; None passes every argument in declared order. ``grid`` is an int or a function ``grid(b)``;
None from it means nothing to launch. A kernel whose launch is planned in Python (the GEMMs, the
layer-norm jobs) gives a function ``cuda(device_index, b)`` instead.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, NULL, f32, grid_for, i32, i64, launch, ptr, u32
from rl_zerosync.kernels.validate import expect_finite, expect_tensor

Bound = SimpleNamespace
"""One call's arguments as attributes, plus (checked so far, or at launch) its dimensions and ``device``."""
Rule = Callable[[Bound], None]
REQUIRED = inspect.Parameter.empty
DIM_CASTS = {"i32": i32, "i64": i64, "u32": u32}
"""The types a dimension can be passed as (``"B:i64"``)."""


@dataclass(frozen=True)
class Tensor:
    """A tensor argument (see the module docstring)."""

    name: str
    dtype: torch.dtype
    shape: Tuple[Union[int, str, Callable[[Bound], int], None], ...]
    optional: bool = False
    strided: bool = False
    or_float: bool = False
    lead: bool = False
    rule: Optional[Rule] = None

    def check(self, b: Bound) -> None:
        t = getattr(b, self.name)
        if t is None and self.optional:
            return
        if self.or_float and not isinstance(t, torch.Tensor):
            expect_finite(self.name, t)
            return
        want = [getattr(b, s, None) if isinstance(s, str) else s(b) if callable(s) else s for s in self.shape]
        expect_tensor(self.name, t, dtype=self.dtype, shape=want, device=b.device, strided=self.strided)
        for s, size in zip(self.shape, t.shape):
            if isinstance(s, str) and getattr(b, s, None) is None:
                setattr(b, s, int(size))
        if b.device is None:
            b.device = t.device

    def cuda(self, t: Any) -> tuple:
        if self.or_float:
            return (ptr(t), f32(0.0)) if isinstance(t, torch.Tensor) else (NULL, f32(t))
        if t is None and self.optional:
            return (NULL, i64(0)) if self.strided else (NULL,)
        return (ptr(t), i64(t.stride(0))) if self.strided else (ptr(t),)


@dataclass(frozen=True)
class Value:
    """A host value (or, ``positional=True``, a structure such as ``jobs``) that rules check."""

    name: str
    cast: Optional[Callable[[Any], Any]] = None
    default: Any = REQUIRED
    positional: bool = False
    rule: Optional[Rule] = None
    lead = False

    def check(self, b: Bound) -> None:
        pass

    def cuda(self, value: Any) -> tuple:
        return (self.cast(value),)


Item = Union[str, Callable[[Bound], Any]]


@dataclass(frozen=True)
class Launch:
    """One CUDA launch of a kernel: entry point, grid (int or ``grid(b)``), block, parameter list."""

    kernel: str
    grid: Union[int, Callable[[Bound], Optional[int]]]
    block: int
    args: Optional[Sequence[Item]] = None


def per_row(dim: str, block: int = ELEMENTWISE_BLOCK) -> Callable[[Bound], Optional[int]]:
    """The grid of one thread per row of dimension ``dim`` in blocks of ``block``; no launch for 0 rows."""
    return lambda b: grid_for(getattr(b, dim), block) if getattr(b, dim) else None


def _as_tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


class Kernel:
    """One kernel's declaration (see the module docstring).

    Args:
        name: The kernel's name (its twin's, its ``Kernels`` method's).
        source: The CUDA source of its entry points.
        args: Its :class:`Tensor` and :class:`Value` arguments, in signature order.
        cuda: Its :class:`Launch` (or a tuple of them, run in order), or ``cuda(device_index, b)``.
        rule: Runs after every argument is checked.
    """

    def __init__(self, name: str, source: CudaSource, args: Sequence[Union[Tensor, Value]], *,
                 cuda: Union[Launch, Tuple[Launch, ...], Callable[[int, Bound], None]],
                 rule: Optional[Rule] = None) -> None:
        self.name, self.source, self.args, self.rule = name, source, tuple(args), rule
        self._by_name = {a.name: a for a in self.args}
        if len(self._by_name) != len(self.args) or "device" in self._by_name:
            raise ValueError(f"{name}: argument names must be unique and not 'device'")
        self._order = [a for a in self.args if a.lead] + [a for a in self.args if not a.lead]
        self._positional = tuple(a.name for a in self.args if isinstance(a, Tensor) or a.positional)
        self._defaults = {a.name: a.default for a in self.args if isinstance(a, Value) and a.default is not REQUIRED}
        self._dims = {}  # dimension -> (argument, axis) that gives its size at launch
        for a in self._order:
            for axis, s in enumerate(a.shape if isinstance(a, Tensor) else ()):
                if isinstance(s, str) and not (a.optional or a.or_float):
                    self._dims.setdefault(s, (a.name, axis))
        named = {s for a in self.args if isinstance(a, Tensor) for s in a.shape if isinstance(s, str)}
        if named - set(self._dims) or named & set(self._by_name):
            raise ValueError(f"{name}: dimensions {sorted(named)} must each be in a required tensor, and no "
                             f"argument's name")
        self._compiled: dict = {}  # cuda_args' items, compiled once
        if callable(cuda):
            self._custom, self._launches = cuda, ()
        else:
            self._custom = None
            specs = cuda if isinstance(cuda, tuple) else (cuda,)
            bad = [s.kernel for s in specs if s.kernel not in source.kernels]
            if bad:
                raise ValueError(f"{name}: {bad} are not entry points of {source.filename}")
            self._launches = tuple((s, [self._item(i) for i in (s.args or [a.name for a in self.args])])
                                   for s in specs)
        kinds = inspect.Parameter
        params = [kinds(a.name, kinds.POSITIONAL_OR_KEYWORD if a.name in self._positional else kinds.KEYWORD_ONLY,
                        default=self._defaults.get(a.name, REQUIRED)) for a in self.args]
        self.signature = inspect.Signature(params)
        """The kernel's Python signature (its twin's)."""

        def check(*args: Any, **kwargs: Any) -> None:
            self._check(self._bind(args, kwargs))

        def launch_(device_index: int, *args: Any, **kwargs: Any) -> None:
            self._run(device_index, self._bind(args, kwargs))

        check.__signature__ = self.signature
        check.__doc__ = f"Validate the arguments of ``{name}`` (ValueError naming the bad one)."
        launch_.__signature__ = self.signature.replace(
            parameters=[kinds("device_index", kinds.POSITIONAL_OR_KEYWORD), *params])
        launch_.__doc__ = f"Enqueue ``{name}`` on CUDA device ``device_index`` (no check, no host sync)."
        for fn, what in ((check, "check"), (launch_, "launch")):
            fn.__name__ = fn.__qualname__ = f"{name}.{what}"
        self.check: Callable[..., None] = check
        self.launch: Callable[..., None] = launch_

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, {self.source.filename!r}, {self.signature})"

    def cuda_args(self, b: Bound, *items: Item) -> list:
        """The CuPy arguments of ``items`` (a :class:`Launch`'s ``args``) for a call bound to ``b``, for a
        launch planned in Python."""
        compiled = self._compiled.get(items)
        if compiled is None:
            compiled = self._compiled[items] = [self._item(i) for i in items]
        return [v for item in compiled for v in item(b)]

    def _item(self, item: Item) -> Callable[[Bound], tuple]:
        """One entry of a launch's parameter list as ``b -> tuple of CuPy arguments``."""
        if callable(item):
            return lambda b: _as_tuple(item(b))
        arg = self._by_name.get(item)
        if isinstance(arg, Value):
            if arg.cast is None:
                raise ValueError(f"{self.name}: {item} has no cast, so it cannot be a CUDA argument")
            cast = arg.cast
            return lambda b: (cast(getattr(b, item)),)
        if arg is not None:
            if not (arg.optional or arg.strided or arg.or_float):  # the common case, without the branches
                return lambda b: (ptr(getattr(b, item)),)
            return lambda b: arg.cuda(getattr(b, item))
        dim, _, kind = item.partition(":")
        if dim not in self._dims or kind not in DIM_CASTS:
            raise ValueError(f"{self.name}: {item!r} is neither an argument nor a dimension as one of "
                             f"{list(DIM_CASTS)}")
        cast = DIM_CASTS[kind]
        return lambda b: (cast(getattr(b, dim)),)

    def _bind(self, args: tuple, kwargs: dict) -> Bound:
        """The arguments by name, as a call of :attr:`signature` binds them (TypeError as Python's)."""
        if len(args) > len(self._positional):
            raise TypeError(f"{self.name}() takes {len(self._positional)} positional arguments but "
                            f"{len(args)} were given")
        bound = dict(zip(self._positional, args))
        for key in kwargs:
            if key not in self._by_name:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {key!r}")
            if key in bound:
                raise TypeError(f"{self.name}() got multiple values for argument {key!r}")
        bound.update(kwargs)
        if len(bound) < len(self.args):
            bound = {**self._defaults, **bound}
            if len(bound) < len(self.args):
                missing = [a.name for a in self.args if a.name not in bound]
                raise TypeError(f"{self.name}() missing required arguments: {missing}")
        return SimpleNamespace(**bound)

    def _check(self, b: Bound) -> None:
        b.device = None
        for arg in self._order:
            arg.check(b)
            if arg.rule is not None:
                arg.rule(b)
        if self.rule is not None:
            self.rule(b)

    def _run(self, device_index: int, b: Bound) -> None:
        for dim, (name, axis) in self._dims.items():
            setattr(b, dim, getattr(b, name).shape[axis])
        if self._custom is not None:
            self._custom(device_index, b)
            return
        for spec, items in self._launches:
            grid = spec.grid(b) if callable(spec.grid) else spec.grid
            if grid is not None:
                launch(self.source, spec.kernel, device_index=device_index, grid=grid, block=spec.block,
                       args=[v for item in items for v in item(b)])
