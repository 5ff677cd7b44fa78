"""Torch twins of the CUDA kernels: same signatures, same semantics, any device.

These are the plain, readable definitions the kernels are tested against, and the CPU backend
(``api.KERNELS`` pairs each with its launch). They use only device-side torch ops (``torch.where``,
reductions into tensors), so they never read a value back to the host either; they do allocate
temporaries. Buffers are addressed by field name through the layouts of ``layouts.py``, the same
ones the CUDA sources get as generated defines.

NaN in a Q row: the greedy action is the index of the first NaN (as ``torch.argmax`` documents for
NaN); otherwise the first maximum (ties go to the lowest index).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

from rl_zerosync.actions import NUM_EXPOSURES, OrderType, Urgency, encode_t
from rl_zerosync.kernels import rng
from rl_zerosync.kernels.adam import CLIP_EPS, derived_constants
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, INT32_MAX, QAGG, QSTATS, RECORD
from rl_zerosync.kernels.grad_norm import NORM_CHUNK
from rl_zerosync.kernels.route import ROUTING_DEFAULTS


def greedy_argmax(q: torch.Tensor) -> torch.Tensor:
    """Row-wise argmax of q [N, A] as int64 [N]: first NaN if any, else the first maximum."""
    is_nan = torch.isnan(q)
    first_nan = is_nan.to(torch.int32).argmax(dim=1)
    return torch.where(is_nan.any(dim=1), first_nan, q.argmax(dim=1))


def _explore(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, seed: rng.IntOrTensor, stream_base: int,
    idx: torch.Tensor
) -> torch.Tensor:
    """Epsilon-greedy over one Q matrix: coin and random action from streams ``stream_base`` +
    ``rng.STREAM_EXPLORE`` / ``rng.STREAM_RANDOM_ACTION``. ``seed`` is a host seed or per-row keys
    (``rng.random_bits``); ``epsilon`` is ``[1]`` or one value per row."""
    u = rng.uniform24(seed, step, stream_base + rng.STREAM_EXPLORE, idx)
    rand = rng.random_index(rng.bits24(seed, step, stream_base + rng.STREAM_RANDOM_ACTION, idx), q.shape[1])
    return torch.where(u < epsilon, rand, greedy_argmax(q))


def guard_check(
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    warmup_done: Union[torch.Tensor, float],
    flags: torch.Tensor,
    clipped_loss: torch.Tensor,
    loss_scale: torch.Tensor,
    found_inf: torch.Tensor,
    *,
    loss_clip: float,
    collapse_threshold: float,
) -> None:
    """Twin of ``zs_guard_check`` (``guard.cu``); ``flags`` in the :data:`FLAGS` layout."""
    nonfinite = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
    clipped = ~nonfinite & (loss > loss_clip)
    if isinstance(warmup_done, torch.Tensor):
        warm = warmup_done != 0
    else:
        warm = torch.full_like(nonfinite, float(warmup_done) != 0.0)
    collapse = warm & ~nonfinite & (grad_norm < collapse_threshold)
    clip_value = torch.full_like(loss, loss_clip)
    cl = torch.where(nonfinite, torch.zeros_like(loss), torch.where(clipped, clip_value, loss))
    scale = torch.where(clipped, cl / torch.where(clipped, loss, torch.ones_like(loss)), torch.ones_like(loss))
    scale = torch.where(nonfinite, torch.zeros_like(loss), scale)
    decisions = {"nonfinite": nonfinite, "loss_clipped": clipped, "grad_collapse": collapse}
    flags.copy_(torch.cat(FLAGS.ordered(decisions)))
    clipped_loss.copy_(cl)
    loss_scale.copy_(scale)
    found_inf.copy_(nonfinite)


def guard_accumulate(
    clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Twin of ``zs_guard_accumulate`` (``guard.cu``); ``accum`` in the :data:`ACCUM` layout."""
    nonfinite = flags[FLAGS.span("nonfinite")] != 0
    zero = torch.zeros(1, dtype=torch.float64, device=accum.device)
    f = flags.to(torch.float64)
    accum.add_(torch.cat(ACCUM.ordered({
        "loss_sum": torch.where(nonfinite, zero, clipped_loss.to(torch.float64)),
        "grad_norm_sum": torch.where(nonfinite, zero, grad_norm.to(torch.float64)),
        "updates": zero + 1.0,
        "nonfinite": f[FLAGS.span("nonfinite")],
        "clipped": f[FLAGS.span("loss_clipped")],
        "collapse": f[FLAGS.span("grad_collapse")],
    })))


