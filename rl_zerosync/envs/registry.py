"""The registry of batched envs: name -> factory, with the built-in envs registered on import.

``register_batched_env(name, factory)`` makes ``config.environment(name)`` step ``factory``'s envs;
:func:`resolve_batched_env` is the one place a ``config.env`` value becomes a factory (the GPU env
runner builds every env through it, the trading env included), and :func:`spaces_of` gives one
env's spaces without building the built-ins. The built-ins: ``"rl_zerosync/Trading-v0"`` (the trading
env, also the default when ``config.env`` is None, and the importable gymnasium id the YAML settings
use; its factory is :meth:`BatchedTradingEnv.from_env_config`) and ``"rl_zerosync/CartPole-v1"``.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

import gymnasium as gym
import torch

from rl_zerosync.envs.batched import BatchedTradingEnv
from rl_zerosync.envs.cartpole import BatchedCartPole
from rl_zerosync.envs.gym_twin import ENV_ID_IMPORTABLE
from rl_zerosync.envs.protocol import BatchedEnv, EnvFactory

TRADING_ENV_ID = "rl_zerosync/Trading-v0"
"""The trading env (also the default when ``config.env`` is None)."""
CARTPOLE_ENV_ID = "rl_zerosync/CartPole-v1"

_REGISTRY: dict[str, EnvFactory] = {
    TRADING_ENV_ID: BatchedTradingEnv.from_env_config,
    ENV_ID_IMPORTABLE: BatchedTradingEnv.from_env_config,  # the id the YAML settings use
    CARTPOLE_ENV_ID: BatchedCartPole,
}


def register_batched_env(name: str, factory: EnvFactory) -> None:
    """Register ``factory(env_config, num_envs, device, seed)`` (usually a :class:`BatchedEnv`
    subclass) under ``name`` for ``config.environment(name)``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_batched_env: name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise ValueError(f"register_batched_env({name!r}): factory must be callable, got {factory!r}")
    _REGISTRY[name] = factory


def registered_batched_envs() -> list[str]:
    return sorted(_REGISTRY)


def resolve_batched_env(env: Union[None, str, type]) -> EnvFactory:
    """The factory for ``config.env``: None (the trading env), a registered name, or a
    :class:`BatchedEnv` subclass. Anything else is a ValueError naming the env and what is
    supported (never a silent substitution)."""
    if env is None:
        return _REGISTRY[TRADING_ENV_ID]
    if isinstance(env, type) and issubclass(env, BatchedEnv):
        return env
    if isinstance(env, str) and env in _REGISTRY:
        return _REGISTRY[env]
    what = env.__name__ if isinstance(env, type) else repr(env)
    hint = (f"; for a batched CartPole use {CARTPOLE_ENV_ID!r}" if isinstance(env, str) and "cartpole" in env.lower()
            else "")
    raise ValueError(
        f"config.env {what}: ZeroSyncDQN's GPU env runner steps batched envs (rl_zerosync.envs.BatchedEnv), "
        f"and this is not one. Registered batched envs: {registered_batched_envs()}{hint}. Register yours "
        "with rl_zerosync.envs.register_batched_env(name, cls) or pass a BatchedEnv subclass; for gymnasium "
        "envs use stock RLlib DQN")


def env_class_of(factory: EnvFactory) -> Optional[type]:
    """The :class:`BatchedEnv` subclass a factory builds, when known without building it: the
    factory itself, or the class of a classmethod factory (the trading env's); else None."""
    owner = factory if isinstance(factory, type) else getattr(factory, "__self__", None)
    return owner if isinstance(owner, type) and issubclass(owner, BatchedEnv) else None


def spaces_of(env: Union[None, str, type], env_config: Mapping[str, Any]) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    """One env's (observation, action) spaces for ``config.env`` (no envs built for the built-ins)."""
    factory = resolve_batched_env(env)
    env_class = env_class_of(factory)
    if env_class is not None:
        obs_space, act_space = env_class.spaces_for(env_config)
    else:
        probe = factory(env_config, 1, torch.device("cpu"), 0)
        obs_space, act_space = probe.observation_space, probe.action_space
    if not isinstance(act_space, gym.spaces.Discrete) or int(act_space.n) < 2:
        raise ValueError(f"config.env {env!r}: action space must be gymnasium.spaces.Discrete(n) with n >= 2, "
                         f"got {act_space!r}")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"config.env {env!r}: observation space must be a 1-D gymnasium.spaces.Box, got {obs_space!r}")
    return obs_space, act_space
