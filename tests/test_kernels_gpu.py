"""CUDA kernels against their torch twins on the GPU: parity, no host sync, CUDA-graph replay."""
from __future__ import annotations

import math
import time

import pytest
import torch

from rl_zerosync.kernels import AsyncReadback, get_kernels, qstats_scratch_numel

pytestmark = pytest.mark.gpu

SIZES = (1, 7, 257, 4099)
NAN, INF = float("nan"), float("inf")
LOSS_CLIP, COLLAPSE, THRESHOLD, PATIENCE, SEED = 10.0, 0.05, 10.0, 2, 99
INT_KEYS = ("flags", "counter", "flag", "actions", "bactions", "ractions", "blocks_done")
FLOAT_KEYS = ("clipped_loss", "loss_scale", "found_inf", "accum", "qout", "qagg", "records", "update_index",
              "params", "exp_avg", "exp_avg_sq", "adam_t")
ADAM = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8)


@pytest.fixture(scope="module")
def dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def kc(dev):
    k = get_kernels(dev, backend="cuda")
    assert k.backend == "cuda"
    k.warmup()  # compile + load before any sync-checked or captured launch
    return k


@pytest.fixture(scope="module")
def kt(dev):
    k = get_kernels(dev, backend="torch")
    assert k.backend == "torch"
    return k


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _q(n: int, a: int, seed: int, dev, *, ties: bool = False, specials: bool = False) -> torch.Tensor:
    q = torch.randn(n, a, generator=_gen(seed))
    if ties:
        q = torch.round(q * 2.0)  # many exact ties
    if specials and n >= 7:
        q[::5, a // 2] = NAN
        q[1::7, :] = -INF
        q[2::9, 0] = INF
    return q.to(dev)


def test_auto_backend_is_cuda(dev):
    assert get_kernels(dev).backend == "cuda"
    assert get_kernels("cuda").backend == "cuda"


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("a", (1, 5, 45))
def test_epsilon_greedy_parity(kc, kt, dev, n, a):
    for eps in (0.0, 0.1, 0.5, 1.0):
        for variant, (ties, specials) in enumerate(((False, False), (True, False), (True, True))):
            q = _q(n, a, 100 * n + a + variant, dev, ties=ties, specials=specials)
            e = torch.tensor([eps], device=dev)
            step = torch.tensor([2**33 + 17 * n + variant], dtype=torch.int64, device=dev)
            out_c = torch.full((n,), -1, dtype=torch.int64, device=dev)
            out_t = torch.full((n,), -2, dtype=torch.int64, device=dev)
            kc.epsilon_greedy(q, e, step, out_c, seed=1234 + n)
            kt.epsilon_greedy(q, e, step, out_t, seed=1234 + n)
            assert torch.equal(out_c, out_t), (eps, ties, specials)
            assert int(out_c.min()) >= 0 and int(out_c.max()) < a


def test_epsilon_zero_draw_boundary(kc, kt, dev):
    # seed 386, step 0: env 1771 draws u = 0 exactly on the explore stream (see the CPU test)
    q = torch.zeros(1772, 3, device=dev)
    q[:, 2] = 1.0
    step = torch.zeros(1, dtype=torch.int64, device=dev)
    for eps in (0.0, 2.0**-24):
        out_c = torch.full((1772,), -1, dtype=torch.int64, device=dev)
        out_t = torch.full((1772,), -2, dtype=torch.int64, device=dev)
        kc.epsilon_greedy(q, torch.tensor([eps], device=dev), step, out_c, seed=386)
        kt.epsilon_greedy(q, torch.tensor([eps], device=dev), step, out_t, seed=386)
        assert torch.equal(out_c, out_t)
        assert bool((out_c[:1771] == 2).all())
        if eps == 0.0:
            assert int(out_c[1771]) == 2  # "u < epsilon" is false for u = 0


@pytest.mark.parametrize("n", SIZES)
def test_branching_select_parity(kc, kt, dev, n):
    for eps in (0.0, 0.25, 1.0):
        for ties in (False, True):
            qe = _q(n, 5, n + 1, dev, ties=ties, specials=ties)
            qo = _q(n, 3, n + 2, dev, ties=ties)
            qu = _q(n, 3, n + 3, dev, ties=ties, specials=ties)
            e = torch.tensor([eps], device=dev)
            step = torch.tensor([n * 31 + 5], dtype=torch.int64, device=dev)
            out_c = torch.full((n,), -1, dtype=torch.int64, device=dev)
            out_t = torch.full((n,), -2, dtype=torch.int64, device=dev)
            kc.branching_select(qe, qo, qu, e, step, out_c, seed=7)
            kt.branching_select(qe, qo, qu, e, step, out_t, seed=7)
            assert torch.equal(out_c, out_t), (eps, ties)
            assert int(out_c.min()) >= 0 and int(out_c.max()) <= 44


def _route_inputs(n: int, seed: int, dev):
    g = _gen(seed)
    med_s = torch.tensor([1.0, 2.0, 0.5, 4.0])[torch.randint(0, 4, (n,), generator=g)]
    med_v = torch.tensor([1.0, 2.0, 0.5, 4.0])[torch.randint(0, 4, (n,), generator=g)]
    ratios = torch.tensor([0.5, 0.75, 1.0, 1.4999, 1.5, 1.6, 3.0])  # incl. values exactly on thresholds
    spread = med_s * ratios[torch.randint(0, 7, (n,), generator=g)]
    vol = med_v * ratios[torch.randint(0, 7, (n,), generator=g)]
    spread = torch.where(torch.rand(n, generator=g) < 0.3, torch.rand(n, generator=g) * 3, spread)
    if n >= 7:
        med_s[::6] = 0.0
        med_v[1::6] = -1.0
        spread[2::6] = NAN
        vol[3::6] = INF
        med_s[4::6] = INF
        med_v[5::6] = NAN
    exposure = torch.randint(-1, 6, (n,), generator=g)  # includes out-of-range values (clamped)
    return [t.to(dev) for t in (exposure, spread, med_s, vol, med_v)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("thresholds", [{}, dict(wide=2.0, high_vol=1.6, low_vol=1.0)])
def test_route_parity(kc, kt, dev, n, thresholds):
    inputs = _route_inputs(n, n, dev)
    out_c = torch.full((n,), -1, dtype=torch.int64, device=dev)
    out_t = torch.full((n,), -2, dtype=torch.int64, device=dev)
    kc.route(*inputs, out_c, **thresholds)
    kt.route(*inputs, out_t, **thresholds)
    assert torch.equal(out_c, out_t)


GUARD_CASES = [
    (2.0, 3.0, 1.0), (20.0, 3.0, 1.0), (10.0, 3.0, 1.0), (0.0, 3.0, 1.0), (NAN, 3.0, 1.0), (INF, 3.0, 1.0),
    (-INF, 3.0, 1.0), (2.0, NAN, 1.0), (2.0, -INF, 1.0), (2.0, 0.01, 1.0), (2.0, 0.01, 0.0), (2.0, 0.05, 1.0),
    (NAN, 0.01, 1.0), (37.3, 0.0, 1.0), (13.7, 0.2, 0.0),
]


def _guard_outputs(dev):
    return (torch.full((3,), -1, dtype=torch.int32, device=dev), *(torch.full((1,), -1.0, device=dev)
                                                                   for _ in range(3)))


def test_guard_parity(kc, kt, dev):
    g = _gen(5)
    cases = GUARD_CASES + [(float(torch.rand(1, generator=g)) * 20, float(torch.rand(1, generator=g)) * 0.1, 1.0)
                           for _ in range(50)]
    accum_c = torch.zeros(6, dtype=torch.float64, device=dev)
    accum_t = torch.zeros(6, dtype=torch.float64, device=dev)
    for loss, grad, warm in cases:
        for host_warm in (False, True):
            lo = torch.tensor([loss], device=dev)
            gn = torch.tensor([grad], device=dev)
            w = warm if host_warm else torch.tensor([warm], device=dev)
            oc, ot = _guard_outputs(dev), _guard_outputs(dev)
            kc.guard_check(lo, gn, w, *oc, loss_clip=LOSS_CLIP, collapse_threshold=COLLAPSE)
            kt.guard_check(lo, gn, w, *ot, loss_clip=LOSS_CLIP, collapse_threshold=COLLAPSE)
            assert torch.equal(oc[0], ot[0]), (loss, grad, warm)
            for x, y in zip(oc[1:], ot[1:]):
                torch.testing.assert_close(x, y)  # fp32 tolerance (the maths is the same IEEE ops)
            kc.guard_accumulate(oc[1], gn, oc[0], accum_c)
            kt.guard_accumulate(ot[1], gn, ot[0], accum_t)
    torch.testing.assert_close(accum_c, accum_t, rtol=1e-12, atol=0.0)
    assert float(accum_c[2]) == 2 * len(cases)
    assert float(accum_c[3]) > 0 and float(accum_c[4]) > 0 and float(accum_c[5]) > 0


def _record_state(dev):
    return [torch.zeros(6, dtype=torch.float64, device=dev),
            torch.tensor([INF, -INF, 0.0, 0.0, 0.0], dtype=torch.float64, device=dev),
            torch.zeros(3, 6, dtype=torch.float64, device=dev), torch.zeros(1, dtype=torch.float64, device=dev)]


def test_guard_record_parity(kc, kt, dev):
    g = _gen(21)
    state_c, state_t = _record_state(dev), _record_state(dev)
    for i in range(60):
        flags = torch.randint(0, 2, (3,), generator=g, dtype=torch.int32)
        div_flag = torch.randint(0, 2, (1,), generator=g, dtype=torch.int32)
        loss = torch.randn(1, generator=g) * 20
        grad = torch.rand(1, generator=g)
        if i % 7 == 3:
            loss[0], grad[0] = NAN, INF
        stats = torch.randn(5, generator=g) * 4
        stats[4] = 0.0
        if i % 5 == 2:
            stats[:4] = NAN
            stats[4] = 1.0
        inputs = [t.to(dev) for t in (loss.clamp(max=10.0), loss, grad, flags, stats, div_flag)]
        kc.guard_record(*inputs, *state_c)
        kt.guard_record(*inputs, *state_t)
        for x, y in zip(state_c, state_t):  # the same float64 IEEE ops in the same order: exact
            torch.testing.assert_close(x, y, rtol=0.0, atol=0.0, equal_nan=True)
        if i % 11 == 10:  # a boundary read clears rows: they re-arm
            for st in (state_c, state_t):
                st[2][i % 3].zero_()
    records = state_c[2].cpu()
    assert (records[:, 0] == 1.0).all() and float(state_c[3]) == 60.0
    assert float(state_c[1][4]) == 60 - len([i for i in range(60) if i % 5 == 2])


def _qstats_pair(kc, kt, q, dev):
    b = q.shape[0]
    out_c = torch.full((5,), -9.0, device=dev)
    out_t = torch.full((5,), -8.0, device=dev)
    kc.qstats(q, out_c, torch.full((qstats_scratch_numel(b),), NAN, device=dev))
    kt.qstats(q, out_t, torch.empty(qstats_scratch_numel(b), device=dev))
    return out_c, out_t


@pytest.mark.parametrize("b", SIZES + (1 << 20,))
@pytest.mark.parametrize("a", (1, 5, 45))
def test_qstats_parity(kc, kt, dev, b, a):
    q = torch.randn(b, a, generator=_gen(b + a)).to(dev) * 3.0 + 0.5
    out_c, out_t = _qstats_pair(kc, kt, q, dev)
    assert torch.equal(out_c[[0, 1, 4]], out_t[[0, 1, 4]])  # min / max / flag are exact
    torch.testing.assert_close(out_c[2:4], out_t[2:4], rtol=1e-5, atol=1e-5)
    q64 = q.double()
    want = torch.stack([q64.amax(1).mean(), q64.mean()]).float()
    torch.testing.assert_close(out_c[2:4], want, rtol=1e-6, atol=1e-6)  # double accumulation inside
    assert float(out_c[4]) == 0.0


@pytest.mark.parametrize("b", (7, 4099, 1 << 20))
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_qstats_nonfinite(kc, kt, dev, b, bad):
    q = torch.randn(b, 5, generator=_gen(b)).to(dev)
    q[b * 3 // 4, 2] = bad  # in a late block, and not the row max for NaN / -Inf
    out_c, out_t = _qstats_pair(kc, kt, q, dev)
    torch.testing.assert_close(out_c, out_t, equal_nan=True)
    assert float(out_c[4]) == 1.0 and bool(torch.isnan(out_c[:4]).all())


def test_divergence_parity(kc, kt, dev):
    g = _gen(9)
    seq = []
    for i in range(40):
        s = torch.randn(5, generator=g) * 8  # |min| or |max| above the threshold about half the time
        s[4] = 0.0
        if i % 4 == 1:
            s[:2] = torch.tensor([1.0, -2.0])  # clearly fine: resets the counter
        if i % 5 == 0:
            s[:4] = NAN
            s[4] = 1.0
        seq.append(s)
    state_c = [torch.zeros(1, dtype=torch.int32, device=dev) for _ in range(2)]
    state_t = [torch.zeros(1, dtype=torch.int32, device=dev) for _ in range(2)]
    counters = []
    for s in seq:
        stats = s.to(dev)
        kc.divergence(stats, *state_c, threshold=THRESHOLD, patience=3)
        kt.divergence(stats, *state_t, threshold=THRESHOLD, patience=3)
        assert torch.equal(state_c[0], state_t[0]) and torch.equal(state_c[1], state_t[1])
        counters.append(int(state_c[0]))
    assert counters[0] == 1 and counters[1] == 0


def test_epsilon_random_fraction_1m(kc, dev):
    n, a, eps = 1 << 20, 4, 0.37
    q = torch.zeros(n, a, device=dev)
    q[:, 0] = 1.0
    acts = torch.empty(n, dtype=torch.int64, device=dev)
    kc.epsilon_greedy(q, torch.tensor([eps], device=dev), torch.tensor([3], device=dev), acts, seed=11)
    p = eps * (a - 1) / a  # an explored draw is non-greedy w.p. (A-1)/A
    frac = float((acts != 0).float().mean())
    assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / n)


# ----------------------------------------------------------------------------- adam_step
def _adam_state(n: int, seed: int, dev) -> dict[str, torch.Tensor]:
    g = _gen(seed)
    return dict(params=torch.randn(n, generator=g).to(dev), grads=torch.zeros(n, device=dev),
                exp_avg=(torch.randn(n, generator=g) * 0.1).to(dev),
                exp_avg_sq=(torch.rand(n, generator=g) * 0.01).to(dev), step=torch.tensor([3.0], device=dev),
                found_inf=torch.zeros(1, device=dev), loss_scale=torch.zeros(1, device=dev),
                grad_norm=torch.zeros(1, device=dev), blocks_done=torch.zeros(1, dtype=torch.int32, device=dev))


def _adam_inputs(states, n: int, seed: int, *, skip: bool = False) -> torch.Tensor:
    """Write one update's gradient (of changing scale), its norm, a loss scale and found_inf into every
    state in place; return the gradient."""
    grads = torch.randn(n, generator=_gen(seed)) * 10.0 ** (seed % 3 - 1)
    for st in states:
        st["grads"].copy_(grads)
        st["grad_norm"].copy_(torch.linalg.vector_norm(grads).reshape(1))
        st["loss_scale"].fill_((0.25, 1.0, 0.5)[seed % 3])
        st["found_inf"].fill_(1.0 if skip else 0.0)
    return grads.to(states[0]["grads"].device)


def _assert_adam_close(c, t, gmax: float) -> None:
    """Kernel vs twin: the same float32 operations in the same order (powf aside): step and counter exact,
    the rest to a few float32 roundings."""
    assert torch.equal(c["step"], t["step"])
    assert int(c["blocks_done"]) == 0
    torch.testing.assert_close(c["params"], t["params"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(c["exp_avg"], t["exp_avg"], rtol=1e-6, atol=1e-7 * gmax)
    torch.testing.assert_close(c["exp_avg_sq"], t["exp_avg_sq"], rtol=1e-6, atol=1e-7 * gmax * gmax)


@pytest.mark.parametrize("n", SIZES + (256, (1 << 20) + 5))
@pytest.mark.parametrize("weight_decay", (0.0, 0.01))
@pytest.mark.parametrize("grad_clip", (None, 0.5))
def test_adam_step_parity(kc, kt, dev, n, weight_decay, grad_clip):
    hp = dict(ADAM, weight_decay=weight_decay, grad_clip=grad_clip)
    c, t = _adam_state(n, n, dev), _adam_state(n, n, dev)
    gmax = 0.0
    for i, skip in enumerate((False, False, True, False)):
        grads = _adam_inputs((c, t), n, 10 * n + i, skip=skip)
        gmax = max(gmax, float(grads.abs().max()))
        before = {k: v.clone() for k, v in c.items()}
        kc.adam_step(**c, **hp)
        kt.adam_step(**t, **hp)
        assert torch.equal(c["grads"], grads)  # read, never written
        if skip:  # nothing moved, bit for bit
            for key in ("params", "exp_avg", "exp_avg_sq", "step", "blocks_done"):
                assert torch.equal(c[key], before[key]), key
        _assert_adam_close(c, t, gmax)
    assert float(c["step"]) == 3.0 + 3


def test_adam_step_found_inf_is_bit_identical(kc, dev):
    n = 4099
    c = _adam_state(n, 1, dev)
    _adam_inputs((c,), n, 1)
    c["params"][::97] = NAN
    c["exp_avg"][1::89] = -0.0
    c["found_inf"].fill_(NAN)  # any non-zero value skips
    before = {k: v.clone() for k, v in c.items()}
    kc.adam_step(**c, **ADAM, weight_decay=0.01, grad_clip=0.5)
    for key, v in c.items():
        bits = (lambda x: x.view(torch.int32)) if v.dtype == torch.float32 else (lambda x: x)
        assert torch.equal(bits(v), bits(before[key])), key


def test_adam_step_graph_replay(kc, kt, dev):
    """One launch captured in a CUDA graph, replayed for three steps and a skipped one with new inputs
    written in place: equal to eager launches (exactly) and to the twin; blocks_done stays 0."""
    n = (1 << 16) + 3
    hp = dict(ADAM, weight_decay=0.01, grad_clip=0.5)
    graphed, eager, twin = (_adam_state(n, 5, dev) for _ in range(3))
    start = {k: v.clone() for k, v in graphed.items()}
    graph = _capture([kc.bind_adam_step(**graphed, **hp)])
    for key, v in graphed.items():  # the warm-up launches stepped the buffers: back to the start, in place
        v.copy_(start[key])
    gmax = 0.0
    for i, skip in enumerate((False, True, False, False)):
        grads = _adam_inputs((graphed, eager, twin), n, 40 + i, skip=skip)
        gmax = max(gmax, float(grads.abs().max()))
        graph.replay()
        kc.adam_step(**eager, **hp)
        kt.adam_step(**twin, **hp)
        torch.cuda.synchronize()
        for key in graphed:
            assert torch.equal(graphed[key], eager[key]), key
        _assert_adam_close(graphed, twin, gmax)
    assert float(graphed["step"]) == float(start["step"]) + 3
    assert int(graphed["blocks_done"]) == 0
    assert not torch.equal(graphed["params"], start["params"])


# ----------------------------------------------------------------------------- hot-path buffers
def _make_buffers(dev, n: int = 257, a: int = 45, b: int = 4099) -> dict[str, torch.Tensor]:
    f, i32, i64 = dict(device=dev), dict(dtype=torch.int32, device=dev), dict(dtype=torch.int64, device=dev)
    return dict(
        loss=torch.zeros(1, **f), grad_norm=torch.zeros(1, **f), warmup=torch.zeros(1, **f),
        flags=torch.zeros(3, **i32), clipped_loss=torch.zeros(1, **f), loss_scale=torch.zeros(1, **f),
        found_inf=torch.zeros(1, **f), accum=torch.zeros(6, dtype=torch.float64, device=dev),
        q=torch.zeros(b, a, **f), qout=torch.zeros(5, **f), scratch=torch.zeros(qstats_scratch_numel(b), **f),
        counter=torch.zeros(1, **i32), flag=torch.zeros(1, **i32),
        qsel=torch.zeros(n, a, **f), eps=torch.zeros(1, **f), step=torch.zeros(1, **i64),
        actions=torch.zeros(n, **i64),
        qe=torch.zeros(n, 5, **f), qo=torch.zeros(n, 3, **f), qu=torch.zeros(n, 3, **f),
        bactions=torch.zeros(n, **i64),
        exposure=torch.zeros(n, **i64), spread=torch.zeros(n, **f), mspread=torch.zeros(n, **f),
        vol=torch.zeros(n, **f), mvol=torch.zeros(n, **f), ractions=torch.zeros(n, **i64),
        qagg=torch.zeros(5, dtype=torch.float64, device=dev),
        records=torch.zeros(3, 6, dtype=torch.float64, device=dev),
        update_index=torch.zeros(1, dtype=torch.float64, device=dev),
        params=torch.zeros(b, **f), grads=torch.zeros(b, **f), exp_avg=torch.zeros(b, **f),
        exp_avg_sq=torch.zeros(b, **f), adam_t=torch.zeros(1, **f), blocks_done=torch.zeros(1, **i32),
    )


def _fill(bufs: dict[str, torch.Tensor], seed: int) -> None:
    """Write every buffer in place (inputs, state and outputs) from ``seed``."""
    g = _gen(seed)
    for t in bufs.values():
        t.fill_(-7)
    bufs["loss"].fill_([2.5, 25.0, NAN, 0.5][seed % 4])
    bufs["grad_norm"].fill_([0.3, 0.01, 1.0, 0.02][seed % 4])
    bufs["warmup"].fill_(1.0)
    bufs["accum"].copy_(torch.rand(6, generator=g, dtype=torch.float64) * 10)
    b, a = bufs["q"].shape
    q = torch.randn(b, a, generator=g) * (3.0 if seed % 2 else 1.0)
    if seed % 3 == 2:
        q[b // 2, 1] = NAN
    bufs["q"].copy_(q)
    bufs["counter"].fill_(seed % 3)
    bufs["flag"].fill_(0)
    n = bufs["qsel"].shape[0]
    bufs["qsel"].copy_(torch.round(torch.randn(n, a, generator=g) * 2))
    bufs["eps"].fill_(0.3)
    bufs["step"].fill_(2**32 + 1000 * seed)
    for k in ("qe", "qo", "qu"):
        bufs[k].copy_(torch.randn(bufs[k].shape, generator=g))
    exposure, spread, ms, vol, mv = _route_inputs(n, seed, "cpu")
    for k, v in (("exposure", exposure), ("spread", spread), ("mspread", ms), ("vol", vol), ("mvol", mv)):
        bufs[k].copy_(v)
    bufs["qagg"].copy_(torch.tensor([1.0 + seed, -1.0 - seed, 0.5, 0.25, 2.0], dtype=torch.float64))
    bufs["records"].zero_()
    if seed % 2:
        bufs["records"][1].fill_(-7)  # a row that already holds its first trigger
    bufs["update_index"].fill_(10.0 * seed)
    for k in ("params", "grads", "exp_avg"):
        bufs[k].copy_(torch.randn(bufs[k].shape, generator=g))
    bufs["exp_avg_sq"].copy_(torch.rand(bufs["exp_avg_sq"].shape, generator=g))
    bufs["adam_t"].fill_(float(seed))
    bufs["blocks_done"].zero_()  # adam_step's counter must be 0 at launch
    bufs["loss_scale"].fill_(0.5)  # adam_step's inputs when guard_check does not write them first
    bufs["found_inf"].fill_(1.0 if seed % 4 == 2 else 0.0)


def _bind_all(k, bufs) -> dict[str, object]:
    b = bufs
    return {
        "guard_check": k.bind_guard_check(b["loss"], b["grad_norm"], b["warmup"], b["flags"], b["clipped_loss"],
                                          b["loss_scale"], b["found_inf"], loss_clip=LOSS_CLIP,
                                          collapse_threshold=COLLAPSE),
        "guard_accumulate": k.bind_guard_accumulate(b["clipped_loss"], b["grad_norm"], b["flags"], b["accum"]),
        "qstats": k.bind_qstats(b["q"], b["qout"], b["scratch"]),
        "divergence": k.bind_divergence(b["qout"], b["counter"], b["flag"], threshold=THRESHOLD, patience=PATIENCE),
        "epsilon_greedy": k.bind_epsilon_greedy(b["qsel"], b["eps"], b["step"], b["actions"], seed=SEED),
        "branching_select": k.bind_branching_select(b["qe"], b["qo"], b["qu"], b["eps"], b["step"], b["bactions"],
                                                    seed=SEED),
        "route": k.bind_route(b["exposure"], b["spread"], b["mspread"], b["vol"], b["mvol"], b["ractions"]),
        "guard_record": k.bind_guard_record(b["clipped_loss"], b["loss"], b["grad_norm"], b["flags"], b["qout"],
                                            b["flag"], b["accum"], b["qagg"], b["records"], b["update_index"]),
        "adam_step": k.bind_adam_step(b["params"], b["grads"], b["exp_avg"], b["exp_avg_sq"], b["adam_t"],
                                      b["found_inf"], b["loss_scale"], b["grad_norm"], b["blocks_done"], **ADAM,
                                      weight_decay=0.01, grad_clip=0.5),
    }


def _assert_outputs_equal(x, y, *, exact: bool) -> None:
    for key in INT_KEYS:
        assert torch.equal(x[key], y[key]), key
    tol = dict(rtol=0.0, atol=0.0) if exact else dict(rtol=1e-5, atol=1e-5)
    for key in FLOAT_KEYS:
        torch.testing.assert_close(x[key], y[key], equal_nan=True, **tol, msg=key)


def _snapshot(bufs):
    return {k: v.clone() for k, v in bufs.items()}


def test_hot_path_has_no_sync(kc, dev):
    bufs = _make_buffers(dev)
    _fill(bufs, 1)
    launchers = list(_bind_all(kc, bufs).values())
    readback = AsyncReadback(6, torch.float64, dev)
    for launch in launchers:  # warm-up outside the checked region
        launch()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            for launch in launchers:
                launch()
            bufs["step"] += 1
        readback.start(bufs["accum"])
        assert readback.poll() in (True, False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.equal(readback.wait(), bufs["accum"].cpu())


def _capture(launchers) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream first
        for _ in range(2):
            for launch in launchers:
                launch()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for launch in launchers:
            launch()
    return graph


@pytest.mark.parametrize("name", ["all", "guard_check", "guard_accumulate", "qstats", "divergence",
                                  "epsilon_greedy", "branching_select", "route", "guard_record", "adam_step"])
def test_graph_replay_equals_eager_and_twin(kc, kt, dev, name):
    bufs = _make_buffers(dev)
    _fill(bufs, 0)
    bound = _bind_all(kc, bufs)
    launchers = list(bound.values()) if name == "all" else [bound[name]]
    graph = _capture(launchers)
    twin_bufs = _make_buffers(dev)
    twin_bound = _bind_all(kt, twin_bufs)
    twin_launchers = list(twin_bound.values()) if name == "all" else [twin_bound[name]]
    for seed in (1, 2, 3, 4):  # new inputs written in place; the graph sees them
        _fill(bufs, seed)
        graph.replay()
        torch.cuda.synchronize()
        replayed = _snapshot(bufs)
        _fill(bufs, seed)
        for launch in launchers:
            launch()
        torch.cuda.synchronize()
        _assert_outputs_equal(replayed, bufs, exact=True)
        _fill(twin_bufs, seed)
        for launch in twin_launchers:
            launch()
        _assert_outputs_equal(replayed, twin_bufs, exact=False)
        assert not torch.equal(replayed["q"], torch.full_like(replayed["q"], -7))  # inputs were written


# ----------------------------------------------------------------------------- readback
def test_async_readback_gpu(dev):
    src = torch.arange(1000, dtype=torch.float32, device=dev)
    rb = AsyncReadback(1000, torch.float32, dev)
    assert rb.host.is_pinned()
    assert rb.poll() is False
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # keep the stream busy (~0.1 s) so the copy is still queued
    torch.cuda.set_sync_debug_mode("error")
    try:
        rb.start(src)
        t0 = time.perf_counter()
        pending = rb.poll()
        poll_s = time.perf_counter() - t0
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert pending is False and poll_s < 0.01  # poll() did not wait for the copy
    out = rb.wait()
    assert rb.poll() is True
    assert torch.equal(out, torch.arange(1000, dtype=torch.float32))
