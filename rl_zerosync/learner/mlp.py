"""The Q network's forward and backward as ``linear_forward`` / ``linear_backward`` launches.

For a routed / flat :class:`~rl_zerosync.module.ZeroSyncQModule` whose network is the plain stack
(hidden ``Linear -> ReLU`` layers and one ``Linear`` head: no dueling, LayerNorm or dropout),
trained from the device replay, :class:`MLPKernels` replaces torch's forward, autograd's backward
and the gradient gather (:meth:`FlatAdam.gather_grads`) of an update:

* forward, one ``linear_forward`` launch per layer: the online layer on the batch's observations
  and (double DQN) next observations and the target layer on the next observations, bias and ReLU
  fused. The outputs are static buffers: ``q`` and ``q_select`` are the two halves of the online
  network's ``[2B, A]`` output, ``q_target`` the target network's ``[B, A]``.
* backward, one ``linear_backward`` launch per layer from the head down, starting from the
  ``td_loss`` kernel's ``dL/dQ``: the weight and bias gradients written straight into their slots
  of the flat gradient buffer (:meth:`FlatAdam.grad_slot`), and the gradient of the layer below
  with its ReLU's mask applied. Only the ``B`` rows of the observations carry a gradient.

On the torch backend (CPU) the launches are their twins (``addmm``, ``relu``, ``mm``, ``sum``):
the same update in torch ops. The kernels compute in float32 without TF32, so the learner uses this
path only when ``learner.compile`` and ``learner.tf32`` are off (those ask for torch's matmuls).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import nn

from rl_zerosync.kernels import Kernels
from rl_zerosync.kernels.linear import backward_gemms, forward_gemms, workspace
from rl_zerosync.learner.flat_adam import FlatAdam

__all__ = ["MLPKernels", "mlp_kernel_blocker"]


def _plain_layers(net: nn.Module) -> Optional[List[nn.Linear]]:
    """The Linear layers of a ``QNetwork`` made of ``Linear, ReLU`` pairs and a Linear head, else None."""
    torso, head = getattr(net, "torso", None), getattr(net, "head", None)
    if not isinstance(torso, nn.Sequential) or not isinstance(head, nn.Linear):
        return None
    mods = list(torso)
    if len(mods) % 2:
        return None
    layers = [m for m in mods[0::2]]
    if not all(type(m) is nn.Linear for m in layers) or not all(type(m) is nn.ReLU for m in mods[1::2]):
        return None
    return layers + [head]


def mlp_kernel_blocker(module: nn.Module) -> Optional[str]:
    """Why :class:`MLPKernels` cannot run ``module`` (an unwrapped ZeroSyncQModule), or None if it can."""
    mode = getattr(module, "action_mode", None)
    if mode not in ("routed", "flat"):
        return f"action_mode {mode!r} (the linear kernels cover routed and flat)"
    if getattr(module, "uses_dueling", False):
        return "dueling=True"
    if getattr(module, "uses_layernorm", False):
        return "layernorm=True"
    if getattr(module, "dropout", 0.0) > 0.0:
        return "dropout > 0"
    if _plain_layers(module.q_net) is None or _plain_layers(module.target_q_net) is None:
        return "the Q network is not a plain Linear/ReLU stack"
    return None


class MLPKernels:
    """Forward of the online and target networks and backward of the online one as kernel launches
    on static buffers (see the module docstring).

    Args:
        module: The unwrapped ZeroSyncQModule (``mlp_kernel_blocker(module)`` must be None).
        kernels: Kernels of the learner's device.
        flat: The learner's flat optimizer; the backward writes into its gradient slots.
        obs, next_obs: The static batch's observation buffers ``[B, *obs_shape]`` (views of the
            replay's sample rows; each must be viewable as ``[B, obs_dim]``).
        double_q: Pick the bootstrap action with the online network (it then also runs on ``next_obs``).
    """

    def __init__(self, *, module: nn.Module, kernels: Kernels, flat: FlatAdam, obs: torch.Tensor,
                 next_obs: torch.Tensor, double_q: bool) -> None:
        reason = mlp_kernel_blocker(module)
        if reason is not None:
            raise ValueError(f"MLPKernels: unsupported module: {reason}")
        online, target = _plain_layers(module.q_net), _plain_layers(module.target_q_net)
        b = int(obs.shape[0])
        try:
            x, x_next = obs.view(b, -1), next_obs.view(b, -1)
        except RuntimeError as exc:
            raise ValueError(f"MLPKernels: obs and next_obs must be viewable as [{b}, obs_dim], got shapes "
                             f"{list(obs.shape)} / {list(next_obs.shape)} with strides {list(obs.stride())} / "
                             f"{list(next_obs.stride())}") from exc
        dev, rows = obs.device, (2 * b if double_q else b)

        def empty(r: int, c: int) -> torch.Tensor:
            return torch.zeros((r, c), dtype=torch.float32, device=dev)

        fwd_jobs: List[list] = []
        bwd_args: List[tuple] = []
        on_in, tg_in = None, x_next
        outs_on: List[torch.Tensor] = []
        for i, (lo, lt) in enumerate(zip(online, target)):
            w, bias = lo.weight.detach(), lo.bias.detach()
            wt, bt = lt.weight.detach(), lt.bias.detach()
            y_on, y_tg = empty(rows, w.shape[0]), empty(b, w.shape[0])
            if i == 0:
                jobs = [(x, w, bias, y_on[:b])]
                if double_q:
                    jobs.append((x_next, w, bias, y_on[b:]))
            else:
                jobs = [(on_in, w, bias, y_on)]
            jobs.append((tg_in, wt, bt, y_tg))
            fwd_jobs.append(jobs)
            outs_on.append(y_on)
            on_in, tg_in = y_on, y_tg
        self.q_online = on_in
        """The online network's output ``[2B, A]`` (``[B, A]`` without double DQN)."""
        self.q_target = tg_in
        """The target network's output on the next observations ``[B, A]``."""
        self.dq = empty(b, online[-1].weight.shape[0])
        """``dL/dQ`` of the batch's rows ``[B, A]``: the backward starts from it."""
        dz = self.dq
        for i in range(len(online) - 1, -1, -1):
            layer = online[i]
            inp = x if i == 0 else outs_on[i - 1][:b]
            dx = None if i == 0 else empty(b, layer.weight.shape[1])
            bwd_args.append((dz, inp, layer.weight.detach(), flat.grad_slot(layer.weight),
                             flat.grad_slot(layer.bias), dx))
            dz = dx
        scratch_n, counters_n = workspace([forward_gemms(j) for j in fwd_jobs]
                                          + [backward_gemms(a[0], a[1], a[5] is not None) for a in bwd_args])
        scratch = torch.zeros(scratch_n, dtype=torch.float32, device=dev)
        counters = torch.zeros(counters_n, dtype=torch.int32, device=dev)
        relus = [True] * (len(fwd_jobs) - 1) + [False]
        self._forward: List[Callable[[], None]] = [
            kernels.bind_linear_forward(jobs, scratch, counters, relu=relu) for jobs, relu in zip(fwd_jobs, relus)]
        self._backward: List[Callable[[], None]] = [
            kernels.bind_linear_backward(*args, scratch, counters) for args in bwd_args]
        self.launches_per_update = len(self._forward) + len(self._backward)
        """Kernel launches of one forward plus backward."""

    def forward(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Enqueue the forward; returns ``(q, q_select, q_target)`` ``[B, A]`` views of the static outputs
        (``q_select`` is ``q_target`` without double DQN)."""
        with torch.no_grad():
            for launch in self._forward:
                launch()
        b = self.q_target.shape[0]
        q = self.q_online[:b]
        q_select = self.q_online[b:] if self.q_online.shape[0] > b else self.q_target
        return q, q_select, self.q_target

    def backward(self) -> None:
        """Enqueue the backward from :attr:`dq`: every parameter's gradient written into its flat slot."""
        with torch.no_grad():
            for launch in self._backward:
                launch()
