"""The schema of a settings file's ``algo`` and ``model`` keys: each key's default, RLlib name and rule,
written once and read by the YAML loader (:mod:`rl_zerosync.config.settings`), ``ZeroSyncDQNConfig``,
the learner's settings and the Q module.

Where each fact lives:

* **Defaults**: the two presets, side by side. :data:`API` is what a Python-API user gets from
  ``ZeroSyncDQNConfig()``: RLlib's ``DQNConfig`` values, sized for one GPU env runner (1,024 envs x
  32 steps per rollout); ``ZeroSyncDQNConfig`` sets every field from here, ``LearnerSettings`` and the
  env runner / module epsilon fallbacks default to it. :data:`FILE_DEFAULTS` is what a settings file
  (``configs/*.yaml``) gives for a key it leaves out (the fields of ``AlgoSettings`` and
  ``ModelSettings`` default to it): :data:`API` with the differences listed in one ``replace`` call
  (n-step 3, a batch of 1,024, a longer warm-up, a target update every 1,000 learner updates, a
  tighter gradient clip, a slower epsilon decay, 64-step rollouts and no dueling head). The
  scale-out keys that neither preset holds default in ``AlgoSettings``.
* **Names**: :data:`ALGO_KEYS`, the one table between a settings file's ``algo`` names and RLlib's.
  ``to_rllib_config`` sets every key through it, ``ZeroSyncDQNConfig()`` sets the :data:`API` preset
  through it, ``LearnerSettings`` reads its DQN fields (:data:`LEARNER_KEYS`) through it, and the loader
  takes RLlib's names as aliases (:data:`RLLIB_ALIASES`) or refuses them (:data:`REFUSED_RLLIB_NAMES`)
  by it. ``model`` keys keep their names in RLlib's ``model_config``.
* **Types**: the fields of ``AlgoSettings`` / ``ModelSettings``, which the YAML loader reads values as.
* **Rules**: a ``model`` key's in :data:`MODEL_KEYS`, checked by the loader (naming the file and the
  key) and by the Q module and ``ZeroSyncDQNConfig.validate`` (:func:`check_model_value`); an
  ``algo`` key the learner reads is checked by ``LearnerSettings`` (built once, at load), ``epsilon``
  by :func:`~rl_zerosync.env_runner.epsilon.normalize_epsilon_schedule`, ``replay_ratio`` and
  ``env_runner_restart_timeout_s`` by :func:`check_positive_number` (the loader and
  ``ZeroSyncDQNConfig.validate``), the scale-out keys by the loader alone.
"""
from __future__ import annotations

import dataclasses
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from rl_zerosync.actions import ACTION_MODES

__all__ = ["ALGO_KEYS", "API", "DEFAULT_HIDDEN", "FILE_DEFAULTS", "LEARNER_KEYS", "MODEL_KEYS", "REFUSED_RLLIB_NAMES",
           "RLLIB_ALIASES", "AlgoKey", "ModelKey", "Preset", "algo_key_of", "bounded_repr", "check_model_value",
           "check_positive_number"]

DEFAULT_HIDDEN: Tuple[int, ...] = (256, 256)
"""Hidden layer widths of the Q network (both presets, and a module built outside any config)."""


# ---------------------------------------------------------------- defaults
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
    layernorm: bool = False
    """LayerNorm after every hidden Linear (before the ReLU)."""
    dropout: float = 0.0
    """Dropout probability after every hidden ReLU (0 = off)."""


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

