"""``TradingGymEnv``: the batched env's step function with N = 1 on the CPU, as a gymnasium.Env.

This is the torch reference twin (about 1 ms per step: a batch of one through the torch step
function), registered as :data:`TORCH_ENV_ID` (``"rl_zerosync/TradingTorch-v0"``). The id users get
by default, ``"rl_zerosync/Trading-v0"`` (:data:`ENV_ID`), is the numpy single-env twin
:class:`~rl_zerosync.envs.numpy_twin.NumpyTradingEnv`: the same maths, RNG and observation (tested
equal to this class and to the batched env) at about 10 us per step. Both are registered when
:mod:`rl_zerosync.envs` is imported, so stock RLlib can use them by name:
``config.environment("rl_zerosync/Trading-v0", env_config={"data": {...}, "env": {...}})`` (in
processes that may not have imported :mod:`rl_zerosync.envs`, such as remote env runners, use
:data:`ENV_ID_IMPORTABLE` or :data:`TORCH_ENV_ID_IMPORTABLE`). RLlib builds string envs with
``gymnasium.make_vec(name, **env_config)``, so the top-level keys of ``env_config`` arrive as
keyword arguments; a single ``env_config`` mapping works too. Both classes take the same keys and
seed the same way (below).

Keys: ``data`` (``make_market`` config, or a ``MarketData``), ``env`` (``EnvParams`` fields),
``runner`` (ignored), ``split`` ("train"), ``action_mode`` ("flat" -> Discrete(45) factored actions,
"routed" -> Discrete(5) exposures routed with the routing rule), ``routing`` (``wide``,
``high_vol``, ``low_vol`` thresholds), ``env_id`` (RNG index of this env).

Seeding: ``reset(seed=s)`` restarts the RNG step counter with seed ``s`` and ``env_id`` (0 when not
given), so a twin with ``env_id=i`` and seed ``s`` reproduces env ``i`` of a
``BatchedTradingEnv(..., seed=s)`` step for step. Without any seed the first reset uses
``EnvParams.seed`` and, when ``env_id`` is not given, a random ``env_id`` (so unseeded copies in a
vector env differ).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch

from rl_zerosync.actions import ACTION_MODES, NUM_ACTIONS, NUM_EXPOSURES
from rl_zerosync.envs.core import EnvState, init_state, make_tables, observe, reset_state, route_inputs, step_with_info
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.kernels.route import ROUTING_THRESHOLDS

ENV_ID = "rl_zerosync/Trading-v0"
"""The default gymnasium id: the numpy twin (:class:`~rl_zerosync.envs.numpy_twin.NumpyTradingEnv`)."""
ENV_ID_IMPORTABLE = "rl_zerosync.envs:" + ENV_ID
"""The id with gymnasium's ``module:`` prefix: works in processes that never imported the package
(e.g. remote RLlib env runners)."""
TORCH_ENV_ID = "rl_zerosync/TradingTorch-v0"
"""The torch reference twin (:class:`TradingGymEnv`)."""
TORCH_ENV_ID_IMPORTABLE = "rl_zerosync.envs:" + TORCH_ENV_ID
TWIN_ACTION_MODES = tuple(m for m in ACTION_MODES if m != "branching")
"""The action modes of the one-env twins (no branching head)."""
_KEYS = ("data", "env", "runner", "split", "action_mode", "routing", "env_id")


def parse_env_config(env_config: Mapping[str, Any] | None, kwargs: Mapping[str, Any],
                     owner: str = "TradingGymEnv") -> dict[str, Any]:
    """Validate the twins' configuration (see the module doc); returns ``data`` (a CPU
    ``MarketData``), ``params``, ``action_mode``, ``routing`` (float thresholds) and ``env_id``."""
    cfg = dict(env_config or {})
    cfg.update(kwargs)
    unknown = sorted(set(cfg) - set(_KEYS))
    if unknown:
        raise ValueError(f"{owner} env_config: unknown key(s) {unknown}; allowed keys are {list(_KEYS)}")
    data = cfg.get("data")
    if isinstance(data, MarketData):
        data = data.to("cpu")
    else:
        from rl_zerosync.data.data_settings import make_market

        data = make_market(data, split=cfg.get("split", "train")).to("cpu")
    env_cfg = cfg.get("env")
    params = env_cfg if isinstance(env_cfg, EnvParams) else EnvParams.from_dict(env_cfg)
    action_mode = cfg.get("action_mode", "flat")
    if action_mode not in TWIN_ACTION_MODES:
        raise ValueError(f"{owner} action_mode: expected one of {TWIN_ACTION_MODES}, got {action_mode!r}")
    routing = dict(cfg.get("routing") or {})
    bad = sorted(set(routing) - set(ROUTING_THRESHOLDS))
    if bad:
        raise ValueError(f"{owner} routing: unknown key(s) {bad}; allowed keys are {list(ROUTING_THRESHOLDS)}")
    env_id = cfg.get("env_id")
    if env_id is not None and (isinstance(env_id, bool) or not isinstance(env_id, int) or not 0 <= env_id < 2**32):
        raise ValueError(f"{owner} env_id: expected an int in [0, 2**32), got {env_id!r}")
    return {"data": data, "params": params, "action_mode": action_mode,
            "routing": {k: float(v) for k, v in routing.items()}, "env_id": env_id}


def observation_space_for(data: MarketData, params: EnvParams) -> gym.spaces.Box:
    """The observation space of the twins (bounds from the feature clips and exposure levels)."""
    d = params.observation_dim
    k = params.window
    feats = data.features
    low = np.full(d, -feats.ratio_clip, dtype=np.float32)
    high = np.full(d, feats.ratio_clip, dtype=np.float32)
    low[:k], high[:k] = -feats.ret_clip, feats.ret_clip
    low[k], high[k] = min(params.exposure_levels + (0.0,)), max(params.exposure_levels + (0.0,))
    low[k + 3], high[k + 3] = 0.0, 1.0
    return gym.spaces.Box(low=low, high=high, dtype=np.float32)


class TradingGymEnv(gym.Env):
    """Single trading env, torch reference (see the module doc for the configuration keys)."""

    metadata = {"render_modes": []}

    def __init__(self, env_config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__()
        c = parse_env_config(env_config, kwargs, "TradingGymEnv")
        self.data, self.params = c["data"], c["params"]
        self.action_mode, self.routing = c["action_mode"], c["routing"]
        self._fixed_env_id = c["env_id"]
        self.tables = make_tables(self.data, self.params)
        self.observation_space = observation_space_for(self.data, self.params)
        n_actions = NUM_ACTIONS if self.action_mode == "flat" else NUM_EXPOSURES
        self.action_space = gym.spaces.Discrete(n_actions)
        self._route = None
        self._state: EnvState | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None or self._state is None:
            if seed is not None:
                self.tables = replace(self.tables, params=replace(self.params, seed=int(seed)))
            env_id = self._fixed_env_id
            if env_id is None:
                env_id = 0 if seed is not None else int(self.np_random.integers(0, 2**24))
            self._state = init_state(self.data, self.tables, torch.tensor([env_id], dtype=torch.int64))
        else:
            self._state = reset_state(self.data, self.tables, torch.ones(1, dtype=torch.bool), self._state,
                                      self._state.counter)
        obs = observe(self.data, self.tables, self._state)
        return obs[0].numpy(), self._info(self._state)  # host read: the CPU twin returns numpy

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._state is None:
            raise ValueError("TradingGymEnv.step called before reset()")
        if not self.action_space.contains(action) and not (
            isinstance(action, (int, np.integer)) and 0 <= int(action) < self.action_space.n
        ):
            raise ValueError(f"TradingGymEnv.step: expected an action in 0..{self.action_space.n - 1}, got {action!r}")
        actions = torch.tensor([int(action)], dtype=torch.int64)
        if self.action_mode == "routed":
            actions = self._route_exposure(actions)
        self._state, _obs, reward, terminated, truncated, final_obs, moved, step_info = step_with_info(
            self.data, self.tables, self._state, actions
        )
        info = self._info(moved)
        info.update(
            action=int(actions[0]), trade=float(step_info.trade[0]), cost=float(step_info.cost[0]),
            pnl=float(step_info.pnl[0]),
        )
        # The CPU twin returns numpy and Python scalars (gymnasium API).
        return final_obs[0].numpy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info  # host read

    def _route_exposure(self, exposure: torch.Tensor) -> torch.Tensor:
        if self._route is None:
            from rl_zerosync.kernels import get_kernels

            self._route = get_kernels("cpu").route
        out = torch.empty(1, dtype=torch.int64)
        self._route(exposure, *route_inputs(self.data, self._state), out, **self.routing)
        return out

    def _info(self, state: EnvState) -> dict[str, Any]:
        return {
            "position": float(state.pos[0]), "equity": float(state.equity[0]),
            "asset": int(state.asset[0]), "bar": int(state.t[0]),
        }

    def metrics_vector(self) -> torch.Tensor:
        """Completed-episode accumulators of this env (same layout as the batched env)."""
        if self._state is None:
            raise ValueError("TradingGymEnv.metrics_vector called before reset()")
        return self._state.acc


def register() -> None:
    """Register :data:`ENV_ID` (the numpy twin) and :data:`TORCH_ENV_ID` (this class) with gymnasium
    (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="rl_zerosync.envs.numpy_twin:NumpyTradingEnv")
    if TORCH_ENV_ID not in gym.registry:
        gym.register(id=TORCH_ENV_ID, entry_point="rl_zerosync.envs.gym_twin:TradingGymEnv")
