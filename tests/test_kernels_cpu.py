"""Torch twins of the kernels against hand-computed values and independent references (CPU)."""
from __future__ import annotations

import inspect
import math
import re
import sys

import numpy as np
import pytest
import torch

from rl_zerosync.actions import OrderType as O
from rl_zerosync.actions import Urgency as U
from rl_zerosync.kernels import (
    KERNELS,
    AsyncReadback,
    Kernels,
    get_kernels,
    qstats_scratch_numel,
    rng,
    set_default_backend,
)
from rl_zerosync.kernels import reference as ref
from rl_zerosync.kernels.adam import CLIP_EPS as ADAM_CLIP_EPS
from rl_zerosync.kernels import launch as kernel_launch
from rl_zerosync.kernels.adam import adam_step
from rl_zerosync.kernels.compile import KERNEL_DIR
from rl_zerosync.kernels.declare import Kernel
from rl_zerosync.kernels.divergence import divergence
from rl_zerosync.kernels.guard import guard_accumulate, guard_check, guard_record
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, QAGG, QSTATS, RECORD, Layout
from rl_zerosync.kernels.qstats import qstats
from rl_zerosync.kernels.route import route
from rl_zerosync.kernels.select import branching_select, epsilon_greedy

NAN, INF = float("nan"), float("inf")
K = get_kernels("cpu")


# ----------------------------------------------------------------------------- RNG reference
def _u32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64).astype(np.uint32)


def np_hash32(x: np.ndarray) -> np.ndarray:
    """uint32 reference with numpy's wrap-around multiply (independent of the int64 masking)."""
    x = _u32(x)
    m = np.uint32(0x45D9F3B)
    x = ((x >> np.uint32(16)) ^ x) * m
    x = ((x >> np.uint32(16)) ^ x) * m
    return (x >> np.uint32(16)) ^ x


def np_combine(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    h, v = _u32(h), _u32(v)
    return np_hash32(h ^ (v + np.uint32(0x9E3779B9) + (h << np.uint32(6)) + (h >> np.uint32(2))))


def np_bits(seed: int, step: int, stream: int, idx: np.ndarray) -> np.ndarray:
    n = len(idx)
    full = lambda v: np.full(n, v, dtype=np.uint64)  # noqa: E731
    key = np_combine(np_combine(full(0x2545F491), full(seed & 0xFFFFFFFF)), full(seed >> 32))
    s = step % 2**64
    h = np_combine(np_combine(key, full(s & 0xFFFFFFFF)), full(s >> 32))
    return np_combine(np_combine(h, full(stream)), idx.astype(np.uint64))


def np_bits24(seed, step, stream, n) -> np.ndarray:
    return (np_bits(seed, step, stream, np.arange(n)) >> np.uint32(8)).astype(np.int64)


@pytest.mark.parametrize("seed, step, stream", [(0, 0, 0), (12345, 2**40 + 7, 3), (2**64 - 1, 99, 16), (7, -1, 1)])
def test_rng_matches_uint32_reference(seed, step, stream):
    idx = torch.arange(1000)
    got = rng.random_bits(seed, step, stream, idx).numpy()
    assert np.array_equal(got, np_bits(seed, step, stream, idx.numpy()).astype(np.int64))
    # a device-counter step (tensor [1]) gives the same words as the host int
    got_t = rng.random_bits(seed, torch.tensor([step], dtype=torch.int64), stream, idx)
    assert np.array_equal(got_t.numpy(), got)


def test_rng_golden_values():
    # pinned so that the CUDA mirror (rng.cuh) and the torch side cannot drift together unnoticed
    assert rng.random_bits(0, 0, 0, torch.arange(4)).tolist() == [3208427548, 3809995352, 1532640561, 1585101870]
    assert rng.hash32(0) == 0
    assert int(rng.hash32(torch.tensor([0xDEADBEEF]))[0]) == int(np_hash32([0xDEADBEEF])[0])


def test_uniform24_range_and_moments():
    u = rng.uniform24(3, 11, 0, torch.arange(200_000))
    assert u.dtype == torch.float32
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 4 * math.sqrt(1 / 12 / 200_000)
    hist = torch.histc(u, bins=16, min=0.0, max=1.0)
    expected = 200_000 / 16
    chi2 = float(((hist - expected) ** 2 / expected).sum())
    assert chi2 < 60.0  # 15 dof: p ~ 1e-7
    assert torch.equal(rng.bits24(3, 11, 0, torch.arange(10)) % 1, torch.zeros(10, dtype=torch.int64))
    assert int(rng.bits24(3, 11, 0, torch.arange(100_000)).max()) < 2**24


def test_rng_independence_across_envs_steps_streams_seeds():
    n = 100_000
    base = rng.uniform24(5, 0, 0, torch.arange(n))
    others = [
        rng.uniform24(5, 0, 0, torch.arange(1, n + 1)),  # neighbouring env
        rng.uniform24(5, 1, 0, torch.arange(n)),  # next step
        rng.uniform24(5, 0, 1, torch.arange(n)),  # other stream
        rng.uniform24(6, 0, 0, torch.arange(n)),  # other seed
        rng.uniform24(5, 2**32, 0, torch.arange(n)),  # step high word
    ]
    for other in others:
        assert not torch.equal(base, other)
        corr = float(torch.corrcoef(torch.stack([base, other]))[0, 1])
        assert abs(corr) < 4 / math.sqrt(n)
    assert torch.equal(base, rng.uniform24(5, 0, 0, torch.arange(n)))


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True, "3"])
def test_rng_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        rng.seed_key(seed)


# ----------------------------------------------------------------------------- epsilon-greedy
def _eg(q, eps, step, seed=1):
    q = torch.as_tensor(q, dtype=torch.float32)
    actions = torch.full((q.shape[0],), -7, dtype=torch.int64)
    K.epsilon_greedy(q, torch.tensor([eps], dtype=torch.float32), torch.tensor([step]), actions, seed=seed)
    return actions


def test_epsilon_zero_is_greedy_with_ties_nan_inf():
    q = [
        [1.0, 3.0, 3.0, 2.0],  # tie -> lowest index
        [5.0, 5.0, 5.0, 5.0],  # all equal -> 0
        [1.0, NAN, 9.0, NAN],  # NaN wins, the first one
        [NAN, 1.0, 2.0, 3.0],
        [-INF, -INF, -INF, -INF],
        [0.0, INF, INF, 1.0],
        [-3.0, -2.0, -1.0, -4.0],
    ]
    assert _eg(q, 0.0, 0).tolist() == [1, 0, 1, 0, 0, 1, 2]
    assert torch.equal(ref.greedy_argmax(torch.tensor(q)), torch.tensor([1, 0, 1, 0, 0, 1, 2]))


def test_epsilon_one_matches_reference_random_actions():
    n, a, seed, step = 1000, 45, 17, 123
    q = torch.randn(n, a, generator=torch.Generator().manual_seed(0))
    got = _eg(q, 1.0, step, seed)
    want = (np_bits24(seed, step, rng.STREAM_RANDOM_ACTION, n) * a) >> 24
    assert np.array_equal(got.numpy(), want)


def test_epsilon_mixed_matches_reference_coin():
    n, a, seed, step, eps = 5000, 5, 4, 9, 0.3
    q = torch.randn(n, a, generator=torch.Generator().manual_seed(1))
    coin = np_bits24(seed, step, rng.STREAM_EXPLORE, n).astype(np.float32) * np.float32(2.0**-24)
    rand = (np_bits24(seed, step, rng.STREAM_RANDOM_ACTION, n) * a) >> 24
    want = np.where(coin < np.float32(eps), rand, q.argmax(dim=1).numpy())
    assert np.array_equal(_eg(q, eps, step, seed).numpy(), want)


def test_epsilon_random_fraction():
    n, a, eps = 200_000, 4, 0.37
    q = torch.zeros(n, a)
    q[:, 0] = 1.0  # greedy action 0 everywhere
    acts = _eg(q, eps, 3, seed=11)
    p = eps * (a - 1) / a  # exploring picks a non-greedy action w.p. (A-1)/A
    frac = float((acts != 0).float().mean())
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n)
    counts = torch.bincount(acts, minlength=a)[1:].float()  # non-greedy actions uniform
    assert float((counts.max() - counts.min()) / counts.mean()) < 0.05