FILE_DEFAULTS = dataclasses.replace(
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


# ---------------------------------------------------------------- names: settings file <-> RLlib
@dataclass(frozen=True)
class AlgoKey:
    """How one ``algo`` key of a settings file reaches RLlib (a row of :data:`ALGO_KEYS`)."""

    rllib: Optional[str]
    """Its name on ``ZeroSyncDQNConfig`` (RLlib's ``DQNConfig`` name, same meaning and unit); None where
    DQNConfig has no such field (``weight_decay`` travels in ``learner_config_dict["zerosync"]``)."""
    method: str = "training"
    """The ``AlgorithmConfig`` method ``to_rllib_config`` sets it with (``method(rllib=value)``)."""
    learner: bool = False
    """The learner reads it, as the ``LearnerSettings`` field named ``rllib`` (the key itself where
    ``rllib`` is None); ``LearnerSettings`` is then its one validator."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """RLlib names a settings file may not use for this key, each with the reason; an ``rllib`` name
    that differs from the key and is not refused is accepted as an alias."""


ALGO_KEYS: Dict[str, AlgoKey] = {
    "lr": AlgoKey("lr", learner=True),
    "gamma": AlgoKey("gamma", learner=True),
    "n_step": AlgoKey("n_step", learner=True),
    "batch_size": AlgoKey("train_batch_size_per_learner", learner=True),
    "replay_ratio": AlgoKey("replay_ratio", refused={
        "training_intensity": "use algo.replay_ratio (trained transitions per sampled env step)"}),
    "learning_starts": AlgoKey("num_steps_sampled_before_learning_starts"),
    "target_update_freq": AlgoKey("target_network_update_freq", learner=True, refused={
        "target_network_update_freq": "RLlib's target_network_update_freq counts sampled env steps; this "
                                      "project's algo.target_update_freq counts learner updates: set that"}),
    "tau": AlgoKey("tau", learner=True),
    "double_q": AlgoKey("double_q", learner=True),
    "grad_clip": AlgoKey("grad_clip", learner=True),
    "epsilon": AlgoKey("epsilon"),
    "num_envs_per_runner": AlgoKey("num_envs_per_env_runner", method="env_runners"),
    "rollout_length": AlgoKey("rollout_fragment_length", method="env_runners"),
    "num_env_runners": AlgoKey("num_env_runners", method="env_runners"),
    "num_learners": AlgoKey("num_learners", method="learners"),
    "num_gpus_per_learner": AlgoKey("num_gpus_per_learner", method="learners"),
    "num_gpus_per_env_runner": AlgoKey("num_gpus_per_env_runner", method="env_runners"),
    "custom_resources_per_env_runner": AlgoKey("custom_resources_per_env_runner", method="env_runners"),
    "env_runner_restart_timeout_s": AlgoKey("env_runner_restart_timeout_s", method="fault_tolerance"),
    "weight_decay": AlgoKey(None, learner=True),
}
"""Every ``algo`` key of a settings file (in ``AlgoSettings`` order) -> how it reaches RLlib: the one
name table. ``target_network_update_freq`` holds learner updates on ``ZeroSyncDQNConfig`` (RLlib's
DQN counts env steps), hence refused as a file's spelling."""

LEARNER_KEYS: Dict[str, str] = {key: k.rllib or key for key, k in ALGO_KEYS.items() if k.learner}
"""``algo`` key -> the ``LearnerSettings`` field that reads it (derived from :data:`ALGO_KEYS`)."""
RLLIB_ALIASES: Dict[str, str] = {k.rllib: key for key, k in ALGO_KEYS.items()
                                 if k.rllib not in (None, key) and k.rllib not in k.refused}
"""RLlib name -> ``algo`` key, for the RLlib names a settings file may use (derived from :data:`ALGO_KEYS`)."""
REFUSED_RLLIB_NAMES: Dict[str, str] = {name: why for k in ALGO_KEYS.values() for name, why in k.refused.items()}
"""RLlib names a settings file's ``algo`` may not use -> why (derived from :data:`ALGO_KEYS`)."""


def algo_key_of(rllib: str) -> Optional[str]:
    """The ``algo`` key whose RLlib name is ``rllib`` (None for none)."""
    return next((key for key, k in ALGO_KEYS.items() if k.rllib == rllib), None)


# ---------------------------------------------------------------- rules
SHOWN_CHARS = 200
"""The most characters of a value a rule's message shows (:func:`bounded_repr`)."""
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 3, 80, 40, 80
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = _SHOWN.maxfrozenset = _SHOWN.maxdeque = 8


def bounded_repr(value: Any) -> str:
    """``repr(value)`` for an error message, bounded whatever the value: at most 3 levels of nesting,
    8 items per container, 80 characters per string, then cut at ``SHOWN_CHARS`` (``...`` marks what
    was left out). Small values read as ``repr`` does."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class ModelKey:
    """The rule of one ``model`` key (a row of :data:`MODEL_KEYS`)."""

    expected: str
    """What the rule allows, in words."""
    allows: Callable[[Any], bool]
    """The rule (strict: no bool for a number, no string for a number)."""
    choices: Tuple[str, ...] = ()
    """The allowed values, for a key that is one of a few names."""

    def settings_message(self, value: Any) -> str:
        """What the loader says after ``<file>: model.<key>:``."""
        if self.choices:
            return f"got {bounded_repr(value)}; allowed: {', '.join(self.choices)}"
        return f"expected {self.expected}, got {bounded_repr(value)}"


def _positive_ints(value: Any) -> bool:
    return (isinstance(value, Sequence) and not isinstance(value, (str, bytes))
            and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _probability(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0.0 <= float(value) < 1.0


MODEL_KEYS: Dict[str, ModelKey] = {
    "action_mode": ModelKey(f"one of {ACTION_MODES}", lambda v: v in ACTION_MODES, choices=ACTION_MODES),
    "hidden": ModelKey("a list of positive ints", _positive_ints),
    "dueling": ModelKey("a bool (true/false)", _is_bool),
    "layernorm": ModelKey("a bool (true/false)", _is_bool),
    "dropout": ModelKey("a float in [0, 1)", _probability),
}
"""Every ``model`` key of a settings file (in ``ModelSettings`` order) -> its rule; the same keys and
values in RLlib's ``model_config``. ``hidden`` may be empty (the head alone, a linear Q)."""


def check_model_value(key: str, value: Any) -> None:
    """The rule of ``model_config[key]``, wherever it is read (the Q module, ``ZeroSyncDQNConfig.validate``,
    the env runner): ValueError ``model_config['<key>'] must be <expected>, got <value>``."""
    if not MODEL_KEYS[key].allows(value):
        raise ValueError(f"model_config[{key!r}] must be {MODEL_KEYS[key].expected}, got {bounded_repr(value)}")


def check_positive_number(name: str, value: object) -> None:
    """The rule for ``replay_ratio`` and ``env_runner_restart_timeout_s``, wherever they are set (a
    settings file or ``ZeroSyncDQNConfig``): a finite number > 0 (not a bool; an infinite replay ratio
    or restart wait never ends). ValueError naming ``name``."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{name} must be a number > 0, got {bounded_repr(value)}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0, got {bounded_repr(value)}")
