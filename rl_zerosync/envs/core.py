"""The batched trading env as pure functions of (data, params, state, actions).

Timing of one step of env ``i`` at bar ``t = start + j`` (``j`` = steps done in the episode):

1. The agent has seen the observation of bar ``t`` (features of bars ``<= t`` only).
2. The action (factored index) sets the target position ``levels[e]``. With ``execution_lag: 0``
   the order executes at the close of bar ``t`` with fill fraction ``f[o, u]`` (expected mode) or
   all-or-nothing with probability ``f[o, u]`` (stochastic mode, uniform ``u24(seed, counter, STREAM_FILL, env_id)``):
   ``q = fill * (target - pos)``, ``pos' = pos + q``.
3. ``cost = |q| * (fee + spread_frac[o, u] * spread_t + impact[o, u] * vol_t * |q|)``;
   ``pnl = pos' * ret[t+1]`` (simple return from the close of ``t`` to the close of ``t+1``);
   ``risk = risk_penalty * pos'**2 * vol_t**2``; ``reward = reward_scale * (pnl - cost - risk -
   turnover_penalty * |q|)``, divided by ``max(vol_t, REWARD_VOL_FLOOR)`` with ``reward_vol_scaled``
   (``vol_t``: EWMA volatility of bars up to ``t``). The last two shape the reward only.
4. Equity ``E' = max(E * (1 + pnl - cost), 0)``. The env moves to bar ``t+1``; the episode is
   truncated after ``episode_len`` steps and terminated when equity is 0 or the drawdown reaches
   ``stop_drawdown`` (when > 0). Ended envs are reset on the device (``torch.where``) to a new asset
   and start bar drawn from the counter-based RNG (:func:`reset_state`: one word
   ``bits(seed, counter, STREAM_RESET, env_id)`` and a hash of it), position 0, equity 1.

With ``execution_lag: 1`` (the default; :func:`execute_next_bar`) the order decided at ``t`` executes on
bar ``t+1``, whose prices the observation of ``t`` never holds. The want is ``w = target - pos``,
``side = sign(w)``:

* MARKET fills ``q = w`` at ``X = open[t+1]`` (``close[t+1]`` without opens) and costs
  ``|q| * (fee + spread_frac[0, u] * spread_{t+1} + impact[0, u] * vol_{t+1} * |q|)``.
* LIMIT / PASSIVE rest at ``L = close_t * (1 + side * spread_frac[o, u] * spread_t)`` and fill
  ``q = f * w`` (expected mode; stochastic: ``w`` with probability ``f``) only when bar ``t+1``
  trades through ``L`` (``low[t+1] <= L`` for a buy, ``high[t+1] >= L`` for a sell), else ``q = 0``;
  ``X = L`` and the cost is ``|q| * (fee - rebate + impact[o, u] * vol_{t+1} * |q|)`` with ``rebate =
  maker_rebate_bps * 1e-4``. A gap through ``L`` still fills at ``L`` (no price improvement), and
  what did not fill is cancelled at the end of bar ``t+1`` (the next decision sends a new order).
  Without high/low in the data they execute as MARKET (same urgency).
* ``pnl = pos * ret[t+1] + q * (close[t+1] / X - 1)``: the old position earns the whole bar, the
  traded part from its fill price (for ``X = close_t`` this is the same-bar ``pos' * ret[t+1]``).
  The risk term uses ``vol_t`` as with lag 0.

Positions are fractions of equity, held at constant weight over the bar. The observation of bar
``t`` is ``[ret_norm[t-K+1..t], pos, obs_spread[t], obs_vol[t], j / episode_len]``.
None of these functions reads a device value on the host.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rl_zerosync.actions import NUM_ACTIONS, decode_t
from rl_zerosync.envs.episode_stats import (
    COMPLETED_INDEX, EP_FIELDS, EP_INDEX, METRICS_SIZE, NUM_COMPLETED,
)
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import REWARD_VOL_FLOOR, EnvParams
from rl_zerosync.kernels.rng import GOLDEN, MASK32, STREAM_USER_BASE, hash32, random_bits, uniform24

STREAM_RESET = STREAM_USER_BASE + 0
STREAM_FILL = STREAM_USER_BASE + 2


@dataclass(frozen=True, eq=False)
class EnvTables:
    """``EnvParams`` compiled to device tensors for one ``MarketData`` (built once, host reads here)."""

    params: EnvParams
    levels: torch.Tensor       # f32[5]
    fill: torch.Tensor         # f32[9], index order_type * 3 + urgency
    spread_frac: torch.Tensor  # f32[9]
    impact: torch.Tensor       # f32[9]
    start_lo: torch.Tensor     # i64[A] first allowed start bar
    start_span: torch.Tensor   # i64[A] number of allowed start bars
    win_offsets: torch.Tensor  # i64[K] = -K+1 .. 0
    order_ids: torch.Tensor    # i64[3] = 0, 1, 2
    num_bars: int
    num_assets: int
    periods_per_year: float
    has_open: bool = False     # data.open is not None (MARKET at the next open)
    has_range: bool = False    # data.high / low are not None (passive orders must trade through)
    # Members of a population stepped as one batch (envs.population_env); absent for one run:
    seed_keys: torch.Tensor | None = None   # i64[N] each env's RNG seed key (rng.seed_keys), else params.seed
    asset_base: torch.Tensor | None = None  # i64[N] first asset row of each env's member
    member_assets: int = 0                  # assets per member (reset draws among these), 0: num_assets
    groups: int = 1                         # members: acc is f64[groups, METRICS_SIZE] when > 1


def env_seed(tables: EnvTables) -> int | torch.Tensor:
    """The RNG seed of the envs' draws: ``params.seed``, or per-env seed keys (a population's batch)."""
    return tables.seed_keys if tables.seed_keys is not None else tables.params.seed


def make_tables(data: MarketData, params: EnvParams) -> EnvTables:
    """Compile ``params`` for ``data`` on its device; ValueError naming an asset too short for episodes."""
    dev = data.device
    lengths = data.length.cpu().tolist()  # host read: construction-time validation
    starts = data.valid_start.cpu().tolist()  # host read: construction-time validation
    lo, span = [], []
    for a, (n, vs) in enumerate(zip(lengths, starts)):
        first = max(vs, params.window)
        last = n - 1 - params.episode_len
        if last < first:
            raise ValueError(
                f"env: asset {data.asset_names[a]!r} (segment {data.segment!r}) has {n} bars with the first "
                f"tradable bar at {first}; an episode of episode_len={params.episode_len} needs at least "
                f"{first + params.episode_len + 1} bars: lower EnvParams.episode_len or use more data"
            )
        lo.append(first)
        span.append(last - first + 1)

    def flat(table) -> torch.Tensor:
        return torch.tensor([v for row in table for v in row], dtype=torch.float32, device=dev)

    return EnvTables(
        params=params,
        levels=torch.tensor(params.exposure_levels, dtype=torch.float32, device=dev),
        fill=flat(params.fill_prob),
        spread_frac=flat(params.spread_frac),
        impact=flat(params.impact),
        start_lo=torch.tensor(lo, dtype=torch.int64, device=dev),
        start_span=torch.tensor(span, dtype=torch.int64, device=dev),
        win_offsets=torch.arange(-params.window + 1, 1, dtype=torch.int64, device=dev),
        order_ids=torch.arange(3, dtype=torch.int64, device=dev),
        num_bars=data.num_bars,
        num_assets=data.num_assets,
        periods_per_year=data.periods_per_year,
        has_open=data.open is not None,
        has_range=data.high is not None and data.low is not None,
    )


@dataclass(frozen=True, eq=False)
class EnvState:
    """Device state of N envs (all tensors on the data's device)."""

    env_id: torch.Tensor   # i64[N] RNG index of each env
    asset: torch.Tensor    # i64[N]
    t: torch.Tensor        # i64[N] current bar
    step: torch.Tensor     # i64[N] steps done in the episode
    pos: torch.Tensor      # f32[N] position (fraction of equity)
    equity: torch.Tensor   # f32[N] episode equity, starts at 1
    peak: torch.Tensor     # f32[N] running max of equity
    max_dd: torch.Tensor   # f32[N] running max drawdown
    ep: torch.Tensor       # f32[N, len(EP_FIELDS)] running episode sums
    acc: torch.Tensor      # f64[METRICS_SIZE] completed-episode sums + action counts
    counter: torch.Tensor  # i64[1] env steps taken by the batch (RNG step counter)


@dataclass(frozen=True, eq=False)
class StepInfo:
    """Per-env components of one transition (before auto-reset)."""

    trade: torch.Tensor
    cost: torch.Tensor
    pnl: torch.Tensor
    net: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    order_type: torch.Tensor


def as_tables(data: MarketData, params: EnvParams | EnvTables) -> EnvTables:
    """``params`` compiled for ``data`` (pass ``EnvTables`` on hot paths: building them reads the host)."""
    return params if isinstance(params, EnvTables) else make_tables(data, params)


def init_state(data: MarketData, params: EnvParams | EnvTables, env_ids: torch.Tensor) -> EnvState:
    """Fresh state for envs ``env_ids`` (i64[N]), all reset with RNG step 0."""
    tables = as_tables(data, params)
    dev = data.device
    env_ids = env_ids.to(device=dev, dtype=torch.int64)
    n = env_ids.shape[0]
    zi = torch.zeros(n, dtype=torch.int64, device=dev)
    zf = torch.zeros(n, dtype=torch.float32, device=dev)
    blank = EnvState(
        env_id=env_ids, asset=zi, t=zi, step=zi, pos=zf, equity=zf + 1.0, peak=zf + 1.0, max_dd=zf,
        ep=torch.zeros(n, len(EP_FIELDS), dtype=torch.float32, device=dev),
        acc=torch.zeros(METRICS_SIZE, dtype=torch.float64, device=dev),
        counter=torch.zeros(1, dtype=torch.int64, device=dev),
    )
    return reset_state(data, tables, torch.ones(n, dtype=torch.bool, device=dev), blank, blank.counter)


def reset_state(
    data: MarketData,
    params: EnvParams | EnvTables,
    env_ids_mask: torch.Tensor,
    state: EnvState,
    key: torch.Tensor | int,
) -> EnvState:
    """Reset the envs where ``env_ids_mask`` (bool[N]) is set; ``key`` is the RNG step (i64[1] or int).

    With ``w = random_bits(seed, key, STREAM_RESET, env_id)`` and ``w' = hash32(w ^ GOLDEN)``, the
    new asset is ``((w >> 8) * A) >> 24`` and the start bar ``start_lo[a] + ((w' >> 8) * start_span[a]) >> 24``.
    """
    tables = as_tables(data, params)
    m = env_ids_mask
    word = random_bits(env_seed(tables), key, STREAM_RESET, state.env_id)
    asset = ((word >> 8) * (tables.member_assets or tables.num_assets)) >> 24
    if tables.asset_base is not None:
        asset = asset + tables.asset_base
    word2 = hash32(word ^ GOLDEN) & MASK32
    start = tables.start_lo[asset] + (((word2 >> 8) * tables.start_span[asset]) >> 24)
    zero = torch.zeros_like(state.pos)
    one = torch.ones_like(state.pos)
    return replace(
        state,
        asset=torch.where(m, asset, state.asset),
        t=torch.where(m, start, state.t),
        step=torch.where(m, torch.zeros_like(state.step), state.step),
        pos=torch.where(m, zero, state.pos),
        equity=torch.where(m, one, state.equity),
        peak=torch.where(m, one, state.peak),
        max_dd=torch.where(m, zero, state.max_dd),
        ep=torch.where(m[:, None], torch.zeros_like(state.ep), state.ep),
    )


def observe(data: MarketData, params: EnvParams | EnvTables, state: EnvState) -> torch.Tensor:
    """Observation f32[N, K + 4] of each env's current bar (see the module doc)."""
    tables = as_tables(data, params)
    idx = state.asset * tables.num_bars + state.t
    rn = data.ret_norm.reshape(-1)[idx[:, None] + tables.win_offsets]
    extra = torch.stack(
        (
            state.pos,
            data.obs_spread.reshape(-1)[idx],
            data.obs_vol.reshape(-1)[idx],
            state.step.to(torch.float32) / float(tables.params.episode_len),
        ),
        dim=1,
    )
    return torch.cat((rn, extra), dim=1)


def route_inputs(data: MarketData, state: EnvState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(spread, median_spread, vol, median_vol) f32[N] at each env's current bar."""
    idx = state.asset * data.num_bars + state.t
    return (
        data.spread.reshape(-1)[idx], data.median_spread.reshape(-1)[idx],
        data.vol.reshape(-1)[idx], data.median_vol.reshape(-1)[idx],
    )


def execute(
    data: MarketData, tables: EnvTables, state: EnvState, actions: torch.Tensor, counter: torch.Tensor,
    cost_scale: torch.Tensor | None = None, force_market: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """Execution of ``actions`` decided at each env's bar (steps 2-3 of the module doc):
    ``(trade q, |q|, new position, cost, pnl, order type, vol_t, fill price X)`` (``X = close_t`` with
    ``execution_lag: 0``). Reads ``state.asset``, ``t``, ``pos`` and ``env_id`` only; ``counter`` is
    the RNG step of the stochastic fills.

    ``cost_scale`` (f32[N], optional) multiplies each env's cost; ``force_market`` (bool[N],
    optional) executes those envs' orders as MARKET of the same urgency (the sensitivity walks of
    :mod:`rl_zerosync.evaluation.sensitivity`). ``execution_lag`` 1 goes to :func:`execute_next_bar`."""
    p = tables.params
    if p.execution_lag == 1:
        return execute_next_bar(data, tables, state, actions, counter, cost_scale, force_market)
    e, o, u = decode_t(actions)
    if force_market is not None:
        o = torch.where(force_market, torch.zeros_like(o), o)
    ou = o * 3 + u
    idx = state.asset * tables.num_bars + state.t
    fill = tables.fill[ou]
    if p.fill_mode == "stochastic":
        fill = (uniform24(env_seed(tables), counter, STREAM_FILL, state.env_id) < fill).to(torch.float32)
    trade = fill * (tables.levels[e] - state.pos)
    pos = state.pos + trade
    spread_t = data.spread.reshape(-1)[idx]
    vol_t = data.vol.reshape(-1)[idx]
    size = trade.abs()
    cost = size * (p.fee + tables.spread_frac[ou] * spread_t + tables.impact[ou] * vol_t * size)
    if cost_scale is not None:
        cost = cost * cost_scale
    pnl = pos * data.ret.reshape(-1)[idx + 1]
    return trade, size, pos, cost, pnl, o, vol_t, data.close.reshape(-1)[idx]


def execute_next_bar(
    data: MarketData, tables: EnvTables, state: EnvState, actions: torch.Tensor, counter: torch.Tensor,
    cost_scale: torch.Tensor | None = None, force_market: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """:func:`execute` with ``execution_lag: 1``: the order decided at bar ``t`` fills on bar ``t+1``
    (module doc). No host read and no branch on tensor values (``torch.where``): CUDA-graph safe."""
    p = tables.params
    e, o, u = decode_t(actions)
    if force_market is not None:
        o = torch.where(force_market, torch.zeros_like(o), o)
    if not tables.has_range:  # static: passive orders cannot be checked against a range -> MARKET
        o = torch.zeros_like(o)
    ou = o * 3 + u
    idx = state.asset * tables.num_bars + state.t
    nxt = idx + 1
    want = tables.levels[e] - state.pos
    fill = tables.fill[ou]
    if p.fill_mode == "stochastic":
        fill = (uniform24(env_seed(tables), counter, STREAM_FILL, state.env_id) < fill).to(torch.float32)
    close_t = data.close.reshape(-1)[idx]
    close_n = data.close.reshape(-1)[nxt]
    spread_n = data.spread.reshape(-1)[nxt]
    vol_n = data.vol.reshape(-1)[nxt]
    market_px = data.open.reshape(-1)[nxt] if tables.has_open else close_n
    unit = p.fee + tables.spread_frac[ou] * spread_n
    price = market_px
    if tables.has_range:
        resting = o > 0
        side = torch.sign(want)
        limit_px = close_t * (1.0 + side * tables.spread_frac[ou] * data.spread.reshape(-1)[idx])
        crossed = torch.where(want > 0, data.low.reshape(-1)[nxt] <= limit_px,
                              data.high.reshape(-1)[nxt] >= limit_px)
        fill = torch.where(resting & ~crossed, torch.zeros_like(fill), fill)
        price = torch.where(resting, limit_px, market_px)
        unit = torch.where(resting, torch.full_like(unit, p.fee - p.maker_rebate_bps * 1e-4), unit)
    trade = fill * want
    pos = state.pos + trade
    size = trade.abs()
    cost = size * (unit + tables.impact[ou] * vol_n * size)
    if cost_scale is not None:
        cost = cost * cost_scale
    pnl = state.pos * data.ret.reshape(-1)[nxt] + trade * (close_n / price - 1.0)
    return trade, size, pos, cost, pnl, o, data.vol.reshape(-1)[idx], price


def transition(
    data: MarketData, params: EnvParams | EnvTables, state: EnvState, actions: torch.Tensor
) -> tuple[EnvState, StepInfo]:
    """Apply ``actions`` (i64[N], factored 0..44) without auto-reset; see the module doc."""
    tables = as_tables(data, params)
    p = tables.params
    counter = state.counter + 1
    trade, size, pos, cost, pnl, o, vol_t, _ = execute(data, tables, state, actions, counter)
    net = pnl - cost
    risk = p.risk_penalty * (pos * vol_t).square()
    shaped = net - risk
    if p.turnover_penalty > 0.0:  # static: 0 keeps the earlier reward bit for bit
        shaped = shaped - p.turnover_penalty * size
    reward = p.reward_scale * shaped
    if p.reward_vol_scaled:
        reward = reward / vol_t.clamp_min(REWARD_VOL_FLOOR)
    equity = (state.equity * (1.0 + net)).clamp_min(0.0)
    peak = torch.maximum(state.peak, equity)
    dd = 1.0 - equity / peak
    max_dd = torch.maximum(state.max_dd, dd)
    step = state.step + 1
    terminated = equity <= 0.0
    if p.stop_drawdown > 0.0:
        terminated = terminated | (dd >= p.stop_drawdown)
    truncated = (step >= p.episode_len) & ~terminated
    onehot_o = (o[:, None] == tables.order_ids).to(torch.float32)
    ep = state.ep + torch.cat(
        (
            torch.stack((reward, pnl), dim=1),
            cost[:, None] * onehot_o,
            torch.stack((size, net, net.square()), dim=1),
        ),
        dim=1,
    )
    done = terminated | truncated
    acc = _accumulate(tables, state.acc, done, step, equity, max_dd, ep, actions)
    new = replace(
        state, t=state.t + 1, step=step, pos=pos, equity=equity, peak=peak, max_dd=max_dd, ep=ep,
        acc=acc, counter=counter,
    )
    info = StepInfo(trade=trade, cost=cost, pnl=pnl, net=net, reward=reward, terminated=terminated,
                    truncated=truncated, order_type=o)
    return new, info


def _accumulate(
    tables: EnvTables, acc: torch.Tensor, done: torch.Tensor, step: torch.Tensor, equity: torch.Tensor,
    max_dd: torch.Tensor, ep: torch.Tensor, actions: torch.Tensor,
) -> torch.Tensor:
    """Add the ended episodes' totals and this step's action counts to the f64 accumulator."""
    length = step.to(torch.float64)
    ep64 = ep.to(torch.float64)
    mean = ep64[:, EP_INDEX["net_sum"]] / length
    var = (ep64[:, EP_INDEX["net_sumsq"]] / length - mean.square()).clamp_min(0.0)
    std = var.sqrt()
    sharpe = torch.where(std > 1e-12, mean / std.clamp_min(1e-12), torch.zeros_like(std))
    sharpe = sharpe * (tables.periods_per_year ** 0.5)
    cols = [None] * (NUM_COMPLETED - 1)  # every field but env_steps
    ci = COMPLETED_INDEX
    cols[ci["episodes"]] = torch.ones_like(length)
    cols[ci["length_sum"]] = length
    cols[ci["return_sum"]] = equity.to(torch.float64) - 1.0
    cols[ci["reward_sum"]] = ep64[:, EP_INDEX["reward"]]
    cols[ci["pnl_sum"]] = ep64[:, EP_INDEX["pnl"]]
    cols[ci["cost_market_sum"]] = ep64[:, EP_INDEX["cost_market"]]
    cols[ci["cost_limit_sum"]] = ep64[:, EP_INDEX["cost_limit"]]
    cols[ci["cost_passive_sum"]] = ep64[:, EP_INDEX["cost_passive"]]
    cols[ci["turnover_sum"]] = ep64[:, EP_INDEX["turnover"]]
    cols[ci["max_drawdown_sum"]] = max_dd.to(torch.float64)
    cols[ci["sharpe_sum"]] = sharpe
    vals = torch.stack(cols, dim=1) * done.to(torch.float64)[:, None]
    if tables.groups > 1:
        return acc + _accumulate_groups(tables.groups, vals, actions)
    completed = torch.cat((vals.sum(dim=0), torch.full((1,), float(done.shape[0]), dtype=torch.float64, device=acc.device)))
    counts = torch.zeros(NUM_ACTIONS, dtype=torch.float64, device=acc.device).index_add_(
        0, actions, torch.ones_like(actions, dtype=torch.float64)
    )
    return acc + torch.cat((completed, counts))


def _accumulate_groups(groups: int, vals: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """:func:`_accumulate`'s increment per member of a population batch (``groups`` members of
    ``n`` consecutive envs each): f64[groups, METRICS_SIZE], row k what member k's own envs add."""
    n = vals.shape[0] // groups
    sums = vals.view(groups, n, vals.shape[1]).sum(dim=1)
    steps = torch.full((groups, 1), float(n), dtype=torch.float64, device=vals.device)
    counts = torch.zeros(groups, NUM_ACTIONS, dtype=torch.float64, device=vals.device).scatter_add_(
        1, actions.view(groups, n), torch.ones(groups, n, dtype=torch.float64, device=vals.device))
    return torch.cat((sums, steps, counts), dim=1)


def step_with_info(
    data: MarketData, params: EnvParams | EnvTables, state: EnvState, actions: torch.Tensor
) -> tuple[EnvState, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, EnvState, StepInfo]:
    """:func:`env_step` plus the pre-reset state and the :class:`StepInfo` of the transition."""
    tables = as_tables(data, params)
    moved, info = transition(data, tables, state, actions)
    final_obs = observe(data, tables, moved)
    done = info.terminated | info.truncated
    new = reset_state(data, tables, done, moved, moved.counter)
    obs = torch.where(done[:, None], observe(data, tables, new), final_obs)
    return new, obs, info.reward, info.terminated, info.truncated, final_obs, moved, info


def env_step(
    data: MarketData, params: EnvParams | EnvTables, state: EnvState, actions: torch.Tensor
) -> tuple[EnvState, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step with auto-reset: ``(state, obs_next, reward, terminated, truncated, final_obs)``.

    ``obs_next`` is post-reset (first observation of the new episode where one ended);
    ``final_obs`` is every env's pre-reset next observation (equal to ``obs_next`` where nothing
    ended), i.e. the ``next_obs`` of the transition.
    """
    return step_with_info(data, params, state, actions)[:6]
