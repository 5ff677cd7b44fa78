"""One learner update of P population members at once: their state stacked with a member dimension.

:class:`PopulationUpdate` takes the learners of P members (one RLlib learner per member, built in
one process on one device; their network shapes and batch size agree) and moves their device state
into stacked buffers with a leading member dimension (:meth:`ZeroSyncDQNTorchLearner.adopt_rows`):
flat parameters, gradients, Adam moments and step ``[P, n]``, target networks ``[P, n]``, the
training guard's buffers ``[P, ...]`` and the static batches ``[P, B, row_words]``. Row k *is* member
k's state (its module's parameters and its optimizer's state are views of it), so checkpoints,
evaluation, PBT's copies and the env runner's weight sync keep working on each member as before.

One population update is, in one of two modes (``population.update``):

* ``per_member``: every member's own update (:meth:`ZeroSyncDQNTorchLearner.device_update`: its
  kernels, or their torch twins on the CPU) one after the other. This is the reference: member k is
  bit for bit the single run with its seed and hyperparameters. The default on the CPU.
* ``batched``: every member draws its batch from its own replay shard (its own RNG stream), then
  the ops of :mod:`rl_zerosync.kernels.member_ops` update all members at once: the Q network's forward
  as batched GEMMs, the double-DQN loss, one backward for all members (autograd; member k's gradient
  is that of its own loss), the per-member gradient norm, guard, Adam / AdamW step with each member's
  lr, weight decay and clip (a bad step of member k is skipped for k alone), Q stats, divergence and
  accumulators. Matches ``per_member`` to float32 rounding (``tests/test_population_update.py``). The
  default on CUDA from :data:`BATCHED_FROM` members on where the members' network is the plain
  Linear/[LayerNorm]/ReLU stack of routed / flat actions; otherwise ``per_member``
  (:func:`batched_blocker` says why).

On CUDA (``learner.graph``) either mode is captured once in one CUDA graph and replayed: one launch
per population update, no host read. ``batched`` reads the members' optimizer hyperparameters from
``[P, 1]`` device rows written in place when a member's change (PBT's lr), so its graph is kept
(:attr:`PopulationUpdate.graph_captures`); ``per_member``'s kernels bind the lr as a number, so there a
changed lr captures the graph again. The host work after an update (update counts, the collapse
warmup switch, each member's target update every its own ``target_update_freq``) is issued per
member by :meth:`ZeroSyncDQNTorchLearner.after_update`, as in a single run. :meth:`collect` reads every
member's guard metrics back in one readback.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, List, Optional, Sequence

import torch

from rl_zerosync.kernels import AsyncReadback
from rl_zerosync.kernels import member_ops as M
from rl_zerosync.kernels.adam import derived_constants
from rl_zerosync.kernels.layouts import PACK
from rl_zerosync.learner import flat_adam as fa
from rl_zerosync.learner import training_guard as tg
from rl_zerosync.learner.graph import GraphedUpdate
from rl_zerosync.learner.mlp import plain_layers, mlp_kernel_blocker
from rl_zerosync.learner.replay import WEIGHTS

__all__ = ["UPDATE_MODES", "PopulationUpdate", "batched_blocker"]

UPDATE_MODES = ("auto", "batched", "per_member")
"""``population.update``: ``auto`` = ``batched`` on CUDA from :data:`BATCHED_FROM` members where it can
run, else ``per_member``."""
BATCHED_FROM = 8
"""``auto`` batches from this many members on: on one H200 at ``local.yaml`` size the batched update took
0.47 ms for 1 member (0.10 ms per_member), 0.77 ms for 8 (0.85 ms) and 2.97 ms for 64 (6.79 ms)
(``benchmarks/results/population_update.json``)."""


def batched_blocker(learners: Sequence) -> Optional[str]:
    """Why the members' update cannot run ``batched``, or None."""
    first = learners[0]
    s0 = first.settings
    for k, learner in enumerate(learners):
        s = learner.settings
        if learner.distributed:
            return f"member {k} has num_learners > 1 (DDP)"
        if s.compile or s.tf32:
            return f"member {k} has learner.compile or learner.tf32 on (the batched update computes in float32)"
        reason = mlp_kernel_blocker(learner.q_module)
        if reason is not None:
            return f"member {k}: {reason}"
        if (s.double_q, s.loss, s.train_batch_size_per_learner) != (s0.double_q, s0.loss, s0.train_batch_size_per_learner):
            return f"member {k} differs from member 0 in double_q, loss or batch size"
        if learner.device != first.device:
            return f"member {k} is on {learner.device}, member 0 on {first.device}"
    return None


def _stack(shape: tuple, dtype: torch.dtype, size: int, device: torch.device) -> torch.Tensor:
    return torch.zeros((size,) + tuple(shape), dtype=dtype, device=device)


