"""Numpy single-env twin == the torch env (core / BatchedTradingEnv / TradingGymEnv), CPU.

The parity runs drive N numpy twins (``env_id = offset + i``, reset with the batch seed) next to the
pure torch step function on the same N envs, for >= 10k env steps per configuration (both fill
modes x flat and routed actions), with many truncations and drawdown terminations, and compare
observations (post-reset and final), rewards, flags, trades (fills), costs, PnL, positions, equity,
routed actions and the completed-episode accumulators.
"""
from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import rl_zerosync.envs  # noqa: F401  (registers the gymnasium ids)
from rl_zerosync.envs import ENV_ID, ENV_ID_IMPORTABLE, TORCH_ENV_ID, EnvParams, NumpyTradingEnv, TradingGymEnv
from rl_zerosync.data import synthetic_market
from rl_zerosync.envs.core import (
    STREAM_FILL, STREAM_RESET, init_state, make_tables, observe, reset_state, route_inputs, step_with_info,
)
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.envs.numpy_twin import fill_uniform, random_bits, reset_draw
from rl_zerosync.kernels import rng
from rl_zerosync.kernels.reference import route

FEATURES = FeatureConfig(warmup=32, median_window=64)
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def market():
    return synthetic_market(3, 1200, seed=11, features=FEATURES)


@pytest.fixture(scope="module")
def bars_market():
    """The same closes with open/high/low bars (next-bar execution with passive orders that must
    trade through the range)."""
    return synthetic_market(3, 1200, seed=11, features=FEATURES, ohlc=True)


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=RTOL, atol=ATOL, err_msg=what)


# ---------------------------------------------------------------------------------------------- RNG
def test_rng_words_equal_torch():
    g = np.random.default_rng(0)
    idx = np.concatenate([g.integers(0, 2**32, 5000), [0, 1, 2**32 - 1]]).astype(np.int64)
    for seed in (0, 1, 5, 2**32 + 7, 2**64 - 1):
        for step in (0, 1, 12345, 2**32 - 1, 2**32 + 3, 2**40 + 17):
            for stream in (rng.STREAM_EXPLORE, STREAM_RESET, STREAM_FILL, 2**32 - 1):
                want = rng.random_bits(seed, step, stream, torch.from_numpy(idx)).numpy()
                got = random_bits(seed, step, stream, idx)
                assert got.dtype == np.uint64 and np.array_equal(got.astype(np.int64), want)
                assert random_bits(seed, step, stream, int(idx[7])) == int(want[7])  # the scalar path
    u = fill_uniform(3, 99, idx)
    assert u.dtype == np.float32 and np.array_equal(u, rng.uniform24(3, 99, STREAM_FILL, torch.from_numpy(idx)).numpy())


def test_reset_draws_equal_torch(market):
    params = EnvParams(episode_len=50, window=8, seed=9)
    tables = make_tables(market, params)
    ids = torch.arange(4000, dtype=torch.int64) + 77
    state = init_state(market, tables, ids)
    lo, span = tables.start_lo.tolist(), tables.start_span.tolist()
    for key in (0, 1, 1000, 2**33 + 5):
        s = reset_state(market, tables, torch.ones(4000, dtype=torch.bool), state, key)
        asset, start = reset_draw(9, key, ids.numpy(), lo, span)
        assert np.array_equal(asset, s.asset.numpy()) and np.array_equal(start, s.t.numpy())
        assert reset_draw(9, key, 77 + 5, lo, span) == (int(s.asset[5]), int(s.t[5]))
    assert len(set(asset.tolist())) == 3


