"""Training guard state: device buffers, kernel launches, one readback per iteration, policies.

Per update (all on the device, no host read):

1. :meth:`TrainingGuard.check` copies the loss and the global grad norm into static buffers (in
   DDP mode the loss is first averaged over the ranks with one all-reduce, so every rank takes the
   same decisions; the grad norm is already global because DDP all-reduced the gradients) and
   launches ``guard_check`` -> ``flags``, ``clipped_loss``, ``loss_scale``, ``found_inf``.
2. :meth:`TrainingGuard.record` (after the optimizer step) launches ``qstats`` on the batch's Q,
   ``divergence`` and ``guard_record`` (the accumulators, the Q stats folded into the iteration
   aggregate and, per check, the first triggering update: index, loss, grad norm, Q range): four
   kernels on CUDA.

Per training iteration, :meth:`TrainingGuard.collect` packs everything into one float64 buffer,
reads it with one ``AsyncReadback`` (pinned, non-blocking copy + event wait), zeroes the
per-iteration accumulators on the device and returns Python floats; :meth:`TrainingGuard.apply_policies`
then warns or raises :class:`TrainingHalted`. Every buffer, the pack included, is read and written by
field name through the layouts of ``rl_zerosync.kernels.layouts``, the ones the CUDA kernels and
their twins share. Update indices are 0-based and count every update
this learner ran (restored from checkpoints).

With DDP (``world_size > 1``) the packs of all ranks are first gathered on the device (one
``all_gather`` at the boundary, none per update) and read back together; every rank then combines
them the same way, so all ranks report and act on the same numbers (:func:`combine_ranks`). The
counters and the loss / grad-norm sums are global by construction (one decision per update for all
ranks) and are checked to agree: a disagreement raises ``RuntimeError`` naming the ranks' values.
The Q statistics and the divergence counter are per rank (each rank sees its own replay shard) and
are combined: min of ``q_min``, max of ``q_max``, ``q_mean`` / ``q_all_mean`` over all ranks'
batches, max of the divergence counter and flag, and the earliest divergence record.

Metrics (per iteration; ``n`` = updates with a finite loss and grad norm, ``m`` = updates whose Q
was all finite):

* ``updates``: updates run; ``skipped``: non-finite updates (the optimizer step was skipped);
  ``clip_events``: updates whose loss exceeded ``loss_clip``; ``collapse_events``: updates past the
  warmup with grad norm < ``lr * collapse_multiplier``.
* ``loss_mean`` = sum(clipped loss) / n; ``grad_norm_mean`` = sum(global grad norm before
  clipping) / n (NaN when n = 0).
* ``q_min`` / ``q_max``: min / max over updates of the batch's min / max per-row max-Q;
  ``q_mean`` = mean over the m updates of the batch mean of per-row max-Q; ``q_all_mean`` = mean of
  the batch means of all Q (NaN when m = 0).
* ``divergence_count``: the device patience counter (consecutive diverged updates) at the read;
  ``divergence_flag``: 1 once it reached ``divergence_patience``.
* ``updates_lifetime``: updates run by this learner since it was built (or restored).
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import torch

from rl_zerosync.kernels import AsyncReadback, Kernels, qstats_scratch_numel
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, PACK, QAGG, QSTATS, RECORD
from rl_zerosync.learner.learner_settings import LearnerSettings
from rl_zerosync.learner.rows import move_into_rows

__all__ = ["STACKED", "pack_rows", "CHECKS", "TrainingGuard", "TrainingHalted", "METRIC_NAMES", "combine_ranks"]

logger = logging.getLogger(__name__)

CHECKS = CHECK.names
"""The guard's checks, in the row order of its first-trigger records (``layouts.CHECK``)."""
METRIC_NAMES = (
    "loss_mean",
    "grad_norm_mean",
    "updates",
    "skipped",
    "clip_events",
    "collapse_events",
    "q_min",
    "q_max",
    "q_mean",
    "q_all_mean",
    "divergence_count",
    "divergence_flag",
    "updates_lifetime",
)
_SEEN, _INDEX = RECORD.offset("seen"), RECORD.offset("update_index")
STACKED = ("loss", "grad_norm", "warmup_done", "clipped_loss", "loss_scale", "found_inf", "flags", "accum",
           "qstats_out", "div_counter", "div_flag", "qagg", "records", "update_index")