def test_epsilon_determinism_and_step_dependence():
    q = torch.randn(4099, 45, generator=torch.Generator().manual_seed(2))
    a1, a2 = _eg(q, 0.5, 10, seed=3), _eg(q, 0.5, 10, seed=3)
    assert torch.equal(a1, a2)
    assert not torch.equal(a1, _eg(q, 0.5, 11, seed=3))
    assert not torch.equal(a1, _eg(q, 0.5, 10, seed=4))
    assert int(a1.min()) >= 0 and int(a1.max()) < 45


def test_epsilon_zero_never_explores_even_on_a_zero_draw():
    # seed 386, step 0: env 1771 draws u = 0 exactly on the explore stream; "u < eps" must be False
    assert int(rng.bits24(386, 0, rng.STREAM_EXPLORE, torch.tensor([1771]))[0]) == 0
    q = torch.zeros(1772, 3)
    q[:, 2] = 1.0
    assert bool((_eg(q, 0.0, 0, seed=386) == 2).all())
    assert int(_eg(q, 2.0**-24, 0, seed=386)[1771]) == int(np_bits24(386, 0, 1, 1772)[1771] * 3 >> 24)


def test_epsilon_edge_shapes():
    assert _eg(torch.zeros(0, 5), 0.5, 0).shape == (0,)
    assert _eg([[2.0]], 1.0, 0).tolist() == [0]  # A=1: the only action
    assert _eg([[1.0, 2.0]], 0.0, 0).tolist() == [1]  # B=1


# ----------------------------------------------------------------------------- branching select
def _bs(qe, qo, qu, eps, step, seed=5):
    n = qe.shape[0]
    actions = torch.full((n,), -1, dtype=torch.int64)
    K.branching_select(qe, qo, qu, torch.tensor([eps]), torch.tensor([step]), actions, seed=seed)
    return actions


def test_branching_greedy():
    qe = torch.tensor([[0.0, 1, 5, 2, 3], [9.0, 0, 0, 0, 9]])
    qo = torch.tensor([[1.0, 0, 0], [0.0, 0, 4]])
    qu = torch.tensor([[0.0, 2, 2], [NAN, 1, 2]])
    assert _bs(qe, qo, qu, 0.0, 0).tolist() == [2 * 9 + 0 * 3 + 1, 0 * 9 + 2 * 3 + 0]


def test_branching_explore_matches_reference_streams():
    n, seed, step = 3000, 21, 77
    qe, qo, qu = torch.zeros(n, 5), torch.zeros(n, 3), torch.zeros(n, 3)
    got = _bs(qe, qo, qu, 1.0, step, seed)
    e = (np_bits24(seed, step, 1, n) * 5) >> 24
    o = (np_bits24(seed, step, 3, n) * 3) >> 24
    u = (np_bits24(seed, step, 5, n) * 3) >> 24
    assert np.array_equal(got.numpy(), e * 9 + o * 3 + u)


def test_branching_branches_explore_independently():
    n, eps = 200_000, 0.5
    qe, qo, qu = torch.zeros(n, 5), torch.zeros(n, 3), torch.zeros(n, 3)
    qe[:, 0] = qo[:, 0] = qu[:, 0] = 1.0
    acts = _bs(qe, qo, qu, eps, 1, seed=8)
    assert int(acts.min()) >= 0 and int(acts.max()) <= 44
    e, o = acts // 9, (acts // 3) % 3
    pe, po = eps * 4 / 5, eps * 2 / 3
    both = float(((e != 0) & (o != 0)).float().mean())
    for frac, p in ((float((e != 0).float().mean()), pe), (float((o != 0).float().mean()), po), (both, pe * po)):
        assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n)


# ----------------------------------------------------------------------------- route
def _route(spread, med_s, vol, med_v, exposure=None, **kw):
    spread = torch.tensor(spread, dtype=torch.float32)
    n = spread.shape[0]
    exposure = torch.zeros(n, dtype=torch.int64) if exposure is None else torch.tensor(exposure)
    out = torch.full((n,), -1, dtype=torch.int64)
    K.route(exposure, spread, torch.tensor(med_s, dtype=torch.float32), torch.tensor(vol, dtype=torch.float32),
            torch.tensor(med_v, dtype=torch.float32), out, **kw)
    return out


def _ou(order, urgency):
    return int(order) * 3 + int(urgency)


@pytest.mark.parametrize(
    "rs, rv, order, urgency",
    [
        (1.0, 2.0, O.MARKET, U.HIGH),  # narrow, high vol
        (2.0, 2.0, O.LIMIT, U.HIGH),  # wide, high vol
        (1.0, 1.0, O.LIMIT, U.NORMAL),  # narrow, normal vol
        (1.0, 0.5, O.LIMIT, U.LOW),  # narrow, low vol
        (2.0, 1.0, O.PASSIVE, U.NORMAL),  # wide, normal vol
        (2.0, 0.5, O.PASSIVE, U.LOW),  # wide, low vol
        (1.5, 1.0, O.PASSIVE, U.NORMAL),  # rs exactly on wide -> wide
        (1.0, 1.5, O.MARKET, U.HIGH),  # rv exactly on high_vol -> high
        (1.5, 1.5, O.LIMIT, U.HIGH),
        (1.0, 0.75, O.LIMIT, U.LOW),  # rv exactly on low_vol -> LOW
        (1.4999999, 1.4999999, O.LIMIT, U.NORMAL),
    ],
)
def test_route_table_cells(rs, rv, order, urgency):
    # medians of 1 (and 2, 4: exact in float32) make the ratios exactly rs and rv
    for m in (1.0, 2.0, 4.0):
        out = _route([rs * m], [m], [rv * m], [m], exposure=[3])
        assert out.tolist() == [3 * 9 + _ou(order, urgency)]


def test_route_degenerate_ratios_are_one():
    # ratio 1 -> rs < 1.5 and 0.75 < rv < 1.5 -> LIMIT, NORMAL
    cases = [
        ([5.0], [0.0], [1.0], [1.0]),  # median spread 0
        ([5.0], [-1.0], [1.0], [1.0]),  # median spread < 0
        ([NAN], [1.0], [1.0], [1.0]),
        ([INF], [1.0], [1.0], [1.0]),
        ([5.0], [NAN], [1.0], [1.0]),
        ([5.0], [INF], [1.0], [1.0]),
        ([1.0], [1.0], [9.0], [0.0]),  # median vol 0
        ([1.0], [1.0], [NAN], [1.0]),
        ([1.0], [1.0], [-INF], [1.0]),
        ([1.0], [1.0], [0.1], [NAN]),
    ]
    for args in cases:
        assert _route(*args).tolist() == [_ou(O.LIMIT, U.NORMAL)], args


def test_route_custom_thresholds_and_exposure_passthrough():
    out = _route([1.2] * 5, [1.0] * 5, [0.9] * 5, [1.0] * 5, exposure=[0, 1, 2, 3, 4], wide=1.1, high_vol=2.0,
                 low_vol=0.95)
    assert out.tolist() == [e * 9 + _ou(O.PASSIVE, U.LOW) for e in range(5)]
    clamped = _route([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], exposure=[-3, 7])
    assert clamped.tolist() == [0 * 9 + _ou(O.LIMIT, U.NORMAL), 4 * 9 + _ou(O.LIMIT, U.NORMAL)]
    assert _route([], [], [], []).shape == (0,)


def test_route_random_against_python_rule():
    g = torch.Generator().manual_seed(4)
    n = 2000
    s, ms, v, mv = (torch.rand(n, generator=g) * 3 for _ in range(4))
    ms[::7] = 0.0
    e = torch.randint(0, 5, (n,), generator=g)
    out = _route(s.tolist(), ms.tolist(), v.tolist(), mv.tolist(), exposure=e.tolist())
    for i in range(n):
        rs = float(np.float32(s[i]) / np.float32(ms[i])) if ms[i] > 0 else 1.0
        rv = float(np.float32(v[i]) / np.float32(mv[i])) if mv[i] > 0 else 1.0
        if rv >= 1.5:
            o, u = (O.LIMIT if rs >= 1.5 else O.MARKET), U.HIGH
        else:
            o, u = (O.PASSIVE if rs >= 1.5 else O.LIMIT), (U.LOW if rv <= 0.75 else U.NORMAL)
        assert int(out[i]) == int(e[i]) * 9 + _ou(o, u)


