"""Rule baselines a trader tries first, with the agent's execution model and costs.

Signal of bar ``t`` over lookback ``L`` (bars ``t-L+1..t`` only, no look-ahead):
``z_t = sum(ret_norm[t-L+1..t]) / sqrt(L)`` (the normalized returns of the observation, a t-stat
of the recent trend). Target exposure (levels of ``EnvParams.exposure_levels``; ``long``/``short``
= the highest / lowest level):

=================  ==========================================================================
rule               target
=================  ==========================================================================
``flat``           no position (all metrics 0)
``buy_and_hold``   ``long`` from the first bar (a MARKET order of NORMAL urgency)
``momentum``       ``long`` if ``z > h``, ``short`` if ``z < -h``, else keep the position
``mean_reversion`` ``short`` if ``z > h``, ``long`` if ``z < -h``, else keep the position
=================  ==========================================================================

Momentum and mean reversion trade through the routing rule (order type and urgency from spread and
volatility), like the routed agent. Their ``(L, h)`` are chosen from :data:`LOOKBACKS` x
:data:`THRESHOLDS` on the validation segment (highest mean Sharpe over assets) and frozen for
the test segment. All variants of all rules walk together in one :class:`SegmentWalk`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.evaluation.walk import SegmentWalk, WalkState

LOOKBACKS = (4, 8, 16, 32, 64)
THRESHOLDS = (0.0, 0.5, 1.0, 1.5, 2.0)
RULES = ("flat", "buy_and_hold", "momentum", "mean_reversion")
TUNED_RULES = ("momentum", "mean_reversion")


@dataclass(frozen=True)
class RuleVariant:
    rule: str
    lookback: int = 0
    threshold: float = 0.0

    @property
    def label(self) -> str:
        if self.rule in TUNED_RULES:
            return f"{self.rule}({self.lookback},{self.threshold:g})"
        return self.rule


def variants() -> list[RuleVariant]:
    """Every walked variant: buy-and-hold, then the momentum and mean-reversion grids."""
    out = [RuleVariant("buy_and_hold")]
    for rule in TUNED_RULES:
        out += [RuleVariant(rule, lb, h) for lb in LOOKBACKS for h in THRESHOLDS]
    return out


class RuleWalk:
    """All rule variants on one segment: one batched walk, envs = variants x assets."""

    def __init__(self, data: MarketData, params: EnvParams, routing: Optional[Mapping[str, float]] = None,
                 *, chunk: int = 64, graph: bool = True, rule_variants: Optional[Sequence[RuleVariant]] = None,
                 cost_scale: Optional[Sequence[float]] = None, force_market: Optional[Sequence[bool]] = None) -> None:
        """``rule_variants``: walk these (default: :func:`variants`, every one); ``cost_scale`` /
        ``force_market``: one value per walked variant (see :class:`SegmentWalk`)."""
        self.variants = list(rule_variants) if rule_variants is not None else variants()
        v, a = len(self.variants), data.num_assets
        dev = data.device
        route_mask = torch.tensor([x.rule in TUNED_RULES for x in self.variants], device=dev).repeat_interleave(a)
        per_variant = lambda x: None if x is None else torch.tensor(list(x)).repeat_interleave(a)  # noqa: E731
        self.walk = SegmentWalk(data, params, replicas=v, routing=routing or {}, route_mask=route_mask,
                                chunk=chunk, graph=graph, cost_scale=per_variant(cost_scale),
                                force_market=per_variant(force_market),
                                observe=False)  # one whole walk per variant: no splits; rules read the state
        levels = params.exposure_levels
        self._long, self._short = int(np.argmax(levels)), int(np.argmin(levels))
        self._levels = torch.tensor(levels, dtype=torch.float32, device=dev)
        # Per env: lookback, threshold, direction (+1 momentum, -1 reversion, 0 buy-and-hold).
        per = lambda f: torch.tensor([f(x) for x in self.variants], device=dev).repeat_interleave(a)  # noqa: E731
        self._lookback = per(lambda x: max(x.lookback, 1)).to(torch.int64)
        self._scale = per(lambda x: 1.0 / math.sqrt(max(x.lookback, 1))).to(torch.float32)
        self._threshold = per(lambda x: x.threshold).to(torch.float32)
        self._direction = per(lambda x: {"momentum": 1.0, "mean_reversion": -1.0}.get(x.rule, 0.0)).to(torch.float32)
        zero = torch.zeros(a, 1, dtype=torch.float64, device=dev)
        self._csum = torch.cat((zero, data.ret_norm.to(torch.float64).cumsum(1)), 1)  # csum[:, t+1] = sum 0..t
        self._width = self._csum.shape[1]

    def _act(self, obs: Optional[torch.Tensor], state: WalkState) -> torch.Tensor:
        row = state.asset * self._width
        hi = row + state.t + 1
        lo = row + (state.t + 1 - self._lookback).clamp_min(0)
        flat = self._csum.reshape(-1)
        z = ((flat[hi] - flat[lo]).to(torch.float32)) * self._scale
        cur = (self._levels[None, :] - state.pos[:, None]).abs().argmin(1)  # exposure index held now
        up = torch.full_like(cur, self._long)
        down = torch.full_like(cur, self._short)
        sig = z * self._direction
        target = torch.where(sig > self._threshold, up, torch.where(sig < -self._threshold, down, cur))
        return torch.where(self._direction == 0.0, up, target)

    def run(self) -> dict[str, dict[str, Any]]:
        """Per variant label: per-asset records (host) of the walk."""
        rec = self.walk.run(self._act, key="rules")
        a = self.walk.data.num_assets
        return {x.label: [self.walk.env_records(rec, k, replica=i) for k in range(a)]
                for i, x in enumerate(self.variants)}

    def run_replicas(self) -> list[list[dict[str, Any]]]:
        """Per walked variant (in order, repeats kept): per-asset records (host) of the walk."""
        rec = self.walk.run(self._act, key="rules")
        a = self.walk.data.num_assets
        return [[self.walk.env_records(rec, k, replica=i) for k in range(a)] for i in range(len(self.variants))]


def choose(variant_means: Mapping[str, Mapping[str, float]], metric: str = "sharpe") -> dict[str, str]:
    """Per tuned rule, the label of its variant with the highest mean ``metric`` (ties: first)."""
    out = {}
    for rule in TUNED_RULES:
        best, best_v = None, -math.inf
        for x in variants():
            if x.rule != rule:
                continue
            v = variant_means[x.label][metric]
            if v > best_v:
                best, best_v = x.label, v
        out[rule] = best
    return out


def parse_label(label: str) -> RuleVariant:
    """Inverse of :attr:`RuleVariant.label`."""
    for x in variants():
        if x.label == label:
            return x
    if label == "flat":
        return RuleVariant("flat")
    raise ValueError(f"rule: unknown variant {label!r}; expected one of {[x.label for x in variants()]}")
