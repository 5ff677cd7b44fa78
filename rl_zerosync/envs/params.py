"""``EnvParams``: every coefficient of the trading environment, validated once at construction.

Execution model (per unit of position traded, as a fraction of equity; ``o`` order type, ``u``
urgency, tables indexed ``[o][u]`` with rows MARKET, LIMIT, PASSIVE and columns LOW, NORMAL, HIGH):

* fill fraction ``f = fill_prob[o][u]`` (expected-fill mode: the position moves by ``f * (target -
  position)``; stochastic mode: it moves by the full difference with probability ``f``, else not at
  all). MARKET fills fully (its row must be all 1).
* cost of a trade ``q`` (signed change of position): ``|q| * (fee + spread_frac[o][u] * spread_t +
  impact[o][u] * vol_t * |q|)``; ``spread_t`` is the relative spread and ``vol_t`` the EWMA volatility
  at the execution bar. A negative ``spread_frac`` is a rebate (a passive order earning part of the
  spread).
* The reward (``reward_scale * (pnl - cost - risk penalty - turnover_penalty * |q|)``, divided by
  the bar's volatility with ``reward_vol_scaled``) is what the agent learns from; equity and every
  reported return use ``pnl - cost`` only.
* Higher urgency never fills less nor costs less: each row of ``fill_prob``, ``spread_frac`` and
  ``impact`` must be non-decreasing from LOW to HIGH.

``execution_lag`` (default 1) says when the order decided on bar ``t``'s observation executes:

* ``0``: at the close of ``t`` as above, every order type filling ``f`` whatever bar ``t+1`` does
  (the model of the earlier versions, kept bit for bit for comparison and for their checkpoints).
* ``1``: on bar ``t+1``. MARKET fills fully at the open of ``t+1`` (the close of ``t+1`` when the
  data has no opens) and pays ``spread_frac[0][u] * spread_{t+1}`` (half the spread by default) and
  impact. LIMIT and PASSIVE rest at ``L = close_t * (1 + side * spread_frac[o][u] * spread_t)``
  (``side`` +1 buy, -1 sell: ``spread_frac`` is now the limit's offset from the close as a fraction
  of the spread) and fill only when bar ``t+1`` trades through it (``low <= L`` for a buy, ``high >=
  L`` for a sell), with fraction / probability ``f`` applied only then, at ``L``; they pay ``fee -
  maker_rebate_bps * 1e-4`` plus impact (no rebate by default). Data without high/low executes
  LIMIT and PASSIVE orders as MARKET (the preflight line says so). See :mod:`rl_zerosync.envs.core`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from rl_zerosync.actions import DEFAULT_EXPOSURE_LEVELS, NUM_EXPOSURES, NUM_ORDER_TYPES, NUM_URGENCIES

Table = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]

FILL_MODES = ("expected", "stochastic")
EXECUTION_LAGS = (0, 1)
LEGACY_EXECUTION_LAG = 0
"""The execution lag of runs whose ``settings.yaml`` has no ``env.execution_lag`` (written before the
key existed: trained, selected and reported under same-bar fills), see :func:`with_recorded_lag`."""


MAX_BPS = 10_000.0
"""The largest ``maker_rebate_bps``: 10,000 bps are the whole notional."""
MAX_SEED = 2**64 - 1
"""The largest ``seed``: the counter-based RNG keys seeds in ``[0, 2**64)``."""


REWARD_VOL_FLOOR = 1e-4
"""The smallest divisor of ``reward_vol_scaled`` (a bar volatility of 1 bp): a bar whose volatility
estimate is below it (a flat start of a series) is scaled as if its volatility were 1 bp."""


MAX_ABS_EXPOSURE = 10.0
"""The largest |exposure level| (position as a multiple of equity): beyond 10x a bar's move of 10%
wipes out the account, and both the agent and buy-and-hold report ruin."""


@dataclass(frozen=True)
class EnvParams:
    """Configuration of :class:`~rl_zerosync.envs.BatchedTradingEnv` (``env_config["env"]``)."""

    episode_len: int = 256
    """Steps per episode (an episode starting at bar ``s`` trades at bars ``s .. s+episode_len-1``); >= 2 in a
    training run."""
    window: int = 16
    """K: past normalized returns in the observation; >= 1."""
    exposure_levels: tuple[float, ...] = DEFAULT_EXPOSURE_LEVELS
    """Target position (fraction of equity) of exposure index 0..4; every ``|level|`` <= 10."""
    fee: float = 0.5e-4
    """Commission per unit traded (fraction of notional), all order types, in [0, 1)."""
    fill_prob: Table = ((1.0, 1.0, 1.0), (0.5, 0.7, 0.85), (0.2, 0.3, 0.4))
    """Fill fraction (expected mode) or fill probability (stochastic mode) ``[order][urgency]``, in [0, 1];
    MARKET's row all 1."""
    spread_frac: Table = ((0.5, 0.5, 0.5), (0.0, 0.1, 0.25), (-0.1, -0.05, 0.0))
    """Lag 1: MARKET's fraction of the spread paid, LIMIT / PASSIVE's limit offset from the close in spreads
    (> 0 towards the far side); lag 0: fraction of the spread paid per unit traded (< 0: a rebate)."""
    impact: Table = ((0.05, 0.1, 0.2), (0.0, 0.02, 0.05), (0.0, 0.0, 0.0))
    """Linear impact ``[order][urgency]``: extra cost per unit = impact × vol × ``|q|``; >= 0."""
    fill_mode: str = "expected"
    """``expected``: the position moves by ``fill × (target − position)``; ``stochastic``: by the whole
    difference with probability ``fill``, seeded."""
    reward_scale: float = 100.0
    """Reward = reward_scale × (position PnL − costs − risk penalty); 100 = percent; > 0."""
    risk_penalty: float = 0.0
    """Mean-variance penalty per step: risk_penalty × position² × vol²; >= 0."""
    turnover_penalty: float = 0.0
    """Charge per unit of position traded, in the reward only (equity and every reported return leave it out):
    reward −= reward_scale × turnover_penalty × ``|q|``; 5e-4 = 5 bps per unit; >= 0, 0 = off (the earlier
    reward bit for bit).

    Teaches the agent that trading costs more than the costs it pays."""
    reward_vol_scaled: bool = False
    """Divide the reward by ``max(vol_t, REWARD_VOL_FLOOR)`` (1e-4), the EWMA volatility of bars up to t
    (known before the P&L of bar t+1): P&L in units of the bar's volatility; pair it with ``reward_scale:
    1.0``.

    Calm and wild instruments and periods then weigh alike; rewards come in volatility units (about 1 for a
    full position on a one-sigma bar). Off: the earlier reward."""
    stop_drawdown: float = 0.0
    """End an episode when its drawdown from peak equity reaches this, in [0, 1); 0 = off."""
    seed: int = 0
    """Seed of the env's counter-based RNG (episode offsets, assets, stochastic fills), 0 to 2**64 − 1; when a
    settings file leaves it out, the GPU env runner seeds its envs with its own seed (``runner.seed`` + worker
    index)."""
    execution_lag: int = 1
    """1: execute on the next bar (MARKET at the next open, passive orders only if the next bar trades through
    their price); 0: at the same close, every order type filling its fraction (the earlier versions' model)."""
    maker_rebate_bps: float = 0.0
    """Rebate in bps of notional of a filled LIMIT / PASSIVE order under ``execution_lag: 1``, in [0, 10000]
    (0: none; the passive price offset of ``spread_frac`` is the only gain of resting)."""
    stagger_start: bool = False
    """Training envs of the GPU env runner start their first episode at a random step in ``[0, episode_len)``
    so episodes do not all end in the same iteration; evaluation and the gymnasium twins ignore it.

    Later episodes are whole. Off by default: the committed learning results were produced without it."""

    def __post_init__(self) -> None:
        for name in ("stagger_start", "reward_vol_scaled"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EnvParams.{name}: expected true or false, got {getattr(self, name)!r}")
        _check_int("episode_len", self.episode_len, 1)
        _check_int("window", self.window, 1)
        _check_int("seed", self.seed, 0, MAX_SEED)
        levels = _float_tuple("exposure_levels", self.exposure_levels)
        if len(levels) != NUM_EXPOSURES:
            raise ValueError(f"EnvParams.exposure_levels: expected {NUM_EXPOSURES} values, got {len(levels)}")
        too_big = [x for x in levels if abs(x) > MAX_ABS_EXPOSURE]
        if too_big:
            raise ValueError(f"EnvParams.exposure_levels: expected every |level| <= {MAX_ABS_EXPOSURE:g} (times equity), "
                             f"got {too_big[0]:g} in {list(levels)}")
        object.__setattr__(self, "exposure_levels", levels)
        for name in ("fill_prob", "spread_frac", "impact"):
            table = _table(name, getattr(self, name))
            object.__setattr__(self, name, table)
            for o, row in enumerate(table):
                if any(b < a for a, b in zip(row, row[1:])):
                    raise ValueError(
                        f"EnvParams.{name}[{o}]: expected non-decreasing values from LOW to HIGH "
                        f"urgency, got {row}"
                    )
        for o, row in enumerate(self.fill_prob):
            for u, p in enumerate(row):
                if not 0.0 <= p <= 1.0:
                    raise ValueError(f"EnvParams.fill_prob[{o}][{u}]: expected a value in [0, 1], got {p}")
        if self.fill_prob[0] != (1.0, 1.0, 1.0):
            raise ValueError(f"EnvParams.fill_prob[0] (MARKET): expected (1.0, 1.0, 1.0), got {self.fill_prob[0]}")
        for o, row in enumerate(self.impact):
            if any(v < 0.0 for v in row):
                raise ValueError(f"EnvParams.impact[{o}]: expected values >= 0, got {row}")
        for name in ("fee", "reward_scale", "risk_penalty", "turnover_penalty", "stop_drawdown"):
            value = _check_float(name, getattr(self, name))
            object.__setattr__(self, name, value)
            if value < 0.0:
                raise ValueError(f"EnvParams.{name}: expected a value >= 0, got {value}")
        if self.reward_scale == 0.0:
            raise ValueError("EnvParams.reward_scale: expected a value > 0, got 0.0")
        if self.fee >= 1.0:
            raise ValueError(f"EnvParams.fee: expected a fraction of the notional in [0, 1), got {self.fee}")
        if self.stop_drawdown >= 1.0:
            raise ValueError(f"EnvParams.stop_drawdown: expected a value in [0, 1), got {self.stop_drawdown}")
        if isinstance(self.execution_lag, bool) or self.execution_lag not in EXECUTION_LAGS:
            raise ValueError(f"EnvParams.execution_lag: expected one of {EXECUTION_LAGS}, got {self.execution_lag!r}")
        rebate = _check_float("maker_rebate_bps", self.maker_rebate_bps)
        if not 0.0 <= rebate <= MAX_BPS:
            raise ValueError(f"EnvParams.maker_rebate_bps: expected a value in [0, {MAX_BPS:g}] (bps of the "
                             f"notional), got {rebate}")
        object.__setattr__(self, "maker_rebate_bps", rebate)
        if self.fill_mode not in FILL_MODES:
            raise ValueError(f"EnvParams.fill_mode: expected one of {FILL_MODES}, got {self.fill_mode!r}")

    @property
    def observation_dim(self) -> int:
        """K normalized returns + position + log spread ratio + log vol ratio + episode progress."""
        return self.window + 4

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | None) -> "EnvParams":
        """Build from ``env_config["env"]``; unknown keys raise ValueError naming them."""
        cfg = dict(cfg or {})
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(cfg) - set(allowed))
        if unknown:
            raise ValueError(f"env config: unknown key(s) {unknown}; allowed keys are {allowed}")
        return cls(**cfg)