# ----------------------------------------------------------------------------- guard
def _guard(loss, grad, warm=1.0, host_warm=False, loss_clip=10.0, collapse_threshold=1e-3):
    bufs = dict(flags=torch.full((3,), -1, dtype=torch.int32), clipped_loss=torch.full((1,), -1.0),
                loss_scale=torch.full((1,), -1.0), found_inf=torch.full((1,), -1.0))
    w = warm if host_warm else torch.tensor([warm])
    K.guard_check(torch.tensor([loss]), torch.tensor([grad]), w, bufs["flags"], bufs["clipped_loss"],
                  bufs["loss_scale"], bufs["found_inf"], loss_clip=loss_clip, collapse_threshold=collapse_threshold)
    return (bufs["flags"].tolist(), float(bufs["clipped_loss"]), float(bufs["loss_scale"]), float(bufs["found_inf"]))


@pytest.mark.parametrize(
    "loss, grad, warm, want",
    [
        (2.0, 3.0, 1.0, ([0, 0, 0], 2.0, 1.0, 0.0)),
        (20.0, 3.0, 1.0, ([0, 1, 0], 10.0, 0.5, 0.0)),
        (10.0, 3.0, 1.0, ([0, 0, 0], 10.0, 1.0, 0.0)),  # exactly at the clip: not clipped
        (0.0, 3.0, 1.0, ([0, 0, 0], 0.0, 1.0, 0.0)),  # zero loss: scale 1
        (NAN, 3.0, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),
        (INF, 3.0, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),
        (-INF, 3.0, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),
        (2.0, NAN, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),
        (2.0, INF, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),
        (2.0, 1e-5, 1.0, ([0, 0, 1], 2.0, 1.0, 0.0)),  # collapse after warmup
        (2.0, 1e-5, 0.0, ([0, 0, 0], 2.0, 1.0, 0.0)),  # not before warmup
        (2.0, 1e-3, 1.0, ([0, 0, 0], 2.0, 1.0, 0.0)),  # exactly at the threshold: no collapse
        (NAN, 1e-5, 1.0, ([1, 0, 0], 0.0, 0.0, 1.0)),  # non-finite steps never count as collapse
        (40.0, 0.0, 1.0, ([0, 1, 1], 10.0, 0.25, 0.0)),
    ],
)
def test_guard_check_cases(loss, grad, warm, want):
    assert _guard(loss, grad, warm) == want  # every expected value is exact in float32
    assert _guard(loss, grad, warm, host_warm=True) == want  # host float warmup


def test_guard_accumulate_excludes_nonfinite_steps():
    accum = torch.zeros(6, dtype=torch.float64)
    steps = [(2.0, 3.0, 1.0), (20.0, 1.0, 1.0), (NAN, 5.0, 1.0), (1.0, INF, 1.0), (4.0, 1e-5, 1.0), (3.0, 2.0, 0.0)]
    for loss, grad, warm in steps:
        flags, cl, ls, fi = (torch.zeros(3, dtype=torch.int32), torch.zeros(1), torch.zeros(1), torch.zeros(1))
        g = torch.tensor([grad])
        K.guard_check(torch.tensor([loss]), g, torch.tensor([warm]), flags, cl, ls, fi, loss_clip=10.0,
                      collapse_threshold=1e-3)
        K.guard_accumulate(cl, g, flags, accum)
    # finite steps: losses 2, 10 (clipped from 20), 4, 3; grad norms 3, 1, 1e-5, 2
    want = [2 + 10 + 4 + 3, 3 + 1 + np.float32(1e-5) + 2, 6, 2, 1, 1]
    assert accum.dtype == torch.float64
    assert accum.tolist() == pytest.approx(want, rel=1e-12)


def test_guard_accumulate_direct_nonfinite_inputs():
    accum = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    K.guard_accumulate(torch.tensor([NAN]), torch.tensor([INF]), torch.tensor([1, 0, 0], dtype=torch.int32), accum)
    assert accum.tolist() == [1.0, 2.0, 4.0, 1.0, 0.0, 0.0]
    K.guard_accumulate(torch.tensor([0.5]), torch.tensor([0.25]), torch.tensor([0, 1, 1], dtype=torch.int32), accum)
    assert accum.tolist() == [1.5, 2.25, 5.0, 1.0, 1.0, 1.0]


def _record_bufs():
    """Fresh guard_record state: accum, qagg (reset as at an iteration start), records, update_index."""
    return dict(accum=torch.zeros(6, dtype=torch.float64),
                qagg=torch.tensor([INF, -INF, 0.0, 0.0, 0.0], dtype=torch.float64),
                records=torch.zeros(3, 6, dtype=torch.float64), update_index=torch.tensor([4.0], dtype=torch.float64))


def _record(state, *, flags, div_flag, clipped_loss, loss, grad_norm, qstats):
    K.guard_record(torch.tensor([clipped_loss]), torch.tensor([loss]), torch.tensor([grad_norm]),
                   torch.tensor(flags, dtype=torch.int32), torch.tensor(qstats),
                   torch.tensor([div_flag], dtype=torch.int32),
                   state["accum"], state["qagg"], state["records"], state["update_index"])


def test_guard_record_hand_computed():
    st = _record_bufs()
    # update 4: loss clipped (25 -> 10) and a grad collapse; Q finite
    _record(st, flags=[0, 1, 1], div_flag=0, clipped_loss=10.0, loss=25.0, grad_norm=0.5,
            qstats=[-1.5, 2.0, 0.25, -0.75, 0.0])
    assert st["accum"].tolist() == [10.0, 0.5, 1.0, 0.0, 1.0, 1.0]
    assert st["qagg"].tolist() == [-1.5, 2.0, 0.25, -0.75, 1.0]
    assert st["records"].tolist() == [[0.0] * 6, [1.0, 4.0, 25.0, 0.5, -1.5, 2.0], [0.0] * 6]
    assert st["update_index"].tolist() == [5.0]
    # update 5: non-finite step with non-finite Q and the divergence flag up
    _record(st, flags=[1, 0, 0], div_flag=1, clipped_loss=0.0, loss=NAN, grad_norm=INF,
            qstats=[NAN, NAN, NAN, NAN, 1.0])
    assert st["accum"].tolist() == [10.0, 0.5, 2.0, 1.0, 1.0, 1.0]  # loss / grad norm sums skip it
    assert st["qagg"].tolist() == [-1.5, 2.0, 0.25, -0.75, 1.0]  # NaN stats are not folded in
    rec = st["records"]
    assert rec[0, :2].tolist() == [1.0, 5.0] and math.isnan(rec[0, 2]) and rec[0, 3] == INF
    assert math.isnan(rec[0, 4]) and math.isnan(rec[0, 5])
    assert rec[1].tolist() == [1.0, 4.0, 25.0, 0.5, -1.5, 2.0]  # first trigger kept
    assert torch.equal(rec[2].isnan(), rec[0].isnan()) and rec[2, :2].tolist() == [1.0, 5.0]
    # update 6: every check fires again; all rows already hold their first trigger
    before = rec.clone()
    _record(st, flags=[0, 0, 1], div_flag=1, clipped_loss=3.0, loss=3.0, grad_norm=0.25,
            qstats=[-3.0, 1.0, 0.5, 0.25, 0.0])
    assert st["accum"].tolist() == [13.0, 0.75, 3.0, 1.0, 1.0, 2.0]
    assert st["qagg"].tolist() == [-3.0, 2.0, 0.75, -0.5, 2.0]
    assert torch.equal(rec.isnan(), before.isnan()) and torch.equal(rec.nan_to_num(), before.nan_to_num())
    # a cleared row re-arms: the next trigger is stored again
    rec[2].zero_()
    _record(st, flags=[0, 0, 0], div_flag=1, clipped_loss=1.0, loss=1.0, grad_norm=2.0,
            qstats=[0.5, 4.0, 1.0, 1.0, 0.0])
    assert rec[2].tolist() == [1.0, 7.0, 1.0, 2.0, 0.5, 4.0]
    assert st["qagg"].tolist() == [-3.0, 4.0, 1.75, 0.5, 3.0]
    assert st["update_index"].tolist() == [8.0]


