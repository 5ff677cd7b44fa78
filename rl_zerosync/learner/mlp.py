"""The Q network's forward and backward as ``linear_forward`` / ``linear_backward`` launches.

For a routed / flat :class:`~rl_zerosync.module.ZeroSyncQModule` whose network is the plain stack
(hidden ``Linear -> [LayerNorm] -> ReLU`` layers and one ``Linear`` head: no dueling or dropout),
trained from the device replay, :class:`MLPKernels` replaces torch's forward, autograd's backward
and the gradient gather (:meth:`FlatAdam.gather_grads`) of an update:

* forward, one ``linear_forward`` launch per layer: the online layer on the batch's observations
  and (double DQN) next observations and the target layer on the next observations, bias and ReLU
  fused; with LayerNorm the Linear writes its pre-activation and one ``layernorm_relu`` launch per
  hidden layer normalizes it (online and target rows) and applies the ReLU. The outputs are static
  buffers: ``q`` and ``q_select`` are the two halves of the online network's ``[2B, A]`` output,
  ``q_target`` the target network's ``[B, A]``.
* backward, one ``linear_backward`` launch per layer from the head down, starting from the
  ``td_loss`` kernel's ``dL/dQ``: the weight and bias gradients written straight into their slots
  of the flat gradient buffer (:meth:`FlatAdam.grad_slot`), and the gradient of the layer below
  with its ReLU's mask applied; with LayerNorm one ``layernorm_backward`` launch per hidden layer
  between them (its gamma and beta gradients into their slots too). Only the ``B`` rows of the
  observations carry a gradient.

On the torch backend (CPU) the launches are their twins (``addmm``, ``relu``, ``mm``, ``sum``):
the same update in torch ops. The kernels compute in float32 without TF32, so the learner uses this
path only when ``learner.compile`` and ``learner.tf32`` are off (those ask for torch's matmuls).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import nn

from rl_zerosync.kernels import Kernels
from rl_zerosync.kernels.layernorm import layernorm_part_numel
from rl_zerosync.kernels.linear import backward_gemms, forward_gemms, workspace
from rl_zerosync.learner.flat_adam import FlatAdam

__all__ = ["MLPKernels", "mlp_kernel_blocker", "plain_layers"]


Layer = Tuple[nn.Linear, Optional[nn.LayerNorm]]


def plain_layers(net: nn.Module) -> Optional[List[Layer]]:
    """``(Linear, LayerNorm or None)`` per layer of a ``QNetwork`` made of ``Linear, [LayerNorm], ReLU``
    hidden layers and a Linear head (whose LayerNorm is None), else None."""
    torso, head = getattr(net, "torso", None), getattr(net, "head", None)
    if not isinstance(torso, nn.Sequential) or type(head) is not nn.Linear or head.bias is None:
        return None
    mods, layers, i = list(torso), [], 0
    while i < len(mods):
        lin = mods[i]
        norm = mods[i + 1] if i + 1 < len(mods) and type(mods[i + 1]) is nn.LayerNorm else None
        j = i + (2 if norm is not None else 1)
        if type(lin) is not nn.Linear or lin.bias is None or j >= len(mods) or type(mods[j]) is not nn.ReLU:
            return None
        if norm is not None and (len(norm.normalized_shape) != 1 or norm.weight is None or norm.bias is None):
            return None
        layers.append((lin, norm))
        i = j + 1
    return layers + [(head, None)]


def mlp_kernel_blocker(module: nn.Module, *, target: bool = True) -> Optional[str]:
    """Why :class:`MLPKernels` cannot run ``module`` (an unwrapped ZeroSyncQModule), or None if it can;
    ``target=False``: the online network only (an inference-only module has no target network)."""
    mode = getattr(module, "action_mode", None)
    if mode not in ("routed", "flat"):
        return f"action_mode {mode!r} (the linear kernels cover routed and flat)"
    if getattr(module, "uses_dueling", False):
        return "dueling=True"
    if getattr(module, "dropout", 0.0) > 0.0:
        return "dropout > 0"
    if plain_layers(module.q_net) is None or (target and plain_layers(module.target_q_net) is None):
        return "the Q network is not a plain Linear/[LayerNorm]/ReLU stack"
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
        dq: ``dL/dQ`` of the batch's rows ``[B, A]`` (contiguous; the ``td_loss`` kernel writes it): the
            backward starts from it.
        double_q: Pick the bootstrap action with the online network (it then also runs on ``next_obs``).
    """

    def __init__(self, *, module: nn.Module, kernels: Kernels, flat: FlatAdam, obs: torch.Tensor,
                 next_obs: torch.Tensor, dq: torch.Tensor, double_q: bool) -> None:
        reason = mlp_kernel_blocker(module)
        if reason is not None:
            raise ValueError(f"MLPKernels: unsupported module: {reason}")
        online, target = plain_layers(module.q_net), plain_layers(module.target_q_net)
        b = int(obs.shape[0])
        try:
            x, x_next = obs.view(b, -1), next_obs.view(b, -1)
        except RuntimeError as exc:
            raise ValueError(f"MLPKernels: obs and next_obs must be viewable as [{b}, obs_dim], got shapes "
                             f"{list(obs.shape)} / {list(next_obs.shape)} with strides {list(obs.stride())} / "
                             f"{list(next_obs.stride())}") from exc
        dev, rows = obs.device, (2 * b if double_q else b)

        def empty(r: int, c: int = 0) -> torch.Tensor:
            return torch.zeros((r, c) if c else (r,), dtype=torch.float32, device=dev)

        # Pass 1: the buffers and each launch's arguments, in launch order.
        forward: List[tuple] = []  # ("linear", jobs, relu) | ("norm", jobs, eps)
        on_in, tg_in = x, x_next
        acts: List[torch.Tensor] = []  # each layer's online output [rows, width] (its activation for hidden ones)
        saved: List[Optional[tuple]] = []  # per hidden layer with LayerNorm: (z_online, stats_online)
        for i, ((lo, no), (lt, nt)) in enumerate(zip(online, target)):
            w, bias, wt, bt = lo.weight.detach(), lo.bias.detach(), lt.weight.detach(), lt.bias.detach()
            width = int(w.shape[0])
            y_on, y_tg = empty(rows, width), empty(b, width)
            jobs = [(on_in, w, bias, y_on)] if i else [(x, w, bias, y_on[:b])]
            if i == 0 and double_q:
                jobs.append((x_next, w, bias, y_on[b:]))
            jobs.append((tg_in, wt, bt, y_tg))
            last = i == len(online) - 1
            forward.append(("linear", jobs, not last and no is None))
            if no is not None:
                a_on, a_tg, st_on, st_tg = empty(rows, width), empty(b, width), empty(rows, 2), empty(b, 2)
                forward.append(("norm", [(y_on, no.weight.detach(), no.bias.detach(), a_on, st_on),
                                         (y_tg, nt.weight.detach(), nt.bias.detach(), a_tg, st_tg)], float(no.eps)))
                saved.append((y_on[:b], st_on[:b]))
                y_on, y_tg = a_on, a_tg
            else:
                saved.append(None)
            acts.append(y_on)
            on_in, tg_in = y_on, y_tg
        # (q, q_select, q_target): the online output's halves (q_select is the target's output
        # without double DQN) and the target network's output on the next observations, [B, A] each.
        self._outputs = (on_in[:b], on_in[b:] if double_q else tg_in, tg_in)
        self.dq = dq
        """The ``dL/dQ`` buffer the backward starts from."""
        backward: List[tuple] = []  # ("linear", args) | ("norm", args)
        dz = dq
        for i in range(len(online) - 1, -1, -1):
            lin = online[i][0]
            dx = None if i == 0 else empty(b, int(lin.weight.shape[1]))  # gradient at layer i - 1's activation
            backward.append(("linear", (dz, x if i == 0 else acts[i - 1][:b], lin.weight.detach(),
                                        flat.grad_slot(lin.weight), flat.grad_slot(lin.bias), dx)))
            dz = dx
            if i and saved[i - 1] is not None:
                norm = online[i - 1][1]
                z, stats = saved[i - 1]
                dz = empty(b, int(z.shape[1]))
                backward.append(("norm", (dx, z, stats, norm.weight.detach(), dz, flat.grad_slot(norm.weight),
                                          flat.grad_slot(norm.bias))))
        # Pass 2: one workspace for the sequential launches, then bind (validates) each launch.
        gemms = ([forward_gemms(jobs) for kind, jobs, _ in forward if kind == "linear"]
                 + [backward_gemms(a[0], a[1], a[5] is not None) for kind, a in backward if kind == "linear"])
        scratch_n, counters_n = workspace(gemms)
        scratch = torch.zeros(scratch_n, dtype=torch.float32, device=dev)
        counters = torch.zeros(counters_n, dtype=torch.int32, device=dev)
        part = empty(max([layernorm_part_numel(b, a[0].shape[1]) for kind, a in backward if kind == "norm"] + [1]))
        blocks_done = torch.zeros(1, dtype=torch.int32, device=dev)
        self._forward: List[Callable[[], None]] = [
            kernels.bind_linear_forward(jobs, scratch, counters, relu=extra) if kind == "linear"
            else kernels.bind_layernorm_relu(jobs, eps=extra) for kind, jobs, extra in forward]
        self._backward: List[Callable[[], None]] = [
            kernels.bind_linear_backward(*args, scratch, counters) if kind == "linear"
            else kernels.bind_layernorm_backward(*args, part, blocks_done) for kind, args in backward]
        self.launches_per_update = len(self._forward) + len(self._backward)
        """Kernel launches of one forward plus backward."""

    def forward(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Enqueue the forward; returns ``(q, q_select, q_target)`` ``[B, A]`` views of the static outputs
        (``q_select`` is ``q_target`` without double DQN)."""
        with torch.no_grad():
            for launch in self._forward:
                launch()
        return self._outputs

    def backward(self) -> None:
        """Enqueue the backward from :attr:`dq`: every parameter's gradient written into its flat slot."""
        with torch.no_grad():
            for launch in self._backward:
                launch()
