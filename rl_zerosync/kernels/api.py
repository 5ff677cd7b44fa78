"""The kernel table and the one ``Kernels`` object built from it, for both backends.

:data:`KERNELS` maps each kernel name to a :class:`KernelSpec`: its declaration (a
:class:`~rl_zerosync.kernels.declare.Kernel` in the wrapper module beside its ``.cu``: arguments,
rules, CUDA launches) and its torch twin (``reference.py``). The declaration is the one place a
kernel's arguments are written in Python: its bind-time check and its CuPy argument lists derive
from it, and a CPU test holds the twin to its signature.

Adding a kernel:

1. the ``.cu`` (its constants come from ``#define`` lines generated from Python, ``compile.py``);
2. in a wrapper module beside it, its ``SOURCE`` and its declaration: one ``Tensor(name, dtype,
   shape)`` or ``Value(name, cast)`` per argument in signature order, a rule for what they cannot
   say (value ranges, sizes computed from dimensions, overlaps), and one ``Launch(entry point, grid,
   block, args)`` per entry point, ``args`` following the ``.cu`` parameter list (``declare.py``);
3. its twin in ``reference.py``: the same parameter names, kinds and defaults, in order;
4. one row here, and tests: the twin against hand-computed values (CPU), the kernel against the
   twin (GPU), the check's messages.

A :class:`Kernels` object gets one method per table row, with that kernel's signature (e.g.
``k.qstats(q, out, scratch)``): the twin on the "torch" backend, the launch on the "cuda" backend.
Methods write into caller-owned outputs, return nothing, allocate nothing on the CUDA backend and
never read device memory back to the host. They do not validate their arguments: validate once with
``k.bind_<name>(...)`` (same arguments), which returns a zero-argument launcher for the buffers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Union

import torch

from rl_zerosync.kernels import (adam, divergence, grad_norm, guard, layernorm, linear, qstats, reference, replay_add,
                                 replay_sample, route, select, td_loss)
from rl_zerosync.kernels.compile import CudaSource, load_module
from rl_zerosync.kernels.declare import Kernel

Launcher = Callable[[], None]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of the table.

    Attributes:
        kernel: Its declaration: ``kernel.check(*args, **kwargs)`` (raises ValueError naming the
            argument), ``kernel.launch(device_index, *args, **kwargs)``, ``kernel.source``,
            ``kernel.signature``.
        twin: The torch twin, ``twin(*args, **kwargs)`` (the same arguments).
    """

    kernel: Kernel
    twin: Callable[..., None]


KERNELS: Dict[str, KernelSpec] = {spec.kernel.name: spec for spec in (
    KernelSpec(guard.guard_check, reference.guard_check),
    KernelSpec(guard.guard_accumulate, reference.guard_accumulate),
    KernelSpec(guard.guard_record, reference.guard_record),
    KernelSpec(qstats.qstats, reference.qstats),
    KernelSpec(td_loss.td_loss, reference.td_loss),
    KernelSpec(divergence.divergence, reference.divergence),
    KernelSpec(select.epsilon_greedy, reference.epsilon_greedy),
    KernelSpec(select.epsilon_greedy_members, reference.epsilon_greedy_members),
    KernelSpec(select.branching_select, reference.branching_select),
    KernelSpec(route.route, reference.route),
    KernelSpec(replay_add.replay_add, reference.replay_add),
    KernelSpec(grad_norm.grad_norm, reference.grad_norm),
    KernelSpec(adam.adam_step, reference.adam_step),
    KernelSpec(linear.linear_forward, reference.linear_forward),
    KernelSpec(linear.linear_backward, reference.linear_backward),
    KernelSpec(layernorm.layernorm_relu, reference.layernorm_relu),
    KernelSpec(layernorm.layernorm_backward, reference.layernorm_backward),
    KernelSpec(replay_sample.replay_sample, reference.replay_sample),
)}
"""Every kernel: name -> declaration and twin (see ``docs/ARCHITECTURE.md`` for semantics)."""

SOURCES: Dict[str, CudaSource] = {spec.kernel.source.filename: spec.kernel.source for spec in KERNELS.values()}
"""Every CUDA source of the table, by file name."""

CONCRETE_BACKENDS = ("cuda", "torch")


def _tensors(values) -> Iterator[torch.Tensor]:
    """The tensors among ``values``, in order, looking into lists and tuples (the jobs of a launch)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


class Kernels:
    """The kernels of one backend on one device: ``k.<name>(...)`` and ``k.bind_<name>(...)`` for
    every :data:`KERNELS` row (see the module docstring). Build it with ``get_kernels(device)``.

    Args:
        device: The device of every buffer; an indexed CUDA device for the "cuda" backend.
        backend: "torch" (the twins, any device) or "cuda" (the launches).
    """

    def __init__(self, device: Union[str, torch.device], backend: str = "torch") -> None:
        self.device = torch.device(device)
        if backend not in CONCRETE_BACKENDS:
            raise ValueError(f"backend must be one of {CONCRETE_BACKENDS}, got {backend!r}")
        self.backend = backend
        if backend == "cuda" and (self.device.type != "cuda" or self.device.index is None):
            raise ValueError(f"device must be an indexed CUDA device, got {self.device}")
        for name, spec in KERNELS.items():
            run = functools.partial(spec.kernel.launch, self.device.index) if backend == "cuda" else spec.twin
            setattr(self, name, run)
            setattr(self, f"bind_{name}", functools.partial(self.bind, name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend!r}, device={str(self.device)!r})"

    def warmup(self) -> None:
        """Compile and load every kernel now (CUDA backend; nothing to do for the twins), so that
        later launches can be graph-captured."""
        if self.backend == "cuda":
            for source in SOURCES.values():
                load_module(self.device.index, source)

    def bind(self, name: str, *args, **kwargs) -> Launcher:
        """Validate the buffers of kernel ``name`` once; return a zero-argument launcher for them.

        ``k.bind_<name>(*args, **kwargs)`` is ``k.bind("<name>", *args, **kwargs)``.
        """
        KERNELS[name].kernel.check(*args, **kwargs)
        first = next(_tensors((*args, *kwargs.values())))
        if first.device != self.device:
            raise ValueError(f"{name}: buffers are on {first.device}, these kernels are for {self.device}")
        return functools.partial(getattr(self, name), *args, **kwargs)
