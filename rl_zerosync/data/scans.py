"""Recurrences over bars computed without a Python loop over bars, to the same bits as the loop.

Arrays are time-major, ``[num_bars, num_series]``: row ``t`` is bar ``t`` of every series.

* :func:`two_state_chain`: a two-state Markov chain driven by uniforms (integers: exact by
  construction). Each bar's transition is one of four maps of {0, 1}: keep, swap, or set to 0 or 1.
  A state is the value set at the last "set" bar (bar 0: the first state) flipped by the parity of
  the swaps since: a cumulative xor and a running maximum of indices.
* :func:`carry_last`: the value of the last event at or before each bar (a running maximum of indices).
* :func:`recurrence`: ``x[t] = step(x[t - 1], inputs[t])`` for a float ``step`` that contracts
  (``|dx[t] / dx[t - 1]| <= rho < 1``), evaluated with the same float operations as the loop, so bit
  for bit the loop's numbers. Bars are cut into blocks that run side by side, lane after lane in
  one array: the lane of block ``b`` starts ``warmup`` bars before the block from an approximate
  value (``guess``) and runs the exact ``step``; the contraction makes it land on the loop's bits
  within the warm-up (from a bar where they agree, the same operations on the same inputs give the
  same floats). Each lane is checked: its value at the bar before its block must equal, bit for bit, the
  finished value of the block before, which makes every value of the block the loop's; a block whose
  check fails (its warm-up too short) is run again from that finished value, in order. So the result
  is always the loop's; the warm-up only decides how often a block is run twice.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

_CALL_COST = 2000
"""One numpy call on a lane row costs about as much as this many elements of work (measured: 3.7 us
a call, 2 ns an element): :func:`recurrence` picks the block length that minimises
``(warmup + block) * (_CALL_COST + lanes * series)`` element-times, ``sqrt(n * s * warmup / _CALL_COST)``."""


def two_state_chain(first: np.ndarray, u: np.ndarray, stay0: float, stay1: float) -> np.ndarray:
    """States int8 ``[n, s]`` of chains that start in ``first`` (0 or 1, ``[s]``) and at bar ``t >= 1``
    leave state 0 when ``u[t] >= stay0`` and state 1 when ``u[t] >= stay1`` (``u[0]`` unused): the
    loop ``g[t] = where(u[t] >= where(g[t-1] == 0, stay0, stay1), 1 - g[t-1], g[t-1])``."""
    n = u.shape[0]
    from0 = u >= stay0  # the next state from 0 (1 when it leaves)
    from1 = u < stay1   # the next state from 1 (1 when it stays)
    sets = from0 == from1  # both states go to the same one: the chain forgets its past
    swaps = from0 & ~from1
    sets[0], swaps[0] = True, False
    value = from0.astype(np.int8)
    value[0] = first
    bar = np.arange(n).reshape(n, *([1] * (u.ndim - 1)))
    last_set = np.maximum.accumulate(np.where(sets, bar, 0), axis=0)
    parity = np.bitwise_xor.accumulate(swaps.view(np.int8), axis=0)  # of the swaps in bars 1..t
    return np.take_along_axis(value ^ parity, last_set, axis=0) ^ parity


def carry_last(values: np.ndarray, events: np.ndarray) -> np.ndarray:
    """``out[t] = values[s]`` with ``s`` the last bar ``<= t`` where ``events`` is true, bar 0 counted
    as an event (``[n, ...]``): the loop ``x = where(events[t], values[t], x)`` from ``x = values[0]``."""
    n = values.shape[0]
    bar = np.arange(n).reshape(n, *([1] * (values.ndim - 1)))
    hit = events.copy()
    hit[0] = True
    return np.take_along_axis(values, np.maximum.accumulate(np.where(hit, bar, 0), axis=0), axis=0)


def warmup_bars(rho: float, start_error: float) -> int:
    """Warm-up of :func:`recurrence` for a step contracting by ``rho`` from a start off by
    ``start_error`` (relative to the values' size): the bars for the error to shrink below the
    last bit (``log(start_error / eps) / (1 - rho)``) plus ``12 / (1 - rho)`` bars for a last-bit
    difference to die out (it survives a bar with odds about ``rho``, so these bars with odds about
    ``e**-12``, 6e-6: a block is seldom run twice)."""
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"warmup_bars: expected a contraction rho in [0, 1), got {rho!r}")
    eps = np.finfo(np.float64).eps
    return 1 + math.ceil((max(math.log(max(start_error, eps) / eps), 0.0) + 12.0) / (1.0 - rho))


def ar1_approx(first: np.ndarray, rho: float, w: np.ndarray, *, block: int = 256) -> np.ndarray:
    """About ``x[0] = first``, ``x[t] = rho * x[t - 1] + w[t]`` (``[n, s]``; ``w[0]`` unused) for
    ``0 < rho < 1``, within about ``1 / (1 - rho)`` last bits: a start for :func:`recurrence`. Per block
    of ``b`` bars in closed form, ``x[k + j] = rho**(j + 1) x[k - 1] + rho**j cumsum_i(rho**-i w[k + i])[j]``
    (``b`` at most ``block`` and ``rho**-b`` at most ``e**30``), and a loop over blocks for ``x[k - 1]``."""
    if not 0.0 < rho < 1.0:
        raise ValueError(f"ar1_approx: expected rho in (0, 1), got {rho!r}")
    n, s = w.shape
    b = max(1, int(min(block, 30.0 / -math.log(rho))))
    blocks = -(-(n - 1) // b)
    padded = np.zeros((blocks * b, s))
    padded[: n - 1] = w[1:]
    i = np.arange(b)[:, None]
    out = np.cumsum(padded.reshape(blocks, b, s) * rho**-i, axis=1) * rho**i
    grow = rho ** (i + 1)
    carry = np.asarray(first, dtype=np.float64)
    for k in range(blocks):
        out[k] += grow * carry
        carry = out[k, -1]
    x = np.empty((n, s))
    x[0] = first
    x[1:] = out.reshape(-1, s)[: n - 1]
    return x


def recurrence(step: Callable[..., np.ndarray], first: np.ndarray, inputs: Sequence[np.ndarray], *,
               warmup: int, guess: Optional[np.ndarray] = None, block: Optional[int] = None) -> np.ndarray:
    """``x[0] = first``, ``x[t] = step(x[t - 1], *(v[t] for v in inputs))`` for ``t >= 1``: float64
    ``[n, s]``, the loop's bits (module doc). ``step`` works elementwise on arrays of any shape;
    ``inputs`` ``[n, s]`` each; ``guess`` ``[n, s]``: approximate values where lanes start (None: 0);
    ``warmup`` >= 1 bars; ``block``: bars per block (None: chosen from ``warmup`` and the size)."""
    n, s = inputs[0].shape
    first = np.asarray(first, dtype=np.float64)
    warmup = max(int(warmup), 1)
    if block is None:
        block = max(math.isqrt(n * s * warmup // _CALL_COST), 16)
    block = min(max(int(block), 1), n)
    starts = np.arange(0, n, block)
    ends = np.minimum(starts + block, n)
    lane0 = np.maximum(starts - warmup, 0)  # bar where each lane starts
    exact = lane0 == 0                      # lanes from bar 0 start from ``first``: no check
    steps = int((ends - lane0).max())
    bars = np.minimum(lane0[None, :] + np.arange(steps)[:, None], n - 1)  # [steps, lanes]
    lane_inputs = [np.take(v, bars, axis=0) for v in inputs]              # [steps, lanes, s]
    start = np.zeros((len(starts), s)) if guess is None else guess[lane0]
    start[exact] = first
    out = np.empty((steps, len(starts), s))
    out[0] = x = start
    for k in range(1, steps):
        x = step(x, *(v[k] for v in lane_inputs))
        out[k] = x
    t = np.arange(n)
    lane = t // block
    result = np.take(out.reshape(-1, s), (t - lane0[lane]) * len(starts) + lane, axis=0)  # [n, s]
    _repair(step, result, out, inputs, starts, ends, lane0, exact, warmup)
    return result


def _repair(step: Callable[..., np.ndarray], result: np.ndarray, out: np.ndarray, inputs: Sequence[np.ndarray],
            starts: np.ndarray, ends: np.ndarray, lane0: np.ndarray, exact: np.ndarray, warmup: int) -> None:
    """Check every lane that started from a guess against the finished block before it (in order) and
    run a block again, in place in ``result``, for the series whose check fails."""
    checked = np.nonzero(~exact)[0]
    if checked.size == 0:
        return
    at_warmup = out[warmup - 1, checked]  # each checked lane's value at the bar before its block
    if _same_bits(at_warmup, result[starts[checked] - 1]).all():
        return  # every block follows its finished predecessor: the loop's bits everywhere
    for b in checked:
        bad = ~_same_bits(out[warmup - 1, b], result[starts[b] - 1])
        if not bad.any():
            continue
        x = result[starts[b] - 1, bad]
        for t in range(starts[b], ends[b]):
            x = step(x, *(v[t, bad] for v in inputs))
            result[t, bad] = x


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int64) == np.ascontiguousarray(b).view(np.int64)
