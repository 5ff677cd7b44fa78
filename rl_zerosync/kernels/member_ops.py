"""Member-batched torch ops: one learner update of P population members at once.

Each op here is a single-member kernel of this package with a leading member dimension ``P``
(every buffer is ``[P, ...]``, row ``k`` is member ``k``'s buffer; per-member hyperparameters are
``[P, 1]`` tensors). They are the GPU path of the population update
(:mod:`rl_zerosync.learner.population_update`): batched GEMMs (``torch.baddbmm``) instead of ``P``
small ones, and one elementwise launch over all members instead of ``P``. Their reference is the
single-member twin of :mod:`rl_zerosync.kernels.reference` applied to each member, which is also
what a population runs on the CPU (so member ``k`` is bit for bit the single run there); the ops
here match that reference to float32 rounding (``tests/test_member_ops.py``, and the GPU tests).

Like the twins they only use device-side torch ops (``torch.where``, reductions into tensors): no
host read, no data-dependent shape, so a whole population update is captured in one CUDA graph.

| op | single-member twin |
| --- | --- |
| :func:`mlp_forward` | ``linear_forward`` (+ ``layernorm_relu``) per layer |
| :func:`td_loss` | ``td_loss`` (loss and ``|TD|``; the gradient comes from autograd) |
| :func:`qstats` | ``qstats`` |
| :func:`grad_norm` | ``grad_norm`` |
| :func:`guard_check` | ``guard_check`` |
| :func:`adam_step` | ``adam_step`` |
| :func:`divergence` | ``divergence`` |
| :func:`guard_record` | ``guard_record`` |
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from rl_zerosync.kernels.adam import CLIP_EPS
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, INT32_MAX, QAGG, QSTATS, RECORD
from rl_zerosync.kernels.grad_norm import NORM_CHUNK

__all__ = ["MemberLayer", "mlp_forward", "td_loss", "qstats", "grad_norm", "guard_check", "adam_step",
           "divergence", "guard_record"]


class MemberLayer(NamedTuple):
    """One Linear [+ LayerNorm] layer of every member: ``weight [P, out, in]``, ``bias [P, out]``,
    ``gamma`` / ``beta [P, out]`` (None without LayerNorm), the LayerNorm's ``eps``."""

    weight: torch.Tensor
    bias: torch.Tensor
    gamma: Optional[torch.Tensor] = None
    beta: Optional[torch.Tensor] = None
    eps: float = 1e-5


def mlp_forward(layers: Sequence[MemberLayer], x: torch.Tensor) -> torch.Tensor:
    """The Q network of every member on its rows ``x [P, R, in]`` -> ``[P, R, A]``: per hidden layer
    ``relu(layer_norm?(x @ w.T + b))``, the last layer linear (the plain stack of
    :mod:`rl_zerosync.learner.mlp`)."""
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        x = torch.baddbmm(layer.bias.unsqueeze(1), x, layer.weight.transpose(1, 2))
        if i == last:
            break
        if layer.gamma is not None:
            x = F.layer_norm(x, (x.shape[-1],), eps=layer.eps)
            x = torch.addcmul(layer.beta.unsqueeze(1), x, layer.gamma.unsqueeze(1))
        x = torch.relu(x)
    return x


