"""Flat parameters and one optimizer kernel: the learner's Adam / AdamW step in one launch.

:class:`FlatAdam` makes the trained parameters views into one flat float32 buffer (each parameter
starts at a multiple of :data:`ALIGN` elements, so every view is as aligned as its own allocation
would be) and keeps the Adam moments in two more flat buffers. One update then takes:

1. :meth:`FlatAdam.gather_grads`: the gradients backward produced, copied into the flat gradient
   buffer by one ``torch.cat`` (static zero pads fill the gaps between parameters);
2. :meth:`FlatAdam.grad_norm_into`: the global L2 norm of that buffer, as two reductions in one
   ``grad_norm`` launch (the norms of its :data:`NORM_CHUNK`-element rows, one block each, then
   the norm of those by the block that finishes last; the buffers' length is a multiple of
   :data:`NORM_CHUNK`). A single flat torch reduction runs in one block and took 10 us per update
   at 86K parameters on an H200, torch's two reductions 7.4 us;
3. :meth:`FlatAdam.step`: the ``adam_step`` kernel (``rl_zerosync.kernels``): the guard's loss scale
   and the global-norm clip applied to the gradient, then Adam, or AdamW with its decoupled decay,
   for every parameter, skipped on the device when the guard's ``found_inf`` is set (nothing moves,
   the step count included). One launch with one thread per element.

torch's fused Adam took a multi-tensor launch over a handful of 64K-element chunks (a few blocks on
a GPU of 132 SMs: 27 us per update at 86K parameters), plus multi-tensor norm and scale kernels;
this path replaces all of that.

The torch optimizer (``torch.optim.Adam`` / ``AdamW``) stays RLlib's optimizer: its
``param_groups[0]`` holds the hyperparameters the kernel is bound with, and its ``state`` holds, per
parameter, views into the flat moments and the shared step count, so RLlib saves and restores it as
before. After a restore (which replaces those tensors and copies the parameters in place),
:meth:`FlatAdam.absorb_state` copies the state back into the flat buffers and re-points the views.
The optimizer's own ``step()`` is never called.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from rl_zerosync.kernels import Kernels
from rl_zerosync.kernels.grad_norm import NORM_CHUNK
from rl_zerosync.learner.rows import move_into_rows

__all__ = ["ALIGN", "NORM_CHUNK", "STACKED", "FlatAdam"]

STACKED = ("flat_params", "flat_grads", "exp_avg", "exp_avg_sq", "step_count")
"""The flat buffers a population stacks with a member dimension (:meth:`FlatAdam.adopt`)."""

ALIGN = 64
"""Each parameter's offset in the flat buffers is a multiple of this many elements (256 bytes)."""


def _round_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


