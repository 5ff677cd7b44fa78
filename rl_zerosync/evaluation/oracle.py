"""The oracle reference policy of synthetic data: "oracle (knows the generator)".

A bound, not a competitor: it reads what no agent observes, the generator's parameters and its
true volatility path (:func:`rl_zerosync.data.hidden.synthetic_hidden`), and trades through the
same walk, execution, routing and costs as the agent and the rules (:class:`OracleWalk`). An
evaluation on synthetic data reports its test Sharpe beside the rules and the agent's
``efficiency = agent Sharpe / oracle Sharpe``; on file data it is absent, with the reason.

**Filter.** The generator's hidden state (:mod:`rl_zerosync.data.synthetic`) is one of three:
trend up (``d = +1``), trend down (``d = -1``) and revert. With ``p_T = p_stay_trend``, ``p_R =
p_stay_revert`` the chain moves (rows from, columns to; order up, down, revert)::

    up      [ p_T,           0,             1 - p_T ]
    down    [ 0,             p_T,           1 - p_T ]
    revert  [ (1 - p_R) / 2, (1 - p_R) / 2, p_R     ]

(a trend's direction is drawn again on every entry into a trend) and starts at ``(1/4, 1/4, 1/2)``.
Knowing ``sigma_t`` the oracle knows ``z_t = log_ret_t / sigma_t`` exactly, whose density is
``N(+drift, 1)``, ``N(-drift, 1)`` and ``N(-rs z_{t-1}, 1 - rs^2)`` in the three states (``drift =
trend_drift``, ``rs = revert_strength``). The forward filter gives ``pi_t = P(state_t | z_1..z_t)``
(bars up to ``t`` only). Predicting ``k`` bars ahead, with ``m_0 = pi_t z_t`` (per state) and
``pi_{t+j} = pi_{t+j-1} P``: ``m_j = (drift pi_{t+j}[up], -drift pi_{t+j}[down], -rs (m_{j-1} P)[revert])``
and ``E[z_{t+k} | F_t] = sum(m_k)``; ``E[sigma_{t+k} | sigma_t] = exp(mu + phi^k (h_t - mu) +
vol_of_vol^2 (1 - phi^{2k}) / (2 (1 - phi^2)))`` with ``mu = log(vol_mean)``, ``phi =
vol_persistence``, ``h_t = log sigma_t``.

**Lead.** An order decided at bar ``t`` fills on bar ``t+1``; without opens a MARKET order fills at
``t+1``'s close, so the new position first earns bar ``t+2``: ``k = 2``. With opens (MARKET at
``t+1``'s open) or ``execution_lag: 0`` the new position earns bar ``t+1``: ``k = 1``.

**Sizing and the no-trade band.** With ``x_t = E[z_{t+k} | F_t]`` (the predicted return over the
predicted volatility) and ``c_t = (fee + spread_frac[MARKET][NORMAL] * spread_t) / E[sigma_{t+k}]``
(a MARKET order's half spread and fee per unit traded, in the same volatility units), the oracle
moves from its position ``p`` to the exposure level ``q`` (of ``EnvParams.exposure_levels``) that
maximizes ``q x_t - q^2 / (2 scale) - band c_t |q - p|``: without costs the level nearest ``scale
x_t``; ``band`` widens the range of signals over which it keeps ``p``. Its exposures go through the
routing rule like the routed agent's and the tuned rules'. ``(scale, band)`` is chosen from
:data:`SCALES` x :data:`BANDS` (:data:`NUM_VARIANTS` trials) by the highest mean Sharpe over the
validation series and frozen for test. With no drift and no reversion ``x_t = 0``: it stays flat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from rl_zerosync.data.hidden import HiddenState
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.evaluation.walk import SegmentWalk, WalkState

ORACLE_LABEL = "oracle (knows the generator)"
"""How the oracle is named in every report."""
SCALES = (2.5, 5.0, 10.0, 20.0)
"""Exposure per unit of predicted per-bar Sharpe (``scale = 5``: full exposure at ``x = 0.2``, the
default trend drift)."""
BANDS = (0.0, 1.0, 2.0, 4.0, 8.0)
"""No-trade band in multiples of the half spread and fee per unit traded."""
UP, DOWN, REVERT = 0, 1, 2
"""The filter's states (index into the posterior's last axis)."""
NO_GENERATOR = "no generator behind file data: the oracle reference exists for synthetic data only"
CACHE_SIZE = 8
"""Oracle walks a process keeps (:func:`oracle_baseline`: population members evaluated one after
another in one process walk the oracle of a segment once)."""
_CACHE: "dict[tuple, dict[str, Any]]" = {}


@dataclass(frozen=True)
class OracleVariant:
    """One point of the oracle's grid."""

    scale: float
    band: float

    @property
    def label(self) -> str:
        return f"oracle({self.scale:g},{self.band:g})"


