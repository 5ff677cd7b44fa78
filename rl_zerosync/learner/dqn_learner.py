"""`ZeroSyncDQNTorchLearner`: RLlib's DQNTorchLearner with a zero-sync update.

One update (:meth:`ZeroSyncDQNTorchLearner._zero_sync_step`), entirely on the device:
forward through ``self.module[mid]`` (the DDP wrapper when ``num_learners > 1``, so gradients are
all-reduced in backward) -> TD loss (:mod:`rl_zerosync.learner.loss`; for routed / flat modules
trained from the device replay one ``td_loss`` launch writes the loss, its gradient with respect
to Q, |TD| and the Q stats, and backward starts from Q with that gradient; for a plain
Linear/[LayerNorm]/ReLU network that forward and backward are the linear kernels of
:mod:`rl_zerosync.learner.mlp`, which write the gradients straight into the flat buffer) -> backward
-> gradients gathered into one flat buffer and its global norm (:mod:`rl_zerosync.learner.flat_adam`) ->
``guard_check`` -> ``adam_step``: gradients scaled by ``loss_scale * clip_coef`` and Adam (AdamW)
on the flat parameters in one kernel, skipped on the device when the guard's ``found_inf`` is set
(parameters, moments and step count stay bit-identical) -> accumulators, Q stats, divergence.
With the device replay, sampling and the priority update join it, and on CUDA the whole thing is
captured once in a CUDA graph and replayed (:class:`GraphedUpdate`).

Two ways to drive it:

* ``learner.replay.add(rollout)``, ``learner.train(K)``, ``learner.collect_metrics()`` (the
  zero-sync algorithm): K updates with no host read; one readback per iteration.
* Drop-in for stock DQN (``config.learners(learner_class=ZeroSyncDQNTorchLearner)``):
  ``Learner.update()`` builds the batch with RLlib's learner connector and runs the same step
  (eager); it logs ``td_error`` for DQN's priority update and reads the guard back once per
  ``update()`` call (the stock loop's per-iteration boundary).

Differences from stock DQNTorchLearner: Adam with a float lr, stepped by the ``adam_step`` kernel
on flat parameters (schedules rejected; AdamW when the zerosync ``weight_decay`` setting is > 0;
one step count shared by all parameters); the global
norm clip also runs when the loss was clipped (the clipped loss drives the gradient); a
non-finite step is skipped instead of stepping with zeroed gradients; no per-update metrics
(``qf_loss``, ``qf_mean``, ...) but the per-iteration guard metrics of
:mod:`rl_zerosync.learner.training_guard`; in ``train()`` the target network is updated every
``target_network_update_freq`` *updates* (drop-in ``update()`` keeps RLlib's env-step meaning);
distributional DQN (``num_atoms > 1``) and multi-module setups are not supported.

DDP (``num_learners > 1``): the forward goes through the DDP wrapper (gradients all-reduced in
backward, so the global grad norm and the guard's skip decision are the same on every rank; the
loss is all-reduced before the guard); each learner keeps its own replay shard; on CUDA the DDP
wrapper is built on the learner's capture stream and the update, NCCL all-reduces included, is
captured in a CUDA graph after ``max(graph_warmup, 11)`` eager updates; the guard's metrics are
gathered from all ranks and combined at the per-iteration readback.
"""
from __future__ import annotations

import logging
from typing import Any, Collection, Dict, List, Optional, Tuple, Union

import torch

from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, StateDict

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.td_loss import td_loss_scratch_numel
from rl_zerosync.learner.flat_adam import FlatAdam
from rl_zerosync.learner.graph import GraphedUpdate
from rl_zerosync.learner.learner_settings import LearnerSettings
from rl_zerosync.learner.mlp import MLPKernels, mlp_kernel_blocker
from rl_zerosync.learner.torch_update import UpdateParts, tf32_matmuls
from rl_zerosync.learner.replay import DISCOUNTS, WEIGHTS, DeviceReplayBuffer, ReplaySample
from rl_zerosync.learner.targets import TargetUpdater
from rl_zerosync.learner.training_guard import TrainingGuard
from rl_zerosync.module import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS

