"""``BatchedTradingEnv``: a thin stateful shell around the pure functions of :mod:`.core`; the
trading implementation of :class:`~rl_zerosync.envs.protocol.BatchedEnv`, built by the registry
from ``env_config`` with :meth:`BatchedTradingEnv.from_env_config`."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch

from rl_zerosync.actions import NUM_ACTIONS
from rl_zerosync.kernels.rng import STREAM_USER_BASE, bits24
from rl_zerosync.envs.core import EnvState, EnvTables, env_step, init_state, make_tables, observe, route_inputs
from rl_zerosync.envs.episode_stats import EP_INDEX, METRICS_SIZE, metrics_names
from rl_zerosync.data.data_settings import make_market, regenerate_every
from rl_zerosync.data.fresh import FreshSeries
from rl_zerosync.data.market import FeatureConfig, MarketData
from rl_zerosync.kernels.route import routing_thresholds
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.envs.protocol import BatchedEnv


def observation_space(params: EnvParams, features: FeatureConfig) -> gym.spaces.Box:
    """The trading env's observation space, built without market data (bounds as ``TradingGymEnv``:
    clipped normalized returns, position within the exposure levels, clipped log ratios, progress)."""
    d, k = params.observation_dim, params.window
    low = np.full(d, -features.ratio_clip, dtype=np.float32)
    high = np.full(d, features.ratio_clip, dtype=np.float32)
    low[:k], high[:k] = -features.ret_clip, features.ret_clip
    low[k] = min(params.exposure_levels + (0.0,))
    high[k] = max(params.exposure_levels + (0.0,))
    low[k + 3], high[k + 3] = 0.0, 1.0
    return gym.spaces.Box(low=low, high=high, dtype=np.float32)


STREAM_STAGGER = STREAM_USER_BASE + 8
"""RNG stream of the staggered first-episode step counters (``stagger=True``)."""


class BatchedTradingEnv(BatchedEnv):
    """N trading envs stepped together on one device, with auto-reset and no host reads in ``step``.

    Attributes updated by ``reset()``/``step()`` (device tensors):
    ``final_obs`` f32[N, D] (pre-reset next observation of every env; differs from the returned obs
    only where an episode ended), ``spread``, ``median_spread``, ``vol``, ``median_vol`` f32[N] (routing
    inputs at each env's current bar), ``state`` (:class:`EnvState`).

    ``stagger=True`` (the GPU env runner passes ``env.stagger_start``) starts each env's first
    episode at a random step counter, so episodes do not all end together.

    ``routing``: the routing thresholds (``wide``, ``high_vol``, ``low_vol``; absent ones take the
    route kernel's defaults) that :meth:`route_thresholds` gives the GPU env runner. ``fresh``: the
    generations of training series (``data.regenerate_every`` of ``fresh.cfg``) that
    :meth:`before_rollout` swaps into ``data`` in place; :meth:`close` stops its prefetch process.

    As a :class:`BatchedEnv` its action space is the factored ``Discrete(45)``
    (:mod:`rl_zerosync.actions`, ``factored_actions``) and its metrics are logged under
    ``"trading"``. The registry's factory (``factory(env_config, num_envs, device, seed)``) is
    :meth:`from_env_config`, which builds the market data (split, fresh series) from ``env_config``.
    """

    metrics_key = "trading"
    factored_actions = True

    def __init__(
        self,
        data: MarketData,
        params: EnvParams | Mapping[str, Any] | None = None,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        env_id_offset: int = 0,
        stagger: bool = False,
        routing: Mapping[str, float] | None = None,
        fresh: FreshSeries | None = None,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"BatchedTradingEnv.num_envs: expected an int >= 1, got {num_envs!r}")
        if isinstance(env_id_offset, bool) or not isinstance(env_id_offset, int) or not 0 <= env_id_offset < 2**32 - num_envs:
            raise ValueError(f"BatchedTradingEnv.env_id_offset: expected an int in [0, 2**32 - num_envs), got {env_id_offset!r}")
        if not isinstance(params, EnvParams):
            params = EnvParams.from_dict(params)
        if seed is not None:
            params = replace(params, seed=seed)
        self.device = torch.device(device)
        self.data = data.to(self.device)
        self.params = params
        self.num_envs = num_envs
        self.tables: EnvTables = make_tables(self.data, params)
        self._env_ids = torch.arange(num_envs, dtype=torch.int64, device=self.device) + env_id_offset
        self.stagger = bool(stagger)
        self.state: EnvState = self._initial_state()
        self.final_obs = observe(self.data, self.tables, self.state)
        self._update_route_inputs()
        self.observation_space = observation_space(params, self.data.features)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.routing = dict(routing or {})
        self._fresh = fresh
        self._regenerate_every = regenerate_every(fresh.cfg) if fresh is not None else 0

    @classmethod
    def from_env_config(cls, env_config: Mapping[str, Any], num_envs: int, device: torch.device | str,
                        seed: int) -> "BatchedTradingEnv":
        """The registry's factory: N trading envs of ``env_config`` (``data``, ``env``, ``split``,
        ``runner``'s routing thresholds) for the env runner ``env_config.worker_index`` (an RLlib
        ``EnvContext``; 0 for a plain mapping).

        Market data: ``make_market(data, split)`` (default split ``"train"``), or with
        ``data.regenerate_every`` the first fresh series of this runner (validation and test stay
        the held-out series ``data.seed``). Env ids start at ``(worker_index - 1) * num_envs`` (remote
        runners 1, 2, ... take distinct ids; the local runner shares runner 1's). ``seed`` (the
        runner's) reaches the env (episode assets and start bars, stochastic fills) unless the
        ``env`` section sets its own."""
        worker_index = int(getattr(env_config, "worker_index", 0) or 0)
        data_cfg = env_config.get("data")
        fresh = None
        if regenerate_every(data_cfg):
            fresh = FreshSeries(data_cfg, seed, worker_index)
            data = fresh.first()
        else:
            data = make_market(data_cfg, split=env_config.get("split", "train"))
        env_cfg = env_config.get("env")
        params = EnvParams.from_dict(env_cfg)
        return cls(data, params, num_envs, device, seed=None if "seed" in (env_cfg or {}) else seed,
                   env_id_offset=max(worker_index - 1, 0) * num_envs, stagger=params.stagger_start,
                   routing=routing_thresholds(env_config.get("runner")), fresh=fresh)

    @property
    def observation_dim(self) -> int:
        return self.params.observation_dim

    @classmethod
    def spaces_for(cls, env_config: Mapping[str, Any]) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        """Observation space from ``env_config["env"]`` / ``["data"]["features"]``; factored actions."""
        features = FeatureConfig.from_dict((env_config.get("data") or {}).get("features"))
        return observation_space(EnvParams.from_dict(env_config.get("env")), features), gym.spaces.Discrete(NUM_ACTIONS)

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """Start every env afresh (RNG step 0, metrics zeroed); returns obs f32[N, D]. ``seed``:
        a new env seed (episode assets, start bars, stochastic fills); None keeps the current one."""
        if seed is not None:
            self.params = replace(self.params, seed=int(seed))
            self.tables = make_tables(self.data, self.params)
        self.state = self._initial_state()
        obs = observe(self.data, self.tables, self.state)
        self.final_obs = obs
        self._update_route_inputs()
        return obs

    def step(self, actions: torch.Tensor):
        """Apply factored actions i64[N] (0..44, not checked here); returns ``(obs f32[N, D] (post
        reset), reward f32[N], terminated bool[N], truncated bool[N], final_obs f32[N, D])``."""
        self.state, obs, reward, terminated, truncated, self.final_obs = env_step(
            self.data, self.tables, self.state, actions
        )
        self._update_route_inputs()
        return obs, reward, terminated, truncated, self.final_obs

    def _initial_state(self) -> EnvState:
        """Every env at the start of an episode; with ``stagger`` each env's step counter starts at
        ``(bits24(seed, 0, STREAM_STAGGER, env_id) * episode_len) >> 24`` (its first episode is shorter)."""
        state = init_state(self.data, self.tables, self._env_ids)
        if not self.stagger:
            return state
        draw = bits24(self.params.seed, 0, STREAM_STAGGER, self._env_ids)
        return replace(state, step=(draw * self.params.episode_len) >> 24)

    def route_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.spread, self.median_spread, self.vol, self.median_vol

    def route_thresholds(self) -> dict[str, float]:
        return dict(self.routing)

    def before_rollout(self, index: int) -> dict[str, float]:
        """With fresh series: every ``data.regenerate_every`` rollouts the next generation is copied
        into ``data`` in place (running episodes carry on over it: same shapes, same bar indices);
        returns ``{"data_generation": n}`` then, else ``{}``."""
        if self._fresh is None or not index or index % self._regenerate_every:
            return {}
        return {"data_generation": self._fresh.advance(self.data)}

    def close(self) -> None:
        """Stop the fresh series' prefetch process (if any)."""
        if self._fresh is not None:
            self._fresh.close()
            self._fresh = None

    def summarize_metrics(self, values: list) -> dict[str, float]:
        from rl_zerosync.envs.episode_stats import summarize_metrics

        return summarize_metrics(values)

    def _update_route_inputs(self) -> None:
        self.spread, self.median_spread, self.vol, self.median_vol = route_inputs(self.data, self.state)

    @property
    def metrics(self) -> dict[str, torch.Tensor]:
        """Device tensors: per-env running episode metrics and the completed-episode vector."""
        s = self.state
        out = {
            "equity": s.equity, "position": s.pos, "max_drawdown": s.max_dd, "episode_step": s.step,
        }
        for name, i in EP_INDEX.items():
            out[f"episode_{name}"] = s.ep[:, i]
        out["completed"] = s.acc
        return out

    def metrics_vector(self) -> torch.Tensor:
        """Flat f64 device vector of completed-episode sums and action counts (see ``metrics_names``)."""
        return self.state.acc

    @staticmethod
    def metrics_names() -> list[str]:
        return metrics_names()

    def reset_metrics(self) -> None:
        """Zero the completed-episode accumulators on the device (running episodes are kept)."""
        self.state = replace(self.state, acc=torch.zeros(METRICS_SIZE, dtype=torch.float64, device=self.device))