def variants() -> list[OracleVariant]:
    """The whole grid, scales outer, bands inner."""
    return [OracleVariant(s, b) for s in SCALES for b in BANDS]


NUM_VARIANTS = len(SCALES) * len(BANDS)
"""Trials behind the oracle's validation choice."""


def parse_label(label: str) -> OracleVariant:
    """Inverse of :attr:`OracleVariant.label`."""
    for v in variants():
        if v.label == label:
            return v
    raise ValueError(f"oracle: unknown variant {label!r}; expected one of {[v.label for v in variants()]}")


# ---------------------------------------------------------------------------------------- filter
def transition_matrix(model: Mapping[str, float]) -> np.ndarray:
    """``P[from, to]`` over (up, down, revert) (module doc)."""
    pt, pr = float(model["p_stay_trend"]), float(model["p_stay_revert"])
    return np.array([[pt, 0.0, 1.0 - pt], [0.0, pt, 1.0 - pt], [(1.0 - pr) / 2, (1.0 - pr) / 2, pr]])


def posterior(z: np.ndarray, model: Mapping[str, float]) -> np.ndarray:
    """Forward filter ``pi[a, t, s] = P(state_t = s | z_1..z_t)`` of ``z`` ``[A, T]`` (bar 0 carries
    no return: the prior). Vectorized over assets, one loop over bars."""
    z = np.asarray(z, dtype=np.float64)
    a, n = z.shape
    trans = transition_matrix(model)
    drift, rs = float(model["trend_drift"]), float(model["revert_strength"])
    var_r = 1.0 - rs * rs
    prev = np.concatenate((np.zeros((a, 1)), z[:, :-1]), axis=1)
    # Log densities up to a shared constant: [A, T, 3].
    logl = np.stack((-0.5 * (z - drift) ** 2, -0.5 * (z + drift) ** 2,
                     -0.5 * (z + rs * prev) ** 2 / var_r - 0.5 * math.log(var_r)), axis=2)
    logl -= logl.max(axis=2, keepdims=True)
    like = np.exp(logl)
    out = np.empty((a, n, 3))
    pi = np.tile([0.25, 0.25, 0.5], (a, 1))
    out[:, 0] = pi
    for t in range(1, n):
        pi = (pi @ trans) * like[:, t]
        pi /= pi.sum(axis=1, keepdims=True)
        out[:, t] = pi
    return out


def expected_z(post: np.ndarray, z: np.ndarray, model: Mapping[str, float], lead: int) -> np.ndarray:
    """``E[z_{t+lead} | F_t]`` ``[A, T]`` from the filter's posterior (module doc)."""
    trans = transition_matrix(model)
    drift, rs = float(model["trend_drift"]), float(model["revert_strength"])
    pi = post
    m = post * np.asarray(z, dtype=np.float64)[:, :, None]
    for _ in range(lead):
        carried = m @ trans
        pi = pi @ trans
        m = np.stack((drift * pi[..., UP], -drift * pi[..., DOWN], -rs * carried[..., REVERT]), axis=-1)
    return m.sum(axis=-1)


def expected_sigma(sigma: np.ndarray, model: Mapping[str, float], lead: int) -> np.ndarray:
    """``E[sigma_{t+lead} | sigma_t]`` of the log-AR(1) volatility (module doc)."""
    mu, phi, vv = math.log(float(model["vol_mean"])), float(model["vol_persistence"]), float(model["vol_of_vol"])
    h = np.log(np.asarray(sigma, dtype=np.float64))
    spread = vv * vv * (1.0 - phi ** (2 * lead)) / (1.0 - phi * phi)
    return np.exp(mu + phi ** lead * (h - mu) + 0.5 * spread)


