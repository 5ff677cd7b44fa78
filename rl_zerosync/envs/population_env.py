"""The envs of P population members stepped as one batch: ``P x N`` trading envs, one set of kernels.

:class:`PopulationTradingEnv` takes the members' own :class:`~rl_zerosync.envs.batched.BatchedTradingEnv`
(same shapes, same env parameters but the seed) and continues all of them as one batch of
``P x N`` envs, member ``k`` at rows ``[k N, (k + 1) N)``:

* **market data**: the members' series concatenated along the asset axis (member ``k``'s assets at
  rows ``[k A, (k + 1) A)``). Each member's env keeps *views* of its rows, so its fresh series
  (``data.regenerate_every``, advanced by the member's own ``before_rollout``) land in the batch;
* **random draws**: each env draws with its member's seed key and its own env id
  (:func:`rl_zerosync.kernels.rng.random_bits` with per-env keys), so an env of member ``k`` draws
  what it draws in member ``k``'s own env: episode resets pick among member ``k``'s assets
  (``EnvTables.asset_base`` / ``member_assets``), stochastic fills use member ``k``'s seed;
* **state**: the members' states at hand-over, concatenated (assets made global); the env counter
  is shared, which needs the members' counters equal (a population steps in lockstep);
* **metrics**: the completed-episode accumulator is ``f64[P, METRICS_SIZE]``, row ``k`` member
  ``k``'s (``EnvTables.groups``).

Every per-env operation of :mod:`rl_zerosync.envs.core` is elementwise or a gather, so member ``k``'s
rows are bit for bit what its own env computes; only the per-member sums of the accumulator are a
different reduction (float64, ``tests/test_population_env.py``).
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Sequence

import torch

from rl_zerosync.envs.batched import BatchedTradingEnv
from rl_zerosync.envs.core import EnvState, env_step, make_tables, route_inputs
from rl_zerosync.envs.episode_stats import METRICS_SIZE
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.protocol import BatchedEnv
from rl_zerosync.kernels.rng import seed_keys


def _check_members(members: Sequence[BatchedTradingEnv]) -> None:
    """A named error unless the members' envs can be one batch."""
    if not members:
        raise ValueError("PopulationTradingEnv: no member envs")
    first = members[0]
    for k, env in enumerate(members):
        if not isinstance(env, BatchedTradingEnv):
            raise ValueError(f"PopulationTradingEnv: member {k}'s env is {type(env).__name__}; "
                             "only the trading env (BatchedTradingEnv) is batched over members")
        d, d0 = env.data, first.data
        same = {
            "device": (env.device, first.device),
            "num_envs": (env.num_envs, first.num_envs),
            "data shape": (tuple(d.close.shape), tuple(d0.close.shape)),
            "data fields": (d.present_fields, d0.present_fields),
            "data features": (d.features, d0.features),
            "periods_per_year": (d.periods_per_year, d0.periods_per_year),
            "env parameters (but the seed)": (replace(env.params, seed=0), replace(first.params, seed=0)),
            "stagger": (env.stagger, first.stagger),
            "routing thresholds": (env.routing, first.routing),
        }
        for what, (mine, theirs) in same.items():
            if mine != theirs:
                raise ValueError(f"PopulationTradingEnv: member {k}'s {what} is {mine!r}, member 0's {theirs!r}; "
                                 "one batch needs the same shapes and parameters")


def _concat_data(members: Sequence[BatchedTradingEnv]) -> MarketData:
    """The members' data along the asset axis; each member's env is pointed at views of its rows."""
    datas = [env.data for env in members]
    a = datas[0].num_assets
    names = datas[0].present_fields + ("valid_start", "length")
    joined = {f: torch.cat([getattr(d, f) for d in datas], dim=0) for f in names}
    for k, env in enumerate(members):
        env.data = replace(env.data, **{f: joined[f][k * a:(k + 1) * a] for f in names})
    asset_names = tuple(f"member{k}/{n}" for k, d in enumerate(datas) for n in d.asset_names)
    offsets = None if datas[0].offsets is None else tuple(o for d in datas for o in d.offsets)
    return replace(datas[0], **joined, asset_names=asset_names, timestamps=None, offsets=offsets)


class PopulationTradingEnv(BatchedEnv):
    """``P x N`` envs continuing the members' envs as one batch (see the module docstring).

    Its fresh series are advanced by the members' own envs (``before_rollout``, into this batch's data
    rows) and the members' runners close them; the protocol's defaults serve here.

    Args:
        members: Every member's trading env (same device, shapes and parameters but the seed), each
            at the same env counter. They are continued from their current state; afterwards their
            own state is stale (step this batch instead), their data tensors are views of the batch's.
    """

    metrics_key = "trading"
    factored_actions = True

    def __init__(self, members: Sequence[BatchedTradingEnv]) -> None:
        _check_members(members)
        self.members = list(members)
        first = members[0]
        p, n, a = len(members), first.num_envs, first.data.num_assets
        counters = torch.cat([env.state.counter for env in members]).tolist()  # host read: hand-over check
        if len(set(counters)) != 1:
            raise ValueError(f"PopulationTradingEnv: the members' env counters differ ({counters}); "
                             "members are batched from the same step only")
        self.device, self.num_envs, self.size = first.device, p * n, p
        self.data = _concat_data(members)
        member = torch.arange(p, dtype=torch.int64, device=self.device).repeat_interleave(n)
        self.tables = replace(
            make_tables(self.data, first.params),
            seed_keys=seed_keys([env.params.seed for env in members], self.device)[member],
            asset_base=member * a, member_assets=a, groups=p,
        )
        self.state = self._joined_state(a)
        self.final_obs = torch.cat([env.final_obs for env in members])
        self._update_route_inputs()
        self.observation_space, self.action_space = first.observation_space, first.action_space

    def _joined_state(self, assets_per_member: int) -> EnvState:
        parts = {}
        for f in fields(EnvState):
            own = [getattr(env.state, f.name) for env in self.members]
            if f.name == "asset":
                parts[f.name] = torch.cat([x + k * assets_per_member for k, x in enumerate(own)])
            elif f.name == "acc":
                parts[f.name] = torch.stack(own)
            elif f.name == "counter":
                parts[f.name] = own[0].clone()
            else:
                parts[f.name] = torch.cat(own)
        return EnvState(**parts)

    def reset(self, seed=None) -> torch.Tensor:
        raise NotImplementedError("PopulationTradingEnv continues its members' envs; reset the members' envs "
                                  "and batch them again")

    def step(self, actions: torch.Tensor):
        """As :meth:`BatchedTradingEnv.step` for the ``P x N`` envs (member k's actions at its rows)."""
        self.state, obs, reward, terminated, truncated, self.final_obs = env_step(
            self.data, self.tables, self.state, actions)
        self._update_route_inputs()
        return obs, reward, terminated, truncated, self.final_obs

    def _update_route_inputs(self) -> None:
        self.spread, self.median_spread, self.vol, self.median_vol = route_inputs(self.data, self.state)

    def route_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.spread, self.median_spread, self.vol, self.median_vol

    def metrics_vector(self) -> torch.Tensor:
        """f64[P, METRICS_SIZE]: row k member k's completed-episode sums and action counts."""
        return self.state.acc

    def reset_metrics(self) -> None:
        self.state = replace(self.state, acc=torch.zeros(self.size, METRICS_SIZE, dtype=torch.float64,
                                                         device=self.device))