def test_guard_record_accumulates_like_guard_accumulate():
    g = torch.Generator().manual_seed(4)
    a, st = torch.zeros(6, dtype=torch.float64), _record_bufs()
    for i in range(20):
        flags = torch.randint(0, 2, (3,), generator=g, dtype=torch.int32)
        cl, gn = torch.rand(1, generator=g) * 5, torch.rand(1, generator=g)
        K.guard_accumulate(cl, gn, flags, a)
        K.guard_record(cl, cl, gn, flags, torch.zeros(5), torch.zeros(1, dtype=torch.int32), st["accum"], st["qagg"],
                       st["records"], st["update_index"])
    assert torch.equal(a, st["accum"])
    assert st["update_index"].tolist() == [24.0]


# ----------------------------------------------------------------------------- qstats
def _qstats(q):
    q = torch.as_tensor(q, dtype=torch.float32)
    out = torch.full((5,), -9.0)
    K.qstats(q, out, torch.empty(qstats_scratch_numel(q.shape[0])))
    return out


def test_qstats_hand_computed():
    out = _qstats([[1.0, 3.0, 2.0], [4.0, -1.0, 0.0]])
    assert out.tolist() == [3.0, 4.0, 3.5, 1.5, 0.0]
    assert _qstats([[-2.5]]).tolist() == [-2.5, -2.5, -2.5, -2.5, 0.0]  # B=1, A=1


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_qstats_nonfinite_raises_flag(bad):
    q = torch.randn(257, 5)
    q[100, 3] = bad  # not the row max for NaN/-Inf: must not vanish inside max
    out = _qstats(q)
    assert math.isnan(out[0]) and math.isnan(out[1]) and math.isnan(out[2]) and math.isnan(out[3])
    assert float(out[4]) == 1.0
    assert float(_qstats([[NAN, 5.0]])[4]) == 1.0


def test_qstats_random_against_float64():
    q = torch.randn(4099, 45, generator=torch.Generator().manual_seed(3)) * 10
    out = _qstats(q)
    q64 = q.double()
    rm = q64.max(dim=1).values
    want = [float(rm.min()), float(rm.max()), float(rm.mean()), float(q64.mean()), 0.0]
    assert out.tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_qstats_empty_and_scratch_sizes():
    with pytest.raises(ValueError, match="row"):
        _qstats(torch.zeros(0, 5))
    assert [qstats_scratch_numel(b) for b in (1, 256, 257, 1 << 20, 1 << 30)] == [5, 5, 10, 5 * 1024, 5 * 1024]
    with pytest.raises(ValueError, match="num_rows"):
        qstats_scratch_numel(0)


# ----------------------------------------------------------------------------- divergence
def test_divergence_patience_sequence():
    counter, flag = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    ok, hi, lo, nan = [0.0, 5.0, 1.0, 0.0, 0.0], [0.0, 11.0, 1.0, 0.0, 0.0], [-11.0, 0.0, 1.0, 0.0, 0.0], [NAN] * 4 + [1.0]
    edge = [-10.0, 10.0, 0.0, 0.0, 0.0]  # exactly at the threshold: fine
    seq = [ok, hi, lo, ok, hi, nan, lo, edge, hi]
    counters, flags = [], []
    for s in seq:
        K.divergence(torch.tensor(s), counter, flag, threshold=10.0, patience=3)
        counters.append(int(counter))
        flags.append(int(flag))
    assert counters == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert flags == [0, 0, 0, 0, 0, 0, 1, 1, 1]  # sticky


def test_divergence_counter_saturates():
    counter, flag = torch.tensor([2**31 - 1], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    K.divergence(torch.tensor([NAN] * 4 + [1.0]), counter, flag, threshold=1.0, patience=5)
    assert int(counter) == 2**31 - 1 and int(flag) == 1


# ----------------------------------------------------------------------------- adam_step
ADAM_HP = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, grad_clip=None)


def _adam_bufs(n: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return dict(params=torch.randn(n, generator=g), grads=torch.randn(n, generator=g),
                exp_avg=torch.randn(n, generator=g) * 0.1, exp_avg_sq=torch.rand(n, generator=g) * 0.01,
                step=torch.tensor([4.0]), found_inf=torch.zeros(1), loss_scale=torch.ones(1),
                grad_norm=torch.ones(1), blocks_done=torch.zeros(1, dtype=torch.int32))


def _scaled_grads(grads, loss_scale, grad_norm, grad_clip):
    """What torch.optim is handed: the gradient times the loss scale and the clip coefficient."""
    s = loss_scale.clone()
    if grad_clip is not None:
        s = s * torch.fmin(torch.ones(1), torch.full((1,), grad_clip) / (grad_norm * loss_scale + ADAM_CLIP_EPS))
    return grads * s


def _adam_against_torch(opt_cls, *, lr, weight_decay, grad_clip, loss_scales, differentiable=False, steps=6):
    """Run the twin and ``opt_cls`` side by side for ``steps`` steps; yield the (twin, torch) states and the
    largest gradient element so far after each."""
    n = 4099
    g = torch.Generator().manual_seed(7)
    p0 = torch.randn(n, generator=g)
    ours = dict(params=p0.clone(), exp_avg=torch.zeros(n), exp_avg_sq=torch.zeros(n), step=torch.zeros(1))
    theirs = p0.clone()  # a plain leaf (no requires_grad): differentiable=True may step it in place
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, foreach=False, differentiable=differentiable)
    if opt_cls is torch.optim.AdamW:
        kw["weight_decay"] = weight_decay
    opt = opt_cls([theirs], **kw)
    gmax = 0.0  # the largest gradient element handed to torch so far: the scale of the moments
    for i in range(steps):
        grads = torch.randn(n, generator=g) * 10.0 ** (i % 3 - 1)  # gradients of changing scale
        loss_scale = torch.tensor([loss_scales[i % len(loss_scales)]])
        grad_norm = torch.linalg.vector_norm(grads).reshape(1)
        grads_before = grads.clone()
        theirs.grad = _scaled_grads(grads, loss_scale, grad_norm, grad_clip)
        opt.step()
        ref.adam_step(ours["params"], grads, ours["exp_avg"], ours["exp_avg_sq"], ours["step"], torch.zeros(1),
                      loss_scale, grad_norm, torch.zeros(1, dtype=torch.int32), lr=lr, beta1=0.9, beta2=0.999,
                      eps=1e-8, weight_decay=weight_decay, grad_clip=grad_clip)
        assert torch.equal(grads, grads_before)  # the gradient buffer is read, never written
        st = opt.state[theirs]
        gmax = max(gmax, float(theirs.grad.abs().max()))
        yield ours, dict(params=theirs.detach(), exp_avg=st["exp_avg"], exp_avg_sq=st["exp_avg_sq"],
                         step=st["step"].reshape(1)), gmax


ADAM_CASES = [  # (optimizer, lr, weight_decay, grad_clip): the clip of 0.5 is active (norms are 6..640), 1e4 is not
    (torch.optim.Adam, 1e-3, 0.0, None), (torch.optim.Adam, 1e-2, 0.0, 0.5), (torch.optim.Adam, 1e-3, 0.0, 1e4),
    (torch.optim.AdamW, 1e-3, 0.01, None), (torch.optim.AdamW, 1e-2, 0.1, 0.5), (torch.optim.AdamW, 0.1, 0.01, 1e4),
]