"""The guard's per-update buffers (attributes), which a population stacks with a member dimension
(:meth:`TrainingGuard.adopt`)."""


def _unpack(vals: List[float]) -> Tuple[Dict[str, float], List[List[float]]]:
    """One rank's pack (see :meth:`TrainingGuard.collect`) -> (metrics, first-trigger records)."""
    pack = PACK.split(vals)
    acc, qagg = ACCUM.split(pack["accum"]), QAGG.split(pack["qagg"])
    rows = pack["records"]
    recs = [rows[c * RECORD.size:(c + 1) * RECORD.size] for c in range(CHECK.size)]
    n, m = acc["updates"] - acc["nonfinite"], qagg["count"]
    nan = float("nan")
    metrics = {
        "loss_mean": acc["loss_sum"] / n if n > 0 else nan,
        "grad_norm_mean": acc["grad_norm_sum"] / n if n > 0 else nan,
        "updates": acc["updates"],
        "skipped": acc["nonfinite"],
        "clip_events": acc["clipped"],
        "collapse_events": acc["collapse"],
        "q_min": qagg["min"] if m > 0 else nan,
        "q_max": qagg["max"] if m > 0 else nan,
        "q_mean": qagg["mean_sum"] / m if m > 0 else nan,
        "q_all_mean": qagg["all_mean_sum"] / m if m > 0 else nan,
        "divergence_count": pack["div_counter"],
        "divergence_flag": pack["div_flag"],
        "updates_lifetime": pack["update_index"],
        "_q_sum": qagg["mean_sum"],
        "_q_all_sum": qagg["all_mean_sum"],
        "_q_rows": m,
    }
    return metrics, recs


_GLOBAL = ("updates", "skipped", "clip_events", "collapse_events", "loss_mean", "grad_norm_mean", "updates_lifetime")


def combine_ranks(
    per_rank: List[Tuple[Dict[str, float], List[List[float]]]]
) -> Tuple[Dict[str, float], List[List[float]]]:
    """Combine the ranks' unpacked metrics (see the module docstring); one rank: unchanged.

    Raises ``RuntimeError`` if the ranks disagree on a value that must be global (the counters,
    loss and grad-norm means): that would mean the ranks took different guard decisions.
    """
    metrics0, recs0 = per_rank[0]
    for key in _GLOBAL:
        values = [m[key] for m, _ in per_rank]
        same = all(v == values[0] or (v != v and values[0] != values[0]) for v in values)
        if not same:
            raise RuntimeError(
                f"guard: the DDP ranks disagree on {key!r} (per rank {values}); the skip / clip / "
                f"collapse decisions must be identical on every rank"
            )
    out = {k: v for k, v in metrics0.items() if not k.startswith("_")}
    if len(per_rank) > 1:
        nan = float("nan")
        rows = sum(m["_q_rows"] for m, _ in per_rank)
        seen = [m for m, _ in per_rank if m["_q_rows"] > 0]
        out["q_min"] = min(m["q_min"] for m in seen) if seen else nan
        out["q_max"] = max(m["q_max"] for m in seen) if seen else nan
        out["q_mean"] = sum(m["_q_sum"] for m, _ in per_rank) / rows if rows > 0 else nan
        out["q_all_mean"] = sum(m["_q_all_sum"] for m, _ in per_rank) / rows if rows > 0 else nan
        out["divergence_count"] = max(m["divergence_count"] for m, _ in per_rank)
        out["divergence_flag"] = max(m["divergence_flag"] for m, _ in per_rank)
        d = CHECK.offset("divergence")
        fired = [r[d] for _, r in per_rank if r[d][_SEEN] > 0]
        recs0 = [list(r) for r in recs0]
        if fired:
            recs0[d] = min(fired, key=lambda rec: rec[_INDEX])  # the earliest trigger over the ranks
    return out, recs0


def _pack_parts(g) -> Dict[str, torch.Tensor]:
    """The :data:`PACK` fields of a guard's buffers (one guard: 1-D; stacked rows: a leading member dim)."""
    lead = g.accum.shape[:-1]
    return {"accum": g.accum, "qagg": g.qagg, "div_counter": g.div_counter.to(torch.float64),
            "div_flag": g.div_flag.to(torch.float64), "records": g.records.reshape(lead + (-1,)),
            "update_index": g.update_index}


