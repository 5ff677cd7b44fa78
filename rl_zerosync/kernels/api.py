"""The kernel table and the one ``Kernels`` object built from it, for both backends.

:data:`KERNELS` maps each kernel name to a :class:`KernelSpec`: its CUDA launch (the wrapper module
beside its ``.cu``), its torch twin (``reference.py``), its bind-time check (beside the launch) and
its CUDA source. Adding or changing a kernel touches its ``.cu``, its wrapper, its twin, its tests
and one row here.

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

from rl_zerosync.kernels import (adam, add, divergence, guard, layernorm, linear, norm, qstats, reference, route,
                                 sample, select, td_loss)
from rl_zerosync.kernels.compile import CudaSource, load_module

Launcher = Callable[[], None]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of the table.

    Attributes:
        launch: The CUDA launch, ``launch(device_index, *args, **kwargs)``.
        twin: The torch twin, ``twin(*args, **kwargs)`` (the same arguments).
        check: The bind-time check, ``check(*args, **kwargs)``; raises ValueError naming the argument.
        source: The CUDA source the launch compiles.
    """

    launch: Callable[..., None]
    twin: Callable[..., None]
    check: Callable[..., None]
    source: CudaSource


KERNELS: Dict[str, KernelSpec] = {
    "guard_check": KernelSpec(guard.guard_check, reference.guard_check, guard.check_guard_check, guard.SOURCE),
    "guard_accumulate": KernelSpec(guard.guard_accumulate, reference.guard_accumulate, guard.check_guard_accumulate,
                                   guard.SOURCE),
    "guard_record": KernelSpec(guard.guard_record, reference.guard_record, guard.check_guard_record, guard.SOURCE),
    "qstats": KernelSpec(qstats.qstats, reference.qstats, qstats.check_qstats, qstats.SOURCE),
    "td_loss": KernelSpec(td_loss.td_loss, reference.td_loss, td_loss.check_td_loss, td_loss.SOURCE),
    "divergence": KernelSpec(divergence.divergence, reference.divergence, divergence.check_divergence,
                             divergence.SOURCE),
    "epsilon_greedy": KernelSpec(select.epsilon_greedy, reference.epsilon_greedy, select.check_epsilon_greedy,
                                 select.SOURCE),
    "branching_select": KernelSpec(select.branching_select, reference.branching_select,
                                   select.check_branching_select, select.SOURCE),
    "route": KernelSpec(route.route, reference.route, route.check_route, route.SOURCE),
    "replay_add": KernelSpec(add.replay_add, reference.replay_add, add.check_replay_add, add.SOURCE),
    "grad_norm": KernelSpec(norm.grad_norm, reference.grad_norm, norm.check_grad_norm, norm.SOURCE),
    "adam_step": KernelSpec(adam.adam_step, reference.adam_step, adam.check_adam_step, adam.SOURCE),
    "linear_forward": KernelSpec(linear.linear_forward, reference.linear_forward, linear.check_linear_forward,
                                 linear.SOURCE),
    "linear_backward": KernelSpec(linear.linear_backward, reference.linear_backward, linear.check_linear_backward,
                                  linear.SOURCE),
    "layernorm_relu": KernelSpec(layernorm.layernorm_relu, reference.layernorm_relu,
                                 layernorm.check_layernorm_relu, layernorm.SOURCE),
    "layernorm_backward": KernelSpec(layernorm.layernorm_backward, reference.layernorm_backward,
                                     layernorm.check_layernorm_backward, layernorm.SOURCE),
    "replay_sample": KernelSpec(sample.replay_sample, reference.replay_sample, sample.check_replay_sample,
                                sample.SOURCE),
}
"""Every kernel: name -> launch, twin, check, source (see ``docs/ARCHITECTURE.md`` for semantics)."""

SOURCES: Dict[str, CudaSource] = {spec.source.filename: spec.source for spec in KERNELS.values()}
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
            run = functools.partial(spec.launch, self.device.index) if backend == "cuda" else spec.twin
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
        KERNELS[name].check(*args, **kwargs)
        first = next(_tensors((*args, *kwargs.values())))
        if first.device != self.device:
            raise ValueError(f"{name}: buffers are on {first.device}, these kernels are for {self.device}")
        return functools.partial(getattr(self, name), *args, **kwargs)
