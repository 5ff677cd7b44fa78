"""The member-batched ops of ``kernels/member_ops.py`` against their single-member twins.

Each batched op runs once on ``[P, ...]`` buffers (per-member hyperparameters as ``[P, 1]``
tensors); its twin of ``kernels/reference.py`` runs on each member row ``k`` of clones of the same
starting buffers (hyperparameters as row k's Python value). ``mlp_forward`` is checked against a
plain per-member torch stack instead. Integer / flag / counter outputs are compared with
``torch.equal``. Exact float comparisons (``torch.equal``: the same elementwise float32 ops in the
same order): ``guard_check`` and ``adam_step``. The rest (reductions, GEMMs, float64 accumulators)
use ``assert_close(rtol=1e-5, atol=1e-6)``, NaN equal to NaN.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rl_zerosync.kernels import member_ops as M
from rl_zerosync.kernels import reference as R
from rl_zerosync.kernels.adam import derived_constants
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, QAGG, QSTATS, RECORD
from rl_zerosync.kernels.grad_norm import NORM_CHUNK

NAN, INF = float("nan"), float("inf")
F64 = torch.float64
MEMBERS = pytest.mark.parametrize("p", [1, 3])
BATCH = pytest.mark.parametrize("b", [1, 7, 257])
ACTIONS = pytest.mark.parametrize("a", [5, 45])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def col(values, dtype=torch.float32) -> torch.Tensor:
    """Per-member values as a ``[P, 1]`` tensor."""
    return torch.tensor(values, dtype=dtype).reshape(-1, 1)


def cycle(values, p: int) -> list:
    """Member k's value is ``values[k % len(values)]`` (the members differ when P > 1)."""
    return [values[k % len(values)] for k in range(p)]


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


# (loss, grad_norm) of member 0; member k's loss is scaled by 1 + k / 3. Per member (k % 3):
# loss_clip 2 / 10 / 3, collapse threshold 1e-6 / 1e-3 / 1e-8, warmup done 1 / 0 / 1.
GUARD_CASES = [(0.5, 0.7), (NAN, 1.0), (1.0, INF), (5.0, 1.0), (1.0, 1e-9), (INF, NAN), (2.5, 1e-4)]


@MEMBERS
def test_guard_check(p):
    loss_clip, collapse = col(cycle([2.0, 10.0, 3.0], p)), col(cycle([1e-6, 1e-3, 1e-8], p))
    warmup = col(cycle([1.0, 0.0, 1.0], p))
    seen = torch.zeros(FLAGS.size, dtype=torch.bool)
    for base_loss, norm in GUARD_CASES:
        loss, gn = col([base_loss * (1 + k / 3) for k in range(p)]), col([norm] * p)
        outs = [torch.full((p, FLAGS.size), -1, dtype=torch.int32)] + [torch.full((p, 1), -1.0) for _ in range(3)]
        twin = [o.clone() for o in outs]  # flags, clipped_loss, loss_scale, found_inf
        M.guard_check(loss, gn, warmup, *outs, loss_clip=loss_clip, collapse_threshold=collapse)
        for k in range(p):
            R.guard_check(loss[k], gn[k], warmup[k], *(o[k] for o in twin), loss_clip=float(loss_clip[k]),
                          collapse_threshold=float(collapse[k]))
        for got, want in zip(outs, twin):
            assert torch.equal(got, want), (base_loss, norm, got, want)  # exact
        seen |= (outs[0] != 0).any(dim=0)
    assert seen.all()  # every decision was taken at least once


@MEMBERS
@pytest.mark.parametrize("n", [257, NORM_CHUNK])
def test_adam_step(p, n):
    hp = dict(lr=cycle([1e-3, 3e-3, 5e-4], p), beta1=cycle([0.9, 0.8, 0.95], p),
              beta2=cycle([0.999, 0.99, 0.9995], p), eps=cycle([1e-8, 1e-6, 1e-7], p),
              weight_decay=cycle([0.0, 1e-2, 0.1], p))
    clips = cycle([0.5, None, 40.0], p)  # member 0's clip is active, member 2's is not
    consts = [derived_constants(hp["lr"][k], hp["beta1"][k], hp["beta2"][k], hp["weight_decay"][k])
              for k in range(p)]
    kw = {key: col(hp[key]) for key in ("lr", "beta1", "beta2", "eps")}
    kw.update({name: col([c[i] for c in consts]) for i, name in enumerate(("c1", "c2", "decay"))})
    kw.update(clip=col([0.25 if c is None else c for c in clips]), use_clip=col([c is not None for c in clips], torch.bool))
    state = [torch.randn(p, n), torch.randn(p, n) * 0.1, torch.rand(p, n) * 0.01, col(cycle([0.0, 4.0, 1.0], p))]
    twin = [s.clone() for s in state]  # params, exp_avg, exp_avg_sq, step
    for i in range(3):
        grads = torch.randn(p, n) * col(cycle([1.0, 10.0, 0.1], p))
        gn = torch.linalg.vector_norm(grads, dim=1, keepdim=True)
        loss_scale = torch.rand(p, 1) * 0.5 + 0.5
        found_inf = col([float((k + i) % 3 == 2) for k in range(p)])
        before = [s.clone() for s in state]
        M.adam_step(state[0], grads, state[1], state[2], state[3], found_inf, loss_scale, gn, **kw)
        for k in range(p):
            R.adam_step(twin[0][k], grads[k], twin[1][k], twin[2][k], twin[3][k], found_inf[k], loss_scale[k], gn[k],
                        torch.zeros(1, dtype=torch.int32), grad_clip=clips[k],
                        **{key: hp[key][k] for key in ("lr", "beta1", "beta2", "eps", "weight_decay")})
        for got, want in zip(state, twin):
            assert torch.equal(got, want)  # exact
        for k in range(p):
            skipped = bool(found_inf[k])
            assert all(torch.equal(s[k], b[k]) == skipped for s, b in zip(state, before)), (i, k)


