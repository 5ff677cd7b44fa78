"""Batched envs: the protocol and its registry, the batched trading env (and its pure step), the
batched CartPole, and the gymnasium twins of the trading env.

Importing this package registers the gymnasium ids ``"rl_zerosync/Trading-v0"`` (the numpy twin,
:class:`NumpyTradingEnv`, the default) and ``"rl_zerosync/TradingTorch-v0"`` (the torch reference,
:class:`TradingGymEnv`). Market data lives in :mod:`rl_zerosync.data`, backtests in
:mod:`rl_zerosync.evaluation`.
"""
from rl_zerosync.envs.batched import BatchedTradingEnv
from rl_zerosync.envs.cartpole import BatchedCartPole
from rl_zerosync.envs.check import BatchedEnvCheckError, check_batched_env
from rl_zerosync.envs.core import EnvState, EnvTables, env_step, init_state, make_tables, observe, reset_state
from rl_zerosync.envs.episode_stats import metrics_names, summarize_metrics
from rl_zerosync.envs.gym_twin import (
    ENV_ID, ENV_ID_IMPORTABLE, TORCH_ENV_ID, TORCH_ENV_ID_IMPORTABLE, TradingGymEnv, register,
)
from rl_zerosync.envs.numpy_twin import NumpyTradingEnv
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.envs.protocol import BatchedEnv
from rl_zerosync.envs.registry import register_batched_env, registered_batched_envs

register()

__all__ = [
    "BatchedCartPole", "BatchedEnv", "BatchedEnvCheckError", "BatchedTradingEnv", "ENV_ID", "ENV_ID_IMPORTABLE", "EnvParams", "EnvState",
    "EnvTables", "NumpyTradingEnv", "TORCH_ENV_ID", "TORCH_ENV_ID_IMPORTABLE", "TradingGymEnv", "check_batched_env", "env_step",
    "init_state", "make_tables", "metrics_names", "observe", "register_batched_env", "registered_batched_envs",
    "reset_state", "summarize_metrics",
]