__all__ = ["ZeroSyncDQNTorchLearner", "COMPONENT_ZEROSYNC"]

logger = logging.getLogger(__name__)

DDP_GRAPH_WARMUP = 11
"""Eager updates before capturing a DDP update (PyTorch's CUDA-graph notes: DDP needs >= 11)."""

COMPONENT_ZEROSYNC = "zerosync"
"""Learner state component holding the replay buffer and the zero-sync counters."""


class ZeroSyncDQNTorchLearner(DQNTorchLearner):
    """DQN learner whose update never waits on the host (see the module docstring)."""

    settings: LearnerSettings
    replay: DeviceReplayBuffer
    guard: TrainingGuard

    @override(DQNTorchLearner)
    def build(self) -> None:
        # Validate everything before RLlib builds modules and optimizers.
        self.settings = LearnerSettings.from_config(self.config)
        self._capture_stream: Optional[torch.cuda.Stream] = None
        if getattr(self.config, "num_atoms", 1) > 1:
            raise ValueError(
                f"num_atoms must be 1 for ZeroSyncDQNTorchLearner (distributional DQN is not "
                f"supported), got {self.config.num_atoms}"
            )
        super().build()
        mids = list(self.module.keys())
        if len(mids) != 1:
            raise ValueError(f"ZeroSyncDQNTorchLearner trains exactly one module, got module ids {mids}")
        self._mid: ModuleID = mids[0]
        inner = self.module[self._mid].unwrapped()
        self._branching = getattr(inner, "action_mode", None) == "branching"
        if self.settings.double_q and not getattr(inner, "uses_double_q", True):
            raise ValueError("double_q is True in the DQNConfig but the module was built with double_q=False")
        self._num_q = int(inner.action_space.n)
        s = self.settings
        kernels = self._kernels = get_kernels(self._device)
        world = torch.distributed.get_world_size() if self.distributed else 1
        self.guard = TrainingGuard(kernels=kernels, settings=s, world_size=world)
        self._optimizer = self.get_optimizer(self._mid)
        # The parameters become views of one flat buffer, stepped by one adam_step launch.
        self._flat = FlatAdam(self._optimizer, kernels, found_inf=self.guard.found_inf,
                              loss_scale=self.guard.loss_scale, grad_norm=self.guard.grad_norm,
                              grad_clip=s.grad_clip)
        self._params: List[torch.nn.Parameter] = list(self._flat.params)
        # DDP: each rank samples its own indices (seed + rank), not the same ones as every other rank.
        dist = torch.distributed
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.replay = DeviceReplayBuffer(
            capacity=s.replay_capacity, obs_shape=inner.observation_space.shape, device=self._device,
            gamma=s.gamma, n_step=s.n_step, prioritized=s.prioritized, alpha=s.alpha, beta=s.beta,
            priority_eps=s.priority_eps, seed=(s.seed + rank) % 2**64, kernels=kernels,
        )
        self._targets = TargetUpdater(pairs=inner.get_target_network_pairs(), tau=s.tau)
        if s.updates_per_graph > 1 and self.distributed:
            raise ValueError("learner.updates_per_graph > 1 is not supported with num_learners > 1 (DDP); "
                             f"got {s.updates_per_graph}, set it to 1")
        if s.compile and self.distributed:
            raise ValueError("learner.compile: torch.compile of the update is not supported with "
                             "num_learners > 1 (DDP); set compile: false")
        self._parts = UpdateParts(
            module=self.module[self._mid], replay=self.replay, branching=self._branching, gamma=s.gamma,
            double_q=s.double_q, loss_type=s.loss,
            compiled=bool(s.compile and self._device.type == "cuda"),
        )
        self._sample: Optional[ReplaySample] = None
        self._sample_rows: Optional[torch.Tensor] = None  # a population's row for the static batch (adopt_rows)
        self._grad_seed: Optional[torch.Tensor] = None
        self._batch: Optional[Dict[str, torch.Tensor]] = None
        # Routed / flat updates from the device replay: loss, dL/dQ, |TD| and Q stats in one td_loss launch.
        self._fused_td = not self._branching
        self._td: Optional[Dict[str, Optional[torch.Tensor]]] = None
        # ... and, for a plain Linear/ReLU network, its forward and backward as linear kernels.
        self._fused_mlp = self._fused_td and self._mlp_blocker() is None
        self._mlp: Optional[MLPKernels] = None
        self.use_graph = bool(s.graph and self._device.type == "cuda")
        # DDP rebuilds its gradient buckets during the first iterations: capture after they settled.
        warmup = max(s.graph_warmup, DDP_GRAPH_WARMUP) if self.distributed else s.graph_warmup
        self._graphed = (
            GraphedUpdate(self._device_update, warmup=warmup, before_capture=self._before_capture,
                          stream=self._capture_stream,
                          capture_error_mode="thread_local" if self.distributed else "global")
            if self.use_graph else None
        )
        self._updates = 0
        self._target_updates = 0
        self._warm = False
        self._dropin_pending = False

    @override(DQNTorchLearner)
    def _make_modules_ddp_if_necessary(self) -> None:
        # A graph captures DDP's all-reduce only if DDP was built on the capture stream (its
        # autograd hooks remember that stream): build the wrapper there and capture there.
        if self._device.type != "cuda" or not self.settings.graph:
            # Eager updates run on the current stream: DDP is built there too.
            super()._make_modules_ddp_if_necessary()
            return
        self._capture_stream = torch.cuda.Stream(device=self._device)
        self._capture_stream.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(self._capture_stream):
            super()._make_modules_ddp_if_necessary()
        torch.cuda.current_stream(self._device).wait_stream(self._capture_stream)

    # ---- read-only views for tests, benchmarks and tools ------------------------------------------
    @property
    def params(self) -> Tuple[torch.nn.Parameter, ...]:
        """The trained parameters, in the optimizer's order."""
        return tuple(self._params)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The Adam/AdamW of the trained module: its hyperparameters, and its state as views of the
        flat moments (stepped by :class:`~rl_zerosync.learner.flat_adam.FlatAdam`, never by ``step()``)."""
        return self._optimizer

    def set_lr(self, lr: float) -> None:
        """A new Adam learning rate from the next update on (population based training); the update's
        CUDA graph, captured with the old one, is captured again after its warm-up."""
        self._flat.set_lr(lr)
        if self._graphed is not None:
            self._graphed.reset()

    @property
    def flat_adam(self) -> FlatAdam:
        """The flat parameters, gradients and moments and their ``adam_step`` launch."""
        return self._flat

    @property
    def td_kernel(self) -> bool:
        """Whether routed / flat updates from the device replay take their loss and dL/dQ from the
        ``td_loss`` kernel (the default); False: the torch loss of :mod:`rl_zerosync.learner.loss`,
        as branching always does. Settable (comparisons and debugging); a captured graph is dropped."""
        return self._fused_td

    @td_kernel.setter
    def td_kernel(self, on: bool) -> None:
        if bool(on) and self._branching:
            raise ValueError("td_kernel: the td_loss kernel covers routed / flat modules, not branching")
        self._fused_td = bool(on)
        if not self._fused_td:
            self._fused_mlp, self._mlp = False, None
        if self._fused_td and self._sample is not None and self._td is None:
            self._bind_td(self.settings.train_batch_size_per_learner, self.settings.prioritized)
        if self._graphed is not None:
            self._graphed.reset()

    @property
    def mlp_kernel(self) -> bool:
        """Whether those ``td_loss`` updates run the Q network's forward and backward as
        ``linear_forward`` / ``linear_backward`` launches (:mod:`rl_zerosync.learner.mlp`): the default
        where the module is a plain Linear/ReLU stack (no dueling, LayerNorm or dropout), on one learner,
        with ``learner.compile`` and ``learner.tf32`` off. False: torch's forward and autograd.
        Settable (comparisons and debugging); turning ``td_kernel`` off turns it off; a captured graph
        is dropped."""
        return self._fused_mlp

    @mlp_kernel.setter
    def mlp_kernel(self, on: bool) -> None:
        if bool(on):
            reason = "td_kernel is off" if not self._fused_td else self._mlp_blocker()
            if reason is not None:
                raise ValueError(f"mlp_kernel: the linear kernels cannot run this update: {reason}")
        self._fused_mlp = bool(on)
        self._mlp = None
        if self._fused_mlp and self._sample is not None:
            self._bind_mlp()
        if self._graphed is not None:
            self._graphed.reset()

    def _mlp_blocker(self) -> Optional[str]:
        """Why the linear kernels cannot run this learner's update, or None."""
        if self.distributed:
            return "num_learners > 1 (DDP all-reduces the gradients inside autograd's backward)"
        if self.settings.compile:
            return "learner.compile is on (torch.compile of torch's forward and backward)"
        if self.settings.tf32:
            return "learner.tf32 is on (the kernels compute in float32)"
        return mlp_kernel_blocker(self.module[self._mid].unwrapped())

    @property
    def device(self) -> torch.device:
        """The device this learner trains on (RLlib's ``Learner._device``)."""
        return self._device

    @property
    def graph_captured(self) -> bool:
        """Whether the update is captured in a CUDA graph and replayed."""
        return self._graphed is not None and self._graphed.captured

    @property
    def updates(self) -> int:
        """Updates issued so far (host counter; restored from checkpoints)."""
        return self._updates

    @property
    def target_updates(self) -> int:
        """Target-network updates issued so far (host counter; restored from checkpoints)."""
        return self._target_updates

    # ---- optimizer ---------------------------------------------------------------------------
    @override(DQNTorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        params = self.get_parameters(self._module[module_id])
        lr, wd = float(self.settings.lr), float(self.settings.weight_decay)
        if wd > 0.0:
            # Decoupled decay (p *= 1 - lr * wd) inside adam_step, on every parameter (one param
            # group): a found_inf step skips the decay too, nothing moves.
            optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        else:
            # wd == 0: exactly the optimizer of a run without the knob (bit-identical default).
            optimizer = torch.optim.Adam(params, lr=lr)
        # lr is a float the optimizer owns: no RLlib Scheduler (its tensor lr would sync). The
        # optimizer holds hyperparameters and state; build() hands it to FlatAdam, which steps it.
        self.register_optimizer(module_id=module_id, optimizer=optimizer, params=params)

    def _before_capture(self) -> None:
        # Backward allocates the gradients from the graph's pool (the linear kernels write into flat slots).
        if self._mlp is None:
            self._optimizer.zero_grad(set_to_none=True)

    # ---- the update --------------------------------------------------------------------------
    def _bind_td(self, batch_size: int, prioritized: bool) -> None:
        """Static buffers of the ``td_loss`` launch: dL/dQ, |TD| (prioritized replay), scratch, counter."""
        dev = self._device
        # dq is the first half of a [2B, A] gradient whose second half stays 0: with the double-Q
        # forward of cat([obs, next_obs]), backward starts from the whole output (see _backward_from_q).
        dq_full = torch.zeros((2 * batch_size, self._num_q), dtype=torch.float32, device=dev)
        self._td = {
            "dq_full": dq_full,
            "dq": dq_full[:batch_size],
            "td_abs": torch.zeros(batch_size, dtype=torch.float32, device=dev) if prioritized else None,
            "scratch": torch.zeros(td_loss_scratch_numel(batch_size), dtype=torch.float64, device=dev),
            "blocks_done": torch.zeros(1, dtype=torch.int32, device=dev),
        }
        self._td_checked = False

    def _bind_mlp(self) -> None:
        """The linear kernels' static buffers for the static batch; their backward starts from ``td_loss``'s dL/dQ."""
        self._mlp = MLPKernels(module=self.module[self._mid].unwrapped(), kernels=self._kernels, flat=self._flat,
                               obs=self._batch[Columns.OBS], next_obs=self._batch[Columns.NEXT_OBS],
                               dq=self._td["dq"], double_q=self.settings.double_q)
        # Each parameter's .grad is its flat slot: the raw gradient of the last update, as with autograd.
        for p in self._params:
            p.grad = self._flat.grad_slot(p)

    def _td_loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Forward, then one ``td_loss`` launch: loss into the guard's buffer, dL/dQ into ``dq``, |TD|,
        Q stats into the guard's ``qstats_out``. Returns the online Q of the batch (it carries the graph)."""
        if self._mlp is not None:
            q, q_select, q_target = self._mlp.forward()
        else:
            fwd = self._parts.forward(batch)
            q, q_target = fwd[QF_PREDS], fwd[QF_TARGET_NEXT_PREDS]
            q_select = fwd[QF_NEXT_PREDS] if self.settings.double_q else q_target
        td = self._td
        args = (q.detach(), q_select, q_target, batch[Columns.ACTIONS], batch[Columns.REWARDS], batch[DISCOUNTS],
                batch[Columns.TERMINATEDS], batch.get(WEIGHTS), td["dq"], self.guard.loss, td["td_abs"],
                self.guard.qstats_out, td["scratch"], td["blocks_done"])
        if not self._td_checked:
            self._kernels.bind_td_loss(*args, loss_type=self.settings.loss)  # validates once
            self._td_checked = True
        elif q.shape != td["dq"].shape or not (q.is_contiguous() and q_select.is_contiguous()
                                                and q_target.is_contiguous()):
            raise ValueError(f"td_loss: the forward's Q must be contiguous {list(td['dq'].shape)}, got "
                             f"{list(q.shape)} (contiguous: {q.is_contiguous()}, {q_select.is_contiguous()}, "
                             f"{q_target.is_contiguous()})")
        self._kernels.td_loss(*args, loss_type=self.settings.loss)
        return q

    def _backward_from_q(self, q: torch.Tensor) -> None:
        """Backward with ``dL/dQ`` (the ``td_loss`` kernel's ``dq``).

        When ``q`` is the first half of the double-Q forward's ``[2B, A]`` output (a view of it,
        ``Tensor._base``), backward starts from that whole output with ``[dq; 0]``: the same gradient
        without the zero fill and copy that the split's own backward would launch.
        """
        td, base = self._td, q._base
        if (base is not None and base.requires_grad and base.shape == td["dq_full"].shape
                and base.data_ptr() == q.data_ptr() and base.stride() == q.stride()):
            torch.autograd.backward(base, td["dq_full"])
        else:
            torch.autograd.backward(q, td["dq"])

    def _zero_sync_step(
        self, batch: Dict[str, torch.Tensor], need_td_abs: bool = True, fused: bool = False
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One guarded update on ``batch`` (device tensors); returns (loss, |TD| or None). No host read.

        ``fused``: the batch is the replay's static batch of a routed / flat module: the loss and its
        gradient with respect to Q come from the ``td_loss`` kernel, and backward starts from Q.
        """
        mlp = self._mlp if fused else None
        if mlp is None:
            self._optimizer.zero_grad(set_to_none=True)
        if fused:
            q_graph = self._td_loss(batch)
            loss, td_abs, q = self.guard.loss, self._td["td_abs"], None
            if mlp is not None:
                mlp.backward()  # the gradients straight into their flat slots
            else:
                self._backward_from_q(q_graph)
        else:
            loss, td_abs, q = self._parts.loss(batch, need_td_abs)
            if self._grad_seed is None or self._grad_seed.device != loss.device:
                self._grad_seed = torch.ones((), dtype=loss.dtype, device=loss.device)
            loss.backward(self._grad_seed)  # the static 1.0 seed: no fill kernel per backward
        if mlp is None:
            self._flat.gather_grads()
        # Written straight into the guard's static buffer (no copy in check()).
        self._flat.grad_norm_into(self.guard.grad_norm)
        self.guard.check(loss, self.guard.grad_norm)
        self._flat.step()  # scale, clip, Adam(W); skipped on the device when found_inf is set
        self.guard.record(q)  # q None: td_loss wrote the Q stats
        return loss.detach(), td_abs

    def _device_update(self) -> None:
        """Sample into the static batch, update, write priorities: the graph-captured unit."""
        self._parts.sample_into(self._sample)
        _, td_abs = self._zero_sync_step(self._batch, need_td_abs=self.replay.prioritized, fused=self._fused_td)
        if td_abs is not None:
            self.replay.update_priorities(self._sample.indices, td_abs)

    def _count_update(self, batch_size: int) -> None:
        """Host bookkeeping after an update is issued (Python ints; fills, no reads)."""
        self._updates += 1
        if not self._warm and self._updates * batch_size >= self.settings.collapse_warmup_transitions:
            self.guard.set_warmup_done(True)
            self._warm = True

    def train(self, num_updates: int) -> None:
        """Enqueue ``num_updates`` updates from the device replay with no host read between them."""
        if isinstance(num_updates, bool) or not isinstance(num_updates, int) or num_updates < 0:
            raise ValueError(f"num_updates must be an int >= 0, got {num_updates!r}")
        if num_updates and self.replay.size == 0:
            raise ValueError("the replay buffer is empty: learner.replay.add(rollout) before train()")
        self.prepare_updates()
        if num_updates:
            self.weights_changed()
        freq = self.settings.target_network_update_freq
        block, bs = self.settings.updates_per_graph, self.settings.train_batch_size_per_learner
        done = 0
        with self._matmul_precision():
            while done < num_updates:
                if (block > 1 and self._graphed is not None and self._graphed.captured
                        and num_updates - done >= block and self._block_fits(block)):
                    self._graphed.block(block)  # `block` updates, one launch
                    for _ in range(block):
                        self._count_update(bs)
                    done += block
                    if self._updates % freq == 0:
                        self._update_targets()
                else:
                    if self._graphed is not None:
                        self._graphed()
                    else:
                        self._device_update()
                    self.after_update()
                    done += 1

    # ---- the parts of train() a population drives for its members (population_update.py) -----------
    def prepare_updates(self) -> None:
        """Allocate and bind the static batch and the update's buffers (once; again after :meth:`adopt_rows`)."""
        if self._sample is not None:
            return
        bs = self.settings.train_batch_size_per_learner
        self._sample = self.replay.make_sample_buffers(bs, packed=self._sample_rows)
        self._batch = self._sample.as_batch()
        if not self.settings.prioritized:
            del self._batch[WEIGHTS]  # uniform replay: all weights are 1 (the loss skips the multiply)
        self.guard.bind_q(bs, self._num_q)
        if self._fused_td:
            self._bind_td(bs, self.settings.prioritized)
        if self._fused_mlp:
            self._bind_mlp()

    def weights_changed(self) -> None:
        """Count a new version of the weights (updates were issued), as ``Learner.update()`` does."""
        self._weights_seq_no += 1

    def device_update(self) -> None:
        """One update from the device replay, eager (:meth:`prepare_updates` first); no host read."""
        self._device_update()

    def draw_batch(self) -> None:
        """Sample the static batch from the replay (the first part of an update; advances the replay's RNG)."""
        self._parts.sample_into(self._sample)

    @property
    def static_batch(self) -> Dict[str, torch.Tensor]:
        """The static batch the updates read (:meth:`prepare_updates` first): RLlib column names plus
        ``discounts`` (and ``weights`` with prioritized replay)."""
        return self._batch

    @property
    def sample_indices(self) -> torch.Tensor:
        """The replay rows of the static batch (for the priority update)."""
        return self._sample.indices

    def after_update(self) -> None:
        """The host bookkeeping after one update was issued: the update count, the collapse warmup
        switch and, every ``target_network_update_freq`` updates, the target-network update (launches, no read)."""
        self._count_update(self.settings.train_batch_size_per_learner)
        if self._updates % self.settings.target_network_update_freq == 0:
            self._update_targets()

    def _update_targets(self) -> None:
        self._targets.update()
        self._target_updates += 1

    def release_grads(self) -> None:
        """Before a CUDA graph capture of updates: gradients set to None, so backward allocates them from
        the graph's pool (a no-op where the linear kernels write into the flat slots)."""
        self._before_capture()

    @property
    def q_module(self) -> torch.nn.Module:
        """The trained RLModule, unwrapped (not the DDP wrapper)."""
        return self.module[self._mid].unwrapped()

    def target_pairs(self) -> List[Tuple[torch.nn.Parameter, torch.nn.Parameter]]:
        """``(online, target)`` parameter pairs of the trained module, in the optimizer's order."""
        inner = self.q_module
        pairs = []
        for online, target in inner.get_target_network_pairs():
            pairs += list(zip(online.parameters(), target.parameters()))
        return pairs

    def adopt_rows(self, *, flat: Dict[str, torch.Tensor], guard: Dict[str, torch.Tensor],
                   target_params: torch.Tensor, sample_rows: torch.Tensor) -> None:
        """Move this learner's device state into rows of a population's stacked buffers (member k's rows):
        the flat parameters, gradients and Adam moments (:meth:`FlatAdam.adopt`), the guard's buffers
        (:meth:`TrainingGuard.adopt`), the target network (``target_params``, float32 ``[numel]``, laid out
        like the flat parameters) and the static batch's packed rows (``sample_rows``, int32 ``[B,
        row_words]``). Values are copied, so the learner trains on exactly as before; its bound buffers
        and captured graph are made again on the next update."""
        if self.distributed:
            raise ValueError("adopt_rows: not with num_learners > 1 (DDP)")
        flat_adam = self._flat
        if target_params.shape != (flat_adam.numel,) or target_params.dtype != torch.float32:
            raise ValueError(f"adopt_rows: target_params must be float32 [{flat_adam.numel}], got "
                             f"{target_params.dtype} {list(target_params.shape)}")
        bs = self.settings.train_batch_size_per_learner
        if sample_rows.shape != (bs, self.replay.row_words) or sample_rows.dtype != torch.int32:
            raise ValueError(f"adopt_rows: sample_rows must be int32 [{bs}, {self.replay.row_words}], got "
                             f"{sample_rows.dtype} {list(sample_rows.shape)}")
        self.guard.adopt(guard)
        flat_adam.adopt(flat, found_inf=self.guard.found_inf, loss_scale=self.guard.loss_scale,
                        grad_norm=self.guard.grad_norm)
        with torch.no_grad():
            for online, target in self.target_pairs():
                view = target_params[flat_adam.slot(online)].view(target.shape)
                view.copy_(target.detach())
                target.data = view
        inner = self.module[self._mid].unwrapped()
        self._targets = TargetUpdater(pairs=inner.get_target_network_pairs(), tau=self.settings.tau)
        self._sample_rows = sample_rows
        self._sample, self._batch, self._td, self._mlp = None, None, None, None
        if self._graphed is not None:
            self._graphed.reset()

    def _block_fits(self, n: int) -> bool:
        """Whether the next ``n`` updates can run as one graph launch: no target-network update and
        no collapse-warmup switch (host-issued after an update) is due after one of the first ``n - 1``."""
        done, freq = self._updates, self.settings.target_network_update_freq
        if (done // freq + 1) * freq < done + n:
            return False
        if not self._warm:
            switch = -(-self.settings.collapse_warmup_transitions // self.settings.train_batch_size_per_learner)
            if done < switch < done + n:
                return False
        return True

    def _matmul_precision(self):
        """TF32 matmuls for the update when ``learner.tf32`` is on (CUDA), else a no-op context."""
        return tf32_matmuls(self.settings.tf32 and self._device.type == "cuda")

    def collect_metrics(self, values: Optional[List[float]] = None) -> Dict[str, float]:
        """The one readback per iteration; may raise :class:`~rl_zerosync.learner.training_guard.TrainingHalted`.

        ``values``: the guard's pack already read back by a population (one readback for all members).

        Returns the guard metrics of :mod:`rl_zerosync.learner.training_guard` plus ``target_updates``
        (target-network updates issued by ``train()`` so far) as Python floats, and logs them to
        ``self.metrics`` under ``(module_id, "zerosync", name)`` (window 1).
        """
        metrics = self.guard.collect(values)
        metrics["target_updates"] = float(self._target_updates)
        for key, value in metrics.items():
            self.metrics.log_value((self._mid, COMPONENT_ZEROSYNC, key), value, window=1)
        self.guard.apply_policies()
        return metrics

    # ---- drop-in path (stock DQN.training_step -> Learner.update) ------------------------------
    @override(DQNTorchLearner)
    def _update(self, batch: Dict[str, Any], **kwargs) -> Tuple[Any, Any, Any]:
        mid_batch = batch[self._mid]
        size = int(mid_batch[Columns.REWARDS].shape[0])
        self.guard.bind_q(size, self._num_q)
        with self._matmul_precision():
            loss, td_abs = self._zero_sync_step(mid_batch)
        self._count_update(size)
        self.metrics.log_value((self._mid, TD_ERROR_KEY), td_abs, reduce="item_series")
        self._dropin_pending = True
        return {}, {self._mid: loss}, {}

    @override(DQNTorchLearner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        if self._dropin_pending:
            self._dropin_pending = False
            self.collect_metrics()

    # ---- checkpoints ---------------------------------------------------------------------------
    @override(DQNTorchLearner)
    def get_state(
        self,
        components: Optional[Union[str, Collection[str]]] = None,
        *,
        not_components: Optional[Union[str, Collection[str]]] = None,
        **kwargs,
    ) -> StateDict:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(COMPONENT_ZEROSYNC, components, not_components):
            g = self.guard
            state[COMPONENT_ZEROSYNC] = {
                "updates": self._updates,
                "target_updates": self._target_updates,
                # host read: checkpoint boundary
                "div_counter": int(g.div_counter.cpu()[0]),  # host read: checkpoint state
                "div_flag": int(g.div_flag.cpu()[0]),  # host read: checkpoint boundary
                "update_index": float(g.update_index.cpu()[0]),  # host read: checkpoint boundary
            }
            if not self.distributed:
                # With DDP RLlib saves only the first learner's state: ZeroSyncDQN saves every
                # rank's shard in the algorithm state instead.
                state[COMPONENT_ZEROSYNC]["replay"] = self.replay.state_dict()
        return state

    @override(DQNTorchLearner)
    def set_state(self, state: StateDict) -> None:
        super().set_state(state)
        zs = state.get(COMPONENT_ZEROSYNC)
        if zs is not None:
            if "replay" in zs:
                self.replay.load_state_dict(zs["replay"])
            self._updates = int(zs.get("updates", 0))
            self._target_updates = int(zs.get("target_updates", 0))
            self.guard.div_counter.fill_(int(zs.get("div_counter", 0)))
            self.guard.div_flag.fill_(int(zs.get("div_flag", 0)))
            self.guard.update_index.fill_(float(zs.get("update_index", 0.0)))
            bs = self.settings.train_batch_size_per_learner
            self._warm = self._updates * bs >= self.settings.collapse_warmup_transitions
            self.guard.set_warmup_done(self._warm)
        # RLlib replaced the optimizer's state tensors: back into the flat buffers the kernel and
        # any captured graph use (the graph is re-captured anyway: the batch buffers may change).
        self._flat.absorb_state()
        if self._mlp is not None:
            self._bind_mlp()  # fresh buffers bound to the restored parameters
        if self._graphed is not None:
            self._graphed.reset()
