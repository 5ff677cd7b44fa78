"""``epsilon_greedy_members``: P members' rows in one launch, each member exactly as ``epsilon_greedy``
on its own rows (its epsilon, its seed, draws indexed by the row's index within the member).

CPU: the twin against the single-member twin, bit for bit, and the bind-time check's messages.
GPU (marked ``gpu``): the CUDA kernel against the twin and against the single-member kernel.
"""
from __future__ import annotations

import inspect
import math

import pytest
import torch

from rl_zerosync.kernels import get_kernels, rng
from rl_zerosync.kernels import reference as ref
from rl_zerosync.kernels.select import epsilon_greedy_members

NAN, INF = float("nan"), float("inf")
K = get_kernels(torch.device("cpu"))
SHAPES = ((1, 7, 5), (1, 1, 1), (3, 1, 4), (2, 257, 1), (4, 13, 45), (5, 64, 3), (3, 1000, 9))
"""(P members, E rows per member, A actions)."""
STEPS = (0, 3, 2**32 - 1, 2**32, 2**33 + 17, 2**62 + 5)
SEEDS = (0, 1, 2**64 - 1, 12345, 2**32, 7, 99)


def _q(n: int, a: int, seed: int, *, ties: bool = False, specials: bool = False) -> torch.Tensor:
    q = torch.randn(n, a, generator=torch.Generator().manual_seed(seed))
    if ties:
        q = torch.round(q * 2.0)  # many exact ties
    if specials:
        q[::5, a // 2] = NAN
        q[3::11, -1] = NAN  # a second NaN later in some rows: the first one wins
        q[1::7, :] = -INF
        q[2::9, 0] = INF
        q[4::13, :] = NAN
    return q


def _epsilons(p: int, kind: str) -> torch.Tensor:
    if kind == "zero":
        return torch.zeros(p)
    if kind == "one":
        return torch.ones(p)
    mixed = (0.0, 1.0, 0.3, 2.0**-24, 0.05, 0.999, 0.5)
    return torch.tensor([mixed[m % len(mixed)] for m in range(p)], dtype=torch.float32)


def _per_member(q, epsilon, step, seeds) -> torch.Tensor:
    """The single-member twin on each member's rows alone."""
    p = len(seeds)
    e = q.shape[0] // p
    out = torch.full((q.shape[0],), -1, dtype=torch.int64, device=q.device)
    for m, seed in enumerate(seeds):
        ref.epsilon_greedy(q[m * e:(m + 1) * e], epsilon[m:m + 1], step, out[m * e:(m + 1) * e], seed=seed)
    return out


def _members(k, q, epsilon, step, seeds) -> torch.Tensor:
    out = torch.full((q.shape[0],), -2, dtype=torch.int64, device=q.device)
    k.epsilon_greedy_members(q, epsilon, step, rng.seed_keys(seeds, q.device), out)
    return out


# ----------------------------------------------------------------------------- CPU: twin == per member
def test_signature_and_table_row():
    names = [p.name for p in inspect.signature(ref.epsilon_greedy_members).parameters.values()]
    assert names == ["q", "epsilon", "step", "seed_keys", "actions"]
    assert K.epsilon_greedy_members is ref.epsilon_greedy_members
    assert "zs_epsilon_greedy_members" in epsilon_greedy_members.source.kernels


@pytest.mark.parametrize("p, e, a", SHAPES)
@pytest.mark.parametrize("eps_kind", ("zero", "one", "mixed"))
def test_twin_equals_epsilon_greedy_per_member(p, e, a, eps_kind):
    epsilon = _epsilons(p, eps_kind)
    seeds = [SEEDS[(m + p) % len(SEEDS)] for m in range(p)]
    for variant, (ties, specials) in enumerate(((False, False), (True, False), (True, True))):
        q = _q(p * e, a, 1000 * p + 10 * e + a + variant, ties=ties, specials=specials)
        for s in STEPS:
            step = torch.tensor([s], dtype=torch.int64)
            want = _per_member(q, epsilon, step, seeds)
            got = _members(K, q, epsilon, step, seeds)
            assert torch.equal(got, want), (eps_kind, ties, specials, s)
            assert int(got.min()) >= 0 and int(got.max()) < a


def test_draws_use_the_index_within_the_member():
    """Members with the same seed, epsilon and Q rows choose the same actions: row j of every member
    draws at index j, not at its index in the batch."""
    p, e, a = 4, 50, 7
    q = _q(e, a, 5).repeat(p, 1)
    step = torch.tensor([2**33 + 1], dtype=torch.int64)
    got = _members(K, q, torch.full((p,), 0.5), step, [42] * p).view(p, e)
    assert torch.equal(got, got[:1].expand(p, e))
    assert len(set(got[0].tolist())) > 1  # random actions were drawn, so the check above means something
    single = torch.empty(e, dtype=torch.int64)
    ref.epsilon_greedy(q[:e], torch.tensor([0.5]), step, single, seed=42)
    assert torch.equal(got[0], single)


def test_members_differ_by_seed_and_epsilon():
    p, e, a = 3, 2000, 10
    q = torch.zeros(p * e, a)
    q[:, 0] = 1.0  # greedy action 0
    step = torch.tensor([9], dtype=torch.int64)
    same_eps = _members(K, q, torch.ones(p), step, [1, 2, 3]).view(p, e)
    assert not torch.equal(same_eps[0], same_eps[1]) and not torch.equal(same_eps[1], same_eps[2])
    epsilon = torch.tensor([0.0, 0.2, 1.0])
    got = _members(K, q, epsilon, step, [1, 2, 3]).view(p, e)
    assert bool((got[0] == 0).all())
    for m in (1, 2):  # a random action is non-greedy with probability epsilon * (A - 1) / A
        frac = float((got[m] != 0).float().mean())
        want = float(epsilon[m]) * (a - 1) / a
        assert abs(frac - want) < 5 * math.sqrt(want * (1 - want) / e + 1e-12)


def test_bound_launcher_and_zero_rows():
    p, e, a = 3, 6, 4
    q = _q(p * e, a, 11, ties=True, specials=True)
    epsilon, step, keys = _epsilons(p, "mixed"), torch.tensor([77], dtype=torch.int64), rng.seed_keys([5, 6, 7])
    out = torch.full((p * e,), -1, dtype=torch.int64)
    launch = K.bind_epsilon_greedy_members(q, epsilon, step, keys, out)
    launch()
    assert torch.equal(out, _per_member(q, epsilon, step, [5, 6, 7]))
    step += 1  # the bound launcher reads the device counter at every call
    launch()
    assert torch.equal(out, _per_member(q, epsilon, step, [5, 6, 7]))
    empty = torch.zeros(0, dtype=torch.int64)
    K.bind_epsilon_greedy_members(torch.zeros(0, a), epsilon, step, keys, empty)()  # no rows: nothing to do
    assert empty.numel() == 0


# ----------------------------------------------------------------------------- CPU: bind-time check
def _bufs(p=3, e=4, a=5):
    return (torch.zeros(p * e, a), torch.zeros(p), torch.zeros(1, dtype=torch.int64),
            rng.seed_keys(range(p)), torch.zeros(p * e, dtype=torch.int64))


@pytest.mark.parametrize("change, match", [
    (dict(q=torch.zeros(13, 5), actions=torch.zeros(13, dtype=torch.int64)),
     r"q must have a multiple of P rows, P = 3 members"),
    (dict(epsilon=torch.zeros(0), seed_keys=torch.zeros(0, dtype=torch.int64)), "at least one member"),
    (dict(seed_keys=rng.seed_keys(range(4))), r"seed_keys must have shape \[3\]"),
    (dict(epsilon=torch.zeros(3, 1)), r"epsilon must have shape \[\*\]"),
    (dict(epsilon=torch.zeros(3, dtype=torch.float64)), "epsilon must have dtype torch.float32"),
    (dict(seed_keys=torch.zeros(3, dtype=torch.int32)), "seed_keys must have dtype torch.int64"),
    (dict(step=torch.zeros(2, dtype=torch.int64)), r"step must have shape \[1\]"),
    (dict(actions=torch.zeros(11, dtype=torch.int64)), r"actions must have shape \[12\]"),
    (dict(actions=torch.zeros(12, dtype=torch.int32)), "actions must have dtype torch.int64"),
    (dict(q=torch.zeros(12, 0)), "action column"),
    (dict(q=torch.zeros(5, 12).t()), "q must be contiguous"),
])
def test_bind_names_the_bad_argument(change, match):
    args = dict(zip(("q", "epsilon", "step", "seed_keys", "actions"), _bufs()))
    args.update(change)
    with pytest.raises(ValueError, match=match):
        K.bind_epsilon_greedy_members(*args.values())
    with pytest.raises(ValueError, match=match):
        epsilon_greedy_members.check(**args)


def test_bind_accepts_keywords_and_rejects_other_devices():
    q, eps, step, keys, act = _bufs()
    K.bind_epsilon_greedy_members(q=q, epsilon=eps, step=step, seed_keys=keys, actions=act)()
    assert bool((act == 0).all())  # all-zero Q, epsilon 0: the first maximum
    with pytest.raises(ValueError, match="these kernels are for meta"):
        get_kernels("meta", backend="torch").bind_epsilon_greedy_members(q, eps, step, keys, act)


# ----------------------------------------------------------------------------- GPU: kernel == twin
@pytest.fixture(scope="module")
def dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def kc(dev):
    k = get_kernels(dev, backend="cuda")
    k.warmup()  # compile + load before any sync-checked launch
    return k


@pytest.fixture(scope="module")
def kt(dev):
    return get_kernels(dev, backend="torch")


@pytest.mark.gpu
@pytest.mark.parametrize("p, e, a", SHAPES + ((8, 4099, 45), (16, 257, 5)))
def test_cuda_equals_twin(kc, kt, dev, p, e, a):
    seeds = [SEEDS[(3 * m + p) % len(SEEDS)] for m in range(p)]
    for eps_kind in ("zero", "one", "mixed"):
        epsilon = _epsilons(p, eps_kind).to(dev)
        for variant, (ties, specials) in enumerate(((False, False), (True, False), (True, True))):
            q = _q(p * e, a, 100 * p + e + a + variant, ties=ties, specials=specials).to(dev)
            for s in (0, 2**32 + 3, 2**62 + 5):
                step = torch.tensor([s], dtype=torch.int64, device=dev)
                got, want = _members(kc, q, epsilon, step, seeds), _members(kt, q, epsilon, step, seeds)
                assert torch.equal(got, want), (eps_kind, ties, specials, s)
                assert torch.equal(got.cpu(), _per_member(q.cpu(), epsilon.cpu(), step.cpu(), seeds))


@pytest.mark.gpu
def test_cuda_equals_single_member_kernel_without_sync(kc, dev):
    p, e, a = 5, 1000, 9
    seeds = [3, 2**64 - 1, 0, 17, 2**40]
    q = _q(p * e, a, 8, ties=True, specials=True).to(dev)
    epsilon = _epsilons(p, "mixed").to(dev)
    step = torch.tensor([2**33 + 1], dtype=torch.int64, device=dev)
    keys = rng.seed_keys(seeds, dev)
    got = torch.full((p * e,), -1, dtype=torch.int64, device=dev)
    want = torch.full((p * e,), -2, dtype=torch.int64, device=dev)
    launch = kc.bind_epsilon_greedy_members(q, epsilon, step, keys, got)
    torch.cuda.synchronize(dev)
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch()
        for m, seed in enumerate(seeds):
            kc.epsilon_greedy(q[m * e:(m + 1) * e], epsilon[m:m + 1], step, want[m * e:(m + 1) * e], seed=seed)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(got, want)
