"""Torch twins of the CUDA kernels: same signatures, same semantics, any device.

These are the plain, readable definitions the kernels are tested against, and the CPU backend. They
use only device-side torch ops (``torch.where``, reductions into tensors), so they never read a value
back to the host either; they do allocate temporaries.

NaN in a Q row: the greedy action is the index of the first NaN (as ``torch.argmax`` documents for
NaN); otherwise the first maximum (ties go to the lowest index).
"""
from __future__ import annotations

from typing import Union

import torch

from rl_zerosync.actions import NUM_EXPOSURES, OrderType, Urgency
from rl_zerosync.kernels import rng
from rl_zerosync.kernels.api import Kernels

INT32_MAX = 2**31 - 1


def greedy_argmax(q: torch.Tensor) -> torch.Tensor:
    """Row-wise argmax of q [N, A] as int64 [N]: first NaN if any, else the first maximum."""
    is_nan = torch.isnan(q)
    first_nan = is_nan.to(torch.int32).argmax(dim=1)
    return torch.where(is_nan.any(dim=1), first_nan, q.argmax(dim=1))


def _explore(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, seed: int, coin_stream: int, idx: torch.Tensor
) -> torch.Tensor:
    """Epsilon-greedy over one Q matrix using streams ``coin_stream`` and ``coin_stream + 1``."""
    u = rng.uniform24(seed, step, coin_stream, idx)
    rand = rng.random_index(rng.bits24(seed, step, coin_stream + 1, idx), q.shape[1])
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
    """Twin of ``zs_guard_check`` (``guard.cu``)."""
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
    flags.copy_(torch.cat([nonfinite, clipped, collapse]))
    clipped_loss.copy_(cl)
    loss_scale.copy_(scale)
    found_inf.copy_(nonfinite)


def guard_accumulate(
    clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Twin of ``zs_guard_accumulate`` (``guard.cu``)."""
    nonfinite = flags[0:1] != 0
    zero = torch.zeros(1, dtype=torch.float64, device=accum.device)
    loss = torch.where(nonfinite, zero, clipped_loss.to(torch.float64))
    norm = torch.where(nonfinite, zero, grad_norm.to(torch.float64))
    accum.add_(torch.cat([loss, norm, zero + 1.0, flags.to(torch.float64)]))


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
    """Twin of ``zs_guard_record`` (``guard.cu``)."""
    guard_accumulate(clipped_loss, grad_norm, flags, accum)
    s = qstats_out.to(torch.float64)
    finite = s[4:5] == 0
    torch.fmin(qagg[0:1], s[0:1], out=qagg[0:1])
    torch.fmax(qagg[1:2], s[1:2], out=qagg[1:2])
    qagg[2:5].add_(torch.where(finite, torch.cat([s[2:4], torch.ones_like(s[4:5])]), torch.zeros_like(s[2:5])))
    trig = torch.cat([flags[0:1], flags[2:3], div_flag])
    cur = torch.cat([torch.ones_like(update_index), update_index, loss.to(torch.float64),
                     grad_norm.to(torch.float64), s[0:2]])
    first = (records[:, 0:1] == 0) & (trig.unsqueeze(1) > 0)
    records.copy_(torch.where(first, cur.unsqueeze(0), records))
    update_index.add_(1.0)


def qstats(q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Twin of ``zs_qstats_partial`` + ``zs_qstats_final`` (``qstats.cu``); ``scratch`` is unused."""
    del scratch
    if q.shape[0] < 1:
        raise ValueError(f"q must have at least one row, got shape {list(q.shape)}")
    row_max = q.amax(dim=1)
    nonfinite = ~torch.isfinite(q).all()
    stats = torch.stack([row_max.min(), row_max.max(), row_max.mean(), q.mean()])
    stats = torch.where(nonfinite, torch.full_like(stats, float("nan")), stats)
    out[:4].copy_(stats)
    out[4:].copy_(nonfinite)


def divergence(
    qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: float, patience: int
) -> None:
    """Twin of ``zs_divergence`` (``divergence.cu``)."""
    s = qstats_out
    bad = (s[0:1].abs() > threshold) | (s[1:2].abs() > threshold) | (s[4:5] != 0)
    bumped = torch.where(counter < INT32_MAX, counter + 1, counter)
    new_counter = torch.where(bad, bumped, torch.zeros_like(counter))
    counter.copy_(new_counter)
    flag.copy_(torch.where(new_counter >= patience, torch.ones_like(flag), flag))


def epsilon_greedy(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *, seed: int
) -> None:
    """Twin of ``zs_epsilon_greedy`` (``select.cu``)."""
    idx = torch.arange(q.shape[0], device=q.device)
    actions.copy_(_explore(q, epsilon, step, seed, rng.STREAM_EXPLORE, idx))


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
    """Twin of ``zs_branching_select`` (``select.cu``); branch ``b`` uses streams ``2b``, ``2b+1``."""
    idx = torch.arange(q_exposure.shape[0], device=q_exposure.device)
    e = _explore(q_exposure, epsilon, step, seed, 0, idx)
    o = _explore(q_order, epsilon, step, seed, 2, idx)
    u = _explore(q_urgency, epsilon, step, seed, 4, idx)
    actions.copy_(e * 9 + o * 3 + u)


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
    wide: float = 1.5,
    high_vol: float = 1.5,
    low_vol: float = 0.75,
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
    actions.copy_(exposure.clamp(0, NUM_EXPOSURES - 1) * 9 + order * 3 + urgency)


class TorchKernels(Kernels):
    """The torch-twin backend (CPU, or any device when forced)."""

    backend = "torch"

    guard_check = staticmethod(guard_check)
    guard_accumulate = staticmethod(guard_accumulate)
    guard_record = staticmethod(guard_record)
    qstats = staticmethod(qstats)
    divergence = staticmethod(divergence)
    epsilon_greedy = staticmethod(epsilon_greedy)
    branching_select = staticmethod(branching_select)
    route = staticmethod(route)