def lead_bars(data: MarketData, params: EnvParams) -> int:
    """The bar ahead whose return a position decided now first earns (module doc)."""
    return 1 if params.execution_lag == 0 or data.open is not None else 2


def signals(hidden: HiddenState, data: MarketData, params: EnvParams) -> tuple[np.ndarray, np.ndarray]:
    """``(x, c)`` ``[A, T]``: the predicted return over volatility and the cost per unit traded in
    volatility units at every bar (module doc), from bars up to each one only."""
    lead = lead_bars(data, params)
    x = expected_z(posterior(hidden.z, hidden.model), hidden.z, hidden.model, lead)
    spread = data.spread.cpu().numpy().astype(np.float64)  # host read: once per evaluation
    half = params.fee + params.spread_frac[0][1] * spread
    return x, half / expected_sigma(hidden.sigma, hidden.model, lead)


# ------------------------------------------------------------------------------------------ walk
class OracleWalk:
    """Oracle variants on one segment: one batched walk, envs = variants x assets (like the rules')."""

    def __init__(self, data: MarketData, params: EnvParams, hidden: HiddenState,
                 routing: Optional[Mapping[str, float]] = None, *, chunk: int = 64, graph: bool = True,
                 oracle_variants: Optional[Sequence[OracleVariant]] = None) -> None:
        """``oracle_variants``: walk these (default: :func:`variants`, every one)."""
        self.variants = list(oracle_variants) if oracle_variants is not None else variants()
        v, a, dev = len(self.variants), data.num_assets, data.device
        if hidden.z.shape != (a, data.num_bars):
            raise ValueError(f"oracle: hidden state of shape {hidden.z.shape}, market of ({a}, {data.num_bars})")
        self.walk = SegmentWalk(data, params, replicas=v, routing=routing or {}, chunk=chunk, graph=graph,
                                 observe=False)  # the filter reads the walk state only
        x, c = signals(hidden, data, params)
        self._x = torch.tensor(x, dtype=torch.float32, device=dev).reshape(-1)
        self._c = torch.tensor(c, dtype=torch.float32, device=dev).reshape(-1)
        self._width = data.num_bars
        per = lambda f: torch.tensor([f(x) for x in self.variants], dtype=torch.float32,  # noqa: E731
                                     device=dev).repeat_interleave(a)
        self._scale = per(lambda x: x.scale)[:, None]
        self._band = per(lambda x: x.band)[:, None]
        self._levels = torch.tensor(params.exposure_levels, dtype=torch.float32, device=dev)[None, :]

    def _act(self, obs: Optional[torch.Tensor], state: WalkState) -> torch.Tensor:
        idx = state.asset * self._width + state.t
        x, c = self._x[idx][:, None], self._c[idx][:, None]
        q = self._levels
        value = q * x - q.square() / (2.0 * self._scale) - self._band * c * (q - state.pos[:, None]).abs()
        return value.argmax(dim=1)

    def run(self) -> dict[str, list[dict[str, np.ndarray]]]:
        """Per variant label: per-asset records (host) of the walk."""
        rec = self.walk.run(self._act, key="oracle")
        a = self.walk.data.num_assets
        return {x.label: [self.walk.env_records(rec, k, replica=i) for k in range(a)]
                for i, x in enumerate(self.variants)}


