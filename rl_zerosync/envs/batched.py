"""``BatchedTradingEnv``: a thin stateful shell around the pure functions of :mod:`.core`."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import torch

from rl_zerosync.envs.core import EnvState, EnvTables, env_step, init_state, make_tables, observe, route_inputs
from rl_zerosync.envs.episode_stats import EP_INDEX, METRICS_SIZE, metrics_names
from rl_zerosync.envs.market import MarketData
from rl_zerosync.envs.params import EnvParams


class BatchedTradingEnv:
    """N trading envs stepped together on one device, with auto-reset and no host reads in ``step``.

    Attributes updated by ``reset()``/``step()`` (device tensors):
    ``final_obs`` f32[N, D] (pre-reset next observation of every env; differs from the returned obs
    only where an episode ended), ``spread``, ``median_spread``, ``vol``, ``median_vol`` f32[N] (routing
    inputs at each env's current bar), ``state`` (:class:`EnvState`).
    """

    def __init__(
        self,
        data: MarketData,
        params: EnvParams | Mapping[str, Any] | None = None,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        *,
        env_id_offset: int = 0,
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
        self.state: EnvState = init_state(self.data, self.tables, self._env_ids)
        self.final_obs = observe(self.data, self.tables, self.state)
        self._update_route_inputs()

    @property
    def observation_dim(self) -> int:
        return self.params.observation_dim

    def reset(self) -> torch.Tensor:
        """Start every env afresh (RNG step 0, metrics zeroed); returns obs f32[N, D]."""
        self.state = init_state(self.data, self.tables, self._env_ids)
        obs = observe(self.data, self.tables, self.state)
        self.final_obs = obs
        self._update_route_inputs()
        return obs

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Apply factored actions i64[N] (0..44, not checked here); returns post-reset
        ``(obs f32[N, D], reward f32[N], terminated bool[N], truncated bool[N])``."""
        self.state, obs, reward, terminated, truncated, self.final_obs = env_step(
            self.data, self.tables, self.state, actions
        )
        self._update_route_inputs()
        return obs, reward, terminated, truncated

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