def pack_rows(stacked, out: torch.Tensor) -> None:
    """Every member's :data:`PACK` into ``out [P, PACK.size]`` from stacked guard buffers (an object with
    the :data:`STACKED` attributes, each ``[P, ...]``): one readback for a whole population."""
    torch.cat(PACK.ordered(_pack_parts(stacked)), dim=1, out=out)


class TrainingHalted(RuntimeError):
    """A guard check with a "halt" policy fired; raised at the next boundary read.

    ``update_index`` is the 0-based index of the first update (since the last read) that tripped
    the check; ``loss``, ``grad_norm`` and the Q range (min / max of the batch's per-row max-Q)
    are that update's values. ``threshold`` is the check's limit (the divergence threshold on
    ``|Q|``, the collapse threshold on the gradient norm; none for the non-finite check) and
    ``iteration`` the training iteration it happened in (set by the training loop,
    :meth:`at_iteration`). The message is one line naming the metric, its value and the threshold.
    Picklable by its fields (Ray and RLlib copy exceptions across processes).
    """

    def __init__(
        self, *, check: str, update_index: int, loss: float, grad_norm: float, q_min: float, q_max: float,
        threshold: float | None = None, iteration: int | None = None,
    ) -> None:
        self.check, self.update_index = check, update_index
        self.loss, self.grad_norm, self.q_min, self.q_max = loss, grad_norm, q_min, q_max
        self.threshold, self.iteration = threshold, iteration
        super().__init__(self._message())

    def fields(self) -> dict:
        """The keyword arguments that rebuild this exception."""
        return dict(check=self.check, update_index=self.update_index, loss=self.loss, grad_norm=self.grad_norm,
                    q_min=self.q_min, q_max=self.q_max, threshold=self.threshold, iteration=self.iteration)

    def __reduce__(self):
        return _rebuild_halted, (self.fields(),)

    def at_iteration(self, iteration: int) -> "TrainingHalted":
        """This halt with the training iteration it happened in named."""
        return TrainingHalted(**{**self.fields(), "iteration": int(iteration)})

    def metric(self) -> str:
        """``<metric> = <value> <relation> <threshold>`` of the check that fired."""
        if self.check == "divergence":
            value = max(abs(self.q_min), abs(self.q_max))
            limit = "" if self.threshold is None else f" above the threshold {self.threshold:.6g} (learner.divergence_threshold)"
            return f"max |Q| = {value:.6g}{limit}"
        if self.check == "grad_collapse":
            limit = "" if self.threshold is None else f" below the threshold {self.threshold:.6g} (lr x learner.collapse_multiplier)"
            return f"grad_norm = {self.grad_norm:.6g}{limit}"
        return f"loss = {self.loss:.6g}, grad_norm = {self.grad_norm:.6g}: not finite"

    def _message(self) -> str:
        where = f"; iteration {self.iteration}" if self.iteration is not None else ""
        return (f"training halted by the {self.check} check at update {self.update_index}: loss={self.loss:.6g}, "
                f"grad_norm={self.grad_norm:.6g}, Q range=[{self.q_min:.6g}, {self.q_max:.6g}]; "
                f"{self.metric()}{where}")


def _rebuild_halted(fields: dict) -> TrainingHalted:
    return TrainingHalted(**fields)


