"""``NumpyTradingEnv``: the trading env as a single-env gymnasium.Env in numpy / plain Python.

The gymnasium env users get by default under ``"rl_zerosync/Trading-v0"`` (and
:data:`~rl_zerosync.envs.gym_twin.ENV_ID_IMPORTABLE`): the maths of :mod:`rl_zerosync.envs.core`
(fills by order type and urgency, same-bar or next-bar execution with passive orders that must
trade through the next bar's range, costs, impact, PnL, risk penalty, the reward's turnover
penalty and volatility scaling, equity, drawdown stop, truncation, auto-reset) and its
counter-based RNG (:mod:`rl_zerosync.kernels.rng`) reproduced for one env, at about 10 us per step
instead of the ~1 ms of the torch reference :class:`~rl_zerosync.envs.gym_twin.TradingGymEnv` (a
batch of one through the torch step function, registered as ``"rl_zerosync/TradingTorch-v0"``).

Same constructor keys, spaces, ``reset(seed)`` / ``env_id`` semantics, ``info`` entries and
``metrics_vector()`` layout as :class:`~rl_zerosync.envs.gym_twin.TradingGymEnv` (see that module's
doc): a twin with ``env_id=i`` reset with seed ``s`` reproduces env ``i`` of
``BatchedTradingEnv(..., seed=s)`` step for step (asset and start-bar draws and stochastic fills
are the same integers; ``tests/test_numpy_twin.py``).

Exactness: the RNG is unsigned 32-bit integer maths (Python ints on the hot path, ``uint64``
arrays in :func:`random_bits`), so every draw is identical. The step maths runs on ``np.float32``
scalars in the order of the torch expressions, with the Python constants cast to float32 as torch
casts them, so observations, rewards and costs agree with the torch env to float32 rounding (bit
for bit in practice); the completed-episode accumulators are float64 as in torch. Routing
(``action_mode="routed"``) is the rule of the route kernel's torch twin
(:func:`rl_zerosync.kernels.reference.route`), evaluated once per bar at construction by that very
function, so the routed order type and urgency are the torch twin's.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch

from rl_zerosync.actions import NUM_ACTIONS, NUM_EXPOSURES
from rl_zerosync.envs.core import STREAM_FILL, STREAM_RESET, make_tables
from rl_zerosync.envs.episode_stats import ACTION_COUNT_OFFSET, COMPLETED_INDEX, METRICS_SIZE
from rl_zerosync.envs.gym_twin import observation_space_for, parse_env_config
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import REWARD_VOL_FLOOR, EnvParams
from rl_zerosync.kernels.rng import GOLDEN, HASH_MUL, MASK32, seed_key

__all__ = ["NumpyTradingEnv", "hash32", "combine", "random_bits", "reset_draw", "fill_uniform"]

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_VOL_FLOOR = np.float32(REWARD_VOL_FLOOR)
_ENV_STEPS = COMPLETED_INDEX["env_steps"]


# ------------------------------------------------------------------------------------------ RNG
# The same formulas as rl_zerosync.kernels.rng, for Python ints (the hot path: exact, arbitrary
# precision) and numpy uint64 arrays (every intermediate < 2**60: exact).
def hash32(x):
    """``hash32`` of :mod:`rl_zerosync.kernels.rng` (Python int or ``uint64`` array in ``[0, 2**32)``)."""
    x = (((x >> 16) ^ x) * HASH_MUL) & MASK32
    x = (((x >> 16) ^ x) * HASH_MUL) & MASK32
    return (x >> 16) ^ x


def combine(h, v):
    """``combine`` of :mod:`rl_zerosync.kernels.rng`."""
    return hash32(h ^ ((v + GOLDEN + (h << 6) + (h >> 2)) & MASK32))


def _bits(key: int, step: int, stream: int, idx: int) -> int:
    """32-bit word ``bits(seed, step, stream, idx)`` of one index (``key = seed_key(seed)``): four
    :func:`combine` calls, inlined (the per-step cost of the stochastic fills)."""
    m, g, mul = MASK32, GOLDEN, HASH_MUL
    for v in (step & m, (step >> 32) & m, stream, idx & m):
        x = key ^ ((v + g + (key << 6) + (key >> 2)) & m)
        x = (((x >> 16) ^ x) * mul) & m
        x = (((x >> 16) ^ x) * mul) & m
        key = (x >> 16) ^ x
    return key


def random_bits(seed: int, step: int, stream: int, idx) -> Any:
    """``random_bits`` of :mod:`rl_zerosync.kernels.rng` in numpy: ``idx`` an int or an integer
    array (returns ``uint64`` words in ``[0, 2**32)``, or a Python int for an int ``idx``)."""
    if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        return _bits(seed_key(seed), int(step), int(stream), int(idx))
    step = int(step)
    h = combine(seed_key(seed), step & MASK32)
    h = combine(h, (step >> 32) & MASK32)
    h = combine(h, int(stream))
    idx = np.asarray(idx).astype(np.uint64) & np.uint64(MASK32)
    return combine(np.uint64(h), idx)


def reset_draw(seed: int, step: int, env_id, start_lo, start_span) -> tuple:
    """(asset, start bar) of a reset at RNG step ``step`` (:func:`rl_zerosync.envs.core.reset_state`):
    ``w = bits(seed, step, STREAM_RESET, env_id)``, asset ``((w >> 8) * A) >> 24``, start
    ``start_lo[a] + ((hash32(w ^ GOLDEN) >> 8) * start_span[a]) >> 24``. ``env_id`` an int (ints
    back) or an array (``int64`` arrays back); ``start_lo``/``start_span`` per asset."""
    lo = np.asarray(start_lo, dtype=np.int64)
    span = np.asarray(start_span, dtype=np.int64)
    word = random_bits(seed, step, STREAM_RESET, env_id)
    if isinstance(word, int):
        asset = ((word >> 8) * len(lo)) >> 24
        w2 = hash32(word ^ GOLDEN)
        return asset, int(lo[asset]) + (((w2 >> 8) * int(span[asset])) >> 24)
    word = word.astype(np.int64)
    asset = ((word >> 8) * len(lo)) >> 24
    w2 = hash32(word ^ GOLDEN)
    return asset, lo[asset] + (((w2 >> 8) * span[asset]) >> 24)


def fill_uniform(seed: int, step: int, env_id) -> Any:
    """The stochastic-fill uniform of :func:`rl_zerosync.envs.core.transition` (float32 in [0, 1))."""
    word = random_bits(seed, step, STREAM_FILL, env_id)
    return (np.asarray(word, dtype=np.int64) >> 8).astype(np.float32) * np.float32(2.0**-24)


# ------------------------------------------------------------------------------------------ env
class NumpyTradingEnv(gym.Env):
    """One trading env in numpy (see the module doc; keys as :class:`TradingGymEnv`)."""

    metadata = {"render_modes": []}

    def __init__(self, env_config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__()
        c = parse_env_config(env_config, kwargs, "NumpyTradingEnv")
        self.data: MarketData = c["data"]
        self.params: EnvParams = c["params"]
        self.action_mode: str = c["action_mode"]
        self.routing: dict[str, float] = c["routing"]
        self._fixed_env_id = c["env_id"]
        p = self.params
        tables = make_tables(self.data, p)  # validates episode lengths; construction-time host reads
        self.observation_space = observation_space_for(self.data, p)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS if self.action_mode == "flat" else NUM_EXPOSURES)
        self._n_actions = int(self.action_space.n)

        d = self.data

        def rows(t: torch.Tensor) -> list[np.ndarray]:
            arr = t.detach().cpu().numpy().astype(np.float32, copy=False)  # host read: construction, CPU data
            return [np.ascontiguousarray(arr[a]) for a in range(arr.shape[0])]

        self._ret_norm, self._obs_spread, self._obs_vol = rows(d.ret_norm), rows(d.obs_spread), rows(d.obs_vol)
        self._spread, self._vol, self._ret = rows(d.spread), rows(d.vol), rows(d.ret)
        self._close = rows(d.close)
        self._lag = p.execution_lag
        self._has_range = tables.has_range
        self._open = rows(d.open) if tables.has_open else self._close  # MARKET at the next open, else close
        self._high = rows(d.high) if tables.has_range else None
        self._low = rows(d.low) if tables.has_range else None
        self._resting_fee = np.float32(p.fee - p.maker_rebate_bps * 1e-4)
        self._num_assets = tables.num_assets
        self._start_lo = [int(v) for v in tables.start_lo.tolist()]  # host read: construction
        self._start_span = [int(v) for v in tables.start_span.tolist()]  # host read: construction
        self._ppy_sqrt = tables.periods_per_year ** 0.5  # the same Python expression as core._accumulate
        # float32 tables and constants, cast as torch casts them (tensor(dtype=float32); scalars -> f32)
        levels = [np.float32(v) for v in tables.levels.numpy()]  # host read: construction
        fill = [np.float32(v) for v in tables.fill.numpy()]  # host read: construction
        sfrac = [np.float32(v) for v in tables.spread_frac.numpy()]  # host read: construction
        impact = [np.float32(v) for v in tables.impact.numpy()]  # host read: construction
        # order type executed: the action's, or MARKET where next-bar execution has no high/low
        kind = [(a // 3) % 3 if p.execution_lag == 0 or tables.has_range else 0 for a in range(NUM_ACTIONS)]
        self._decode = tuple(
            (levels[a // 9], fill[kind[a] * 3 + a % 3], float(fill[kind[a] * 3 + a % 3]) * 2.0**24,
             sfrac[kind[a] * 3 + a % 3], impact[kind[a] * 3 + a % 3], 2 + kind[a])
            for a in range(NUM_ACTIONS)
        )
        self._fee = np.float32(p.fee)
        self._risk = np.float32(p.risk_penalty)
        self._scale = np.float32(p.reward_scale)
        self._turnover = np.float32(p.turnover_penalty) if p.turnover_penalty > 0.0 else None
        self._vol_scaled = p.reward_vol_scaled
        self._stop = np.float32(p.stop_drawdown) if p.stop_drawdown > 0.0 else None
        self._stochastic = p.fill_mode == "stochastic"
        self._k = p.window
        self._dim = p.observation_dim
        self._len = p.episode_len
        # episode progress j / episode_len, computed by the torch expression of core.observe
        self._progress = [np.float32(v) for v in
                          (torch.arange(p.episode_len + 1, dtype=torch.float32) / float(p.episode_len)).numpy()]  # host read: construction
        self._route_ou: list[list[int]] | None = None
        if self.action_mode == "routed":
            self._route_ou = self._route_table()

        # state (set by reset)
        self._started = False
        self._seed = p.seed
        self._key = 0
        self._env_id = 0
        self._counter = 0
        self._asset = 0
        self._t = 0
        self._step = 0
        self._pos = self._equity = self._peak = self._max_dd = _F0
        self._ep = [_F0] * 8
        self._acc = [0.0] * METRICS_SIZE

    def _route_table(self) -> list[list[int]]:
        """Routed ``order_type * 3 + urgency`` of every bar of every asset, by the route kernel's twin."""
        from rl_zerosync.kernels.reference import route

        d = self.data
        flat = [t.reshape(-1) for t in (d.spread, d.median_spread, d.vol, d.median_vol)]
        out = torch.empty(flat[0].shape[0], dtype=torch.int64)
        route(torch.zeros_like(out), *flat, out, **self.routing)
        return [row.tolist() for row in out.reshape(d.num_assets, d.num_bars)]  # host read: construction (route table)

    # ---------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None or not self._started:
            if seed is not None:
                self._seed = replace(self.params, seed=int(seed)).seed  # validated as EnvParams.seed
            env_id = self._fixed_env_id
            if env_id is None:
                env_id = 0 if seed is not None else int(self.np_random.integers(0, 2**24))
            self._key = seed_key(self._seed)
            self._env_id = env_id
            self._counter = 0
            self._acc = [0.0] * METRICS_SIZE
            self._started = True
        self._reset_episode()
        return self._observe(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self._started:
            raise ValueError("NumpyTradingEnv.step called before reset()")
        if type(action) is int or isinstance(action, np.integer):
            a = int(action)
            ok = 0 <= a < self._n_actions
        else:
            ok = self.action_space.contains(action)
            a = int(action) if ok else -1
        if not ok:
            raise ValueError(f"NumpyTradingEnv.step: expected an action in 0..{self._n_actions - 1}, got {action!r}")
        asset, t = self._asset, self._t
        if self._route_ou is not None:
            a = a * 9 + self._route_ou[asset][t]
        level, fill, fill_thresh, sfrac, impact, cost_col = self._decode[a]
        self._counter = counter = self._counter + 1
        if self._stochastic:
            # uniform24 < fill  <=>  bits24 < fill * 2**24 (both sides exact)
            fill = _F1 if (_bits(self._key, counter, STREAM_FILL, self._env_id) >> 8) < fill_thresh else _F0
        if self._lag == 1:
            trade, pos, size, cost, pnl, vol_t = self._next_bar(asset, t, level, fill, sfrac, impact, cost_col)
        else:
            pos = self._pos
            trade = fill * (level - pos)
            pos = pos + trade
            spread_t = self._spread[asset][t]
            vol_t = self._vol[asset][t]
            size = abs(trade)
            cost = size * ((self._fee + sfrac * spread_t) + impact * vol_t * size)
            pnl = pos * self._ret[asset][t + 1]
        net = pnl - cost
        pv = pos * vol_t
        shaped = net - self._risk * (pv * pv)
        if self._turnover is not None:
            shaped = shaped - self._turnover * size
        reward = self._scale * shaped
        if self._vol_scaled:
            reward = reward / (vol_t if vol_t >= _VOL_FLOOR else _VOL_FLOOR)
        equity = self._equity * (_F1 + net)
        if equity < _F0:
            equity = _F0
        peak = self._peak if self._peak >= equity else equity
        dd = _F1 - equity / peak
        max_dd = self._max_dd if self._max_dd >= dd else dd
        step = self._step + 1
        terminated = bool(equity <= _F0) or (self._stop is not None and bool(dd >= self._stop))
        truncated = step >= self._len and not terminated
        ep = self._ep
        ep[0] += reward
        ep[1] += pnl
        ep[cost_col] += cost
        ep[5] += size
        ep[6] += net
        ep[7] += net * net
        acc = self._acc
        acc[_ENV_STEPS] += 1.0
        acc[ACTION_COUNT_OFFSET + a] += 1.0
        self._pos, self._equity, self._peak, self._max_dd = pos, equity, peak, max_dd
        self._t, self._step = t + 1, step
        obs = self._observe()
        info = {"position": float(pos), "equity": float(equity), "asset": asset, "bar": t + 1,
                "action": a, "trade": float(trade), "cost": float(cost), "pnl": float(pnl)}
        if terminated or truncated:
            self._complete_episode()
            self._reset_episode()  # auto-reset as the batched env (a later reset() draws the same)
        return obs, float(reward), terminated, truncated, info

    # ---------------------------------------------------------------- internals
    def _next_bar(self, asset: int, t: int, level, fill, sfrac, impact, cost_col: int) -> tuple:
        """:func:`rl_zerosync.envs.core.execute_next_bar` for this env, in its float32 order:
        ``(trade, position, |trade|, cost, pnl, vol_t)``."""
        pos0 = self._pos
        want = level - pos0
        close_t, close_n = self._close[asset][t], self._close[asset][t + 1]
        spread_n, vol_n = self._spread[asset][t + 1], self._vol[asset][t + 1]
        market_px = self._open[asset][t + 1]
        unit = self._fee + sfrac * spread_n
        price = market_px
        if self._has_range and cost_col > 2:  # LIMIT / PASSIVE rest at L until bar t+1 trades through it
            side = np.sign(want)
            limit_px = close_t * (_F1 + side * sfrac * self._spread[asset][t])
            crossed = self._low[asset][t + 1] <= limit_px if want > _F0 else self._high[asset][t + 1] >= limit_px
            if not crossed:
                fill = _F0
            price = limit_px
            unit = self._resting_fee
        trade = fill * want
        pos = pos0 + trade
        size = abs(trade)
        cost = size * (unit + impact * vol_n * size)
        pnl = pos0 * self._ret[asset][t + 1] + trade * (close_n / price - _F1)
        return trade, pos, size, cost, pnl, self._vol[asset][t]

    def _reset_episode(self) -> None:
        """New asset and start bar from the RNG at the current step counter (core.reset_state)."""
        word = _bits(self._key, self._counter, STREAM_RESET, self._env_id)
        asset = ((word >> 8) * self._num_assets) >> 24
        w2 = hash32(word ^ GOLDEN)
        self._asset = asset
        self._t = self._start_lo[asset] + (((w2 >> 8) * self._start_span[asset]) >> 24)
        self._step = 0
        self._pos, self._equity, self._peak, self._max_dd = _F0, _F1, _F1, _F0
        self._ep = [_F0] * 8

    def _complete_episode(self) -> None:
        """Add the ended episode to the float64 accumulators (core._accumulate, one env)."""
        ep = self._ep
        length = float(self._step)
        mean = float(ep[6]) / length
        var = float(ep[7]) / length - mean * mean
        std = math.sqrt(var if var > 0.0 else 0.0)
        sharpe = (mean / std if std > 1e-12 else 0.0) * self._ppy_sqrt
        acc, ci = self._acc, COMPLETED_INDEX
        acc[ci["episodes"]] += 1.0
        acc[ci["length_sum"]] += length
        acc[ci["return_sum"]] += float(self._equity) - 1.0
        acc[ci["reward_sum"]] += float(ep[0])
        acc[ci["pnl_sum"]] += float(ep[1])
        acc[ci["cost_market_sum"]] += float(ep[2])
        acc[ci["cost_limit_sum"]] += float(ep[3])
        acc[ci["cost_passive_sum"]] += float(ep[4])
        acc[ci["turnover_sum"]] += float(ep[5])
        acc[ci["max_drawdown_sum"]] += float(self._max_dd)
        acc[ci["sharpe_sum"]] += sharpe

    def _observe(self) -> np.ndarray:
        k, a, t = self._k, self._asset, self._t
        obs = np.empty(self._dim, dtype=np.float32)
        obs[:k] = self._ret_norm[a][t - k + 1:t + 1]
        obs[k] = self._pos
        obs[k + 1] = self._obs_spread[a][t]
        obs[k + 2] = self._obs_vol[a][t]
        obs[k + 3] = self._progress[self._step]
        return obs

    def _info(self) -> dict[str, Any]:
        return {"position": float(self._pos), "equity": float(self._equity), "asset": self._asset, "bar": self._t}

    # ---------------------------------------------------------------- extras
    @property
    def env_id(self) -> int:
        """RNG index of this env (fixed by ``env_id``, 0 after a seeded reset, else random)."""
        return self._env_id

    @property
    def rng_step(self) -> int:
        """The RNG step counter (env steps since the last seeded/first reset)."""
        return self._counter

    def metrics_vector(self) -> np.ndarray:
        """Completed-episode accumulators and action counts (float64, the batched env's layout)."""
        if not self._started:
            raise ValueError("NumpyTradingEnv.metrics_vector called before reset()")
        return np.array(self._acc, dtype=np.float64)