@pytest.mark.parametrize("opt_cls, lr, weight_decay, grad_clip", ADAM_CASES)
@pytest.mark.parametrize("loss_scales", [(1.0,), (0.25, 1.0, 0.5)])
def test_adam_step_matches_torch_optim(opt_cls, lr, weight_decay, grad_clip, loss_scales):
    """Six steps against torch.optim.Adam / AdamW (foreach=False). The moments agree to float32 rounding
    (1e-7 of the largest gradient absolute: m is a sum that can cancel; measured 1.4e-8); the parameters to
    1e-4 * lr (measured 4.3e-5 * lr): torch takes the bias corrections in double from the host step count,
    the kernel in float32 on the device (1 - 0.999f**t is 1.3e-5 off 1 - 0.999**t at t = 1)."""
    for ours, theirs, gmax in _adam_against_torch(opt_cls, lr=lr, weight_decay=weight_decay, grad_clip=grad_clip,
                                                  loss_scales=loss_scales):
        torch.testing.assert_close(ours["params"], theirs["params"], rtol=1e-6, atol=1e-4 * lr)
        torch.testing.assert_close(ours["exp_avg"], theirs["exp_avg"], rtol=1e-6, atol=1e-7 * gmax)
        torch.testing.assert_close(ours["exp_avg_sq"], theirs["exp_avg_sq"], rtol=1e-6, atol=0.0)
        assert torch.equal(ours["step"], theirs["step"])


@pytest.mark.parametrize("opt_cls, lr, weight_decay, grad_clip", ADAM_CASES)
def test_adam_step_matches_torch_capturable_maths(opt_cls, lr, weight_decay, grad_clip):
    """torch's capturable branch (taken on the CPU with differentiable=True) computes the bias corrections
    in float32 from the step tensor, as the kernel does: the parameters then agree to 2e-6 * lr (measured
    6.2e-7 * lr; the rest is lerp vs. the explicit moment update and torch's folded denominator)."""
    for ours, theirs, gmax in _adam_against_torch(opt_cls, lr=lr, weight_decay=weight_decay, grad_clip=grad_clip,
                                                  loss_scales=(0.25, 1.0, 0.5), differentiable=True):
        torch.testing.assert_close(ours["params"], theirs["params"], rtol=1e-6, atol=2e-6 * lr)
        torch.testing.assert_close(ours["exp_avg"], theirs["exp_avg"], rtol=1e-6, atol=1e-7 * gmax)
        torch.testing.assert_close(ours["exp_avg_sq"], theirs["exp_avg_sq"], rtol=1e-6, atol=0.0)
        assert torch.equal(ours["step"], theirs["step"])


def test_adam_step_hand_computed():
    """One element, float64 by hand: decay, scale, clip, moments, bias corrections, step count."""
    hp = dict(lr=0.1, beta1=0.8, beta2=0.9, eps=1e-3, weight_decay=0.5, grad_clip=2.0)
    p, g, m, v, step, ls, gn = 1.5, 4.0, 0.5, 0.25, 2.0, 0.5, 10.0
    bufs = dict(params=torch.tensor([p]), grads=torch.tensor([g]), exp_avg=torch.tensor([m]),
                exp_avg_sq=torch.tensor([v]), step=torch.tensor([step]), found_inf=torch.zeros(1),
                loss_scale=torch.tensor([ls]), grad_norm=torch.tensor([gn]),
                blocks_done=torch.zeros(1, dtype=torch.int32))
    K.adam_step(**bufs, **hp)
    s = ls * min(1.0, 2.0 / (gn * ls + 1e-6))  # 0.5 * 0.4
    gs, t = g * s, step + 1
    m1, v1 = 0.8 * m + 0.2 * gs, 0.9 * v + 0.1 * gs * gs
    p1 = p * (1 - 0.1 * 0.5) - (0.1 / (1 - 0.8**t)) * m1 / (math.sqrt(v1) / math.sqrt(1 - 0.9**t) + 1e-3)
    for key, want in (("params", p1), ("exp_avg", m1), ("exp_avg_sq", v1)):
        assert bufs[key].item() == pytest.approx(want, rel=1e-6), key
    assert bufs["step"].item() == 3.0 and bufs["grads"].item() == g and bufs["blocks_done"].item() == 0


@pytest.mark.parametrize("bad", [1.0, NAN, INF, -1.0])
def test_adam_step_found_inf_changes_nothing(bad):
    bufs = _adam_bufs(257)
    bufs["params"][3] = NAN  # bit-identical includes NaN payloads and signed zeros
    bufs["exp_avg"][5] = -0.0
    bufs["found_inf"].fill_(bad)
    before = {k: v.clone() for k, v in bufs.items()}
    K.adam_step(**bufs, **{**ADAM_HP, "weight_decay": 0.01, "grad_clip": 1.0})
    for key, t in bufs.items():
        assert torch.equal(t.view(torch.int32) if t.dtype == torch.float32 else t,
                           before[key].view(torch.int32) if t.dtype == torch.float32 else before[key]), key


def test_adam_step_clip_and_decay_switches():
    """weight_decay=0 leaves the decay out exactly; an inactive clip equals no clip; an active one scales g."""
    base = _adam_bufs(64, seed=3)
    base["grad_norm"].fill_(5.0)
    base["loss_scale"].fill_(0.5)

    def run(**hp):
        b = {k: v.clone() for k, v in base.items()}
        K.adam_step(**b, **{**ADAM_HP, **hp})
        return b

    plain = run()
    assert torch.equal(run(grad_clip=1e6)["params"], plain["params"])  # min(1, ...) = 1
    clipped = run(grad_clip=1.0)  # coefficient 1 / (5 * 0.5 + 1e-6)
    manual = {k: v.clone() for k, v in base.items()}
    manual["loss_scale"].fill_(0.5 * (1.0 / (2.5 + 1e-6)))
    K.adam_step(**manual, **ADAM_HP)
    torch.testing.assert_close(clipped["exp_avg"], manual["exp_avg"], rtol=1e-6, atol=1e-7)  # |g * s| < 1
    decayed = run(weight_decay=0.1)
    assert not torch.equal(decayed["params"], plain["params"])
    torch.testing.assert_close(decayed["exp_avg"], plain["exp_avg"], rtol=0.0, atol=0.0)  # decay touches p only


def _adam_check(**change):
    bufs = {**_adam_bufs(5), **{k: v for k, v in change.items() if k not in ADAM_HP}}
    hp = {**ADAM_HP, **{k: v for k, v in change.items() if k in ADAM_HP}}
    adam_step.check(**bufs, **hp)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(params=torch.zeros(5, dtype=torch.float64)), "params must have dtype torch.float32"),
        (dict(params=torch.zeros(0), grads=torch.zeros(0), exp_avg=torch.zeros(0), exp_avg_sq=torch.zeros(0)),
         "params must have at least one element"),
        (dict(params=torch.zeros(5, 1)), r"params must have shape \[\*\]"),
        (dict(grads=torch.zeros(6)), r"grads must have shape \[5\]"),
        (dict(exp_avg=torch.zeros(10)[::2]), "exp_avg must be contiguous"),
        (dict(exp_avg_sq=torch.zeros(5, device="meta")), "exp_avg_sq must be on device cpu"),
        (dict(step=torch.zeros(1, dtype=torch.int64)), "step must have dtype torch.float32"),
        (dict(found_inf=torch.zeros(2)), r"found_inf must have shape \[1\]"),
        (dict(loss_scale=1.0), "loss_scale must be a torch.Tensor"),
        (dict(grad_norm=torch.zeros(())), r"grad_norm must have shape \[1\]"),
        (dict(blocks_done=torch.zeros(1)), "blocks_done must have dtype torch.int32"),
        (dict(lr=0.0), "lr must be > 0"),
        (dict(lr=1e-50), "lr must be > 0.0 in float32"),
        (dict(lr=NAN), "lr must be a finite float"),
        (dict(lr=1e300), "lr must be finite in float32"),
        (dict(beta1=1.0), "beta1 must be < 1"),
        (dict(beta1=1 - 1e-10), "beta1 must be < 1.0 in float32"),
        (dict(beta1=-0.1), "beta1 must be >= 0"),
        (dict(beta2=1.5), "beta2 must be < 1"),
        (dict(beta2=INF), "beta2 must be a finite float"),
        (dict(eps=0.0), "eps must be > 0"),
        (dict(eps=-1e-8), "eps must be > 0"),
        (dict(weight_decay=-0.01), "weight_decay must be >= 0"),
        (dict(weight_decay=NAN), "weight_decay must be a finite float"),
        (dict(lr=1e20, weight_decay=1e20), "1 - lr \\* weight_decay must be finite in float32"),
        (dict(grad_clip=0.0), "grad_clip must be > 0"),
        (dict(grad_clip=-1.0), "grad_clip must be > 0"),
        (dict(grad_clip=INF), "grad_clip must be a finite float"),
        (dict(grad_clip="x"), "grad_clip must be a finite float"),
    ],
)
def test_check_adam_step_errors(change, match):
    with pytest.raises(ValueError, match=match):
        _adam_check(**change)


