"""Typed settings of the GPU env runner, read from ``config.env_config["runner"]``.

The epsilon rule (:func:`normalize_epsilon_schedule`, re-exported here) lives in
:mod:`rl_zerosync.env_runner.epsilon`; the action modes in :mod:`rl_zerosync.actions`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from rl_zerosync.actions import ACTION_MODES, DEFAULT_ACTION_MODE
from rl_zerosync.env_runner.epsilon import EpsilonSchedule, normalize_epsilon_schedule
from rl_zerosync.kernels.route import ROUTING_DEFAULTS, ROUTING_THRESHOLDS
from rl_zerosync.presets import check_model_value

__all__ = ["DEVICES", "OUTPUTS", "EpsilonSchedule", "RunnerSettings", "action_mode_from_model_config",
           "normalize_epsilon_schedule"]

OUTPUTS = ("columnar", "episodes")
MAX_SEED = 2**64 - 1
"""The largest ``seed``: the counter-based RNG of the actions and envs keys seeds in ``[0, 2**64)``."""
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class RunnerSettings:
    """Settings of :class:`~rl_zerosync.env_runner.GPUEnvRunner` (``env_config["runner"]``)."""

    output: str = "columnar"
    """What ``sample()`` returns: ``columnar`` (a dict of ``[T, N, ...]`` tensors, the fast path) or
    ``episodes`` (``SingleAgentEpisode`` objects, for stock RLlib DQN)."""
    device: str = "auto"
    """Where envs and the inference module live: ``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    graph: bool = True
    """Capture the T-step rollout in one CUDA graph and replay it (CUDA only; ignored on CPU).

    Measured on one H200 (benchmarks/results/env_runner.json): 3.3x (64k envs) to 12x (1k envs) more env
    steps/s than eager."""
    overlap: bool = False
    """Sample the iteration's rollouts while the learner trains on the replay as it was before them: on the
    runner's own CUDA stream when runner and learner are in the driver, as asynchronous Ray calls with remote
    env runners (DDP learners included); refused with a local runner and remote learners; results are
    reproducible for a given setting.

    Runner and learner in the driver process (num_env_runners 0, num_learners 0): each iteration launches its
    rollout on the runner's own CUDA stream, enqueues the iteration's updates on the learner's stream, then
    waits for the rollout and adds it (on CPU the same order runs without concurrency). Remote env runners
    (num_env_runners >= 1, any num_learners): the rollouts are asynchronous Ray calls that run while the
    learners train; K follows the env steps the previous iteration sampled. Either way the rollouts act with
    the weights of the previous iteration, as without overlap, and the updates see data one rollout older."""
    check_env: bool = True
    """Check the runner's envs against the ``BatchedEnv`` protocol when they are built
    (:func:`~rl_zerosync.envs.check.check_batched_env`: a few steps, before the first rollout resets them);
    ``false`` skips it."""
    seed: Optional[int] = None
    """Seed of the action RNG and the envs (None, the Python API's default: the config's seed, or 0), 0 to
    2**64 − 1; the worker index is added."""
    epsilon: Optional[Any] = None
    """An epsilon schedule for the runner alone (same rule as ``algo.epsilon``,
    :func:`~rl_zerosync.env_runner.epsilon.normalize_epsilon_schedule`); None: the config's ``epsilon``."""
    wide: float = ROUTING_DEFAULTS["wide"]
    """Routing: spread / median spread at or above this is a wide spread; > 0."""
    high_vol: float = ROUTING_DEFAULTS["high_vol"]
    """Routing: vol / median vol at or above this is high volatility; > 0."""
    low_vol: float = ROUTING_DEFAULTS["low_vol"]
    """Routing: vol / median vol at or below this gets LOW urgency; > 0 and <= ``high_vol``."""

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ValueError(f"runner.output must be one of {OUTPUTS}, got {self.output!r}")
        if self.device not in DEVICES:
            raise ValueError(f"runner.device must be one of {DEVICES}, got {self.device!r}")
        if not isinstance(self.graph, bool):
            raise ValueError(f"runner.graph must be a bool, got {self.graph!r}")
        if not isinstance(self.overlap, bool):
            raise ValueError(f"runner.overlap must be a bool, got {self.overlap!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED
        ):
            raise ValueError(f"runner.seed must be None or an integer in [0, 2**64 - 1], got {self.seed!r}")
        if self.epsilon is not None:
            object.__setattr__(
                self, "epsilon", normalize_epsilon_schedule(self.epsilon, field="runner.epsilon")
            )
        for name in ROUTING_THRESHOLDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"runner.{name} must be a finite number > 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.low_vol > self.high_vol:
            raise ValueError(
                f"runner.low_vol must be <= runner.high_vol, got low_vol={self.low_vol}, "
                f"high_vol={self.high_vol}"
            )

    @classmethod
    def from_env_config(cls, env_config: Optional[Mapping[str, Any]]) -> "RunnerSettings":
        """Builds the settings from ``env_config["runner"]`` (missing: defaults)."""
        runner_cfg = (env_config or {}).get("runner") or {}
        if not isinstance(runner_cfg, Mapping):
            raise ValueError(f"env_config['runner'] must be a mapping, got {type(runner_cfg).__name__}")
        allowed = tuple(f.name for f in fields(cls))
        unknown = sorted(set(runner_cfg) - set(allowed))
        if unknown:
            raise ValueError(f"env_config['runner'] has unknown keys {unknown}; allowed: {allowed}")
        return cls(**runner_cfg)


def action_mode_from_model_config(model_config: Optional[Mapping[str, Any]], *, trading: bool = True) -> str:
    """``model_config["action_mode"]`` (default ``DEFAULT_ACTION_MODE`` for the trading env, "flat"
    for other batched envs), validated by the Q module's rule (:func:`rl_zerosync.presets.check_model_value`)."""
    mode = (model_config or {}).get("action_mode", DEFAULT_ACTION_MODE if trading else "flat")
    check_model_value("action_mode", mode)
    return mode