def guard_record(
    clipped_loss: torch.Tensor,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    flags: torch.Tensor,
    qstats_out: torch.Tensor,
    div_flag: torch.Tensor,
    accum: torch.Tensor,
    qagg: torch.Tensor,
    records: torch.Tensor,
    update_index: torch.Tensor,
) -> None:
    """Twin of ``zs_guard_record`` (``guard.cu``): :data:`QSTATS` folded into :data:`QAGG`, one
    :data:`RECORD` row per :data:`CHECK`."""
    guard_accumulate(clipped_loss, grad_norm, flags, accum)
    s = qstats_out.to(torch.float64)
    q_min, q_max = s[QSTATS.span("min")], s[QSTATS.span("max")]
    finite = s[QSTATS.span("nan_flag")] == 0
    torch.fmin(qagg[QAGG.span("min")], q_min, out=qagg[QAGG.span("min")])
    torch.fmax(qagg[QAGG.span("max")], q_max, out=qagg[QAGG.span("max")])
    sums = {"mean_sum": s[QSTATS.span("mean")], "all_mean_sum": s[QSTATS.span("all_mean")],
            "count": torch.ones_like(q_min)}
    added = torch.cat(QAGG.ordered(sums))
    qagg[QAGG.span(*sums)].add_(torch.where(finite, added, torch.zeros_like(added)))
    trig = torch.cat(CHECK.ordered({"nonfinite": flags[FLAGS.span("nonfinite")],
                                    "grad_collapse": flags[FLAGS.span("grad_collapse")], "divergence": div_flag}))
    cur = torch.cat(RECORD.ordered({"seen": torch.ones_like(update_index), "update_index": update_index,
                                    "loss": loss.to(torch.float64), "grad_norm": grad_norm.to(torch.float64),
                                    "q_min": q_min, "q_max": q_max}))
    first = (records[:, RECORD.span("seen")] == 0) & (trig.unsqueeze(1) > 0)
    records.copy_(torch.where(first, cur.unsqueeze(0), records))
    update_index.add_(1.0)