def test_check_adam_step_accepts_edges():
    _adam_check(beta1=0.0, beta2=0.0, weight_decay=0.0, grad_clip=None)
    _adam_check(beta1=0.999999, beta2=0.99999, lr=10.0, weight_decay=1.0, grad_clip=1e-3)
    bufs = _adam_bufs(3)
    K.bind_adam_step(*bufs.values(), **ADAM_HP)()  # positional form, in signature order
    K.bind_adam_step(**bufs, **ADAM_HP)()  # keyword form
    assert bufs["step"].item() == 6.0 and bufs["blocks_done"].item() == 0


# ----------------------------------------------------------------------------- validation
def _guard_bufs():
    f = lambda: torch.zeros(1)  # noqa: E731
    return dict(loss=f(), grad_norm=f(), warmup_done=f(), flags=torch.zeros(3, dtype=torch.int32),
                clipped_loss=f(), loss_scale=f(), found_inf=f())


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(loss=torch.zeros(1, dtype=torch.float64)), "loss must have dtype torch.float32"),
        (dict(grad_norm=torch.zeros(2)), r"grad_norm must have shape \[1\]"),
        (dict(flags=torch.zeros(3)), "flags must have dtype torch.int32"),
        (dict(found_inf=torch.zeros(1, device="meta")), "found_inf must be on device cpu"),
        (dict(warmup_done=float("nan")), "warmup_done"),
        (dict(loss=[1.0]), "loss must be a torch.Tensor"),
    ],
)
def test_check_guard_check_errors(change, match):
    bufs = {**_guard_bufs(), **change}
    with pytest.raises(ValueError, match=match):
        guard_check.check(**bufs, loss_clip=1.0, collapse_threshold=0.0)


def test_check_option_errors():
    with pytest.raises(ValueError, match="loss_clip"):
        guard_check.check(**_guard_bufs(), loss_clip=0.0, collapse_threshold=0.0)
    with pytest.raises(ValueError, match="collapse_threshold"):
        guard_check.check(**_guard_bufs(), loss_clip=1.0, collapse_threshold=NAN)
    c, f = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="patience"):
        divergence.check(torch.zeros(5), c, f, threshold=1.0, patience=0)
    with pytest.raises(ValueError, match="threshold"):
        divergence.check(torch.zeros(5), c, f, threshold=INF, patience=1)
    with pytest.raises(ValueError, match="counter must have dtype torch.int32"):
        divergence.check(torch.zeros(5), torch.zeros(1), f, threshold=1.0, patience=1)
    with pytest.raises(ValueError, match="accum must have dtype torch.float64"):
        guard_accumulate.check(torch.zeros(1), torch.zeros(1), torch.zeros(3, dtype=torch.int32), torch.zeros(6))
    with pytest.raises(ValueError, match="wide"):
        route.check(*_route_bufs(3), wide=NAN)


def _guard_record_bufs():
    f, i = (lambda: torch.zeros(1)), (lambda n: torch.zeros(n, dtype=torch.int32))  # noqa: E731
    return dict(clipped_loss=f(), loss=f(), grad_norm=f(), flags=i(3), qstats_out=torch.zeros(5), div_flag=i(1),
                **_record_bufs())


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(loss=torch.zeros(1, dtype=torch.float64)), "loss must have dtype torch.float32"),
        (dict(qstats_out=torch.zeros(4)), r"qstats_out must have shape \[5\]"),
        (dict(div_flag=torch.zeros(1)), "div_flag must have dtype torch.int32"),
        (dict(qagg=torch.zeros(5)), "qagg must have dtype torch.float64"),
        (dict(records=torch.zeros(18, dtype=torch.float64)), r"records must have shape \[3, 6\]"),
        (dict(records=torch.zeros(6, 3, dtype=torch.float64).t()), "records must be contiguous"),
        (dict(update_index=torch.zeros(1, dtype=torch.float64, device="meta")), "update_index must be on device cpu"),
        (dict(accum=[0.0] * 6), "accum must be a torch.Tensor"),
    ],
)
def test_check_guard_record_errors(change, match):
    bufs = {**_guard_record_bufs(), **change}
    with pytest.raises(ValueError, match=match):
        guard_record.check(**bufs)


def test_bind_guard_record_returns_working_launcher():
    bufs = _guard_record_bufs()
    bufs["flags"][0] = 1
    launch = K.bind_guard_record(*bufs.values())
    launch()
    launch()
    assert bufs["accum"].tolist() == [0.0, 0.0, 2.0, 2.0, 0.0, 0.0]
    assert bufs["records"][0].tolist() == [1.0, 4.0, 0.0, 0.0, 0.0, 0.0]
    assert bufs["update_index"].tolist() == [6.0]


def test_check_qstats_errors():
    q = torch.zeros(300, 5)
    with pytest.raises(ValueError, match="scratch must have at least"):
        qstats.check(q, torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError, match="q must have at least one row"):
        qstats.check(torch.zeros(0, 5), torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError, match="q must be contiguous"):
        qstats.check(torch.zeros(5, 300).t(), torch.zeros(5), torch.zeros(10))
    with pytest.raises(ValueError, match=r"out must have shape \[5\]"):
        qstats.check(q, torch.zeros(4), torch.zeros(10))
    qstats.check(q, torch.zeros(5), torch.zeros(qstats_scratch_numel(300)))


def _select_bufs(n, a=5):
    return torch.zeros(n, a), torch.zeros(1), torch.zeros(1, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)


def test_check_select_errors():
    q, eps, step, act = _select_bufs(7)
    with pytest.raises(ValueError, match="step must have dtype torch.int64"):
        epsilon_greedy.check(q, eps, torch.zeros(1, dtype=torch.int32), act, seed=0)
    with pytest.raises(ValueError, match=r"actions must have shape \[7\]"):
        epsilon_greedy.check(q, eps, step, torch.zeros(8, dtype=torch.int64), seed=0)
    with pytest.raises(ValueError, match="seed"):
        epsilon_greedy.check(q, eps, step, act, seed=-5)
    with pytest.raises(ValueError, match="epsilon must have shape"):
        epsilon_greedy.check(q, torch.zeros(()), step, act, seed=0)
    with pytest.raises(ValueError, match="action column"):
        epsilon_greedy.check(torch.zeros(7, 0), eps, step, act, seed=0)
    with pytest.raises(ValueError, match=r"q_order must have shape \[7, 3\]"):
        branching_select.check(torch.zeros(7, 5), torch.zeros(7, 4), torch.zeros(7, 3), eps, step, act, seed=0)
    with pytest.raises(ValueError, match=r"q_exposure must have shape \[\*, 5\]"):
        branching_select.check(torch.zeros(7, 45), torch.zeros(7, 3), torch.zeros(7, 3), eps, step, act, seed=0)


def _route_bufs(n):
    f = lambda: torch.ones(n)  # noqa: E731
    return torch.zeros(n, dtype=torch.int64), f(), f(), f(), f(), torch.zeros(n, dtype=torch.int64)


def test_check_route_errors():
    e, s, ms, v, mv, a = _route_bufs(4)
    with pytest.raises(ValueError, match="exposure must have dtype torch.int64"):
        route.check(e.int(), s, ms, v, mv, a)
    with pytest.raises(ValueError, match=r"median_vol must have shape \[4\]"):
        route.check(e, s, ms, v, torch.ones(5), a)
    with pytest.raises(ValueError, match="spread must have dtype torch.float32"):
        route.check(e, s.double(), ms, v, mv, a)


