"""rl_zerosync: zero-sync DQN for trading on GPUs with Ray RLlib.

The public pieces (imported lazily, so ``import rl_zerosync`` stays cheap)::

    from rl_zerosync import ZeroSyncDQNConfig, ZeroSyncDQNTorchLearner, GPUEnvRunner, ZeroSyncQModule
"""

__version__ = "0.1.0"

_EXPORTS = {
    "ZeroSyncDQN": "rl_zerosync.algorithm",
    "ZeroSyncDQNConfig": "rl_zerosync.algorithm",
    "ZeroSyncDQNTorchLearner": "rl_zerosync.learner",
    "TrainingHalted": "rl_zerosync.learner",
    "GPUEnvRunner": "rl_zerosync.env_runner",
    "ZeroSyncQModule": "rl_zerosync.module",
    "BatchedTradingEnv": "rl_zerosync.envs",
    "TradingGymEnv": "rl_zerosync.envs",
    "load_settings": "rl_zerosync.config.settings",
    "to_rllib_config": "rl_zerosync.config.settings",
    "Policy": "rl_zerosync.serving.policy",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rl_zerosync' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(_EXPORTS[name])
    return getattr(module, "load" if name == "load_settings" else name)