class TrainingGuard:
    """Device-side guard buffers and their one readback (see the module docstring).

    Args:
        kernels: Kernels for the learner's device.
        settings: Learner settings (thresholds and policies).
        world_size: Number of DDP ranks (> 1 averages the loss over the ranks before the check).
    """

    def __init__(self, *, kernels: Kernels, settings: LearnerSettings, world_size: int = 1) -> None:
        dev = kernels.device
        self.kernels, self.settings, self.world_size, self.device = kernels, settings, int(world_size), dev

        def f32(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.float32, device=dev)

        self.loss, self.grad_norm, self.warmup_done = f32(1), f32(1), f32(1)
        self.clipped_loss, self.loss_scale, self.found_inf = f32(1), f32(1), f32(1)
        self.flags = torch.zeros(FLAGS.size, dtype=torch.int32, device=dev)
        self.accum = torch.zeros(ACCUM.size, dtype=torch.float64, device=dev)
        self.qstats_out = f32(QSTATS.size)
        self.div_counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.div_flag = torch.zeros(1, dtype=torch.int32, device=dev)
        self.qagg = torch.zeros(QAGG.size, dtype=torch.float64, device=dev)
        self.records = torch.zeros((CHECK.size, RECORD.size), dtype=torch.float64, device=dev)
        self.update_index = torch.zeros(1, dtype=torch.float64, device=dev)
        self._pack = torch.zeros(PACK.size, dtype=torch.float64, device=dev)
        self._gathered = torch.zeros((self.world_size, PACK.size), dtype=torch.float64, device=dev)
        self._readback = AsyncReadback(self.world_size * PACK.size, torch.float64, dev)
        self._reset_qagg()
        self._bind()
        self._qstats: Dict[Tuple[int, int], torch.Tensor] = {}
        self._pending: Optional[tuple] = None
        self.rank = torch.distributed.get_rank() if self.world_size > 1 else 0
        self.last_local_q: Dict[str, float] = {}
        """This rank's own Q stats at the last :meth:`collect` (before combining over the ranks)."""

    @property
    def collapse_threshold(self) -> float:
        """The collapse check's grad-norm threshold as bound (``lr x collapse_multiplier`` at build)."""
        return float(self.settings.collapse_threshold)

    def _bind(self) -> None:
        """Bind (validate) the per-update launches on the current buffers."""
        settings, kernels = self.settings, self.kernels
        self._check = kernels.bind_guard_check(
            self.loss, self.grad_norm, self.warmup_done, self.flags, self.clipped_loss, self.loss_scale,
            self.found_inf, loss_clip=float(settings.loss_clip), collapse_threshold=settings.collapse_threshold,
        )
        self._divergence = kernels.bind_divergence(
            self.qstats_out, self.div_counter, self.div_flag,
            threshold=float(settings.divergence_threshold), patience=int(settings.divergence_patience),
        )
        self._record = kernels.bind_guard_record(
            self.clipped_loss, self.loss, self.grad_norm, self.flags, self.qstats_out, self.div_flag, self.accum,
            self.qagg, self.records, self.update_index,
        )

    def adopt(self, rows: Dict[str, torch.Tensor]) -> None:
        """Move the per-update buffers into ``rows`` (name -> a tensor of the buffer's shape and dtype on
        this device, e.g. member k's row of a population's stacked buffer, :data:`STACKED`): their values
        are copied there, the guard uses them from now on and its launches are bound to them again."""
        if self.world_size > 1:
            raise ValueError("TrainingGuard.adopt: not with DDP (world_size > 1)")
        move_into_rows(self, rows, STACKED, "TrainingGuard.adopt")
        self._bind()
        shapes, self._qstats = list(self._qstats), {}
        for rows_cols in shapes:
            self.bind_q(*rows_cols)

    def _reset_qagg(self) -> None:
        self.qagg.zero_()
        self.qagg[QAGG.span("min")].fill_(float("inf"))
        self.qagg[QAGG.span("max")].fill_(float("-inf"))

    def bind_q(self, num_rows: int, num_cols: int) -> None:
        """Allocate and validate the Q-stats scratch for a ``[num_rows, num_cols]`` Q (once per shape).

        :meth:`record` launches ``qstats`` straight on the update's Q (no copy into a static
        buffer); a Q of a bound shape that is contiguous float32 on this device passes the same
        validation, which :meth:`record` checks on the host (metadata only).
        """
        key = (int(num_rows), int(num_cols))
        if key not in self._qstats:
            scratch = torch.zeros(qstats_scratch_numel(key[0]), dtype=torch.float32, device=self.device)
            self.kernels.bind_qstats(torch.empty(key, dtype=torch.float32, device=self.device), self.qstats_out,
                                     scratch)
            self._qstats[key] = scratch

    def set_warmup_done(self, done: bool) -> None:
        """Host-driven collapse-warmup flag (a device fill, no read)."""
        self.warmup_done.fill_(1.0 if done else 0.0)

    # ---- hot path ----------------------------------------------------------------------------
    def check(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Copy loss / grad norm into the static buffers and launch ``guard_check``.

        ``loss`` and ``grad_norm`` may be :attr:`loss` / :attr:`grad_norm` themselves (written there by
        the ``td_loss`` kernel / computed in place with ``out=``): no copy then.
        """
        if loss is not self.loss:
            self.loss.copy_(loss.detach().reshape(1))
        if grad_norm is not self.grad_norm:
            self.grad_norm.copy_(grad_norm.detach().reshape(1))
        if self.world_size > 1:
            torch.distributed.all_reduce(self.loss)
            self.loss.mul_(1.0 / self.world_size)
        self._check()

    def record(self, q: Optional[torch.Tensor]) -> None:
        """Q stats, divergence, then accumulate + Q aggregate + first-trigger records after the optimizer step.

        ``q`` is the batch's detached Q, contiguous float32 ``[B, A]`` of a shape bound with :meth:`bind_q`;
        None when :attr:`qstats_out` already holds this update's Q stats (the ``td_loss`` kernel wrote them).
        """
        if q is None:
            self._divergence()
            self._record()
            return
        scratch = self._qstats.get((q.shape[0], q.shape[1]) if q.dim() == 2 else None)
        if scratch is None or q.dtype != torch.float32 or not q.is_contiguous() or q.device != self.device:
            raise ValueError(f"record: q must be a contiguous float32 [B, A] tensor on {self.device} of a shape "
                             f"bound with bind_q {sorted(self._qstats)}, got {q.dtype} {list(q.shape)} on {q.device}")
        self.kernels.qstats(q, self.qstats_out, scratch)
        self._divergence()
        self._record()

    # ---- boundary ----------------------------------------------------------------------------
    def collect(self, values: Optional[List[float]] = None) -> Dict[str, float]:
        """The one readback per iteration: metrics as floats; zeroes the per-iteration accumulators.

        ``values``: this guard's pack (:data:`PACK`) already read back by its owner (a population reads
        every member's pack in one readback, :func:`pack_rows`); None reads it here.
        Call :meth:`apply_policies` afterwards to warn or raise for the checks that fired.
        """
        if values is not None:
            if self.world_size > 1 or len(values) != PACK.size:
                raise ValueError(f"collect: values must be one rank's pack of {PACK.size} floats, got "
                                 f"{len(values)} (world size {self.world_size})")
            vals = list(values)
        else:
            torch.cat(PACK.ordered(_pack_parts(self)), out=self._pack)
            if self.world_size > 1:
                # One collective at the boundary: every rank gets every rank's pack.
                torch.distributed.all_gather(list(self._gathered.unbind(0)), self._pack)
                self._readback.start(self._gathered)
            else:
                self._readback.start(self._pack)
            vals = self._readback.wait().tolist()  # host read: the one readback per training iteration
        self.accum.zero_()
        self._reset_qagg()
        self.records[CHECK.span("nonfinite", "grad_collapse")].zero_()  # divergence: cleared by apply_policies
        per_rank = [_unpack(vals[r * PACK.size:(r + 1) * PACK.size]) for r in range(self.world_size)]
        metrics, recs = combine_ranks(per_rank)
        local = per_rank[self.rank][0]
        self.last_local_q = {k: local[k] for k in ("q_min", "q_max", "q_mean", "q_all_mean")}
        self._pending = (metrics, recs)
        return metrics

    def apply_policies(self) -> None:
        """Warn or raise :class:`TrainingHalted` for the checks that fired since the last collect."""
        if self._pending is None:
            return
        metrics, recs = self._pending
        self._pending = None
        s = self.settings
        fired = {
            "nonfinite": (metrics["skipped"] > 0, s.nonfinite_policy),
            "divergence": (metrics["divergence_flag"] > 0, s.divergence_policy),
            "grad_collapse": (metrics["collapse_events"] > 0, s.collapse_policy),
        }
        for check, (hit, policy) in fired.items():
            if not hit:
                continue
            rec = RECORD.split(recs[CHECK.offset(check)])
            threshold = {"divergence": s.divergence_threshold, "grad_collapse": s.collapse_threshold}.get(check)
            info = dict(check=check, update_index=int(rec["update_index"]), loss=rec["loss"],
                        grad_norm=rec["grad_norm"], q_min=rec["q_min"], q_max=rec["q_max"], threshold=threshold)
            if policy == "halt":
                raise TrainingHalted(**info)
            if policy == "warn":
                logger.warning(str(TrainingHalted(**info)).replace("training halted by", "guard warning from"))
            if check == "divergence":
                self.div_flag.zero_()
                self.records[CHECK.offset("divergence")].zero_()