def oracle_baseline(data_cfg: Mapping[str, Any] | None, market: MarketData, params: EnvParams,
                    routing: Optional[Mapping[str, float]] = None, *, device: torch.device | str | None = None,
                    variant: Optional[str] = None) -> dict[str, Any]:
    """The oracle on ``market`` (a segment of ``data_cfg``): every variant walked and the best by mean
    Sharpe chosen (``variant`` None: the validation segment), or only ``variant`` (chosen on
    validation, frozen: the test segment). Returns ``{"label", "available", "variant", "chosen_on",
    "trials", "grid" (label -> mean Sharpe, when walked), asset -> metrics, "mean" -> metrics}``; on
    file data ``{"label", "available": False, "reason"}``. Walked once per process for a segment of
    the same content, generator model, env parameters, routing, device and ``variant``; the returned
    dict is shared: read it, do not change it."""
    from rl_zerosync.data.data_settings import DataSettings
    from rl_zerosync.data.hidden import model_keywords
    from rl_zerosync.evaluation.backtest import data_fingerprint

    if DataSettings.from_dict(data_cfg).source != "synthetic":
        return {"label": ORACLE_LABEL, "available": False, "reason": NO_GENERATOR}
    dev = torch.device(device) if device is not None else market.device
    key = (data_fingerprint(market), repr(sorted(model_keywords(data_cfg).items())), repr(params),
           tuple(sorted((routing or {}).items())), str(dev), variant)
    if key not in _CACHE:
        if len(_CACHE) >= CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _walk_oracle(data_cfg, market, params, routing, dev, variant)
    return _CACHE[key]


def _walk_oracle(data_cfg: Mapping[str, Any] | None, market: MarketData, params: EnvParams,
                 routing: Optional[Mapping[str, float]], dev: torch.device, variant: Optional[str]) -> dict[str, Any]:
    """:func:`oracle_baseline` without the cache."""
    from rl_zerosync.data.hidden import synthetic_hidden
    from rl_zerosync.evaluation.backtest import record_metrics
    from rl_zerosync.evaluation.metrics import mean_metrics

    try:
        hidden = synthetic_hidden(data_cfg, market)
    except ValueError as err:  # e.g. a segment no generator seed of the settings gives
        return {"label": ORACLE_LABEL, "available": False, "reason": str(err)}
    data = market.to(dev)
    walked = variants() if variant is None else [parse_label(variant)]
    per_variant = {}
    for label, recs in OracleWalk(data, params, hidden, routing, oracle_variants=walked).run().items():
        per = {name: record_metrics(r, data.periods_per_year) for name, r in zip(data.asset_names, recs)}
        per["mean"] = mean_metrics([per[n] for n in data.asset_names])
        per_variant[label] = per
    out: dict[str, Any] = {"label": ORACLE_LABEL, "available": True, "trials": NUM_VARIANTS,
                           "grid_scales": list(SCALES), "grid_bands": list(BANDS)}
    if variant is None:
        grid = {label: per["mean"]["sharpe"] for label, per in per_variant.items()}
        variant = max(grid, key=lambda k: (grid[k], -list(grid).index(k)))  # ties: the first
        out.update(chosen_on=market.segment, grid=grid)
    else:
        out["chosen_on"] = "validation"
    return {**out, "variant": variant, **per_variant[variant]}


def oracle_summary(agent_sharpe: float, oracle: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's oracle keys: ``oracle`` (the label), ``oracle_sharpe``, ``oracle_variant``,
    ``oracle_trials`` and ``efficiency = agent_sharpe / oracle_sharpe`` (None, with
    ``efficiency_reason``, when the oracle is absent or its Sharpe is not > 0)."""
    out: dict[str, Any] = {"oracle": ORACLE_LABEL}
    if not oracle or not oracle.get("available"):
        reason = (oracle or {}).get("reason", "not evaluated")
        return {**out, "oracle_sharpe": None, "efficiency": None, "efficiency_reason": reason}
    sharpe = float(oracle["mean"]["sharpe"])
    out.update(oracle_sharpe=sharpe, oracle_variant=oracle["variant"], oracle_trials=oracle["trials"])
    if sharpe > 0.0:
        return {**out, "efficiency": agent_sharpe / sharpe}
    return {**out, "efficiency": None, "efficiency_reason": f"oracle Sharpe {sharpe:+.2f} is not > 0"}


def oracle_text(summary: Mapping[str, Any]) -> str:
    """The oracle's part of the printed result line."""
    if summary.get("oracle_sharpe") is None:
        return f"{ORACLE_LABEL}: absent ({summary.get('efficiency_reason')})"
    eff = summary.get("efficiency")
    return (f"{ORACLE_LABEL} {summary['oracle_sharpe']:+.2f}, efficiency "
            + (f"{eff:.2f}" if eff is not None else f"n/a ({summary.get('efficiency_reason')})"))