@MEMBERS
@pytest.mark.parametrize("chunks", [1, 3])
def test_grad_norm(p, chunks):
    grads = torch.randn(p, chunks * NORM_CHUNK) * col(cycle([1.0, 1e-3, 50.0], p))
    out = torch.full((p, 1), -1.0)
    M.grad_norm(grads, out)
    for k in range(p):
        ref = torch.full((1,), -1.0)
        R.grad_norm(grads[k], torch.empty(chunks), ref, torch.zeros(1, dtype=torch.int32))
        close(out[k], ref)


@MEMBERS
@BATCH
@ACTIONS
@pytest.mark.parametrize("bad", [NAN, -INF])
def test_qstats(p, b, a, bad):
    q = torch.randn(p, b, a) * 3
    if p > 1:
        q[1, b // 2, a // 2] = bad  # a non-finite Q: all four stats NaN, nan_flag 1
    if p > 2:
        q[2] = q[2].round()  # ties: equal Q within rows and equal row maxima
    out = torch.full((p, QSTATS.size), -1.0)
    M.qstats(q, out)
    flag = QSTATS.span("nan_flag")
    for k in range(p):
        ref = torch.full((QSTATS.size,), -1.0)
        R.qstats(q[k], ref, torch.empty(0))
        assert torch.equal(out[k, flag], ref[flag])
        close(out[k], ref)
    assert out[:, flag].flatten().tolist() == cycle([0.0, 1.0, 0.0], p)


def divergence_stats(call: int, k: int) -> list:
    """Member k's QSTATS at a call: k % 3 == 0 always over its threshold 10, 1 NaN on calls 0-1 (then
    fine), 2 over its threshold 100 except on call 3 (its counter resets before its patience 4)."""
    kind = k % 3
    if kind == 1 and call < 2:
        return [NAN] * 4 + [1.0]
    lo, hi = {0: (-1.0, 50.0), 1: (-1.0, 1.0), 2: (-150.0 if call != 3 else -1.0, 1.0)}[kind]
    return [lo, hi, (lo + hi) / 2, 0.5, 0.0]


@MEMBERS
def test_divergence(p):
    threshold, patience = col(cycle([10.0, 5.0, 100.0], p)), col(cycle([3, 2, 4], p), torch.int32)
    bufs = [torch.zeros(p, 1, dtype=torch.int32), torch.zeros(p, 1, dtype=torch.int32)]  # counter, flag
    twin = [t.clone() for t in bufs]
    for call in range(6):
        stats = torch.tensor([divergence_stats(call, k) for k in range(p)])
        M.divergence(stats, *bufs, threshold=threshold, patience=patience)
        for k in range(p):
            R.divergence(stats[k], twin[0][k], twin[1][k], threshold=float(threshold[k]), patience=int(patience[k]))
        for got, want in zip(bufs, twin):
            assert torch.equal(got, want), call
    assert bufs[0].flatten().tolist() == cycle([6, 0, 2], p) and bufs[1].flatten().tolist() == cycle([1, 1, 0], p)


# Per call, per member k % 3: (nonfinite, loss_clipped, grad_collapse, div_flag).
RECORD_SCRIPT = [
    [(1, 0, 0, 0), (0, 0, 0, 0), (0, 1, 0, 0)],
    [(1, 0, 1, 0), (0, 0, 1, 0), (0, 0, 0, 1)],
    [(1, 1, 1, 1), (1, 0, 1, 1), (1, 0, 1, 1)],
]


@MEMBERS
def test_guard_record(p):
    qagg = torch.zeros(p, QAGG.size, dtype=F64)
    qagg[:, QAGG.span("min")], qagg[:, QAGG.span("max")] = INF, -INF  # as TrainingGuard resets it
    bufs = [torch.zeros(p, ACCUM.size, dtype=F64), qagg, torch.zeros(p, CHECK.size, RECORD.size, dtype=F64),
            torch.zeros(p, 1, dtype=F64)]  # accum, qagg, records, update_index
    twin = [t.clone() for t in bufs]
    for call, script in enumerate(RECORD_SCRIPT):
        rows = torch.tensor(cycle(script, p), dtype=torch.int32)
        flags, div_flag = rows[:, :FLAGS.size].contiguous(), rows[:, FLAGS.size:].contiguous()
        nonfinite = flags[:, FLAGS.span("nonfinite")] != 0
        loss = torch.where(nonfinite, NAN, torch.rand(p, 1) * 4)
        clipped, gn = torch.rand(p, 1), torch.rand(p, 1) * 10
        stats = torch.randn(p, QSTATS.size)
        stats[:, QSTATS.span("nan_flag")] = 0.0
        nan_q = nonfinite.flatten() & (call % 2 == 0)  # some non-finite updates also have a NaN Q
        stats[nan_q] = torch.tensor([NAN] * 4 + [1.0])
        M.guard_record(clipped, loss, gn, flags, stats, div_flag, *bufs)
        for k in range(p):
            R.guard_record(clipped[k], loss[k], gn[k], flags[k], stats[k], div_flag[k], *(t[k] for t in twin))
        for got, want in zip(bufs, twin):
            close(got, want)
    rec = bufs[2][0]  # member 0: nonfinite first at call 0, grad_collapse and divergence first at 1 and 2
    first = [rec[CHECK.offset(c), RECORD.offset("update_index")].item() for c in ("nonfinite", "grad_collapse",
                                                                                   "divergence")]
    assert first == [0.0, 1.0, 2.0] and bufs[3].flatten().tolist() == [3.0] * p


@MEMBERS
@BATCH
@ACTIONS
@pytest.mark.parametrize("loss_type", ["huber", "mse"])
@pytest.mark.parametrize("weighted", [False, True])
def test_td_loss(p, b, a, loss_type, weighted):
    q, q_target = torch.randn(p, b, a) * 2, torch.randn(p, b, a)
    q_select = torch.randn(p, b, a).round()  # ties: the greedy action is the first maximum
    actions = torch.randint(0, a, (p, b))
    rewards, discounts, terminateds = torch.randn(p, b), torch.rand(p, b) * 0.1 + 0.9, torch.rand(p, b) < 0.3
    weights = torch.rand(p, b) + 0.5 if weighted else None
    q_leaf = q.clone().requires_grad_(True)
    loss, td_abs = M.td_loss(q_leaf, q_select, q_target, actions, rewards, discounts, terminateds, weights,
                             loss_type=loss_type)
    assert loss.shape == (p,) and td_abs.shape == (p, b)
    (dq,) = torch.autograd.grad(loss.sum(), q_leaf)
    for k in range(p):
        ref_dq, ref_loss, ref_td = torch.full((b, a), NAN), torch.full((1,), NAN), torch.full((b,), NAN)
        R.td_loss(q[k], q_select[k], q_target[k], actions[k], rewards[k], discounts[k], terminateds[k],
                  None if weights is None else weights[k], ref_dq, ref_loss, ref_td, torch.empty(QSTATS.size),
                  torch.empty(0, dtype=F64), torch.zeros(1, dtype=torch.int32), loss_type=loss_type)
        close(loss[k:k + 1].detach(), ref_loss)
        close(td_abs[k], ref_td)
        close(dq[k], ref_dq)


@MEMBERS
@BATCH
@ACTIONS
@pytest.mark.parametrize("layernorm", [False, True])
def test_mlp_forward(p, b, a, layernorm):
    dims = [11, 16, 9, a]
    layers = []
    for i, (d_in, d_out) in enumerate(zip(dims, dims[1:])):
        ln = layernorm and i < len(dims) - 2  # LayerNorm on the hidden layers only
        layers.append(M.MemberLayer(torch.randn(p, d_out, d_in) / d_in ** 0.5, torch.randn(p, d_out) * 0.1,
                                    torch.rand(p, d_out) + 0.5 if ln else None,
                                    torch.randn(p, d_out) * 0.1 if ln else None, eps=1e-3))
    x = torch.randn(p, b, dims[0])
    out = M.mlp_forward(layers, x)
    assert out.shape == (p, b, a)
    for k in range(p):
        z = x[k]
        for i, layer in enumerate(layers):
            z = z @ layer.weight[k].T + layer.bias[k]
            if i == len(layers) - 1:
                break
            if layer.gamma is not None:
                z = F.layer_norm(z, (z.shape[1],), layer.gamma[k], layer.beta[k], layer.eps)
            z = torch.relu(z)
        close(out[k], z)
