"""Names and host-side summary of the env's on-device episode accumulators.

The env keeps one float64 device vector (``BatchedTradingEnv.metrics_vector()``) that a runner
copies to the host once per rollout. Layout: :data:`COMPLETED_FIELDS` (sums over episodes that
ended since the last ``reset_metrics()``), then 45 action counts (every step, by factored index).

Per-episode quantities (``L`` steps, net step return ``n_i = pnl_i - cost_i``, equity
``E_i = E_{i-1} * (1 + n_i)``, ``E_0 = 1``):

* ``return = E_L - 1``; ``pnl = sum pos_i * r_{i+1}``; ``cost_<type> = sum cost_i`` of steps whose
  order type is ``<type>`` (negative = net rebate); ``turnover = sum |q_i|``;
* ``max_drawdown = max_i (1 - E_i / max_{j<=i} E_j)``;
* ``sharpe = mean(n) / std(n) * sqrt(periods_per_year)`` (population std over the episode; 0 when
  the std is 0).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from rl_zerosync.actions import NUM_ACTIONS, NUM_EXPOSURES, NUM_ORDER_TYPES, NUM_URGENCIES

# Columns of the per-env running episode sums (float32 ``[N, len(EP_FIELDS)]``).
EP_FIELDS = ("reward", "pnl", "cost_market", "cost_limit", "cost_passive", "turnover", "net_sum", "net_sumsq")
EP_INDEX = {name: i for i, name in enumerate(EP_FIELDS)}

COMPLETED_FIELDS = (
    "episodes", "length_sum", "return_sum", "reward_sum", "pnl_sum", "cost_market_sum",
    "cost_limit_sum", "cost_passive_sum", "turnover_sum", "max_drawdown_sum", "sharpe_sum",
    "env_steps",
)
COMPLETED_INDEX = {name: i for i, name in enumerate(COMPLETED_FIELDS)}
NUM_COMPLETED = len(COMPLETED_FIELDS)
ACTION_COUNT_OFFSET = NUM_COMPLETED
METRICS_SIZE = NUM_COMPLETED + NUM_ACTIONS


METRIC_NAMES = {"return": "equity_return"}
"""Published names of accumulator fields where the field's own name would collide: the equity
return ``E_L - 1`` is ``episode_equity_return_mean`` (RLlib's ``episode_return_mean`` is the summed
reward, a different quantity)."""


def metrics_names() -> list[str]:
    """Names of the entries of the flat metrics vector, in order."""
    return list(COMPLETED_FIELDS) + [f"action_count_{i:02d}" for i in range(NUM_ACTIONS)]


def summarize_metrics(vector: Sequence[float]) -> dict[str, float]:
    """Means per completed episode and action mix from a host copy of the metrics vector.

    Returns ``episodes``, ``env_steps``, ``episode_<x>_mean`` for equity_return, reward, pnl, the three
    costs, turnover, max_drawdown, sharpe and length (NaN-free: 0 when no episode completed), and
    the fractions of steps by exposure, order type and urgency (``mix_exposure_<e>``,
    ``mix_order_<o>``, ``mix_urgency_<u>``).
    """
    v = [float(x) for x in vector]
    if len(v) != METRICS_SIZE:
        raise ValueError(f"metrics vector: expected {METRICS_SIZE} entries, got {len(v)}")
    n = v[COMPLETED_INDEX["episodes"]]
    out: dict[str, float] = {"episodes": n, "env_steps": v[COMPLETED_INDEX["env_steps"]]}
    for name in COMPLETED_FIELDS:
        if name.endswith("_sum"):
            field = name[: -len("_sum")]
            key = "episode_" + METRIC_NAMES.get(field, field) + "_mean"
            out[key] = v[COMPLETED_INDEX[name]] / n if n > 0 else 0.0
    counts = v[ACTION_COUNT_OFFSET:]
    out.update(action_mix(counts))
    return out


def action_mix(counts: Sequence[float]) -> Mapping[str, float]:
    """Fractions of actions by exposure, order type and urgency from 45 factored counts."""
    total = sum(counts)
    mix: dict[str, float] = {}
    for e in range(NUM_EXPOSURES):
        mix[f"mix_exposure_{e}"] = sum(counts[e * 9:(e + 1) * 9]) / total if total else 0.0
    for o in range(NUM_ORDER_TYPES):
        mix[f"mix_order_{o}"] = sum(c for i, c in enumerate(counts) if (i // 3) % 3 == o) / total if total else 0.0
    for u in range(NUM_URGENCIES):
        mix[f"mix_urgency_{u}"] = sum(c for i, c in enumerate(counts) if i % 3 == u) / total if total else 0.0
    return mix