def qstats(q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Twin of ``zs_qstats_partial`` + ``zs_qstats_final`` (``qstats.cu``); ``out`` in the
    :data:`QSTATS` layout; ``scratch`` is unused."""
    del scratch
    if q.shape[0] < 1:
        raise ValueError(f"q must have at least one row, got shape {list(q.shape)}")
    row_max = q.amax(dim=1)
    nonfinite = ~torch.isfinite(q).all()
    parts = {"min": row_max.min(), "max": row_max.max(), "mean": row_max.mean(), "all_mean": q.mean()}
    stats = torch.stack(QSTATS.ordered(parts))
    stats = torch.where(nonfinite, torch.full_like(stats, float("nan")), stats)
    out[QSTATS.span(*parts)].copy_(stats)
    out[QSTATS.span("nan_flag")].copy_(nonfinite)


def td_loss(
    q: torch.Tensor,
    q_select: torch.Tensor,
    q_target: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminateds: torch.Tensor,
    weights: Optional[torch.Tensor],
    dq: torch.Tensor,
    loss: torch.Tensor,
    td_abs: Optional[torch.Tensor],
    qstats_out: torch.Tensor,
    scratch: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    loss_type: str,
) -> None:
    """Twin of ``zs_td_loss`` (``td_loss.cu``): the routed / flat loss of ``learner/loss.py`` with
    torch's own ops (``argmax``, ``gather``, ``huber_loss`` / ``mse_loss`` with ``reduction="mean"``
    when there are no weights), its gradient with respect to ``q`` by autograd into ``dq``, ``|TD|``
    and :func:`qstats` of ``q``. ``scratch`` and ``blocks_done`` are unused. An action outside
    ``[0, A)`` raises (torch's ``gather``); the kernel writes NaN instead."""
    del blocks_done
    with torch.no_grad():
        a_star = torch.argmax(q_select, dim=1, keepdim=True)
        boot = torch.where(terminateds, 0.0, discounts)
        y = rewards + boot * q_target.gather(1, a_star).squeeze(1)
    elementwise = F.huber_loss if loss_type == "huber" else F.mse_loss
    extra = {"delta": 1.0} if loss_type == "huber" else {}
    with torch.enable_grad():
        leaf = q.detach().requires_grad_(True)
        q_sa = leaf.gather(1, actions.long().unsqueeze(1)).squeeze(1)
        if weights is None:
            value = elementwise(q_sa, y, reduction="mean", **extra)
        else:
            value = torch.mean(weights * elementwise(q_sa, y, reduction="none", **extra))
        (grad,) = torch.autograd.grad(value, leaf)
    dq.copy_(grad)
    loss.copy_(value.detach().reshape(1))
    if td_abs is not None:
        td_abs.copy_((q_sa.detach() - y).abs())
    qstats(q.detach(), qstats_out, scratch)


def grad_norm(x: torch.Tensor, row_norms: torch.Tensor, out: torch.Tensor, blocks_done: torch.Tensor) -> None:
    """Twin of ``zs_grad_norm`` (``grad_norm.cu``): ``torch.linalg.vector_norm`` of the rows of
    ``NORM_CHUNK`` elements into ``row_norms``, then of those into ``out``; ``blocks_done`` is unused."""
    del blocks_done
    torch.linalg.vector_norm(x.view(-1, NORM_CHUNK), dim=1, out=row_norms)
    torch.linalg.vector_norm(row_norms, dim=0, keepdim=True, out=out)


def linear_forward(jobs: Sequence[Sequence[torch.Tensor]], scratch: torch.Tensor, counters: torch.Tensor, *,
                   relu: bool) -> None:
    """Twin of ``zs_linear_forward`` (``linear.cu``): ``y = relu?(x @ w.T + b)`` per job (``torch.addmm``
    and ``torch.relu``); ``scratch`` and ``counters`` are unused."""
    del scratch, counters
    for x, w, b, y in jobs:
        v = torch.addmm(b, x, w.t())
        y.copy_(torch.relu(v) if relu else v)


def linear_backward(dz: torch.Tensor, x: torch.Tensor, w: torch.Tensor, dw: torch.Tensor, db: torch.Tensor,
                    dx: Optional[torch.Tensor], scratch: torch.Tensor, counters: torch.Tensor) -> None:
    """Twin of ``zs_linear_backward`` (``linear.cu``): the Linear layer's backward as autograd writes it
    (``dw = dz.T @ x``, ``db = dz.sum(0)``) and, unless ``dx`` is None, ReLU's backward of the layer
    below (``dx = where(x <= 0, 0, dz @ w)``, ``x`` being that ReLU's output; as ``threshold_backward``, a NaN
    ``x`` keeps the gradient); ``scratch`` and
    ``counters`` are unused."""
    del scratch, counters
    torch.mm(dz.t(), x, out=dw)
    torch.sum(dz, dim=0, out=db)
    if dx is not None:
        dx.copy_(torch.where(x <= 0, 0.0, torch.mm(dz, w)))


def layernorm_relu(jobs: Sequence[Sequence[torch.Tensor]], *, eps: float) -> None:
    """Twin of ``zs_layernorm_relu`` (``layernorm.cu``): ``a = relu(layer_norm(z) * gamma + beta)`` and the
    per-row ``(mean, rstd)`` into ``stats``, from the op ``nn.LayerNorm``'s forward runs
    (``aten.native_layer_norm``)."""
    for z, gamma, beta, a, stats in jobs:
        out, mean, rstd = torch.ops.aten.native_layer_norm(z, [z.shape[1]], gamma, beta, eps)
        a.copy_(torch.relu(out))
        stats.copy_(torch.cat([mean.reshape(-1, 1), rstd.reshape(-1, 1)], dim=1))


def layernorm_backward(dy: torch.Tensor, z: torch.Tensor, stats: torch.Tensor, gamma: torch.Tensor, dz: torch.Tensor,
                       dgamma: torch.Tensor, dbeta: torch.Tensor, part: torch.Tensor,
                       blocks_done: torch.Tensor) -> None:
    """Twin of ``zs_layernorm_backward`` (``layernorm.cu``): the LayerNorm's backward as autograd runs it
    (``aten.native_layer_norm_backward`` with the saved mean and rstd); ``part`` and ``blocks_done`` are unused."""
    del part, blocks_done
    mean, rstd = stats[:, 0:1].contiguous(), stats[:, 1:2].contiguous()
    gz, gg, gb = torch.ops.aten.native_layer_norm_backward(dy, z, [z.shape[1]], mean, rstd, gamma, gamma,
                                                           [True, True, True])
    dz.copy_(gz)
    dgamma.copy_(gg)
    dbeta.copy_(gb)


def divergence(
    qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: float, patience: int
) -> None:
    """Twin of ``zs_divergence`` (``divergence.cu``)."""
    s = qstats_out
    bad = ((s[QSTATS.span("min")].abs() > threshold) | (s[QSTATS.span("max")].abs() > threshold)
           | (s[QSTATS.span("nan_flag")] != 0))
    bumped = torch.where(counter < INT32_MAX, counter + 1, counter)
    new_counter = torch.where(bad, bumped, torch.zeros_like(counter))
    counter.copy_(new_counter)
    flag.copy_(torch.where(new_counter >= patience, torch.ones_like(flag), flag))


def epsilon_greedy(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *, seed: int
) -> None:
    """Twin of ``zs_epsilon_greedy`` (``select.cu``)."""
    idx = torch.arange(q.shape[0], device=q.device)
    actions.copy_(_explore(q, epsilon, step, seed, 0, idx))


def epsilon_greedy_members(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, seed_keys: torch.Tensor, actions: torch.Tensor
) -> None:
    """Twin of ``zs_epsilon_greedy_members`` (``select.cu``): ``epsilon_greedy`` for each of the P
    members (``len(epsilon)``) on its ``E = N / P`` consecutive rows, with the member's epsilon and seed key
    and the row's index within its member."""
    members = epsilon.shape[0]
    per_member = q.shape[0] // members
    keys = seed_keys.repeat_interleave(per_member)
    idx = torch.arange(per_member, device=q.device).repeat(members)
    actions.copy_(_explore(q, epsilon.repeat_interleave(per_member), step, keys, 0, idx))


def branching_select(
    q_exposure: torch.Tensor,
    q_order: torch.Tensor,
    q_urgency: torch.Tensor,
    epsilon: torch.Tensor,
    step: torch.Tensor,
    actions: torch.Tensor,
    *,
    seed: int,
) -> None:
    """Twin of ``zs_branching_select`` (``select.cu``); branch ``b`` uses the streams of
    epsilon-greedy shifted by ``rng.STREAMS_PER_BRANCH * b``."""
    idx = torch.arange(q_exposure.shape[0], device=q_exposure.device)
    e, o, u = (_explore(q, epsilon, step, seed, rng.STREAMS_PER_BRANCH * b, idx)
               for b, q in enumerate((q_exposure, q_order, q_urgency)))
    actions.copy_(encode_t(e, o, u))


def _ratio(x: torch.Tensor, median: torch.Tensor) -> torch.Tensor:
    """``x / median``, or 1 where the median is <= 0 or either input is not finite."""
    ok = torch.isfinite(x) & torch.isfinite(median) & (median > 0)
    one = torch.ones_like(x)
    return torch.where(ok, x / torch.where(ok, median, one), one)


def route(
    exposure: torch.Tensor,
    spread: torch.Tensor,
    median_spread: torch.Tensor,
    vol: torch.Tensor,
    median_vol: torch.Tensor,
    actions: torch.Tensor,
    *,
    wide: float = ROUTING_DEFAULTS["wide"],
    high_vol: float = ROUTING_DEFAULTS["high_vol"],
    low_vol: float = ROUTING_DEFAULTS["low_vol"],
) -> None:
    """Twin of ``zs_route`` (``route.cu``); exposure is clamped to 0..4."""
    rs = _ratio(spread, median_spread)
    rv = _ratio(vol, median_vol)
    is_wide = rs >= wide
    is_high = rv >= high_vol

    def const(v: int) -> torch.Tensor:
        return torch.full_like(exposure, int(v))

    order = torch.where(
        is_high,
        torch.where(is_wide, const(OrderType.LIMIT), const(OrderType.MARKET)),
        torch.where(is_wide, const(OrderType.PASSIVE), const(OrderType.LIMIT)),
    )
    calm = torch.where(rv <= low_vol, const(Urgency.LOW), const(Urgency.NORMAL))
    urgency = torch.where(is_high, const(Urgency.HIGH), calm)
    actions.copy_(encode_t(exposure.clamp(0, NUM_EXPOSURES - 1), order, urgency))


def adam_step(
    params: torch.Tensor,
    grads: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    found_inf: torch.Tensor,
    loss_scale: torch.Tensor,
    grad_norm: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_clip: Optional[float],
) -> None:
    """Twin of ``zs_adam_step`` (``adam.cu``): one Adam / AdamW step, float32, op for op as the
    kernel; nothing changes (bit for bit) when ``found_inf[0] != 0``. ``blocks_done`` is unused.

    Python-float operands are rounded to float32 by torch, as the kernel's arguments are; a scalar
    divided by a tensor is written as a tensor division (``scalar / tensor`` would be a reciprocal
    and a multiply, two roundings).
    """
    del blocks_done
    c1, c2, decay = derived_constants(lr, beta1, beta2, weight_decay)
    ok = found_inf == 0
    s = loss_scale
    if grad_clip is not None:
        ratio = torch.full_like(s, grad_clip) / (grad_norm * loss_scale + CLIP_EPS)
        s = s * torch.fmin(torch.ones_like(s), ratio)  # fmin, as CUDA fminf: a NaN ratio gives 1
    t = step + 1.0
    g = grads * s
    p = params * decay if weight_decay != 0 else params
    m = exp_avg * beta1 + g * c1
    v = exp_avg_sq * beta2 + (g * c2) * g
    bc1 = 1.0 - torch.pow(torch.full_like(t, beta1), t)
    bc2 = 1.0 - torch.pow(torch.full_like(t, beta2), t)
    denom = torch.sqrt(v) / torch.sqrt(bc2) + eps
    step_size = torch.full_like(bc1, lr) / bc1
    new_p = p - step_size * (m / denom)
    for buf, new in ((params, new_p), (exp_avg, m), (exp_avg_sq, v), (step, t)):
        buf.copy_(torch.where(ok, new, buf))


def replay_sample(
    packed: torch.Tensor,
    size: torch.Tensor,
    row_keys: torch.Tensor,
    step_word: torch.Tensor,
    rng_step: torch.Tensor,
    indices: torch.Tensor,
    out_packed: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    seed_key: int,
) -> None:
    """Twin of ``zs_replay_sample`` (``replay_sample.cu``): uniform replay draw of ``B = len(row_keys)`` rows;
    ``blocks_done`` is unused.

    ``indices = (hash32(row_keys ^ step_word) * size) >> 32`` (``size`` clamped to ``[0, capacity]``),
    ``out_packed = packed[indices]``; then ``rng_step += 1`` and ``step_word = hash32((rng_step &
    0xffffffff) ^ seed_key)``. All int64 maths below ``2**63``, as the kernel's 64-bit unsigned maths.
    """
    del blocks_done
    bits = rng.hash32((row_keys ^ step_word) & rng.MASK32)
    torch.bitwise_right_shift(bits * size.clamp(0, packed.shape[0]), 32, out=indices)
    torch.index_select(packed, 0, indices, out=out_packed)
    rng_step.add_(1)
    step_word.copy_(rng.hash32((rng_step & rng.MASK32) ^ seed_key))


def _shift(x: torch.Tensor, j: int, fill) -> torch.Tensor:
    """``x[t + j]`` along dim 0 with ``fill`` past the end (static shapes)."""
    if j == 0:
        return x
    pad = torch.full((j,) + tuple(x.shape[1:]), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x[j:], pad], dim=0)


