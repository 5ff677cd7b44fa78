"""The recurrences of data/scans.py against their loops over bars: integers and floats to the bit,
the repair of lanes whose warm-up was too short, the approximate AR(1) start, named errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rl_zerosync.data.scans import ar1_approx, carry_last, recurrence, two_state_chain, warmup_bars


def _chain_loop(first, u, stay0, stay1):
    g, out = first.copy(), [first.copy()]
    for t in range(1, len(u)):
        g = np.where(u[t] >= np.where(g == 0, stay0, stay1), 1 - g, g).astype(np.int8)
        out.append(g)
    return np.stack(out)


def _recurrence_loop(step, first, inputs):
    x, out = first, [first]
    for t in range(1, len(inputs[0])):
        x = step(x, *(v[t] for v in inputs))
        out.append(x)
    return np.stack(out)


@pytest.mark.parametrize("stay0, stay1", [(0.995, 0.99), (0.9, 0.97), (0.5, 0.5), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)])
@pytest.mark.parametrize("n", [1, 2, 257, 4099])
def test_two_state_chain_is_its_loop(stay0, stay1, n):
    rng = np.random.default_rng(n)
    u = rng.random((n, 7))
    u[n // 2] = stay0  # a draw exactly on a threshold: ">=" leaves
    first = np.array([0, 1, 0, 1, 1, 0, 0], dtype=np.int8)
    got = two_state_chain(first, u, stay0, stay1)
    assert got.dtype == np.int8 and np.array_equal(got, _chain_loop(first, u, stay0, stay1))


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_carry_last_is_its_loop(n):
    rng = np.random.default_rng(3)
    values, events = rng.standard_normal((n, 5)), rng.random((n, 5)) < 0.02
    x, want = values[0], [values[0]]
    for t in range(1, n):
        x = np.where(events[t], values[t], x)
        want.append(x)
    assert np.array_equal(carry_last(values, events), np.stack(want))


def _ar1(m, phi):
    def step(prev, c):
        return m + phi * (prev - m) + c
    return step


@pytest.mark.parametrize("phi", [0.0, 0.3, 0.9, 0.98, 0.999])
@pytest.mark.parametrize("n, s", [(2, 1), (7, 3), (4099, 5)])
def test_recurrence_is_its_loop_to_the_bit(phi, n, s):
    rng = np.random.default_rng(int(phi * 1000) + n)
    m, c, first = math.log(0.01), 0.05 * rng.standard_normal((n, s)), math.log(0.01) + rng.standard_normal(s)
    step = _ar1(m, phi)
    want = _recurrence_loop(step, first, [c])
    guess = m + ar1_approx(first - m, phi, c) if phi > 0 else None
    for block in (None, 1, 64, n + 5):
        got = recurrence(step, first, [c], warmup=warmup_bars(phi, 1.0), guess=guess, block=block)
        assert got.tobytes() == want.tobytes(), block


def test_lanes_that_miss_the_loop_are_run_again_in_order():
    """A one-bar warm-up from 0 cannot reach the loop's bits: every lane fails its check and its block
    is run again (the step then sees one row of series, not a lane matrix); the result is still the loop's."""
    rng = np.random.default_rng(0)
    m, n, s = math.log(0.01), 3000, 4
    c, first = 0.05 * rng.standard_normal((n, s)), np.full(s, m)
    calls = []

    def step(prev, ct):
        calls.append(prev.ndim)
        return _ar1(m, 0.98)(prev, ct)

    got = recurrence(step, first, [c], warmup=1, block=100)
    assert 1 in calls  # blocks were run again
    assert got.tobytes() == _recurrence_loop(_ar1(m, 0.98), first, [c]).tobytes()


def test_recurrence_with_several_inputs_and_resets():
    """The normalized returns' step: a reset where ``trend`` holds, a contraction elsewhere."""
    rng = np.random.default_rng(1)
    n, s = 5000, 6
    trend, v = rng.random((n, s)) < 0.5, rng.standard_normal((n, s))

    def step(prev, tr, vt):
        return np.where(tr, vt, -0.2 * prev + vt)

    got = recurrence(step, np.zeros(s), [trend, v], warmup=warmup_bars(0.2, 1.0))
    assert got.tobytes() == _recurrence_loop(step, np.zeros(s), [trend, v]).tobytes()


@pytest.mark.parametrize("phi", [0.5, 0.98, 0.999])
def test_ar1_approx_is_within_a_few_last_bits(phi):
    rng = np.random.default_rng(2)
    m, n = math.log(0.01), 20000
    c, first = 0.05 * rng.standard_normal((n, 3)), m + 0.2 * rng.standard_normal(3)
    exact = _recurrence_loop(_ar1(m, phi), first, [c])
    approx = m + ar1_approx(first - m, phi, c)
    assert (np.abs(approx - exact) / np.spacing(np.abs(exact))).max() <= 2 / (1 - phi)


def test_named_errors():
    with pytest.raises(ValueError, match="warmup_bars: expected a contraction rho in"):
        warmup_bars(1.0, 1.0)
    with pytest.raises(ValueError, match=r"ar1_approx: expected rho in \(0, 1\)"):
        ar1_approx(np.zeros(1), 0.0, np.zeros((3, 1)))