# ---------------------------------------------------------------------------------------------- parity
def _run_parity(market, fill_mode: str, action_mode: str, *, n: int = 16, steps: int = 700, seed: int = 7,
                offset: int = 1000, routing=None, lag: int = 0, shaping=None) -> dict:
    routing = dict(routing or {})
    params = EnvParams(episode_len=40, window=8, fill_mode=fill_mode, seed=seed, stop_drawdown=0.05,
                       risk_penalty=0.3, fee=1e-4, reward_scale=37.3, execution_lag=lag, maker_rebate_bps=0.5 * lag,
                       **dict(shaping or {}))
    tables = make_tables(market, params)
    state = init_state(market, tables, torch.arange(n, dtype=torch.int64) + offset)
    twins = [NumpyTradingEnv(data=market, env=params, action_mode=action_mode, routing=routing, env_id=offset + i)
             for i in range(n)]
    first = [tw.reset(seed=seed) for tw in twins]
    close(np.stack([o for o, _ in first]), observe(market, tables, state).numpy(), "first obs")
    assert [i["bar"] for _, i in first] == state.t.tolist() and [i["asset"] for _, i in first] == state.asset.tolist()

    g = np.random.default_rng(1234)
    n_choices = 45 if action_mode == "flat" else 5
    choices = g.integers(0, n_choices, size=(steps, n))
    counts = {"terminated": 0, "truncated": 0, "order_urgency": set(), "unfilled": set()}
    for k in range(steps):
        chosen = torch.from_numpy(choices[k])
        if action_mode == "routed":
            factored = torch.empty(n, dtype=torch.int64)
            route(chosen, *route_inputs(market, state), factored, **routing)
        else:
            factored = chosen
        pos_before = state.pos
        state, obs, reward, term, trunc, final_obs, moved, info = step_with_info(market, tables, state, factored)
        out = [tw.step(int(a)) for tw, a in zip(twins, choices[k])]
        what = f"{fill_mode}/{action_mode} step {k}"
        close(np.stack([o[0] for o in out]), final_obs.numpy(), f"final obs, {what}")
        close([o[1] for o in out], reward.numpy(), f"reward, {what}")
        assert [o[2] for o in out] == term.tolist(), what
        assert [o[3] for o in out] == trunc.tolist(), what
        infos = [o[4] for o in out]
        assert [i["action"] for i in infos] == factored.tolist(), what
        assert [i["bar"] for i in infos] == moved.t.tolist() and [i["asset"] for i in infos] == moved.asset.tolist()
        close([i["trade"] for i in infos], info.trade.numpy(), f"trade, {what}")
        close([i["cost"] for i in infos], info.cost.numpy(), f"cost, {what}")
        close([i["pnl"] for i in infos], info.pnl.numpy(), f"pnl, {what}")
        close([i["position"] for i in infos], moved.pos.numpy(), f"position, {what}")
        close([i["equity"] for i in infos], moved.equity.numpy(), f"equity, {what}")
        # gymnasium users reset ended episodes: the twin's reset() is the batched env's auto-reset
        post = []
        for tw, o in zip(twins, out):
            post.append(tw.reset()[0] if (o[2] or o[3]) else o[0])
        close(np.stack(post), obs.numpy(), f"post-reset obs, {what}")
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int(trunc.sum())
        counts["order_urgency"].update((factored % 9).tolist())
        if fill_mode == "stochastic" or lag == 1:  # LIMIT / PASSIVE orders that did not fill this step
            ou = (factored % 9).numpy()
            unfilled = (tables.levels[factored // 9] != pos_before).numpy() & (info.trade.numpy() == 0.0)
            counts["unfilled"].update(np.unique(ou[unfilled]).tolist())
    acc = sum(tw.metrics_vector() for tw in twins)
    np.testing.assert_allclose(acc, state.acc.numpy(), rtol=1e-6, atol=1e-9)
    counts["steps"] = steps * n
    counts["episodes"] = float(acc[0])
    return counts


@pytest.mark.parametrize("action_mode", ["flat", "routed"])
@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_numpy_twin_equals_torch_env(market, fill_mode, action_mode):
    c = _run_parity(market, fill_mode, action_mode)
    assert c["steps"] >= 10_000
    assert c["terminated"] >= 20 and c["truncated"] >= 100, c  # many resets of both kinds
    assert c["episodes"] == c["terminated"] + c["truncated"]
    if action_mode == "flat":
        assert c["order_urgency"] == set(range(9))  # every order type x urgency executed
    else:
        assert len(c["order_urgency"]) >= 3  # the routing rule picked several routes
    if fill_mode == "stochastic" and action_mode == "flat":
        assert c["unfilled"] >= set(range(3, 9))  # unfilled LIMIT and PASSIVE orders at every urgency


@pytest.mark.parametrize("action_mode", ["flat", "routed"])
@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_numpy_twin_equals_torch_env_next_bar(bars_market, fill_mode, action_mode):
    """Next-bar execution (``execution_lag: 1``) with open/high/low and a maker rebate."""
    c = _run_parity(bars_market, fill_mode, action_mode, lag=1)
    assert c["terminated"] >= 20 and c["truncated"] >= 50, c
    assert c["episodes"] == c["terminated"] + c["truncated"]
    if action_mode == "flat":
        assert c["order_urgency"] == set(range(9))
        assert c["unfilled"] >= set(range(3, 9))  # resting orders the next bar did not trade through


def test_numpy_twin_equals_torch_env_next_bar_without_range(market):
    """Next-bar execution on closes only: MARKET at the next close, passive orders as MARKET."""
    c = _run_parity(market, "stochastic", "flat", n=8, steps=300, lag=1)
    assert c["order_urgency"] == set(range(9)) and not c["unfilled"]


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("shaping", [{"turnover_penalty": 7e-4}, {"reward_vol_scaled": True},
                                     {"turnover_penalty": 2e-3, "reward_vol_scaled": True}])
def test_numpy_twin_equals_torch_env_with_reward_shaping(bars_market, shaping, lag):
    """The turnover penalty and the volatility-scaled reward: the same rewards in both envs."""
    c = _run_parity(bars_market, "stochastic", "flat", n=8, steps=300, lag=lag, shaping=shaping)
    assert c["truncated"] >= 20 and c["order_urgency"] == set(range(9))


def test_routed_with_custom_thresholds_equals_torch(market):
    c = _run_parity(market, "stochastic", "routed", n=8, steps=200,
                    routing={"wide": 1.1, "high_vol": 1.05, "low_vol": 0.9})
    assert len(c["order_urgency"]) >= 4


def test_numpy_twin_equals_torch_twin_call_by_call(market):
    """Seeded and unseeded resets, mid-episode resets, re-seeding: the two gymnasium twins agree."""
    g = np.random.default_rng(5)
    for action_mode, fill_mode in (("flat", "stochastic"), ("routed", "expected")):
        env = {"episode_len": 30, "window": 8, "fill_mode": fill_mode, "stop_drawdown": 0.01, "seed": 3}
        kw = {"data": market, "env": env, "action_mode": action_mode}
        a, b = NumpyTradingEnv(**kw), TradingGymEnv(**kw)
        oa, ia = a.reset(seed=11)
        ob, ib = b.reset(seed=11)
        assert np.array_equal(oa, ob) and ia == ib
        for k in range(1500):
            r = g.random()
            if r < 0.01:
                s = int(g.integers(0, 100))
                (oa, ia), (ob, ib) = a.reset(seed=s), b.reset(seed=s)
            elif r < 0.03:
                (oa, ia), (ob, ib) = a.reset(), b.reset()
            else:
                act = int(g.integers(0, a.action_space.n))
                oa, ra, ta, ua, ia = a.step(act)
                ob, rb, tb, ub, ib = b.step(act)
                close(ra, rb, f"reward {k}")
                assert (ta, ua) == (tb, ub)
                if ta or ua:
                    (oa, ia), (ob, ib) = a.reset(), b.reset()
            close(oa, ob, f"obs {k}")
            assert ia.keys() == ib.keys() and all(ia[x] == pytest.approx(ib[x], rel=RTOL, abs=ATOL) for x in ia), k
        np.testing.assert_allclose(a.metrics_vector(), b.metrics_vector().numpy(), rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------------------------------------- gymnasium
DATA = {"num_assets": 2, "num_bars": 1500, "seed": 1, "features": {"warmup": 32, "median_window": 64}}
ENV = {"episode_len": 32, "window": 8}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("mode,n", [("flat", 45), ("routed", 5)])
def test_check_env_and_spaces_match_torch_twin(mode, n):
    env = NumpyTradingEnv({"data": DATA, "env": ENV, "action_mode": mode})
    check_env(env, skip_render_check=True)
    ref = TradingGymEnv({"data": DATA, "env": ENV, "action_mode": mode})
    assert env.action_space == ref.action_space == gym.spaces.Discrete(n)
    assert env.observation_space == ref.observation_space


def test_registered_ids():
    env = gym.make(ENV_ID, data=DATA, env=ENV, action_mode="routed")
    assert isinstance(env.unwrapped, NumpyTradingEnv)
    obs, _ = env.reset(seed=2)
    assert obs.shape == (12,) and obs.dtype == np.float32
    env.close()
    ref = gym.make(TORCH_ENV_ID, data=DATA, env=ENV, action_mode="routed")
    assert isinstance(ref.unwrapped, TradingGymEnv)
    assert np.array_equal(ref.reset(seed=2)[0], obs)
    ref.close()
    code = (
        "import gymnasium as gym; "
        f"e = gym.make({ENV_ID_IMPORTABLE!r}, data={DATA!r}, env={ENV!r}); "
        "print(type(e.unwrapped).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("NumpyTradingEnv"), out.stderr[-2000:]


def test_seeding_semantics():
    a, b = NumpyTradingEnv(data=DATA, env=ENV), NumpyTradingEnv(data=DATA, env=ENV)
    assert np.array_equal(a.reset(seed=9)[0], b.reset(seed=9)[0]) and a.env_id == 0
    starts = {NumpyTradingEnv(data=DATA, env=ENV).reset()[1]["bar"] for _ in range(6)}
    assert len(starts) > 1  # unseeded copies draw random env ids
    c = NumpyTradingEnv(data=DATA, env=ENV, env_id=4)
    c.reset(seed=9)
    assert c.env_id == 4 and c.rng_step == 0
    c.step(0)
    assert c.rng_step == 1


def test_bad_config_and_actions_raise():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['dat'\]"):
        NumpyTradingEnv({"dat": DATA})
    with pytest.raises(ValueError, match="action_mode"):
        NumpyTradingEnv({"data": DATA, "env": ENV, "action_mode": "branching"})
    with pytest.raises(ValueError, match="routing"):
        NumpyTradingEnv({"data": DATA, "env": ENV, "routing": {"narrow": 1.0}})
    with pytest.raises(ValueError, match="env_id"):
        NumpyTradingEnv({"data": DATA, "env": ENV, "env_id": -1})
    env = NumpyTradingEnv({"data": DATA, "env": ENV})
    with pytest.raises(ValueError, match="before reset"):
        env.step(0)
    env.reset(seed=0)
    for bad in (45, -1, 1.5, "3"):
        with pytest.raises(ValueError, match=r"0\.\.44"):
            env.step(bad)
    env.step(np.int64(44))
    env.step(np.array(3))