def nstep_columns(
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    return_scales: torch.Tensor,
    discount_table: torch.Tensor,
) -> dict:
    """The n-step transitions of a ``[T, N, ...]`` rollout (``learner/nstep.py`` states the rule),
    flattened time-major (``T * N`` rows): ``obs``, ``next_obs``, ``actions``, ``rewards`` (the
    n-step return), ``discounts`` and ``terminateds``; ``n = len(return_scales)``
    (:func:`rl_zerosync.kernels.replay_add.nstep_tables`)."""
    t_len, n_envs = rewards.shape
    n_step = return_scales.shape[0]
    done = terminateds | truncateds
    ret = torch.zeros((t_len, n_envs), dtype=torch.float32, device=rewards.device)
    k = torch.zeros((t_len, n_envs), dtype=torch.int64, device=rewards.device)
    open_ = torch.ones((t_len, n_envs), dtype=torch.bool, device=rewards.device)
    for j in range(min(n_step, t_len)):
        valid = _shift(torch.ones_like(done), j, False)
        active = open_ & valid
        ret = ret + torch.where(active, _shift(rewards.to(torch.float32), j, 0.0) * return_scales[j], 0.0)
        k = k + active.to(torch.int64)
        open_ = active & ~_shift(done, j, True)
    last = torch.arange(t_len, device=rewards.device).unsqueeze(1) + k - 1
    env = torch.arange(n_envs, device=rewards.device).unsqueeze(0).expand(t_len, n_envs)
    rows = t_len * n_envs
    return {
        "obs": obs.reshape((rows,) + tuple(obs.shape[2:])),
        "next_obs": next_obs[last, env].reshape((rows,) + tuple(next_obs.shape[2:])),
        "actions": actions.reshape(rows),
        "rewards": ret.reshape(rows),
        "discounts": discount_table[k].reshape(rows),
        "terminateds": terminateds[last, env].reshape(rows),
    }