def test_kernels_bind_returns_working_launcher():
    e, s, ms, v, mv, a = _route_bufs(3)
    s[1] = 2.0
    launch = K.bind_route(e, s, ms, v, mv, a)
    launch()
    assert a.tolist() == [_ou(O.LIMIT, U.NORMAL), _ou(O.PASSIVE, U.NORMAL), _ou(O.LIMIT, U.NORMAL)]
    q, eps, step, act = _select_bufs(4)
    with pytest.raises(ValueError, match="actions must have dtype torch.int64"):
        K.bind_epsilon_greedy(q, eps, step, act.int(), seed=0)
    q[:, 3] = 1.0
    K.bind_epsilon_greedy(q=q, epsilon=eps, step=step, actions=act, seed=0)()  # keyword form
    assert act.tolist() == [3, 3, 3, 3]
    meta = get_kernels("meta", backend="torch")
    with pytest.raises(ValueError, match="these kernels are for meta"):
        meta.bind_epsilon_greedy(q, eps, step, act, seed=0)


# ----------------------------------------------------------------------------- kernel table
def _params(sig: inspect.Signature) -> list:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_table_row_has_one_signature(name):
    """The twin, the check and the launch (after its device index) take the declared arguments: the
    same names, kinds and defaults, in order."""
    spec = KERNELS[name]
    declared = _params(spec.kernel.signature)
    assert isinstance(spec.kernel, Kernel) and spec.kernel.name == name
    assert spec.twin.__name__ == name and inspect.getmodule(spec.twin) is ref
    assert _params(inspect.signature(spec.twin)) == declared
    assert _params(inspect.signature(spec.kernel.check)) == declared
    launch = _params(inspect.signature(spec.kernel.launch))
    assert launch[0][0] == "device_index" and launch[1:] == declared
    assert any(k.startswith(f"zs_{name}") for k in spec.kernel.source.kernels)