class PopulationUpdate:
    """The update of P members' learners at once (see the module docstring).

    Args:
        learners: The members' :class:`~rl_zerosync.learner.dqn_learner.ZeroSyncDQNTorchLearner`, in
            member order; one device, one network shape and batch size.
        mode: One of :data:`UPDATE_MODES`.
        graph: ``update -> wrapper`` replacing the CUDA graph of the update (:class:`GraphedUpdate`'s
            interface: call, ``reset``, ``captured``, ``captures``), e.g. a stand-in that counts captures on
            a CPU; default: a ``GraphedUpdate`` on CUDA with ``learner.graph``, else none.
    """

    def __init__(self, learners: Sequence, mode: str = "auto", *,
                 graph: Optional[Callable[[Callable[[], None]], object]] = None) -> None:
        if mode not in UPDATE_MODES:
            raise ValueError(f"population.update must be one of {list(UPDATE_MODES)}, got {mode!r}")
        if not learners:
            raise ValueError("PopulationUpdate: no learners")
        self.learners = list(learners)
        first = self.learners[0]
        self.size, self.device = len(self.learners), first.device
        blocker = batched_blocker(self.learners)
        if mode == "batched" and blocker is not None:
            raise ValueError(f"population.update: batched cannot run these members: {blocker}")
        if mode == "auto":
            batched = blocker is None and self.device.type == "cuda" and self.size >= BATCHED_FROM
            mode = "batched" if batched else "per_member"
        self.mode = mode
        """``batched`` or ``per_member`` (``auto`` resolved)."""
        numel = {learner.flat_adam.numel for learner in self.learners}
        words = {learner.replay.row_words for learner in self.learners}
        batch = {learner.settings.train_batch_size_per_learner for learner in self.learners}
        if len(numel) != 1 or len(words) != 1 or len(batch) != 1:
            raise ValueError(f"PopulationUpdate: the members' shapes differ (parameters {sorted(numel)}, replay "
                             f"row words {sorted(words)}, batch sizes {sorted(batch)}); a population shares one shape")
        self._adopt(numel.pop(), words.pop(), batch.pop())
        self._batched: Optional[SimpleNamespace] = None
        self._hparams_key: Optional[tuple] = None
        self._hp: Optional[SimpleNamespace] = None  # batched: the members' hyperparameters, [P, 1] each
        fn: Callable[[], None] = self._batched_update if mode == "batched" else self._per_member_update
        self._fn = fn
        use_graph = self.device.type == "cuda" and all(learner.settings.graph for learner in self.learners)
        self._graphed = (graph(fn) if graph is not None else
                         GraphedUpdate(fn, warmup=max(learner.settings.graph_warmup for learner in self.learners),
                                       before_capture=self._before_capture) if use_graph else None)
        self._pack = torch.zeros((self.size, PACK.size), dtype=torch.float64, device=self.device)
        self._readback = AsyncReadback(self.size * PACK.size, torch.float64, self.device)

    # ---- stacked state --------------------------------------------------------------------------
    def _adopt(self, numel: int, row_words: int, batch: int) -> None:
        """Allocate the stacked buffers and move every member's state into its rows."""
        p, dev, first = self.size, self.device, self.learners[0]
        flat = first.flat_adam
        self.flat = {name: _stack(getattr(flat, name).shape, torch.float32, p, dev) for name in fa.STACKED}
        g = first.guard
        self.guard = SimpleNamespace(**{name: _stack(getattr(g, name).shape, getattr(g, name).dtype, p, dev)
                                        for name in tg.STACKED})
        self.target = _stack((numel,), torch.float32, p, dev)
        self.sample_rows = _stack((batch, row_words), torch.int32, p, dev)
        for k, learner in enumerate(self.learners):
            learner.adopt_rows(flat={name: buf[k] for name, buf in self.flat.items()},
                               guard={name: getattr(self.guard, name)[k] for name in tg.STACKED},
                               target_params=self.target[k], sample_rows=self.sample_rows[k])

    def _before_capture(self) -> None:
        for learner in self.learners:
            learner.release_grads()

    def disable_graph(self) -> None:
        """Run the population updates eagerly from now on (profiling, comparisons): the same updates."""
        self._graphed = None

    @property
    def hyperparameter_rows(self) -> Optional[SimpleNamespace]:
        """``batched``: the ``[P, 1]`` device tensors of the members' hyperparameters the update reads
        (``lr``, ``beta1``, ``beta2``, ``eps``, ``c1``, ``c2``, ``decay``, ``clip``, ``use_clip``,
        ``loss_clip``, ``collapse``, ``div_threshold``, ``patience``), the same tensors for the
        population's life; None before the first update and with ``per_member``."""
        return self._hp

    @property
    def graph_captures(self) -> int:
        """CUDA graphs captured for the population update so far (0 without a graph): 1 once captured; a
        PBT step adds none with ``batched`` (the hyperparameter rows are written in place)."""
        return self._graphed.captures if self._graphed is not None else 0

    @property
    def graph_captured(self) -> bool:
        """Whether the population update is captured in a CUDA graph and replayed."""
        return self._graphed is not None and self._graphed.captured

    # ---- per_member -----------------------------------------------------------------------------
    def _per_member_update(self) -> None:
        for learner in self.learners:
            learner.device_update()

    # ---- batched --------------------------------------------------------------------------------
    def _bind_batched(self) -> SimpleNamespace:
        """The stacked views the batched update reads (once, after every member bound its batch)."""
        first = self.learners[0]
        p, b = self.size, first.settings.train_batch_size_per_learner
        inner, flat = first.q_module, first.flat_adam
        to_online = {id(t): o for o, t in first.target_pairs()}

        def member_layers(net: torch.nn.Module, store: torch.Tensor) -> List[M.MemberLayer]:
            """Member views of ``net``'s layers in ``store`` ``[P, n]`` (laid out as the flat parameters)."""
            def view(param: torch.Tensor) -> torch.Tensor:
                return store[:, flat.slot(to_online.get(id(param), param))].view((p,) + tuple(param.shape))

            return [M.MemberLayer(view(lin.weight), view(lin.bias), None if norm is None else view(norm.weight),
                                  None if norm is None else view(norm.bias), 1e-5 if norm is None else float(norm.eps))
                    for lin, norm in plain_layers(net)]

        online = member_layers(inner.q_net, self.flat["flat_params"])
        grads = member_layers(inner.q_net, self.flat["flat_grads"])
        # The stacked batch: the replay's column views of all members' rows at once.
        cols = first.replay.columns_of(self.sample_rows.view(p * b, -1))
        batch = {key: value.reshape((p, b) + tuple(value.shape[1:])) for key, value in cols.items()}
        for key in ("obs", "next_obs"):
            batch[key] = batch[key].reshape(p, b, -1)
        return SimpleNamespace(online=online, target=member_layers(inner.target_q_net, self.target), batch=batch,
                               grad_views=[t for layer in grads for t in layer[:4] if t is not None],
                               grads=self.flat["flat_grads"], prioritized=first.settings.prioritized,
                               double_q=first.settings.double_q, loss_type=first.settings.loss)

    def _hparams(self) -> None:
        """On first use, or when a member's optimizer hyperparameters changed (PBT's lr through the
        member's learner): ``batched`` writes the ``[P, 1]`` rows it reads in place (a captured graph reads
        them by address: it stays valid, nothing is captured again); ``per_member`` runs each member's own
        ``adam_step``, whose launch binds its lr as a number, so its captured graph is dropped and
        captured again after its warm-up."""
        hps = [learner.flat_adam.hyperparameters for learner in self.learners]
        key = tuple(tuple(sorted(h.items())) for h in hps)
        if key == self._hparams_key:
            return
        first_use = self._hparams_key is None
        self._hparams_key = key
        if self.mode == "batched":
            self._hparam_rows(hps)
        elif not first_use and self._graphed is not None:
            self._graphed.reset()

    def _hparam_rows(self, hps: List[dict]) -> None:
        """Every member's optimizer hyperparameters as ``[P, 1]`` tensors on the device: allocated once,
        then written in place (the batched update and its captured graph read these very tensors)."""
        settings = [learner.settings for learner in self.learners]
        consts = [derived_constants(h["lr"], h["beta1"], h["beta2"], h["weight_decay"]) for h in hps]
        columns = {
            "lr": ([h["lr"] for h in hps], torch.float32), "beta1": ([h["beta1"] for h in hps], torch.float32),
            "beta2": ([h["beta2"] for h in hps], torch.float32), "eps": ([h["eps"] for h in hps], torch.float32),
            "c1": ([c[0] for c in consts], torch.float32), "c2": ([c[1] for c in consts], torch.float32),
            "decay": ([c[2] for c in consts], torch.float32),
            "clip": ([h["grad_clip"] if h["grad_clip"] is not None else 1.0 for h in hps], torch.float32),
            "use_clip": ([h["grad_clip"] is not None for h in hps], torch.bool),
            "loss_clip": ([float(s.loss_clip) for s in settings], torch.float32),
            "collapse": ([learner.guard.collapse_threshold for learner in self.learners], torch.float32),
            "div_threshold": ([float(s.divergence_threshold) for s in settings], torch.float32),
            "patience": ([int(s.divergence_patience) for s in settings], torch.int32)}
        host = {name: torch.tensor(values, dtype=dtype).reshape(-1, 1) for name, (values, dtype) in columns.items()}
        if self._hp is None:
            self._hp = SimpleNamespace(**{name: col.to(self.device) for name, col in host.items()})
            return
        for name, col in host.items():
            getattr(self._hp, name).copy_(col)  # in place: the same device tensors, new values

    def _batched_update(self) -> None:
        """Sample every member's batch, then update every member at once (no host read)."""
        for learner in self.learners:
            learner.draw_batch()
        z, g, hp = self._batched, self.guard, self._hp
        batch = z.batch
        weights = None
        if z.prioritized:
            weights = torch.stack([learner.static_batch[WEIGHTS] for learner in self.learners])
        leaves = [t.detach().requires_grad_(True) for layer in z.online
                  for t in (layer.weight, layer.bias, layer.gamma, layer.beta) if t is not None]
        it = iter(leaves)
        online = [M.MemberLayer(next(it), next(it), *((next(it), next(it)) if layer.gamma is not None else
                                                      (None, None)), layer.eps) for layer in z.online]
        with torch.no_grad():
            q_target = M.mlp_forward(z.target, batch["next_obs"])
            q_select = M.mlp_forward(z.online, batch["next_obs"]) if z.double_q else q_target
        with torch.enable_grad():
            q = M.mlp_forward(online, batch["obs"])
            loss, td_abs = M.td_loss(q, q_select, q_target, batch["actions"], batch["rewards"], batch["discounts"],
                                     batch["terminateds"], weights, loss_type=z.loss_type)
            grads = torch.autograd.grad(loss.sum(), leaves)
        M.qstats(q.detach(), g.qstats_out)
        g.loss.copy_(loss.detach().unsqueeze(1))
        torch._foreach_copy_(z.grad_views, list(grads))
        M.grad_norm(z.grads, g.grad_norm)
        M.guard_check(g.loss, g.grad_norm, g.warmup_done, g.flags, g.clipped_loss, g.loss_scale, g.found_inf,
                      loss_clip=hp.loss_clip, collapse_threshold=hp.collapse)
        f = self.flat
        M.adam_step(f["flat_params"], f["flat_grads"], f["exp_avg"], f["exp_avg_sq"], f["step_count"], g.found_inf,
                    g.loss_scale, g.grad_norm, lr=hp.lr, beta1=hp.beta1, beta2=hp.beta2, eps=hp.eps, c1=hp.c1,
                    c2=hp.c2, decay=hp.decay, clip=hp.clip, use_clip=hp.use_clip)
        M.divergence(g.qstats_out, g.div_counter, g.div_flag, threshold=hp.div_threshold, patience=hp.patience)
        M.guard_record(g.clipped_loss, g.loss, g.grad_norm, g.flags, g.qstats_out, g.div_flag, g.accum, g.qagg,
                       g.records, g.update_index)
        if z.prioritized:
            for k, learner in enumerate(self.learners):
                learner.replay.update_priorities(learner.sample_indices, td_abs[k])

    # ---- driving --------------------------------------------------------------------------------
    def train(self, num_updates: Sequence[int]) -> None:
        """``num_updates[k]`` updates of member k: ``min`` of them as population updates, the rest of
        each member's alone (eager). No host read."""
        if len(num_updates) != self.size:
            raise ValueError(f"train: expected {self.size} update counts (one per member), got {len(num_updates)}")
        for k, n in enumerate(num_updates):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"train: member {k}'s update count must be an int >= 0, got {n!r}")
            if n and self.learners[k].replay.size == 0:
                raise ValueError(f"train: member {k}'s replay buffer is empty: add a rollout before train()")
        for learner, n in zip(self.learners, num_updates):
            learner.prepare_updates()
            if n:
                learner.weights_changed()
        together = min(num_updates)
        if together:
            if self.mode == "batched" and self._batched is None:
                self._batched = self._bind_batched()
            self._hparams()
        for _ in range(together):
            if self._graphed is not None:
                self._graphed()
            else:
                self._fn()
            for learner in self.learners:
                learner.after_update()
        for learner, n in zip(self.learners, num_updates):
            for _ in range(n - together):
                learner.device_update()
                learner.after_update()

    def collect(self) -> List[List[float]]:
        """Every member's guard pack (:data:`~rl_zerosync.kernels.layouts.PACK`) in one readback; member
        k's learner takes row k with ``collect_metrics(values=...)``."""
        tg.pack_rows(self.guard, self._pack)
        self._readback.start(self._pack)
        vals = self._readback.wait().tolist()  # host read: the one readback of the population's iteration
        return [vals[k * PACK.size:(k + 1) * PACK.size] for k in range(self.size)]