class FlatAdam:
    """Flat parameters, gradients and moments of one optimizer, stepped by ``adam_step``.

    Args:
        optimizer: The module's ``torch.optim.Adam`` (``weight_decay`` 0) or ``AdamW``; one param
            group of float32 parameters on one device, ``amsgrad`` and ``maximize`` off.
        kernels: Kernels of that device.
        found_inf, loss_scale, grad_norm: The guard's f32[1] buffers the step reads.
        grad_clip: Global-norm clip (None = no clip).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, kernels: Kernels, *, found_inf: torch.Tensor,
                 loss_scale: torch.Tensor, grad_norm: torch.Tensor, grad_clip: Optional[float]) -> None:
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"FlatAdam needs one param group, got {len(optimizer.param_groups)}")
        group = optimizer.param_groups[0]
        for key in ("amsgrad", "maximize"):
            if group.get(key, False):
                raise ValueError(f"FlatAdam: optimizer option {key}=True is not supported")
        decoupled = bool(group.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW)))
        wd = float(group["weight_decay"])
        if wd != 0.0 and not decoupled:
            raise ValueError(f"FlatAdam: coupled (L2) weight decay is not supported, got Adam with "
                             f"weight_decay={wd}; use AdamW")
        self.optimizer = optimizer
        self.params: List[torch.nn.Parameter] = list(group["params"])
        if not self.params:
            raise ValueError("FlatAdam: the optimizer has no parameters")
        device = self.params[0].device
        self._slices: List[slice] = []
        at = 0
        for i, p in enumerate(self.params):
            if p.dtype != torch.float32 or p.device != device:
                raise ValueError(f"FlatAdam: parameter {i} must be float32 on {device}, got {p.dtype} on {p.device}")
            self._slices.append(slice(at, at + p.numel()))
            at = _round_up(at + p.numel())
        at = _round_up(at, NORM_CHUNK)
        self.numel = at
        """Elements of each flat buffer (parameters plus alignment pads)."""

        def zeros(n: int = at) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.float32, device=device)

        self.flat_params, self.flat_grads = zeros(), zeros()
        self.exp_avg, self.exp_avg_sq = zeros(), zeros()
        self.step_count = zeros(1)
        """Adam's step count (shared by every parameter; not advanced by a skipped step)."""
        self._blocks_done = torch.zeros(1, dtype=torch.int32, device=device)
        self._row_norms = zeros(at // NORM_CHUNK)
        self._norm_blocks_done = torch.zeros(1, dtype=torch.int32, device=device)
        self._kernels = kernels
        self._norm: Optional[tuple] = None  # (out buffer, its bound grad_norm launch)
        # The pieces torch.cat writes into flat_grads, in order: a gradient slot per parameter,
        # then the zero pad up to the next parameter's offset (static, never written).
        self._pads: List[Optional[torch.Tensor]] = []
        self._zero = zeros(max(p.numel() for p in self.params))  # stands in for a None gradient
        for i, sl in enumerate(self._slices):
            end = self._slices[i + 1].start if i + 1 < len(self._slices) else at
            self._pads.append(zeros(end - sl.stop) if end > sl.stop else None)
        self._bind_params()
        self._install_state()
        self._bind_args = (found_inf, loss_scale, grad_norm, grad_clip)
        self._bind_step()

    def _bind_step(self) -> None:
        """Bind ``adam_step`` with the param group's hyperparameters (lr, betas, eps, weight decay)."""
        found_inf, loss_scale, grad_norm, grad_clip = self._bind_args
        group = self.optimizer.param_groups[0]
        betas = group["betas"]
        self._step = self._kernels.bind_adam_step(
            self.flat_params, self.flat_grads, self.exp_avg, self.exp_avg_sq, self.step_count, found_inf,
            loss_scale, grad_norm, self._blocks_done, lr=float(group["lr"]), beta1=float(betas[0]),
            beta2=float(betas[1]), eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
            grad_clip=grad_clip,
        )

    def adopt(self, rows: dict, *, found_inf: torch.Tensor, loss_scale: torch.Tensor,
              grad_norm: torch.Tensor) -> None:
        """Move the flat buffers into ``rows`` (:data:`STACKED` name -> a float32 tensor of that buffer's
        shape on this device, e.g. member k's row of a population's ``[P, numel]`` buffers): the values
        are copied there, the parameters and the optimizer's state become views of them, and
        ``adam_step`` is bound to them and to the guard's (possibly moved) ``found_inf``, ``loss_scale``
        and ``grad_norm``. A CUDA graph captured before must be dropped by its owner."""
        move_into_rows(self, rows, STACKED, "FlatAdam.adopt")
        self._bind_params()
        self._install_state()
        for p in self.params:
            if p.grad is not None and p.grad.data_ptr() != self.grad_slot(p).data_ptr():
                p.grad = None
        self._norm = None
        self._bind_args = (found_inf, loss_scale, grad_norm, self._bind_args[3])
        self._bind_step()

    def slot(self, param: torch.nn.Parameter) -> slice:
        """The slice of the flat buffers that holds ``param``."""
        for p, sl in zip(self.params, self._slices):
            if p is param:
                return sl
        raise ValueError(f"slot: a parameter of shape {list(param.shape)} is not one of this optimizer's")

    @property
    def hyperparameters(self) -> dict:
        """The step's hyperparameters as bound: ``lr``, ``beta1``, ``beta2``, ``eps``, ``weight_decay``, ``grad_clip``."""
        group = self.optimizer.param_groups[0]
        return {"lr": float(group["lr"]), "beta1": float(group["betas"][0]), "beta2": float(group["betas"][1]),
                "eps": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                "grad_clip": self._bind_args[3]}

    def set_lr(self, lr: float) -> None:
        """A new learning rate for the next steps (population based training): the param group's
        ``lr`` and the kernel's binding; a CUDA graph captured with the old one must be re-captured
        by its owner (the learner's :meth:`set_lr` does)."""
        lr = float(lr)
        if not (lr > 0.0 and lr < float("inf")):
            raise ValueError(f"FlatAdam.set_lr: expected a finite lr > 0, got {lr!r}")
        self.optimizer.param_groups[0]["lr"] = lr
        self._bind_step()

    def _bind_params(self) -> None:
        """Copy every parameter into its flat slot and make it a view of that slot."""
        with torch.no_grad():
            for p, sl in zip(self.params, self._slices):
                view = self.flat_params[sl].view(p.shape)
                if p.data_ptr() != view.data_ptr():
                    view.copy_(p.detach())
                    p.data = view

    def _install_state(self) -> None:
        """Point the optimizer's per-parameter state at the flat moments and the shared step."""
        step = self.step_count.view(())
        for p, sl in zip(self.params, self._slices):
            self.optimizer.state[p] = {"step": step, "exp_avg": self.exp_avg[sl].view(p.shape),
                                       "exp_avg_sq": self.exp_avg_sq[sl].view(p.shape)}

    def absorb_state(self) -> None:
        """After a restore: parameters back into their slots, the restored state into the flat buffers.

        Raises ValueError if some parameters have state and others not, or their steps differ
        (this optimizer keeps one step count).
        """
        self._bind_params()
        states = [self.optimizer.state.get(p) or {} for p in self.params]
        have = [bool(s) for s in states]
        if not any(have):
            self.exp_avg.zero_()
            self.exp_avg_sq.zero_()
            self.step_count.zero_()
        else:
            if not all(have):
                raise ValueError(f"optimizer state: {have.count(False)} of {len(have)} parameters have no "
                                 f"Adam state; expected all or none")
            steps = {float(s["step"]) for s in states}  # host read: checkpoint restore boundary
            if len(steps) != 1:
                raise ValueError(f"optimizer state: the parameters' Adam steps differ ({sorted(steps)}); "
                                 f"expected one step count")
            with torch.no_grad():
                for s, p, sl in zip(states, self.params, self._slices):
                    for key, flat in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                        value = torch.as_tensor(s[key])
                        if value.shape != p.shape:
                            raise ValueError(f"optimizer state: {key} has shape {list(value.shape)}, "
                                             f"expected {list(p.shape)}")
                        flat[sl].copy_(value.reshape(-1))
            self.step_count.fill_(steps.pop())
        self._install_state()

    # ---- per update (no host read) --------------------------------------------------------------
    def gather_grads(self) -> None:
        """Copy the parameters' gradients (zeros where a gradient is None) into :attr:`flat_grads`."""
        parts: List[torch.Tensor] = []
        for p, pad in zip(self.params, self._pads):
            parts.append(self._zero[:p.numel()] if p.grad is None else p.grad.reshape(-1))
            if pad is not None:
                parts.append(pad)
        torch.cat(parts, out=self.flat_grads)

    def grad_slot(self, param: torch.nn.Parameter) -> torch.Tensor:
        """The view of :attr:`flat_grads` that holds ``param``'s gradient (shape of ``param``), for a
        backward that writes gradients in place of :meth:`gather_grads`."""
        for p, sl in zip(self.params, self._slices):
            if p is param:
                return self.flat_grads[sl].view(p.shape)
        raise ValueError(f"grad_slot: a parameter of shape {list(param.shape)} is not one of this optimizer's")

    def grad_norm_into(self, out: torch.Tensor) -> None:
        """``out[0] = ||flat_grads||_2`` (one ``grad_norm`` launch; bound once per ``out`` buffer)."""
        if self._norm is None or self._norm[0] is not out:
            self._norm = (out, self._kernels.bind_grad_norm(self.flat_grads, self._row_norms, out,
                                                             self._norm_blocks_done))
        self._norm[1]()

    def step(self) -> None:
        """Launch ``adam_step`` on the flat buffers (skipped on the device when ``found_inf`` is set)."""
        self._step()
