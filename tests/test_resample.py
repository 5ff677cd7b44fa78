"""The tensor bootstrap (``rl_zerosync.evidence.resample``) against arch, the reference: the same
indices from the same draws, the same replicated Sharpes and SPA p-values given arch's indices, and
agreement within Monte-Carlo error with draws of its own (CPU here; the GPU in the gpu-marked test)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from arch.bootstrap import SPA, StationaryBootstrap, optimal_block_length

from rl_zerosync.evidence.block import spa_test_panel
from rl_zerosync.evidence.resample import (
    counts_of, generator, kernel_variance, politis_white, spa_pvalues, stationary_counts, stationary_indices,
    weighted_sharpes)


def _arch_indices(n: int, block: float, reps: int, seed: int) -> np.ndarray:
    bs = StationaryBootstrap(block, np.zeros(n), seed=np.random.default_rng(seed))
    out = []
    for _ in bs.bootstrap(reps):
        out.append(bs.index.copy())
    return np.array(out)


@pytest.mark.parametrize("n,block", [(1, 3.0), (7, 1.0), (257, 4.5), (4099, 30.0)])
def test_indices_equal_arch_given_its_draws(n, block):
    rng = np.random.default_rng(11)
    starts = rng.integers(0, n, size=(5, n))
    u = rng.random((5, n))
    mine = stationary_indices(torch.as_tensor(starts), torch.as_tensor(u), block).numpy()
    p = 1.0 / block
    for r in range(5):  # arch's loop, written out (arch.bootstrap._samplers_python)
        idx = starts[r].copy()
        for i in range(1, n):
            if u[r, i] > p:
                idx[i] = (idx[i - 1] + 1) % n
        assert np.array_equal(mine[r], idx)


def test_replicated_sharpes_equal_arch_given_the_same_indices():
    rng = np.random.default_rng(5)
    x = rng.normal(0.001, 0.01, size=(600, 3))
    idx = _arch_indices(600, 12.0, 50, seed=9)
    w = counts_of(torch.as_tensor(idx), 600)
    mine = weighted_sharpes(w, torch.as_tensor(x), 252.0).numpy()
    ref = np.array([[xs.mean() / xs.std(ddof=1) * np.sqrt(252.0) for xs in x[i].T] for i in idx])
    np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12)


def test_own_draws_agree_with_arch_within_monte_carlo_error():
    rng = np.random.default_rng(6)
    x = rng.normal(0.0008, 0.01, 3000)
    bs = StationaryBootstrap(20.0, x, seed=np.random.default_rng(1))
    ref = bs.apply(lambda z: np.array([z.mean() / z.std(ddof=1) * np.sqrt(252.0)]), 2000)[:, 0]
    w = stationary_counts(3000, 20.0, 2000, generator(3, torch.device("cpu")))
    mine = weighted_sharpes(w, torch.as_tensor(x[:, None]), 252.0)[:, 0].numpy()
    # sd of a bootstrap sd estimate over 2000 reps ~ sd / sqrt(2 * 2000) = 1.6%: 6% is ~4 of them
    assert mine.std() == pytest.approx(ref.std(), rel=0.06)
    assert mine.mean() == pytest.approx(ref.mean(), abs=4 * ref.std() / np.sqrt(2000))
    assert (w.sum(dim=1) == 3000).all()


def test_spa_equals_arch_given_arch_indices_and_block():
    rng = np.random.default_rng(8)
    t, k = 800, 4
    bench = rng.normal(0.0, 0.01, t)
    cand = rng.normal(0.0, 0.01, (t, k)) + np.array([0.0, 0.0005, -0.0003, 0.001])
    spa = SPA(-bench, -cand, block_size=10.0, reps=300, bootstrap="stationary", seed=np.random.default_rng(4))
    spa.compute()
    idx = _arch_indices(t, 10.0, 300, seed=4)
    d = cand - bench[:, None]
    replicated = counts_of(torch.as_tensor(idx), t) @ torch.as_tensor(d) / t
    mine = spa_pvalues(d.mean(axis=0), replicated, kernel_variance(d, 10.0), t, studentize=False)
    for name in ("lower", "consistent", "upper"):
        assert mine[name] == pytest.approx(float(spa.pvalues[name]), abs=1e-12), name


def test_kernel_variance_is_the_lag_loop():
    rng = np.random.default_rng(2)
    d = rng.normal(size=(120, 2)).cumsum(axis=0) * 0.01
    dm = d - d.mean(axis=0)
    t, q = len(d), 1.0 - 1.0 / 7.0
    ref = (dm**2).sum(axis=0) / t
    for i in range(1, t):
        kappa = (1 - i / t) * q**i + (i / t) * q ** (t - i)
        ref = ref + 2 * kappa * (dm[: t - i] * dm[i:]).sum(axis=0) / t
    np.testing.assert_allclose(kernel_variance(d, 7.0), ref, rtol=1e-9)


def test_spa_finds_a_planted_winner_and_not_noise():
    rng = np.random.default_rng(12)
    bench = [rng.normal(0.0, 0.01, 1000) for _ in range(10)]
    noise = [[b + rng.normal(0.0, 0.01, 1000) for b in bench] for _ in range(5)]
    labels = [f"c{i}" for i in range(6)]
    winner = [b + rng.normal(0.002, 0.01, 1000) for b in bench]
    yes = spa_test_panel(bench, noise + [winner], labels, independent=True, reps=500, seed=1)
    no = spa_test_panel(bench, noise, labels[:5], independent=True, reps=500, seed=1)
    assert yes["pvalue_consistent"] < 0.01 and yes["best_candidate"] == "c5"
    assert no["pvalue_consistent"] > 0.05
    bars = spa_test_panel(bench[:3], [n[:3] for n in noise] + [winner[:3]], labels, independent=False, reps=300)
    assert "stationary bootstrap over the pooled bars" in bars["method"] and bars["pvalue_consistent"] < 0.05


@pytest.mark.gpu
def test_gpu_draws_agree_with_cpu_within_monte_carlo_error():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    rng = np.random.default_rng(7)
    x = torch.as_tensor(rng.normal(0.0008, 0.01, (3000, 2)))
    cpu = weighted_sharpes(stationary_counts(3000, 20.0, 4000, generator(0, torch.device("cpu"))), x, 252.0)
    gpu = weighted_sharpes(stationary_counts(3000, 20.0, 4000, generator(0, torch.device("cuda"))), x.cuda(), 252.0)
    assert gpu.std(dim=0).cpu().numpy() == pytest.approx(cpu.std(dim=0).numpy(), rel=0.05)
    xg = x.cuda()
    gen = generator(1, torch.device("cuda"))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # drawing and the replicated Sharpes: no host sync
    try:
        w = stationary_counts(3000, 20.0, 100, gen)
        weighted_sharpes(w, xg, 252.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("n,k", [(20, 3), (300, 4), (2012, 10), (20120, 6)])
def test_politis_white_equals_arch_column_by_column(n, k):
    """Every column's stationary and circular block length equals arch's own loop (float64 rounding):
    iid, AR(1) 0.6 and its absolute values (volatility-like) columns side by side."""
    rng = np.random.default_rng(n)
    e = rng.normal(size=(n, k))
    x = e.copy()
    for t in range(1, n):
        x[t, 1:] = 0.6 * x[t - 1, 1:] + e[t, 1:]
    x[:, -1] = np.abs(x[:, -1])
    ref = optimal_block_length(x)
    sb, cb = politis_white(x)
    np.testing.assert_allclose(sb, ref["stationary"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(cb, ref["circular"].to_numpy(), rtol=1e-9)
    if n >= 300:  # long enough to tell: the AR(1) column needs longer blocks than the iid one
        assert sb[1] > 2 * sb[0]
