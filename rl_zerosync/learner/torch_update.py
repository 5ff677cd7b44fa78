"""The pure-torch parts of one learner update, eager or fused by ``torch.compile``.

:class:`UpdateParts` holds the two steps of an update that are plain torch ops (the gradient
gathering, the guard's CUDA kernels and the ``adam_step`` kernel follow them, in
:meth:`~rl_zerosync.learner.dqn_learner.ZeroSyncDQNTorchLearner._zero_sync_step`):

* ``sample_into(out)``: replay sampling into the static batch (:meth:`DeviceReplayBuffer.sample_into`);
* ``forward(batch) -> fwd_out``: forward of the online and target networks (``forward_train``), for
  the routed / flat update, whose TD loss and gradient with respect to Q are the ``td_loss`` kernel;
* ``loss(batch, need_td_abs) -> (loss, td_abs, q)``: forward and the TD loss in torch ops
  (:func:`~rl_zerosync.learner.loss.td_loss`), for branching and RLlib's drop-in batches.

With ``compiled=False`` these are the eager ops (the default).
With ``compiled=True`` each is wrapped in ``torch.compile`` (inductor, static shapes): pointwise
chains and reductions become a few Triton kernels and the backward is compiled with the forward.
The compiled functions are traced during the learner's eager warm-up updates and then captured in
its CUDA graph like any other op; no host read is added. Compiled updates are not bit-identical to
eager ones (fused reductions round differently); the replay's integer hashing is exact either way.
A replay that samples with its own kernel (``replay.sample_kernel``) is not wrapped: a CuPy launch
cannot be traced, and it is one launch already.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, Iterator, Optional, Tuple

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


class UpdateParts:
    """The torch parts of an update for one module and replay (see the module docstring).

    Args:
        module: The trained RLModule (or its DDP wrapper); ``forward_train`` is called on it.
        replay: The device replay buffer sampled from.
        branching, gamma, double_q, loss_type: Passed to :func:`td_loss`.
        compiled: Wrap each part in ``torch.compile`` (CUDA; the learner turns it off on CPU).
    """

    def __init__(self, *, module: torch.nn.Module, replay: DeviceReplayBuffer, branching: bool, gamma: float,
                 double_q: bool, loss_type: str, compiled: bool) -> None:
        self.compiled = bool(compiled)

        def loss(batch: Dict[str, torch.Tensor], need_td_abs: bool
                 ) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
            out = td_loss(fwd_out=module.forward_train(batch), batch=batch, branching=branching, gamma=gamma,
                          double_q=double_q, loss_type=loss_type, need_td_abs=need_td_abs)
            return out.loss, out.td_abs, out.q

        wrap: Callable = (lambda fn: torch.compile(fn, dynamic=False)) if self.compiled else (lambda fn: fn)
        self.loss = wrap(loss)
        self.forward: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]] = wrap(module.forward_train)
        self.sample_into: Callable[[ReplaySample], None] = (
            replay.sample_into if replay.sample_kernel else wrap(replay.sample_into))
