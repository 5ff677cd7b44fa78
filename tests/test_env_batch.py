"""Batched env vs gymnasium twin, determinism, no look-ahead, reset draws (CPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_zerosync.envs import BatchedTradingEnv, EnvParams, TradingGymEnv
from rl_zerosync.data import synthetic_market
from rl_zerosync.data.market import FeatureConfig, build_market, compute_features
from rl_zerosync.data.synthetic import synthetic_series

FEATURES = FeatureConfig(warmup=32, median_window=64)


@pytest.fixture(scope="module")
def market():
    return synthetic_market(3, 600, seed=11, features=FEATURES)


def random_actions(steps: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 45, size=(steps, n)))


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_batched_equals_twin_step_by_step(market, fill_mode):
    params = EnvParams(episode_len=40, window=8, fill_mode=fill_mode, seed=5)
    env = BatchedTradingEnv(market, params, num_envs=3)
    obs_b = env.reset()
    twins = [TradingGymEnv(data=market, env=params, env_id=i) for i in range(3)]
    obs_t = [tw.reset(seed=5)[0] for tw in twins]
    assert np.allclose(obs_b.numpy(), np.stack(obs_t), atol=1e-6)
    actions = random_actions(200, 3, seed=1)
    ended = 0
    for step in range(200):
        obs_b, rew_b, term_b, trunc_b, _ = env.step(actions[step])
        for i, tw in enumerate(twins):
            o, r, te, tr, info = tw.step(int(actions[step, i]))
            assert np.allclose(env.final_obs[i].numpy(), o, atol=1e-6), (step, i)
            assert abs(float(rew_b[i]) - r) <= 1e-5 * max(1.0, abs(r)), (step, i)
            assert bool(term_b[i]) == te and bool(trunc_b[i]) == tr
            if te or tr:
                ended += 1
                o, _ = tw.reset()
            assert np.allclose(obs_b[i].numpy(), o, atol=1e-6), (step, i)
    assert ended == 15  # 200 // 40 episodes per env
    assert torch.allclose(env.metrics_vector(), sum(tw.metrics_vector() for tw in twins), rtol=1e-6)


def trajectory(market, params, seed, steps=120):
    env = BatchedTradingEnv(market, params, num_envs=16, seed=seed)
    out = [env.reset()]
    for a in random_actions(steps, 16, seed=2):
        obs, r, te, tr, _ = env.step(a)
        out += [obs, r[:, None], te[:, None].float(), tr[:, None].float()]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_same_seed_same_trajectory(market, fill_mode):
    params = EnvParams(episode_len=30, window=8, fill_mode=fill_mode)
    a, b, c = trajectory(market, params, 7), trajectory(market, params, 7), trajectory(market, params, 8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_reset_draws_cover_assets_and_offsets(market):
    params = EnvParams(episode_len=100, window=8)
    env = BatchedTradingEnv(market, params, num_envs=3000, seed=1)
    s = env.state
    counts = torch.bincount(s.asset, minlength=3).double() / 3000
    assert torch.allclose(counts, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.04)
    lo, hi = 32, 600 - 1 - 100  # max(warmup, window) .. length - 1 - episode_len
    assert int(s.t.min()) >= lo and int(s.t.max()) <= hi
    assert int(s.t.min()) < lo + 10 and int(s.t.max()) > hi - 10
    # the draw depends on (seed, env id, step) only: a sub-batch with an id offset reproduces it
    sub = BatchedTradingEnv(market, params, num_envs=5, seed=1, env_id_offset=100)
    assert torch.equal(sub.state.t, s.t[100:105]) and torch.equal(sub.state.asset, s.asset[100:105])


def test_stochastic_fill_frequency(market):
    # same-bar fills (execution_lag 0): every order fills with its probability; next-bar fills only
    # when the bar trades through (tests/test_execution.py)
    params = EnvParams(episode_len=100, window=8, fill_mode="stochastic", execution_lag=0)
    env = BatchedTradingEnv(market, params, num_envs=20000, seed=3)
    env.reset()
    for o, u in [(1, 0), (1, 2), (2, 1)]:
        env.reset()
        env.step(torch.full((20000,), 4 * 9 + o * 3 + u))
        pos = env.state.pos
        assert set(pos.unique().tolist()) <= {0.0, 1.0}
        assert float(pos.mean()) == pytest.approx(params.fill_prob[o][u], abs=0.015)


def test_no_look_ahead():
    raw = synthetic_series(1, 400, seed=4)
    close, spread = raw["close"][0], raw["spread"][0]
    t0 = 250
    close2, spread2 = close.copy(), spread.copy()
    rng = np.random.default_rng(9)
    close2[t0 + 1:] *= np.exp(np.cumsum(rng.normal(0, 0.05, 400 - t0 - 1)))
    spread2[t0 + 1:] *= 3.0
    f1, f2 = compute_features(close, spread, FEATURES), compute_features(close2, spread2, FEATURES)
    for k in f1:
        assert np.array_equal(f1[k][: t0 + 1], f2[k][: t0 + 1]), k
        assert not np.array_equal(f1[k][t0 + 1:], f2[k][t0 + 1:]), k
    # env trajectories: same start bars (RNG does not see prices); everything observed at bars <= t0
    # and every reward earned by the close of t0 is identical
    params = EnvParams(episode_len=120, window=8)
    m1 = build_market([close], [spread], features=FEATURES)
    m2 = build_market([close2], [spread2], features=FEATURES)
    e1, e2 = BatchedTradingEnv(m1, params, num_envs=64, seed=2), BatchedTradingEnv(m2, params, num_envs=64, seed=2)
    o1, o2 = e1.reset(), e2.reset()
    checked = 0
    for a in random_actions(119, 64, seed=3):
        bar = e1.state.t.clone()
        assert torch.equal(bar, e2.state.t)
        seen = bar <= t0
        assert torch.equal(o1[seen], o2[seen])
        o1, r1, _, _, _ = e1.step(a)
        o2, r2, _, _, _ = e2.step(a)
        earned = bar + 1 <= t0  # reward of the trade at `bar` is the return into bar + 1
        assert torch.equal(r1[earned], r2[earned])
        checked += int(earned.sum())
        assert not torch.equal(r1[bar >= t0], r2[bar >= t0]) or not (bar >= t0).any()
    assert checked > 1000