def replay_add(
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    packed: torch.Tensor,
    return_scales: torch.Tensor,
    discount_table: torch.Tensor,
    priorities: Optional[torch.Tensor],
    max_priority: torch.Tensor,
    *,
    start: int,
    first_row: int,
    obs_at: int,
    next_obs_at: int,
    actions_at: int,
    rewards_at: int,
    discounts_at: int,
    terminateds_at: int,
) -> None:
    """Twin of ``zs_replay_add`` (``replay_add.cu``): :func:`nstep_columns`, then transition ``r >= first_row``
    into packed row ``(start + r - first_row) % C`` (two slices at the wrap), column by column."""
    trans = nstep_columns(obs, next_obs, actions, rewards, terminateds, truncateds, return_scales, discount_table)
    capacity = packed.shape[0]
    rows = rewards.numel()
    d = obs[0, 0].numel()

    def word(at: int) -> torch.Tensor:
        return packed[:, at:at + 1]

    views = {
        "obs": packed[:, obs_at:obs_at + d].view(torch.float32),
        "next_obs": packed[:, next_obs_at:next_obs_at + d].view(torch.float32),
        "actions": packed[:, actions_at:actions_at + 2].view(torch.int64)[:, 0],
        "rewards": word(rewards_at).view(torch.float32)[:, 0],
        "discounts": word(discounts_at).view(torch.float32)[:, 0],
        "terminateds": word(terminateds_at).view(torch.uint8)[:, 0].view(torch.bool),
    }
    first = min(rows - first_row, capacity - start)
    for dst, lo, hi in ((start, first_row, first_row + first), (0, first_row + first, rows)):
        if hi <= lo:
            continue
        for key, view in views.items():
            src = trans[key][lo:hi]
            view[dst:dst + hi - lo].copy_(src.reshape(hi - lo, -1) if key in ("obs", "next_obs") else src)
        if priorities is not None:
            priorities[dst:dst + hi - lo].copy_(max_priority.expand(hi - lo))