def test_declaration_binds_like_python():
    check = guard_accumulate.check
    args = (torch.zeros(1), torch.zeros(1), torch.zeros(3, dtype=torch.int32), torch.zeros(6, dtype=torch.float64))
    check(*args)
    check(*args[:2], flags=args[2], accum=args[3])
    with pytest.raises(TypeError, match="takes 4 positional arguments but 5"):
        check(*args, args[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'acum'"):
        check(*args[:3], acum=args[3])
    with pytest.raises(TypeError, match="multiple values for argument 'flags'"):
        check(*args, flags=args[2])
    with pytest.raises(TypeError, match=r"missing required arguments: \['accum'\]"):
        check(*args[:3])
    with pytest.raises(TypeError, match="takes 3 positional arguments but 5"):
        divergence.check(torch.zeros(5), args[2][:1], args[2][:1], 1.0, 2)  # options are keyword-only


def _launch_cases() -> dict:
    """One valid call of every kernel on CPU tensors (and a second where an argument may be None / a float)."""
    from rl_zerosync.kernels.replay_add import nstep_tables
    from rl_zerosync.kernels.layernorm import layernorm_part_numel
    from rl_zerosync.kernels.linear import backward_gemms, forward_gemms, workspace
    from rl_zerosync.kernels.td_loss import td_loss_scratch_numel

    f, i, l, d, b = torch.float32, torch.int32, torch.int64, torch.float64, torch.bool
    z = lambda *shape, dt=f: torch.zeros(shape, dtype=dt)  # noqa: E731
    scales, table = nstep_tables(0.9, 3, torch.device("cpu"))
    jobs = [[z(6, 7)[:, :4], z(3, 4), z(3), z(6, 3)], [z(5, 4), z(3, 4), z(3), z(5, 3)]]
    fwd_ws = workspace([forward_gemms(jobs)])
    dz, x = z(512, 66)[:, :64], z(512, 64)
    bwd_ws = workspace([backward_gemms(dz, x, True)])
    packed = z(9, 40, dt=i)
    td = lambda w: (z(9, 5), z(9, 5), z(9, 5), packed[:, 2:4].view(l)[:, 0], packed[:, 4].view(f),  # noqa: E731
                    z(9), packed.view(torch.uint8)[:, 20].view(b), packed[:, 5].view(f) if w else None, z(9, 5),
                    z(1), z(9) if w else None, z(5), z(td_loss_scratch_numel(9), dt=d), z(1, dt=i))
    adam = (z(300), z(300), z(300), z(300), z(1), z(1), z(1), z(1), z(1, dt=i))
    hyper = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
    rollout = (z(4, 3, 6), z(4, 3, 6), z(4, 3, dt=l), z(4, 3), z(4, 3, dt=b), z(4, 3, dt=b), z(20, 20, dt=i),
               scales, table)
    offsets = dict(obs_at=0, next_obs_at=8, actions_at=14, rewards_at=16, discounts_at=17, terminateds_at=18)
    return {
        "guard_check": [((z(1), z(1), z(1), z(3, dt=i), z(1), z(1), z(1)), dict(loss_clip=1.0, collapse_threshold=0.0)),
                        ((z(1), z(1), 1.0, z(3, dt=i), z(1), z(1), z(1)), dict(loss_clip=1.0, collapse_threshold=0.0))],
        "guard_accumulate": [((z(1), z(1), z(3, dt=i), z(6, dt=d)), {})],
        "guard_record": [((z(1), z(1), z(1), z(3, dt=i), z(5), z(1, dt=i), z(6, dt=d), z(5, dt=d), z(3, 6, dt=d),
                           z(1, dt=d)), {})],
        "qstats": [((z(300, 5), z(5), z(qstats_scratch_numel(300))), {})],
        "td_loss": [(td(True), dict(loss_type="huber")), (td(False), dict(loss_type="mse"))],
        "divergence": [((z(5), z(1, dt=i), z(1, dt=i)), dict(threshold=1.0, patience=3))],
        "epsilon_greedy": [((z(7, 5), z(1), z(1, dt=l), z(7, dt=l)), dict(seed=3))],
        "epsilon_greedy_members": [((z(6, 5), z(3), z(1, dt=l), z(3, dt=l), z(6, dt=l)), {})],
        "branching_select": [((z(7, 5), z(7, 3), z(7, 3), z(1), z(1, dt=l), z(7, dt=l)), dict(seed=3))],
        "route": [((z(7, dt=l), z(7), z(7), z(7), z(7), z(7, dt=l)), dict(low_vol=0.5))],
        "replay_add": [((*rollout, None, z(1, dt=d)), dict(start=3, first_row=0, **offsets)),
                       ((*rollout, z(20, dt=d), z(1, dt=d)), dict(start=19, first_row=2, **offsets))],
        "grad_norm": [((z(2 * 2048), z(2), z(1), z(1, dt=i)), {})],
        "adam_step": [(adam, dict(**hyper, grad_clip=None)), (adam, dict(**hyper, grad_clip=1.0))],
        "linear_forward": [((jobs, z(fwd_ws[0]), z(fwd_ws[1], dt=i)), dict(relu=True))],
        "linear_backward": [((dz, x, z(64, 64), z(64, 64), z(64), z(512, 64), z(bwd_ws[0]), z(bwd_ws[1], dt=i)), {}),
                            ((dz, x, z(64, 64), z(64, 64), z(64), None, z(bwd_ws[0]), z(bwd_ws[1], dt=i)), {})],
        "layernorm_relu": [(([(z(4, 8), z(8), z(8), z(4, 8), z(4, 2)), (z(9, 8), z(8), z(8), z(9, 8), z(9, 2))],),
                            dict(eps=1e-5))],
        "layernorm_backward": [((z(4, 8), z(4, 8), z(4, 2), z(8), z(4, 8), z(8), z(8), z(layernorm_part_numel(4, 8)),
                                 z(1, dt=i)), {})],
        "replay_sample": [((z(10, 8, dt=i), z(1, dt=l), torch.arange(5), z(1, dt=l), z(1, dt=l), z(5, dt=l),
                            z(5, 8, dt=i), z(1, dt=i)), dict(seed_key=7))],
    }


C_TYPES = {"long long": np.int64, "int": np.int32, "unsigned int": np.uint32, "float": np.float32}


def _cu_parameters(source, entry: str) -> list:
    """The numpy types CuPy must pass for the parameters of ``entry`` in its ``.cu`` (pointers: uint64)."""
    text = (KERNEL_DIR / source.filename).read_text()
    params = re.search(rf"\b{entry}\s*\(([^)]*)\)\s*\{{", text).group(1).split(",")
    return [np.uint64 if "*" in p else C_TYPES[" ".join(p.split()[:-1])] for p in params]


def _tensors_of(values) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += _tensors_of(v)
    return out


def test_launches_pass_what_the_cu_declares(monkeypatch):
    """Every kernel's CuPy arguments (recorded on CPU tensors, no GPU) have the types of its ``.cu``
    parameters, and every pointer is NULL or into one of the call's buffers (an unused workspace
    offset may point at its end)."""
    calls, enqueue = [], kernel_launch.launch
    for module in [m for n, m in sys.modules.items() if n.startswith("rl_zerosync.kernels.")]:
        if getattr(module, "launch", None) is enqueue:
            monkeypatch.setattr(module, "launch", lambda source, kernel, *, device_index, grid, block, args,
                                shared_mem=0: calls.append((source, kernel, grid, block, list(args))))
    cases = _launch_cases()
    assert sorted(cases) == sorted(KERNELS)
    for name, calls_of in cases.items():
        for args, kwargs in calls_of:
            spec = KERNELS[name]
            spec.kernel.check(*args, **kwargs)
            calls.clear()
            spec.kernel.launch(0, *args, **kwargs)
            assert calls and [c[1] for c in calls] == [k for k in spec.kernel.source.kernels if k in
                                                       {c[1] for c in calls}], name
            spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in _tensors_of(args)]
            for source, entry, grid, block, cuda_args in calls:
                assert source is spec.kernel.source and grid >= 1 and block >= 1, (name, entry)
                assert [type(a) for a in cuda_args] == _cu_parameters(source, entry), (name, entry)
                for a in cuda_args:
                    if type(a) is np.uint64 and a != 0:
                        assert any(lo <= int(a) <= hi for lo, hi in spans), (name, entry, int(a))  # or its end
    calls.clear()
    KERNELS["route"].kernel.launch(0, *(torch.zeros(0, dtype=t) for t in (torch.int64,) + (torch.float32,) * 4
                                        + (torch.int64,)))
    assert calls == []  # zero rows: nothing to launch


def test_kernels_methods_come_from_the_table():
    assert get_kernels("cpu").backend == "torch"
    for name, spec in KERNELS.items():
        assert getattr(K, name) is spec.twin
        assert callable(getattr(K, f"bind_{name}"))
    cuda = Kernels("cuda:3", backend="cuda")  # built without touching a GPU
    for name, spec in KERNELS.items():
        run = getattr(cuda, name)
        assert (run.func, run.args) == (spec.kernel.launch, (3,))
    with pytest.raises(ValueError, match="indexed CUDA device"):
        Kernels("cpu", backend="cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        Kernels("cpu", backend="auto")
    K.warmup()  # nothing to compile for the twins


# ----------------------------------------------------------------------------- layouts
def test_layout_offsets_spans_and_reads():
    lay = Layout("ZS_T", ("a", ("b", 3), "c"))
    assert (lay.size, lay.names) == (5, ("a", "b", "c"))
    assert [lay.offset(n) for n in lay.names] == [0, 1, 4]
    assert lay.span("b") == slice(1, 4) and lay.span("c", "b") == slice(1, 5)
    assert lay.ordered({"c": "C", "a": "A", "b": "B"}) == ["A", "B", "C"]
    assert lay.split([10, 11, 12, 13, 14]) == {"a": 10, "b": [11, 12, 13], "c": 14}
    assert lay.defines() == {"ZS_T_A": 0, "ZS_T_B": 1, "ZS_T_C": 4, "ZS_T_SIZE": 5}
    with pytest.raises(ValueError, match="not adjacent"):
        lay.span("a", "c")
    with pytest.raises(ValueError, match="not adjacent"):
        lay.ordered({"a": 1, "c": 2})
    with pytest.raises(KeyError, match="no field 'd'"):
        lay.offset("d")
    with pytest.raises(ValueError, match="expected 5 values"):
        lay.split([1, 2])
    for bad in (("a", "a"), ("size",), ("a b",), (("a", 0),)):
        with pytest.raises(ValueError, match="bad or repeated field"):
            Layout("ZS_T", bad)


def test_twins_write_the_named_fields():
    """The twins address the shared buffers by name: one clipped, collapsed update, read back by name."""
    flags, cl, ls, fi = torch.zeros(FLAGS.size, dtype=torch.int32), torch.zeros(1), torch.zeros(1), torch.zeros(1)
    K.guard_check(torch.tensor([40.0]), torch.tensor([0.0]), 1.0, flags, cl, ls, fi, loss_clip=10.0,
                  collapse_threshold=1e-3)
    assert FLAGS.split(flags.tolist()) == {"nonfinite": 0, "loss_clipped": 1, "grad_collapse": 1}
    q = torch.tensor([[1.0, 3.0, 2.0], [4.0, -1.0, 0.0]])
    out = torch.zeros(QSTATS.size)
    K.qstats(q, out, torch.zeros(qstats_scratch_numel(2)))
    assert QSTATS.split(out.tolist()) == {"min": 3.0, "max": 4.0, "mean": 3.5, "all_mean": 1.5, "nan_flag": 0.0}
    st = _record_bufs()
    K.guard_record(cl, torch.tensor([40.0]), torch.tensor([0.0]), flags, out, torch.ones(1, dtype=torch.int32),
                   st["accum"], st["qagg"], st["records"], st["update_index"])
    assert ACCUM.split(st["accum"].tolist()) == {"loss_sum": 10.0, "grad_norm_sum": 0.0, "updates": 1.0,
                                                 "nonfinite": 0.0, "clipped": 1.0, "collapse": 1.0}
    assert QAGG.split(st["qagg"].tolist()) == {"min": 3.0, "max": 4.0, "mean_sum": 3.5, "all_mean_sum": 1.5,
                                               "count": 1.0}
    want = {"seen": 1.0, "update_index": 4.0, "loss": 40.0, "grad_norm": 0.0, "q_min": 3.0, "q_max": 4.0}
    for check in ("grad_collapse", "divergence"):
        assert RECORD.split(st["records"][CHECK.offset(check)].tolist()) == want
    assert RECORD.split(st["records"][CHECK.offset("nonfinite")].tolist())["seen"] == 0.0


# ----------------------------------------------------------------------------- backend switch
def test_backend_switch():
    assert get_kernels("cpu").backend == "torch"
    assert get_kernels(torch.device("cpu"), backend="torch") is get_kernels("cpu")
    with pytest.raises(ValueError, match="backend 'cuda' needs a CUDA device"):
        get_kernels("cpu", backend="cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        get_kernels("cpu", backend="triton")
    with pytest.raises(ValueError, match="backend must be one of"):
        set_default_backend("gpu")
    try:
        set_default_backend("torch")
        assert get_kernels("cpu").backend == "torch"
        set_default_backend("cuda")
        with pytest.raises(ValueError, match="CUDA device"):
            get_kernels("cpu")
        assert get_kernels("cpu", backend="torch").backend == "torch"  # explicit argument wins
    finally:
        set_default_backend(None)
    assert get_kernels("cpu").backend == "torch"


# ----------------------------------------------------------------------------- readback
def test_async_readback_cpu():
    rb = AsyncReadback(4, torch.float32, "cpu")
    assert rb.poll() is False
    with pytest.raises(RuntimeError, match="before start"):
        rb.wait()
    src = torch.arange(4.0).reshape(2, 2)
    rb.start(src)
    assert rb.poll() is True
    src += 10  # the host copy was taken at start()
    assert rb.wait().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="src must have 4 elements"):
        rb.start(torch.zeros(5))
    with pytest.raises(ValueError, match="float32"):
        rb.start(torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="numel"):
        AsyncReadback(0, torch.float32, "cpu")