def td_loss(q: torch.Tensor, q_select: torch.Tensor, q_target: torch.Tensor, actions: torch.Tensor,
            rewards: torch.Tensor, discounts: torch.Tensor, terminateds: torch.Tensor,
            weights: Optional[torch.Tensor], *, loss_type: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every member's double-DQN loss on its batch: ``q``, ``q_select``, ``q_target [P, B, A]``, the
    other columns ``[P, B]``; returns ``(loss [P], |TD| [P, B])``. ``loss`` carries autograd's graph
    to ``q``: member k's gradient is that of its own loss (the members' losses are summed for one
    backward, and no member's term depends on another's parameters)."""
    with torch.no_grad():
        a_star = torch.argmax(q_select, dim=2, keepdim=True)
        boot = torch.where(terminateds, 0.0, discounts)
        y = rewards + boot * q_target.gather(2, a_star).squeeze(2)
    q_sa = q.gather(2, actions.long().unsqueeze(2)).squeeze(2)
    if loss_type == "huber":
        each = F.huber_loss(q_sa, y, reduction="none", delta=1.0)
    else:
        each = F.mse_loss(q_sa, y, reduction="none")
    if weights is not None:
        each = weights * each
    return each.mean(dim=1), (q_sa.detach() - y).abs()


def qstats(q: torch.Tensor, out: torch.Tensor) -> None:
    """``out[k]`` = the :data:`QSTATS` of member k's ``q [P, B, A]`` (NaN and ``nan_flag`` 1 when any of
    its Q is not finite)."""
    row_max = q.amax(dim=2)
    nonfinite = ~torch.isfinite(q).flatten(1).all(dim=1, keepdim=True)
    parts = {"min": row_max.amin(dim=1, keepdim=True), "max": row_max.amax(dim=1, keepdim=True),
             "mean": row_max.mean(dim=1, keepdim=True), "all_mean": q.mean(dim=(1, 2)).unsqueeze(1)}
    stats = torch.cat(QSTATS.ordered(parts), dim=1)
    stats = torch.where(nonfinite, torch.full_like(stats, float("nan")), stats)
    out[:, QSTATS.span(*parts)].copy_(stats)
    out[:, QSTATS.span("nan_flag")].copy_(nonfinite)


def grad_norm(grads: torch.Tensor, out: torch.Tensor) -> None:
    """``out[k, 0]`` = the global L2 norm of member k's flat gradient ``grads [P, n]`` (``n`` a multiple
    of ``NORM_CHUNK``): the norms of its ``NORM_CHUNK``-element rows, then the norm of those."""
    rows = torch.linalg.vector_norm(grads.view(grads.shape[0], -1, NORM_CHUNK), dim=2)
    torch.linalg.vector_norm(rows, dim=1, keepdim=True, out=out)


def guard_check(loss: torch.Tensor, grad_norm: torch.Tensor, warmup_done: torch.Tensor, flags: torch.Tensor,
                clipped_loss: torch.Tensor, loss_scale: torch.Tensor, found_inf: torch.Tensor, *,
                loss_clip: torch.Tensor, collapse_threshold: torch.Tensor) -> None:
    """The guard's decisions per member (buffers ``[P, 1]``, ``flags [P, FLAGS.size]``; ``loss_clip``
    and ``collapse_threshold`` are ``[P, 1]``): non-finite -> ``found_inf`` (the member's step is
    skipped), loss above the clip -> clipped loss and its scale, grad collapse after the warmup."""
    nonfinite = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
    clipped = ~nonfinite & (loss > loss_clip)
    collapse = (warmup_done != 0) & ~nonfinite & (grad_norm < collapse_threshold)
    one, zero = torch.ones_like(loss), torch.zeros_like(loss)
    cl = torch.where(nonfinite, zero, torch.where(clipped, loss_clip.expand_as(loss), loss))
    scale = torch.where(clipped, cl / torch.where(clipped, loss, one), one)
    decisions = {"nonfinite": nonfinite, "loss_clipped": clipped, "grad_collapse": collapse}
    flags.copy_(torch.cat(FLAGS.ordered(decisions), dim=1))
    clipped_loss.copy_(cl)
    loss_scale.copy_(torch.where(nonfinite, zero, scale))
    found_inf.copy_(nonfinite)


def adam_step(params: torch.Tensor, grads: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
              step: torch.Tensor, found_inf: torch.Tensor, loss_scale: torch.Tensor, grad_norm: torch.Tensor, *,
              lr: torch.Tensor, beta1: torch.Tensor, beta2: torch.Tensor, eps: torch.Tensor, c1: torch.Tensor,
              c2: torch.Tensor, decay: torch.Tensor, clip: torch.Tensor, use_clip: torch.Tensor) -> None:
    """One Adam / AdamW step of every member on its flat buffers ``[P, n]`` (``step`` and the guard's
    buffers ``[P, 1]``), op for op as ``adam_step``; member k's row is left bit for bit unchanged when
    ``found_inf[k] != 0``. The hyperparameters are ``[P, 1]`` float32 (``c1 = 1 - beta1``, ``c2 = 1 -
    beta2``, ``decay = 1 - lr * weight_decay``, rounded from double on the host as the kernel's are);
    ``use_clip [P, 1]`` bool: the member has a global-norm clip ``clip``."""
    ok = found_inf == 0
    s = loss_scale
    ratio = clip / (grad_norm * loss_scale + CLIP_EPS)
    s = torch.where(use_clip, s * torch.fmin(torch.ones_like(s), ratio), s)
    t = step + 1.0
    g = grads * s
    p = params * decay
    m = exp_avg * beta1 + g * c1
    v = exp_avg_sq * beta2 + (g * c2) * g
    bc1 = 1.0 - torch.pow(beta1, t)
    bc2 = 1.0 - torch.pow(beta2, t)
    denom = torch.sqrt(v) / torch.sqrt(bc2) + eps
    step_size = lr / bc1
    new_p = p - step_size * (m / denom)
    for buf, new in ((params, new_p), (exp_avg, m), (exp_avg_sq, v), (step, t)):
        buf.copy_(torch.where(ok, new, buf))


def divergence(qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: torch.Tensor,
               patience: torch.Tensor) -> None:
    """Each member's divergence patience counter and flag (``[P, 1]`` int32) from its Q stats
    ``[P, QSTATS.size]``; ``threshold`` ``[P, 1]`` float32, ``patience`` ``[P, 1]`` int32."""
    s = qstats_out
    bad = ((s[:, QSTATS.span("min")].abs() > threshold) | (s[:, QSTATS.span("max")].abs() > threshold)
           | (s[:, QSTATS.span("nan_flag")] != 0))
    bumped = torch.where(counter < INT32_MAX, counter + 1, counter)
    new_counter = torch.where(bad, bumped, torch.zeros_like(counter))
    counter.copy_(new_counter)
    flag.copy_(torch.where(new_counter >= patience, torch.ones_like(flag), flag))


def guard_record(clipped_loss: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor,
                 qstats_out: torch.Tensor, div_flag: torch.Tensor, accum: torch.Tensor, qagg: torch.Tensor,
                 records: torch.Tensor, update_index: torch.Tensor) -> None:
    """Every member's accumulators ``[P, ACCUM.size]``, Q aggregate ``[P, QAGG.size]``, first-trigger
    records ``[P, CHECK.size, RECORD.size]`` and update index ``[P, 1]``, as ``guard_record``."""
    f = flags.to(torch.float64)
    nonfinite = flags[:, FLAGS.span("nonfinite")] != 0
    zero = torch.zeros_like(update_index)
    accum.add_(torch.cat(ACCUM.ordered({
        "loss_sum": torch.where(nonfinite, zero, clipped_loss.to(torch.float64)),
        "grad_norm_sum": torch.where(nonfinite, zero, grad_norm.to(torch.float64)),
        "updates": zero + 1.0,
        "nonfinite": f[:, FLAGS.span("nonfinite")],
        "clipped": f[:, FLAGS.span("loss_clipped")],
        "collapse": f[:, FLAGS.span("grad_collapse")],
    }), dim=1))
    s = qstats_out.to(torch.float64)
    q_min, q_max = s[:, QSTATS.span("min")], s[:, QSTATS.span("max")]
    finite = s[:, QSTATS.span("nan_flag")] == 0
    torch.fmin(qagg[:, QAGG.span("min")], q_min, out=qagg[:, QAGG.span("min")])
    torch.fmax(qagg[:, QAGG.span("max")], q_max, out=qagg[:, QAGG.span("max")])
    sums = {"mean_sum": s[:, QSTATS.span("mean")], "all_mean_sum": s[:, QSTATS.span("all_mean")],
            "count": torch.ones_like(q_min)}
    added = torch.cat(QAGG.ordered(sums), dim=1)
    qagg[:, QAGG.span(*sums)].add_(torch.where(finite, added, torch.zeros_like(added)))
    trig = torch.cat(CHECK.ordered({"nonfinite": flags[:, FLAGS.span("nonfinite")],
                                    "grad_collapse": flags[:, FLAGS.span("grad_collapse")],
                                    "divergence": div_flag}), dim=1)
    cur = torch.cat(RECORD.ordered({"seen": torch.ones_like(update_index), "update_index": update_index,
                                    "loss": loss.to(torch.float64), "grad_norm": grad_norm.to(torch.float64),
                                    "q_min": q_min, "q_max": q_max}), dim=1)
    first = (records[:, :, RECORD.span("seen")] == 0) & (trig.unsqueeze(2) > 0)
    records.copy_(torch.where(first, cur.unsqueeze(1), records))
    update_index.add_(1.0)
