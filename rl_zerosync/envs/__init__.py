"""Batched torch trading env, market data (synthetic and files), gymnasium twin and evaluation.

Importing this package registers the gymnasium ids ``"rl_zerosync/Trading-v0"`` (the numpy twin,
:class:`NumpyTradingEnv`, the default) and ``"rl_zerosync/TradingTorch-v0"`` (the torch reference,
:class:`TradingGymEnv`).
"""
from rl_zerosync.envs.batched import BatchedTradingEnv
from rl_zerosync.envs.cartpole import BatchedCartPole
from rl_zerosync.envs.config import make_market
from rl_zerosync.envs.core import EnvState, EnvTables, env_step, init_state, make_tables, observe, reset_state
from rl_zerosync.envs.episode_stats import metrics_names, summarize_metrics
from rl_zerosync.envs.backtest import EvalResult, evaluate_policy
from rl_zerosync.envs.gym_twin import (
    ENV_ID, ENV_ID_IMPORTABLE, TORCH_ENV_ID, TORCH_ENV_ID_IMPORTABLE, TradingGymEnv, register,
)
from rl_zerosync.envs.loaders import load_market
from rl_zerosync.envs.market import FeatureConfig, MarketData, build_market
from rl_zerosync.envs.numpy_twin import NumpyTradingEnv
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.envs.protocol import BatchedEnv, register_batched_env, registered_batched_envs
from rl_zerosync.envs.synthetic import synthetic_market

register()

__all__ = [
    "BatchedCartPole", "BatchedEnv", "register_batched_env", "registered_batched_envs",
    "BatchedTradingEnv", "ENV_ID", "ENV_ID_IMPORTABLE", "EnvParams", "EnvState", "EnvTables", "EvalResult", "FeatureConfig", "MarketData",
    "NumpyTradingEnv", "TORCH_ENV_ID", "TORCH_ENV_ID_IMPORTABLE", "TradingGymEnv", "build_market", "env_step", "evaluate_policy", "init_state", "load_market", "make_market",
    "make_tables", "metrics_names", "observe", "reset_state", "summarize_metrics", "synthetic_market",
]
