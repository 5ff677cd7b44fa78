"""The pure-torch parts of one learner update, eager or fused by ``torch.compile``.

:class:`UpdateParts` holds the four steps of an update that are plain torch ops (the guard's CUDA
kernels and the fused optimizer sit between them, in
:meth:`~rl_zerosync.learner.dqn_learner.ZeroSyncDQNTorchLearner._zero_sync_step`):

* ``sample_into(out)``: replay sampling into the static batch (:meth:`DeviceReplayBuffer.sample_into`);
* ``loss(batch, need_td_abs) -> (loss, td_abs, q)``: forward of the online and target networks and
  the TD loss (:func:`~rl_zerosync.learner.loss.td_loss`);
* ``grad_norm(grads, out)``: the global gradient norm written into ``out`` (f32[1]; always eager);
* ``scale_grads(grads, loss_scale, grad_norm)``: gradients times the guard's loss scale and the
  global-norm clip coefficient ``min(1, clip / (norm * scale + 1e-6))``.

With ``compiled=False`` these are the eager ops (the default; bit-identical to earlier releases).
With ``compiled=True`` the other three are wrapped in ``torch.compile`` (inductor, static shapes): pointwise
chains and reductions become a few Triton kernels and the loss's backward is compiled with it. The
compiled functions are traced during the learner's eager warm-up updates and then captured in its
CUDA graph like any other op; no host read is added. Compiled updates are not bit-identical to
eager ones (fused reductions round differently); the replay's integer hashing is exact either way.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from rl_zerosync.learner.loss import td_loss
from rl_zerosync.learner.replay import DeviceReplayBuffer, ReplaySample

__all__ = ["UpdateParts", "tf32_matmuls"]


@contextlib.contextmanager
def tf32_matmuls(enabled: bool) -> Iterator[None]:
    """Within the block, float32 matmuls may use TF32 tensor cores (``learner.tf32``); the process's
    setting is restored on exit, so the env runner and everything else keep theirs. A CUDA graph
    captured inside the block keeps the TF32 kernels it captured."""
    if not enabled:
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def grad_norm_into(grads: List[torch.Tensor], out: torch.Tensor) -> None:
    """``out[0] = ||concat(grads)||_2`` (per-tensor norms, then the norm of those)."""
    torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)), dim=0, keepdim=True, out=out)


def scale_grads(grads: List[torch.Tensor], loss_scale: torch.Tensor, grad_norm: torch.Tensor,
                grad_clip: Optional[float]) -> None:
    """``g *= loss_scale * min(1, grad_clip / (grad_norm * loss_scale + 1e-6))`` in place (no clip if None)."""
    scale = loss_scale
    if grad_clip is not None:
        clip_coef = torch.clamp(grad_clip / (grad_norm * scale + 1e-6), max=1.0)
        scale = scale * clip_coef
    torch._foreach_mul_(grads, scale.reshape(()))


class UpdateParts:
    """The torch parts of an update for one module and replay (see the module docstring).

    Args:
        module: The trained RLModule (or its DDP wrapper); ``forward_train`` is called on it.
        replay: The device replay buffer sampled from.
        branching, gamma, double_q, loss_type: Passed to :func:`td_loss`.
        grad_clip: Global-norm clip (None = no clip).
        compiled: Wrap each part in ``torch.compile`` (CUDA; the learner turns it off on CPU).
    """

    def __init__(self, *, module: torch.nn.Module, replay: DeviceReplayBuffer, branching: bool, gamma: float,
                 double_q: bool, loss_type: str, grad_clip: Optional[float], compiled: bool) -> None:
        self.compiled = bool(compiled)

        def loss(batch: Dict[str, torch.Tensor], need_td_abs: bool
                 ) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
            out = td_loss(fwd_out=module.forward_train(batch), batch=batch, branching=branching, gamma=gamma,
                          double_q=double_q, loss_type=loss_type, need_td_abs=need_td_abs)
            return out.loss, out.td_abs, out.q

        def scale(grads: List[torch.Tensor], loss_scale: torch.Tensor, grad_norm: torch.Tensor) -> None:
            scale_grads(grads, loss_scale, grad_norm, grad_clip)

        wrap: Callable = (lambda fn: torch.compile(fn, dynamic=False)) if self.compiled else (lambda fn: fn)
        self.loss = wrap(loss)
        self.sample_into: Callable[[ReplaySample], None] = wrap(replay.sample_into)
        # Eager either way: one multi-tensor norm kernel plus a 10-value norm; inductor splits the
        # per-tensor norms into one kernel per parameter (measured: 10 kernels instead of 3).
        self.grad_norm = grad_norm_into
        self.scale_grads = wrap(scale)