def with_recorded_lag(env_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's ``env`` settings with ``execution_lag`` as the run used it: the recorded value, or
    :data:`LEGACY_EXECUTION_LAG` when ``settings.yaml`` predates the key (new runs always record it)."""
    out = dict(env_cfg or {})
    out.setdefault("execution_lag", LEGACY_EXECUTION_LAG)
    return out


def _check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"EnvParams.{name}: expected an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"EnvParams.{name}: expected an int <= {maximum}, got {value!r}")


def _check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"EnvParams.{name}: expected a finite number, got {value!r}")
    return float(value)


def _float_tuple(name: str, values: Sequence[Any]) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"EnvParams.{name}: expected a sequence of numbers, got {values!r}")
    return tuple(_check_float(f"{name}[{i}]", v) for i, v in enumerate(values))


def _table(name: str, table: Any) -> Table:
    if isinstance(table, (str, bytes)) or not isinstance(table, Sequence) or len(table) != NUM_ORDER_TYPES:
        raise ValueError(f"EnvParams.{name}: expected {NUM_ORDER_TYPES} rows (MARKET, LIMIT, PASSIVE), got {table!r}")
    rows = []
    for o, row in enumerate(table):
        values = _float_tuple(f"{name}[{o}]", row)
        if len(values) != NUM_URGENCIES:
            raise ValueError(
                f"EnvParams.{name}[{o}]: expected {NUM_URGENCIES} values (LOW, NORMAL, HIGH), got {row!r}"
            )
        rows.append(values)
    return tuple(rows)  # type: ignore[return-value]
