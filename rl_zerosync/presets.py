"""The two default presets of a run, side by side: the one place each default value lives.

* :data:`API`: what a Python-API user gets from ``ZeroSyncDQNConfig()``: RLlib's ``DQNConfig``
  values, sized for one GPU env runner (1,024 envs x 32 steps per rollout). ``ZeroSyncDQNConfig``
  sets every field from here; ``LearnerSettings`` and the env runner / module epsilon fallback
  default to it.
* :data:`SETTINGS_FILE`: what a settings file (``configs/*.yaml``) gives for a key it leaves out
  (the fields of ``AlgoSettings`` and ``ModelSettings`` default to it). It is :data:`API` with the
  differences listed in one ``replace`` call: n-step 3, a batch of 1,024, a longer warm-up, a target
  update every 1,000 learner updates, a tighter gradient clip, a slower epsilon decay, 64-step
  rollouts and no dueling head.

Field names are the settings file's (``algo.*`` / ``model.*``); :func:`rl_zerosync.config.settings.to_rllib_config`
maps them onto RLlib's names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Tuple

__all__ = ["API", "DEFAULT_HIDDEN", "SETTINGS_FILE", "Preset", "check_positive_number"]

DEFAULT_HIDDEN: Tuple[int, ...] = (256, 256)
"""Hidden layer widths of the Q network (both presets, and a module built outside any config)."""


@dataclass(frozen=True)
class Preset:
    """Default values of one way of starting a run (see the module docstring)."""

    lr: float
    """Adam learning rate."""
    gamma: float
    """Discount factor."""
    n_step: int
    """n-step return horizon."""
    batch_size: int
    """Transitions per update (RLlib: ``train_batch_size_per_learner``; under :data:`API` RLlib's
    ``train_batch_size``, split over the learners unless a per-learner batch is set)."""
    learning_starts: int
    """Env steps sampled before the first update (RLlib: ``num_steps_sampled_before_learning_starts``)."""
    target_update_freq: int
    """Learner updates between target-network updates (RLlib: ``target_network_update_freq``)."""
    tau: float
    """Target update weight (1.0 = hard copy)."""
    double_q: bool
    """Double DQN target."""
    dueling: bool
    """Dueling head (routed/flat)."""
    grad_clip: float
    """Global gradient-norm clip."""
    epsilon: Tuple[Tuple[int, float], ...]
    """Piecewise-linear epsilon schedule over env steps, ``((step, value), ...)``."""
    replay_ratio: float
    """Trained transitions (all learners together) per sampled env step."""
    weight_decay: float
    """Decoupled weight decay of the optimizer (0 = Adam)."""
    num_envs_per_runner: int
    """Batched envs per env runner (RLlib: ``num_envs_per_env_runner``)."""
    rollout_length: int
    """Steps per env per rollout (RLlib: ``rollout_fragment_length``)."""
    env_runner_restart_timeout_s: float
    """Seconds an iteration waits for a remote env runner when none is healthy."""
    hidden: Tuple[int, ...] = DEFAULT_HIDDEN
    """Hidden layer widths of the Q network."""


API = Preset(
    lr=5e-4,
    gamma=0.99,
    n_step=1,
    batch_size=32,
    learning_starts=1000,
    target_update_freq=500,
    tau=1.0,
    double_q=True,
    dueling=True,
    grad_clip=40.0,
    epsilon=((0, 1.0), (10_000, 0.05)),
    replay_ratio=1.0,
    weight_decay=0.0,
    num_envs_per_runner=1024,
    rollout_length=32,
    env_runner_restart_timeout_s=300.0,
)
"""``ZeroSyncDQNConfig()``: RLlib's ``DQNConfig`` values (tests check they still agree) plus the GPU
sizing, replay ratio 1 and a 300 s runner restart timeout."""

SETTINGS_FILE = dataclasses.replace(
    API,
    n_step=3,
    batch_size=1024,
    learning_starts=10_000,
    target_update_freq=1000,
    grad_clip=10.0,
    epsilon=((0, 1.0), (50_000, 0.05)),
    rollout_length=64,
    dueling=False,
)
"""A settings file's ``algo`` / ``model`` keys left out: :data:`API` with these differences."""


def check_positive_number(name: str, value: object) -> None:
    """The rule for ``replay_ratio`` and ``env_runner_restart_timeout_s``, wherever they are set (a
    settings file or ``ZeroSyncDQNConfig``): a number > 0 (not a bool). ValueError naming ``name``."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")

