"""Next-bar execution (``env.execution_lag``), passive orders that must trade through, hand-computed
bars (CPU); ``execution_lag: 0`` against a copy of the earlier same-bar ``execute``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_zerosync.actions import decode_t, encode
from rl_zerosync.data import MarketData, synthetic_market
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.envs import EnvParams
from rl_zerosync.envs.core import STREAM_FILL, init_state, make_tables, observe, step_with_info, transition
from rl_zerosync.envs.params import with_recorded_lag
from rl_zerosync.kernels.rng import uniform24

CLOSE = [100.0, 101.0, 99.0, 102.0, 103.0, 101.0, 100.0, 104.0]
OPEN = [100.0, 100.5, 100.0, 99.5, 102.5, 103.5, 100.5, 100.0]
HIGH = [101.0, 102.0, 101.0, 103.0, 104.0, 104.0, 101.0, 105.0]
LOW = [99.0, 100.0, 98.0, 99.5, 101.0, 100.0, 99.0, 99.5]
SPREAD, VOL = 0.002, 0.01
FEE = 1e-4
PARAMS = EnvParams(episode_len=5, window=2, fee=FEE, reward_scale=100.0)  # execution_lag 1: the default


def bars(close=CLOSE, open_=OPEN, high=HIGH, low=LOW, spread=SPREAD, vol=VOL) -> MarketData:
    """One asset with constant spread / vol features and optional open / high / low bars."""
    c = torch.tensor(close, dtype=torch.float64)
    ret = torch.zeros_like(c)
    ret[1:] = c[1:] / c[:-1] - 1.0
    log_ret = torch.zeros_like(c)
    log_ret[1:] = torch.log(c[1:] / c[:-1])
    n = len(close)
    f = lambda x: torch.as_tensor(x, dtype=torch.float64).to(torch.float32)[None]  # noqa: E731
    const = lambda v: torch.full((1, n), v, dtype=torch.float32)  # noqa: E731
    return MarketData(
        close=f(c), log_ret=f(log_ret), ret=f(ret), spread=const(spread), median_spread=const(spread),
        vol=const(vol), median_vol=const(vol), ret_norm=f(log_ret / vol), obs_spread=const(0.0),
        obs_vol=const(0.0), valid_start=torch.tensor([2]), length=torch.tensor([n]), asset_names=("tiny",),
        features=FeatureConfig(warmup=2), open=None if open_ is None else f(open_),
        high=None if high is None else f(high), low=None if low is None else f(low),
    )


def run(data, params, actions):
    tables = make_tables(data, params)
    state = init_state(data, tables, torch.zeros(1, dtype=torch.int64))
    assert int(state.t) == 2
    rows = []
    for a in actions:
        state, info = transition(data, tables, state, torch.tensor([a]))
        rows.append(dict(q=float(info.trade), pos=float(state.pos), cost=float(info.cost), pnl=float(info.pnl),
                         order=int(info.order_type)))
    return rows


# -------------------------------------------------------------------------------------- MARKET
def test_market_order_decided_at_t_fills_at_the_next_open():
    rows = run(bars(), PARAMS, [encode(4, 0, 1), encode(4, 0, 1), encode(0, 0, 1)])
    # bar 2 (close 99) decides +1; it fills at open[3] = 99.5: the old position (0) earns nothing,
    # the bought unit 102 / 99.5 - 1; cost = 1 * (1e-4 + 0.5 * 0.002 + 0.1 * 0.01 * 1)
    assert rows[0]["q"] == pytest.approx(1.0) and rows[0]["pos"] == pytest.approx(1.0)
    assert rows[0]["cost"] == pytest.approx(0.0021, rel=1e-5)
    assert rows[0]["pnl"] == pytest.approx(102.0 / 99.5 - 1.0, rel=1e-5)
    # hold: the whole bar 3 -> 4
    assert rows[1]["q"] == 0.0 and rows[1]["cost"] == 0.0
    assert rows[1]["pnl"] == pytest.approx(103.0 / 102.0 - 1.0, rel=1e-5)
    # bar 4 decides -1: sold 2 at open[5] = 103.5; the held +1 earns 103 -> 101, the sold 2 miss 103.5 -> 101
    assert rows[2]["q"] == pytest.approx(-2.0)
    assert rows[2]["cost"] == pytest.approx(2.0 * (FEE + 0.5 * SPREAD + 0.1 * VOL * 2.0), rel=1e-5)
    want = (101.0 / 103.0 - 1.0) - 2.0 * (101.0 / 103.5 - 1.0)
    assert rows[2]["pnl"] == pytest.approx(want, rel=1e-5)


def test_market_order_without_opens_fills_at_the_next_close():
    rows = run(bars(open_=None), PARAMS, [encode(4, 0, 1), encode(4, 0, 1)])
    # filled at close[3] = 102: nothing of bar 3's move is earned; the next bar is
    assert rows[0]["q"] == pytest.approx(1.0) and rows[0]["pnl"] == 0.0
    assert rows[0]["cost"] == pytest.approx(0.0021, rel=1e-5)
    assert rows[1]["pnl"] == pytest.approx(103.0 / 102.0 - 1.0, rel=1e-5)


def test_observation_never_holds_the_execution_bar():
    base = bars()
    moved = bars(close=CLOSE[:3] + [150.0] + CLOSE[4:], open_=OPEN[:3] + [140.0] + OPEN[4:],
                 high=HIGH[:3] + [160.0] + HIGH[4:], low=LOW[:3] + [90.0] + LOW[4:])
    obs = [observe(d, make_tables(d, PARAMS), init_state(d, PARAMS, torch.zeros(1, dtype=torch.int64)))
           for d in (base, moved)]
    assert torch.equal(obs[0], obs[1])  # bar 3 changed, the observation of bar 2 did not


# -------------------------------------------------------------------------------------- passive
LIMIT_NORMAL = encode(4, 1, 1)  # spread_frac 0.1, fill 0.7, impact 0.02
LIMIT_PRICE = 99.0 * (1.0 + 0.1 * SPREAD)  # 99.0198: a buy rests a tenth of a spread above the close


def test_limit_buy_fills_only_if_the_next_low_reaches_its_price():
    missed = run(bars(low=LOW[:3] + [99.5] + LOW[4:]), PARAMS, [LIMIT_NORMAL])[0]
    assert missed["q"] == 0.0 and missed["cost"] == 0.0 and missed["pnl"] == 0.0 and missed["order"] == 1
    filled = run(bars(low=LOW[:3] + [99.0] + LOW[4:]), PARAMS, [LIMIT_NORMAL])[0]
    assert filled["q"] == pytest.approx(0.7)
    assert filled["cost"] == pytest.approx(0.7 * (FEE + 0.02 * VOL * 0.7), rel=1e-5)  # no spread paid, no rebate
    assert filled["pnl"] == pytest.approx(0.7 * (102.0 / LIMIT_PRICE - 1.0), rel=1e-5)  # from its own price
    touched = run(bars(low=LOW[:3] + [float(np.float32(LIMIT_PRICE))] + LOW[4:]), PARAMS, [LIMIT_NORMAL])[0]
    assert touched["q"] == pytest.approx(0.7)  # low == limit price fills


def test_passive_sell_fills_only_if_the_next_high_reaches_its_price():
    sell = encode(0, 2, 0)  # PASSIVE LOW: spread_frac -0.1 -> rests above the close, fill 0.2
    price = 99.0 * (1.0 + 0.1 * SPREAD)
    missed = run(bars(high=HIGH[:3] + [99.01] + HIGH[4:], low=LOW[:3] + [98.5] + LOW[4:]), PARAMS, [sell])[0]
    assert missed["q"] == 0.0
    filled = run(bars(), PARAMS, [sell])[0]  # high[3] = 103
    assert filled["q"] == pytest.approx(-0.2)
    assert filled["cost"] == pytest.approx(0.2 * FEE, rel=1e-5)
    assert filled["pnl"] == pytest.approx(-0.2 * (102.0 / price - 1.0), rel=1e-5)


def test_no_rebate_by_default_and_the_maker_rebate_when_set():
    data = bars(low=LOW[:3] + [98.5] + LOW[4:])  # below the PASSIVE LOW buy's 99 * (1 - 0.1 * 0.002)
    assert PARAMS.maker_rebate_bps == 0.0
    plain = run(data, PARAMS, [encode(4, 2, 0)])[0]  # PASSIVE LOW buy: spread_frac -0.1 (a rebate under lag 0)
    assert plain["q"] == pytest.approx(0.2) and plain["cost"] == pytest.approx(0.2 * FEE, rel=1e-5)
    rebate = run(data, EnvParams(episode_len=5, window=2, fee=FEE, maker_rebate_bps=0.25), [encode(4, 2, 0)])[0]
    assert rebate["cost"] == pytest.approx(0.2 * (FEE - 0.25e-4), rel=1e-5)
    market = run(data, EnvParams(episode_len=5, window=2, fee=FEE, maker_rebate_bps=0.25), [encode(4, 0, 0)])[0]
    assert market["cost"] == pytest.approx(FEE + 0.5 * SPREAD + 0.05 * VOL, rel=1e-5)  # MARKET earns none


def test_stochastic_next_bar_fills_at_their_probability_only_where_the_bar_trades_through():
    from rl_zerosync.envs import BatchedTradingEnv

    data = synthetic_market(3, 600, seed=11, features=FeatureConfig(warmup=32, median_window=64), ohlc=True)
    params = EnvParams(episode_len=100, window=8, fill_mode="stochastic")
    env = BatchedTradingEnv(data, params, num_envs=20000, seed=3)
    for o, u in [(1, 0), (2, 1)]:
        env.reset()
        s = env.state
        idx = s.asset * data.num_bars + s.t
        price = data.close.reshape(-1)[idx] * (1.0 + params.spread_frac[o][u] * data.spread.reshape(-1)[idx])
        crossed = data.low.reshape(-1)[idx + 1] <= price
        env.step(torch.full((20000,), 4 * 9 + o * 3 + u))
        pos = env.state.pos
        assert 0.1 < float(crossed.double().mean()) < 0.95  # both cases occur
        assert float(pos[~crossed].abs().max()) == 0.0
        assert float(pos[crossed].mean()) == pytest.approx(params.fill_prob[o][u], abs=0.02)


def test_passive_orders_without_high_low_execute_as_market():
    rows = run(bars(high=None, low=None), PARAMS, [LIMIT_NORMAL])
    assert rows[0]["q"] == pytest.approx(1.0) and rows[0]["order"] == 0
    assert rows[0]["cost"] == pytest.approx(FEE + 0.5 * SPREAD + 0.1 * VOL, rel=1e-5)  # MARKET NORMAL
    from rl_zerosync.data.market import build_market

    with pytest.raises(ValueError, match="high and low"):  # kept together, or not at all
        build_market([np.array(CLOSE * 10)], [np.full(80, SPREAD)], features=FeatureConfig(warmup=2),
                     prices={"high": [np.array(HIGH * 10)]})


def test_execution_lag_is_validated_and_legacy_settings_read_as_lag_0():
    for bad in (2, -1, True, "1"):
        with pytest.raises(ValueError, match="execution_lag"):
            EnvParams(execution_lag=bad)
    with pytest.raises(ValueError, match="maker_rebate_bps"):
        EnvParams(maker_rebate_bps=-1.0)
    assert with_recorded_lag({"window": 8}) == {"window": 8, "execution_lag": 0}
    assert with_recorded_lag({"execution_lag": 1})["execution_lag"] == 1


# -------------------------------------------------------------------------------------- lag 0
def old_execute(data, tables, state, actions, counter):
    """``rl_zerosync.envs.core.execute`` as it was before ``execution_lag`` (same-bar fills), verbatim."""
    p = tables.params
    e, o, u = decode_t(actions)
    ou = o * 3 + u
    idx = state.asset * tables.num_bars + state.t
    fill = tables.fill[ou]
    if p.fill_mode == "stochastic":
        fill = (uniform24(p.seed, counter, STREAM_FILL, state.env_id) < fill).to(torch.float32)
    trade = fill * (tables.levels[e] - state.pos)
    pos = state.pos + trade
    spread_t = data.spread.reshape(-1)[idx]
    vol_t = data.vol.reshape(-1)[idx]
    size = trade.abs()
    cost = size * (p.fee + tables.spread_frac[ou] * spread_t + tables.impact[ou] * vol_t * size)
    pnl = pos * data.ret.reshape(-1)[idx + 1]
    return trade, size, pos, cost, pnl, o, vol_t


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_execution_lag_0_reproduces_the_same_bar_model_bit_for_bit(fill_mode, monkeypatch):
    import rl_zerosync.envs.core as core

    data = synthetic_market(2, 600, seed=3, features=FeatureConfig(warmup=32), ohlc=True)
    params = EnvParams(episode_len=30, window=8, fill_mode=fill_mode, seed=5, execution_lag=0,
                       stop_drawdown=0.05, risk_penalty=0.2)
    actions = torch.from_numpy(np.random.default_rng(0).integers(0, 45, size=(400, 12)))

    def trajectory():
        tables = make_tables(data, params)
        state = init_state(data, tables, torch.arange(12))
        out = []
        for a in actions:
            state, obs, reward, term, trunc, final_obs, moved, info = step_with_info(data, tables, state, a)
            out += [obs, reward, info.cost, info.pnl, info.trade, moved.pos, moved.equity]
        return out + [state.acc]

    new = trajectory()
    monkeypatch.setattr(core, "execute", lambda *args: old_execute(*args) + (None,))  # + the fill price
    old = trajectory()
    assert all(torch.equal(a, b) for a, b in zip(new, old))


# -------------------------------------------------------------------------------------- walks
@pytest.mark.parametrize("lag", [0, 1])
def test_rules_and_walks_execute_as_the_env(lag):
    """The rules' walk records, replayed action by action through the env's ``transition`` from the
    same bar and position, give the same trades, costs, PnL and positions (both lags, passive fills)."""
    from dataclasses import replace as dc_replace

    from rl_zerosync.evaluation.rules import RuleWalk, variants

    data = synthetic_market(2, 500, seed=4, features=FeatureConfig(warmup=32, median_window=64), ohlc=True)
    params = EnvParams(episode_len=40, window=8, execution_lag=lag)
    chosen = [v for v in variants() if v.rule == "momentum"][:3]
    walk = RuleWalk(data, params, {"wide": 3.0, "high_vol": 3.0, "low_vol": 0.0}, rule_variants=chosen)
    per = walk.run_replicas()
    tables = make_tables(data, params)
    passive_seen = 0
    for v, recs in enumerate(per):
        for a, rec in enumerate(recs):
            state = init_state(data, tables, torch.zeros(1, dtype=torch.int64))
            state = dc_replace(state, asset=torch.tensor([a]), t=torch.tensor([walk.walk.starts[a]]))
            for j, act in enumerate(rec["action"]):
                state, info = transition(data, tables, state, torch.tensor([int(act)]))
                got = (float(info.trade), float(info.cost), float(info.pnl), float(state.pos))
                want = (rec["trade"][j], rec["cost"][j], rec["pnl"][j], rec["position"][j])
                assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (v, a, j)
            passive_seen += int((rec["order_type"] > 0).sum())
    assert passive_seen > 0  # the routing sent LIMIT / PASSIVE orders through the range check
