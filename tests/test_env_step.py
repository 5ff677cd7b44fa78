"""Hand-computed execution, costs and rewards of the batched env step (CPU)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_zerosync.actions import encode
from rl_zerosync.envs import BatchedTradingEnv, EnvParams
from rl_zerosync.envs.params import REWARD_VOL_FLOOR
from rl_zerosync.data import MarketData
from rl_zerosync.envs.core import init_state, make_tables, transition
from rl_zerosync.data.market import FeatureConfig

CLOSE = [100.0, 101.0, 99.0, 102.0, 103.0, 101.0, 100.0, 104.0]
SPREAD = 0.002
VOL = 0.01


def tiny_market(close=CLOSE, spread=SPREAD, vol=VOL, valid_start=2) -> MarketData:
    """One asset with constant spread/vol features so every number can be computed by hand."""
    c = torch.tensor(close, dtype=torch.float64)
    ret = torch.zeros_like(c)
    ret[1:] = c[1:] / c[:-1] - 1.0
    log_ret = torch.zeros_like(c)
    log_ret[1:] = torch.log(c[1:] / c[:-1])
    n = len(close)
    f = lambda x: x.to(torch.float32)[None]
    const = lambda v: torch.full((1, n), v, dtype=torch.float32)
    return MarketData(
        close=f(c), log_ret=f(log_ret), ret=f(ret), spread=const(spread), median_spread=const(spread),
        vol=const(vol), median_vol=const(vol), ret_norm=f(log_ret / vol), obs_spread=const(0.0),
        obs_vol=const(0.0), valid_start=torch.tensor([valid_start]), length=torch.tensor([n]),
        asset_names=("tiny",), features=FeatureConfig(warmup=2),
    )


# The same-bar model (execution_lag 0), computed by hand; next-bar execution: tests/test_execution.py
PARAMS = EnvParams(episode_len=5, window=2, fee=1e-4, reward_scale=100.0, execution_lag=0)
EXPOSURES = [4, 4, 0, 2, 3]  # targets +1, +1, -1, 0, +0.5


def reference(params: EnvParams, o: int, u: int, exposures=EXPOSURES, close=CLOSE, start=2):
    """Plain-python replay of the documented step maths for one env (expected-fill mode)."""
    f = params.fill_prob[o][u]
    pos, out = 0.0, []
    for j, e in enumerate(exposures):
        t = start + j
        q = f * (params.exposure_levels[e] - pos)
        pos += q
        cost = abs(q) * (params.fee + params.spread_frac[o][u] * SPREAD + params.impact[o][u] * VOL * abs(q))
        pnl = pos * (close[t + 1] / close[t] - 1.0)
        risk = params.risk_penalty * pos**2 * VOL**2
        out.append(dict(q=q, pos=pos, cost=cost, pnl=pnl, reward=params.reward_scale * (pnl - cost - risk)))
    return out


def run_actions(data, params, actions):
    tables = make_tables(data, params)
    state = init_state(data, tables, torch.zeros(1, dtype=torch.int64))
    rows = []
    for a in actions:
        state, info = transition(data, tables, state, torch.tensor([a]))
        rows.append(dict(q=float(info.trade), pos=float(state.pos), cost=float(info.cost), pnl=float(info.pnl),
                         reward=float(info.reward), terminated=bool(info.terminated), truncated=bool(info.truncated)))
    return rows, state


def test_start_bar_is_forced_by_the_tiny_market():
    data = tiny_market()
    tables = make_tables(data, PARAMS)
    assert tables.start_lo.tolist() == [2] and tables.start_span.tolist() == [1]


def test_market_normal_first_step_by_hand():
    rows, _ = run_actions(tiny_market(), PARAMS, [encode(4, 0, 1)])
    # pos 0 -> +1 fully; cost = 1 * (1e-4 + 0.5 * 0.002 + 0.1 * 0.01 * 1) = 0.0021
    # pnl = +1 * (102 / 99 - 1) = 0.0303030...; reward = 100 * (pnl - cost)
    assert rows[0]["q"] == pytest.approx(1.0)
    assert rows[0]["cost"] == pytest.approx(0.0021, rel=1e-5)
    assert rows[0]["pnl"] == pytest.approx(3.0 / 99.0, rel=1e-5)
    assert rows[0]["reward"] == pytest.approx(100 * (3.0 / 99.0 - 0.0021), rel=1e-5)


def test_passive_low_rebate_by_hand():
    rows, _ = run_actions(tiny_market(), PARAMS, [encode(0, 2, 0)])
    # fill 0.2 of 0 -> -1: q = -0.2; cost = 0.2 * (1e-4 - 0.1 * 0.002 + 0) = -2e-5 (net rebate)
    assert rows[0]["q"] == pytest.approx(-0.2)
    assert rows[0]["cost"] == pytest.approx(-2e-5, rel=1e-4)
    assert rows[0]["pnl"] == pytest.approx(-0.2 * (3.0 / 99.0), rel=1e-5)


@pytest.mark.parametrize("o", [0, 1, 2])
@pytest.mark.parametrize("u", [0, 1, 2])
def test_five_bar_episode_matches_hand_reference(o, u):
    data = tiny_market()
    rows, state = run_actions(data, PARAMS, [encode(e, o, u) for e in EXPOSURES])
    ref = reference(PARAMS, o, u)
    for j, (got, want) in enumerate(zip(rows, ref)):
        for k in ("q", "pos", "cost", "pnl", "reward"):
            assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-7), (j, k)
        assert got["terminated"] is False
        assert got["truncated"] is (j == 4)
    equity = math.prod(1.0 + r["pnl"] - r["cost"] for r in ref)
    assert float(state.equity) == pytest.approx(equity, rel=1e-5)


def test_risk_penalty_enters_reward_only():
    params = EnvParams(episode_len=5, window=2, risk_penalty=2.0, execution_lag=0)
    rows, state = run_actions(tiny_market(), params, [encode(4, 0, 2)])
    ref = reference(params, 0, 2, exposures=[4])
    assert rows[0]["reward"] == pytest.approx(ref[0]["reward"], rel=1e-5)
    assert rows[0]["reward"] == pytest.approx(100 * (ref[0]["pnl"] - ref[0]["cost"] - 2.0 * VOL**2), rel=1e-5)
    assert float(state.equity) == pytest.approx(1 + ref[0]["pnl"] - ref[0]["cost"], rel=1e-6)


def test_turnover_penalty_enters_reward_only():
    """reward = 100 * (pnl - cost - turnover_penalty * |q|): charged per unit traded, twice for a
    reversal, nothing while the position holds; fills, costs, PnL and equity untouched."""
    plain = EnvParams(episode_len=5, window=2, execution_lag=0)
    params = EnvParams(episode_len=5, window=2, execution_lag=0, turnover_penalty=3e-3)
    acts = [encode(4, 0, 1), encode(4, 0, 1), encode(0, 0, 1)]  # buy 1, hold, reverse to -1 (|q| = 2)
    rows, state = run_actions(tiny_market(), params, acts)
    base, base_state = run_actions(tiny_market(), plain, acts)
    for got, ref, size in zip(rows, base, (1.0, 0.0, 2.0)):
        assert (got["q"], got["cost"], got["pnl"]) == (ref["q"], ref["cost"], ref["pnl"])
        assert got["reward"] == pytest.approx(ref["reward"] - 100 * 3e-3 * size, rel=1e-5, abs=1e-6)
    assert rows[1]["reward"] == base[1]["reward"]  # holding: no charge
    assert float(state.equity) == float(base_state.equity)


def test_volatility_scaled_reward_is_in_vol_units():
    """reward_vol_scaled divides the shaped reward by the bar's volatility (here a constant 1%); below
    REWARD_VOL_FLOOR (1 bp) by the floor."""
    acts = [encode(4, 0, 1), encode(2, 0, 1)]
    shaped = dict(episode_len=5, window=2, execution_lag=0, turnover_penalty=1e-3)
    base, _ = run_actions(tiny_market(), EnvParams(**shaped), acts)
    scaled, _ = run_actions(tiny_market(), EnvParams(**shaped, reward_vol_scaled=True, reward_scale=1.0), acts)
    for got, ref in zip(scaled, base):
        assert got["reward"] == pytest.approx(ref["reward"] / 100 / VOL, rel=1e-5)
    calm, _ = run_actions(tiny_market(vol=1e-6), EnvParams(**shaped, reward_vol_scaled=True, reward_scale=1.0), acts)
    assert calm[0]["reward"] == pytest.approx((calm[0]["pnl"] - calm[0]["cost"] - 1e-3) / REWARD_VOL_FLOOR, rel=1e-5)


@pytest.mark.parametrize("bad", [{"turnover_penalty": -1e-3}, {"turnover_penalty": float("nan")},
                                 {"reward_vol_scaled": 1}])
def test_reward_shaping_keys_checked(bad):
    with pytest.raises(ValueError, match=f"EnvParams.{next(iter(bad))}"):
        EnvParams(**bad)


def test_monotone_in_urgency_fill_and_cost():
    data = tiny_market()
    for o in range(3):
        fills, costs = [], []
        for u in range(3):
            rows, _ = run_actions(data, PARAMS, [encode(4, o, u)])
            fills.append(rows[0]["q"])
            costs.append(rows[0]["cost"])
        assert fills == sorted(fills), (o, fills)
        assert costs == sorted(costs), (o, costs)
        if o == 0:
            assert fills == [1.0, 1.0, 1.0] and costs[0] < costs[1] < costs[2]
        else:
            assert fills[0] < fills[1] < fills[2]
    # per unit, limit and passive are cheaper than market at every urgency
    for u in range(3):
        unit = [run_actions(data, PARAMS, [encode(4, o, u)])[0][0]["cost"] / PARAMS.fill_prob[o][u] for o in range(3)]
        assert unit[0] > unit[1] > unit[2], (u, unit)


def test_non_monotone_tables_are_rejected():
    with pytest.raises(ValueError, match=r"fill_prob\[1\].*non-decreasing"):
        EnvParams(fill_prob=((1, 1, 1), (0.9, 0.5, 0.8), (0.1, 0.2, 0.3)))
    with pytest.raises(ValueError, match=r"impact\[0\].*non-decreasing"):
        EnvParams(impact=((0.3, 0.1, 0.2), (0, 0, 0), (0, 0, 0)))
    with pytest.raises(ValueError, match=r"fill_prob\[0\] \(MARKET\)"):
        EnvParams(fill_prob=((0.9, 1, 1), (0.5, 0.7, 0.8), (0.1, 0.2, 0.3)))
    with pytest.raises(ValueError, match="fill_mode"):
        EnvParams(fill_mode="random")
    with pytest.raises(ValueError, match="exposure_levels"):
        EnvParams(exposure_levels=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['episode_length'\]"):
        EnvParams.from_dict({"episode_length": 10})


def test_episode_too_long_for_data_names_the_asset():
    with pytest.raises(ValueError, match="asset 'tiny'.*episode_len=6"):
        BatchedTradingEnv(tiny_market(), EnvParams(episode_len=6, window=2), num_envs=1)


def test_observation_layout_and_auto_reset():
    data = tiny_market()
    env = BatchedTradingEnv(data, PARAMS, num_envs=2, seed=3)
    obs = env.reset()
    lr = data.ret_norm[0]
    assert torch.allclose(obs[0, :2], lr[1:3]) and obs[0, 2] == 0.0 and obs[0, 5] == 0.0
    for j, e in enumerate(EXPOSURES):
        obs, reward, term, trunc, _ = env.step(torch.tensor([encode(e, 0, 2)] * 2))
        if j < 4:
            assert not trunc.any()
            assert torch.equal(obs, env.final_obs)
            assert obs[0, 5] == pytest.approx((j + 1) / 5)
            assert obs[0, 2] == pytest.approx(PARAMS.exposure_levels[e])
    assert trunc.all() and not term.any()
    # final obs: bar 7, position 0.5, progress 1; obs after reset: bar 2 again, flat, progress 0
    assert torch.allclose(env.final_obs[:, :2], lr[6:8].expand(2, 2))
    assert env.final_obs[0, 2] == pytest.approx(0.5) and env.final_obs[0, 5] == 1.0
    assert torch.allclose(obs[:, :2], lr[1:3].expand(2, 2)) and (obs[:, 2] == 0).all() and (obs[:, 5] == 0).all()
    assert torch.equal(env.state.t, torch.tensor([2, 2]))


def test_stop_drawdown_terminates():
    # a full short into the +3.03% move from bar 2 to 3 is a drawdown of more than 2%
    params = EnvParams(episode_len=5, window=2, stop_drawdown=0.02, execution_lag=0)
    rows, _ = run_actions(tiny_market(), params, [encode(0, 0, 2)])  # short into +3.03%
    assert rows[0]["terminated"] is True and rows[0]["truncated"] is False


def test_metrics_accumulate_completed_episodes():
    data = tiny_market()
    env = BatchedTradingEnv(data, PARAMS, num_envs=3, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    rewards = []
    for _ in range(12):  # two full episodes and two steps of a third
        a = torch.from_numpy(rng.integers(0, 45, size=3))
        _, r, _, _, _ = env.step(a)
        rewards.append(r.clone())
    names = env.metrics_names()
    vec = dict(zip(names, env.metrics_vector().tolist()))
    assert vec["episodes"] == 6 and vec["length_sum"] == 30 and vec["env_steps"] == 36
    completed = torch.stack(rewards[:10]).double().sum()
    assert vec["reward_sum"] == pytest.approx(float(completed), rel=1e-5)
    running = torch.stack(rewards[10:]).sum(0)
    assert torch.allclose(env.metrics["episode_reward"], running, rtol=1e-5, atol=1e-6)
    assert sum(vec[f"action_count_{i:02d}"] for i in range(45)) == 36
    env.reset_metrics()
    assert float(env.metrics_vector().abs().sum()) == 0.0
