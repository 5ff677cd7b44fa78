"""``BatchedEnv``: the protocol the GPU env runner steps (the registry of names is
:mod:`rl_zerosync.envs.registry`).

A batched env holds N copies of one environment on one device and steps them together with
device tensors in and out, auto-resetting the ones that ended. Implement it to train your own env
with :class:`~rl_zerosync.algorithm.ZeroSyncDQN` (``GPUEnvRunner``)::

    class MyEnv(BatchedEnv):
        def __init__(self, env_config, num_envs, device, seed): ...
        observation_space = gym.spaces.Box(-inf, inf, (D,), np.float32)   # one env's spaces
        action_space = gym.spaces.Discrete(n)
        def reset(self, seed=None) -> obs f32[N, D]
        def step(self, actions i64[N]) -> (obs f32[N, D], reward f32[N], terminated bool[N],
                                          truncated bool[N], final_obs f32[N, D])

    register_batched_env("my/Env-v0", MyEnv)        # or pass the class itself
    config = ZeroSyncDQNConfig().environment("my/Env-v0", env_config={...})

The GPU env runner builds every env through its factory, with ``env_config`` as an RLlib
``EnvContext``: the run's ``env_config`` mapping, plus ``worker_index`` (0: the local runner, 1, 2,
...: remote runners) and ``num_workers`` attributes; ``seed`` is the runner's seed (run seed +
worker index).

Contract of ``step``: ``obs`` is the observation after auto-reset (what the next step acts on),
``final_obs`` the observation each transition ended in (equal to ``obs`` except where an episode
ended this step), both ``float32 [N, D]``; nothing in ``reset``/``step`` may read device memory on
the host (the runner captures a whole rollout in a CUDA graph on a GPU: keep tensors at fixed
addresses or return fresh ones; no Python branching on tensor values). Randomness should come from
counters (see :mod:`rl_zerosync.kernels.rng`) or be graph-safe.

Check an env with :func:`rl_zerosync.envs.check.check_batched_env` (gymnasium's ``check_env`` for
batched envs: shapes and dtypes of ``reset``/``step`` against the spaces, bool done flags (float
ones are an error), auto-reset, no host sync in ``step`` on CUDA, determinism of ``reset()`` + the same
actions). The GPU env runner runs it on its own envs once, when it builds them, before its rollout
resets them (``env_config["runner"]["check_env"]: False`` skips it); a failure is a
``BatchedEnvCheckError`` naming the env and what was expected.

Optional parts (defaults in the base class):

* episode metrics: ``metrics_vector()`` (a float64 device vector accumulated since
  ``reset_metrics()``) and ``summarize_metrics(values)`` (host list -> ``{name: float}``), logged
  under ``metrics_key`` (``"env_metrics"``; the trading env: ``"trading"``) once per rollout;
* routing inputs for ``action_mode: routed`` (trading envs only): ``route_inputs()`` ->
  ``(spread, median_spread, vol, median_vol)`` f32[N], and ``route_thresholds()`` -> the routing
  rule's ``wide`` / ``high_vol`` / ``low_vol`` (absent ones: the route kernel's defaults);
* between rollouts: ``before_rollout(index)``, called before the runner launches rollout
  ``index`` (0, 1, ...), outside any captured graph and on the stream the rollout runs on (e.g.
  new data copied into the env's tensors in place; shapes and addresses must not change); returns
  ``{name: value}`` the runner logs (window 1); ``close()`` when the runner stops;
* ``spaces_for(env_config)``: a classmethod giving the spaces without building the envs (default:
  a 1-env instance on the CPU).

``action_mode: flat`` (Q over ``Discrete(n)``, any ``n >= 2``) works with every batched env;
``routed`` and ``branching`` need the trading env's action layout (``rl_zerosync.actions``), which a
class declares with ``factored_actions = True`` (then ``routed`` is its default action mode).
"""
from __future__ import annotations

import abc
from typing import Any, Callable, Mapping, Optional

import gymnasium as gym
import torch

EnvFactory = Callable[..., "BatchedEnv"]
"""``factory(env_config, num_envs, device, seed) -> BatchedEnv`` (usually a subclass itself)."""


class BatchedEnv(abc.ABC):
    """N envs on one device, stepped together (see the module doc for the contract)."""

    num_envs: int
    device: torch.device
    observation_space: gym.spaces.Box
    action_space: gym.spaces.Discrete
    metrics_key: str = "env_metrics"
    """Key under which the runner logs ``summarize_metrics``."""
    factored_actions: bool = False
    """The actions are the factored ``Discrete(45)`` of :mod:`rl_zerosync.actions` (exposure x order
    type x urgency): ``action_mode`` routed (the default then) and branching need it."""

    @abc.abstractmethod
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """Start every env afresh; returns obs f32[N, D]."""

    @abc.abstractmethod
    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                   torch.Tensor]:
        """Apply actions i64[N]; returns ``(obs, reward, terminated, truncated, final_obs)``."""

    # --- optional -----------------------------------------------------------------------------
    @classmethod
    def spaces_for(cls, env_config: Mapping[str, Any]) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        """(observation space, action space) of one env of this class."""
        env = cls(env_config, 1, torch.device("cpu"), 0)
        return env.observation_space, env.action_space

    def metrics_vector(self) -> Optional[torch.Tensor]:
        """Float64 device vector of episode metrics since ``reset_metrics`` (None: no metrics)."""
        return None

    def reset_metrics(self) -> None:
        """Zero what ``metrics_vector`` accumulates."""

    def summarize_metrics(self, values: list) -> dict[str, float]:
        """Host values of ``metrics_vector`` -> named metrics."""
        return {}

    def route_inputs(self) -> Optional[tuple[torch.Tensor, ...]]:
        """``(spread, median_spread, vol, median_vol)`` f32[N] at each env's current step, or None."""
        return None

    def route_thresholds(self) -> dict[str, float]:
        """The routing rule's ``wide`` / ``high_vol`` / ``low_vol`` for ``route_inputs`` (absent
        ones: the route kernel's defaults)."""
        return {}

    def before_rollout(self, index: int) -> dict[str, float]:
        """Called before rollout ``index`` is launched (outside any captured graph); returns
        metrics for the runner to log."""
        return {}

    def close(self) -> None:
        """Release what the envs hold besides their tensors (e.g. a helper process)."""
