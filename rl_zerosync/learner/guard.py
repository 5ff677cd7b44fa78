"""Training guard state: device buffers, kernel launches, one readback per iteration, policies.

Per update (all on the device, no host read):

1. :meth:`TrainingGuard.check` copies the loss and the global grad norm into static buffers (in
   DDP mode the loss is first averaged over the ranks with one all-reduce, so every rank takes the
   same decisions; the grad norm is already global because DDP all-reduced the gradients) and
   launches ``guard_check`` -> ``flags``, ``clipped_loss``, ``loss_scale``, ``found_inf``.
2. :meth:`TrainingGuard.record` (after the optimizer step) launches ``guard_accumulate``,
   ``qstats`` on the batch's Q and ``divergence``; folds the Q stats into the iteration aggregate
   and stores, per check, the first triggering update (index, loss, grad norm, Q range).

Per training iteration, :meth:`TrainingGuard.collect` packs everything into one float64 buffer,
reads it with one ``AsyncReadback`` (pinned, non-blocking copy + event wait), zeroes the
per-iteration accumulators on the device and returns Python floats; :meth:`TrainingGuard.apply_policies`
then warns or raises :class:`TrainingHalted`. Update indices are 0-based and count every update
this learner ran (restored from checkpoints).

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
from typing import Callable, Dict, Optional, Tuple

import torch

from rl_zerosync.kernels import AsyncReadback, Kernels, qstats_scratch_numel
from rl_zerosync.learner.settings import LearnerSettings

__all__ = ["CHECKS", "TrainingGuard", "TrainingHalted", "METRIC_NAMES"]

logger = logging.getLogger(__name__)

CHECKS = ("nonfinite", "grad_collapse", "divergence")
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
_REC = 6  # record row: seen, update index, loss, grad norm, q_min, q_max
_PACK = 6 + 5 + 2 + len(CHECKS) * _REC + 1


class TrainingHalted(RuntimeError):
    """A guard check with a "halt" policy fired; raised at the next boundary read.

    ``update_index`` is the 0-based index of the first update (since the last read) that tripped
    the check; ``loss``, ``grad_norm`` and the Q range (min / max of the batch's per-row max-Q)
    are that update's values.
    """

    def __init__(
        self, *, check: str, update_index: int, loss: float, grad_norm: float, q_min: float, q_max: float
    ) -> None:
        self.check, self.update_index = check, update_index
        self.loss, self.grad_norm, self.q_min, self.q_max = loss, grad_norm, q_min, q_max
        super().__init__(
            f"training halted by the {check} check at update {update_index}: loss={loss:.6g}, "
            f"grad_norm={grad_norm:.6g}, Q range=[{q_min:.6g}, {q_max:.6g}]"
        )


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
        self.flags = torch.zeros(3, dtype=torch.int32, device=dev)
        self.accum = torch.zeros(6, dtype=torch.float64, device=dev)
        self.qstats_out = f32(5)
        self.div_counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.div_flag = torch.zeros(1, dtype=torch.int32, device=dev)
        self.qagg = torch.zeros(5, dtype=torch.float64, device=dev)
        self.records = torch.zeros((len(CHECKS), _REC), dtype=torch.float64, device=dev)
        self.update_index = torch.zeros(1, dtype=torch.float64, device=dev)
        self._pack = torch.zeros(_PACK, dtype=torch.float64, device=dev)
        self._readback = AsyncReadback(_PACK, torch.float64, dev)
        self._reset_qagg()
        self._check = kernels.bind_guard_check(
            self.loss, self.grad_norm, self.warmup_done, self.flags, self.clipped_loss, self.loss_scale,
            self.found_inf, loss_clip=float(settings.loss_clip), collapse_threshold=settings.collapse_threshold,
        )
        self._accumulate = kernels.bind_guard_accumulate(self.clipped_loss, self.grad_norm, self.flags, self.accum)
        self._divergence = kernels.bind_divergence(
            self.qstats_out, self.div_counter, self.div_flag,
            threshold=float(settings.divergence_threshold), patience=int(settings.divergence_patience),
        )
        self._qstats: Dict[Tuple[int, int], Tuple[torch.Tensor, Callable[[], None]]] = {}
        self._pending: Optional[tuple] = None

    def _reset_qagg(self) -> None:
        self.qagg.zero_()
        self.qagg[0:1].fill_(float("inf"))
        self.qagg[1:2].fill_(float("-inf"))

    def bind_q(self, num_rows: int, num_cols: int) -> None:
        """Allocate and bind the Q-stats buffers for a ``[num_rows, num_cols]`` Q (once per shape)."""
        key = (int(num_rows), int(num_cols))
        if key not in self._qstats:
            q_buf = torch.zeros(key, dtype=torch.float32, device=self.device)
            scratch = torch.zeros(qstats_scratch_numel(key[0]), dtype=torch.float32, device=self.device)
            self._qstats[key] = (q_buf, self.kernels.bind_qstats(q_buf, self.qstats_out, scratch))

    def set_warmup_done(self, done: bool) -> None:
        """Host-driven collapse-warmup flag (a device fill, no read)."""
        self.warmup_done.fill_(1.0 if done else 0.0)

    # ---- hot path ----------------------------------------------------------------------------
    def check(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Copy loss / grad norm into the static buffers and launch ``guard_check``."""
        self.loss.copy_(loss.detach().reshape(1))
        self.grad_norm.copy_(grad_norm.detach().reshape(1))
        if self.world_size > 1:
            torch.distributed.all_reduce(self.loss)
            self.loss.mul_(1.0 / self.world_size)
        self._check()

    def record(self, q: torch.Tensor) -> None:
        """Accumulate, Q stats, divergence and first-trigger records after the optimizer step."""
        self._accumulate()
        q_buf, launch_qstats = self._qstats[(q.shape[0], q.shape[1])]
        q_buf.copy_(q)
        launch_qstats()
        self._divergence()
        s = self.qstats_out.to(torch.float64)
        finite = s[4:5] == 0
        lo_hi = torch.cat([torch.fmin(self.qagg[0:1], s[0:1]), torch.fmax(self.qagg[1:2], s[1:2])])
        self.qagg[0:2].copy_(lo_hi)
        self.qagg[2:4].add_(torch.where(finite, s[2:4], torch.zeros_like(s[2:4])))
        self.qagg[4:5].add_(finite.to(torch.float64))
        trig = torch.cat([self.flags[0:1], self.flags[2:3], self.div_flag]).to(torch.float64)
        cur = torch.cat([torch.ones_like(self.update_index), self.update_index, self.loss.to(torch.float64),
                         self.grad_norm.to(torch.float64), s[0:2]])
        first = (self.records[:, 0:1] == 0) & (trig.unsqueeze(1) > 0)
        self.records.copy_(torch.where(first, cur.unsqueeze(0).expand_as(self.records), self.records))
        self.update_index.add_(1.0)

    # ---- boundary ----------------------------------------------------------------------------
    def collect(self) -> Dict[str, float]:
        """The one readback per iteration: metrics as floats; zeroes the per-iteration accumulators.

        Call :meth:`apply_policies` afterwards to warn or raise for the checks that fired.
        """
        torch.cat(
            [self.accum, self.qagg, self.div_counter.to(torch.float64), self.div_flag.to(torch.float64),
             self.records.reshape(-1), self.update_index],
            out=self._pack,
        )
        self._readback.start(self._pack)
        vals = self._readback.wait().tolist()  # host read: the one readback per training iteration
        self.accum.zero_()
        self._reset_qagg()
        self.records[0:2].zero_()
        acc, qagg = vals[0:6], vals[6:11]
        div_counter, div_flag = vals[11], vals[12]
        recs = [vals[13 + i * _REC: 13 + (i + 1) * _REC] for i in range(len(CHECKS))]
        n = acc[2] - acc[3]
        m = qagg[4]
        nan = float("nan")
        metrics = {
            "loss_mean": acc[0] / n if n > 0 else nan,
            "grad_norm_mean": acc[1] / n if n > 0 else nan,
            "updates": acc[2],
            "skipped": acc[3],
            "clip_events": acc[4],
            "collapse_events": acc[5],
            "q_min": qagg[0] if m > 0 else nan,
            "q_max": qagg[1] if m > 0 else nan,
            "q_mean": qagg[2] / m if m > 0 else nan,
            "q_all_mean": qagg[3] / m if m > 0 else nan,
            "divergence_count": div_counter,
            "divergence_flag": div_flag,
            "updates_lifetime": vals[-1],
        }
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
            rec = recs[CHECKS.index(check)]
            info = dict(check=check, update_index=int(rec[1]), loss=rec[2], grad_norm=rec[3], q_min=rec[4],
                        q_max=rec[5])
            if policy == "halt":
                raise TrainingHalted(**info)
            if policy == "warn":
                logger.warning(str(TrainingHalted(**info)).replace("training halted by", "guard warning from"))
            if check == "divergence":
                self.div_flag.zero_()
                self.records[2].zero_()
