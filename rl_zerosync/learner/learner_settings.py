"""`LearnerSettings`: the typed, validated settings of `ZeroSyncDQNTorchLearner`.

Two sources, one object (:meth:`LearnerSettings.from_config`):

* ``config.learner_config_dict["zerosync"]`` (a dict): replay, guard, graph and policy fields, and
  the learner's ``algo`` keys DQNConfig has no field for (``weight_decay``: a settings file's
  ``algo.weight_decay`` lands here).
* The DQNConfig itself: :data:`DQN_FIELDS` (the learner's ``algo`` keys under their RLlib names,
  :data:`rl_zerosync.presets.ALGO_KEYS`), ``grad_clip_by`` and ``td_error_loss_fn`` (the default of
  ``loss``). These may not be repeated in the zerosync dict.

The fields of the learner's ``algo`` keys are not written here: :func:`_with_algo_keys` adds them from
their declarations in :class:`rl_zerosync.presets.AlgoSettings` (type, rule, and the
``ZeroSyncDQNConfig()`` default, so a ``LearnerSettings()`` built without a config matches a fresh
config). Every field is checked by its rule helper (``metadata["rule"]``, :mod:`rl_zerosync.presets`);
a bad value raises :class:`LearnerFieldError` (a ValueError) naming the field and the allowed values.

Built once per process for the same values (:meth:`LearnerSettings.validated`): a settings file's
are built and checked at load, and the learner of the same process, building its own from the RLlib
config, gets that object back without a second check. A learner in another process (remote learners)
builds and checks its own, once, from the config it received.
"""
from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional  # Optional: the type of an optional algo key (_with_algo_keys)

from rl_zerosync.presets import ALGO_KEYS, BOOL, MAX_CAPACITY, LEARNER_KEYS, AlgoSettings, Choice, Range, ruled

__all__ = ["LearnerFieldError", "LearnerSettings", "LOSSES", "NONFINITE_POLICIES", "COLLAPSE_POLICIES",
           "DIVERGENCE_POLICIES"]

LOSSES = ("huber", "mse")
NONFINITE_POLICIES = ("skip", "halt")
COLLAPSE_POLICIES = ("warn", "halt")
DIVERGENCE_POLICIES = ("halt", "warn")
DQN_FIELDS = tuple(k.rllib for k in ALGO_KEYS.values() if k.learner and k.rllib is not None)
"""Fields read from the DQNConfig, not from ``learner_config_dict["zerosync"]``: the learner's ``algo``
keys that RLlib has (their RLlib names)."""
_VALIDATED_MAX = 16
"""Distinct settings :meth:`LearnerSettings.validated` keeps per process."""


class LearnerFieldError(ValueError):
    """A bad value of one :class:`LearnerSettings` field; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # pickles (a remote learner's error reaches the driver)
        return type(self), (self.field, str(self))


def _with_algo_keys(cls: type) -> type:
    """Adds the learner's ``algo`` keys (:data:`~rl_zerosync.presets.LEARNER_KEYS`) to ``cls`` as fields,
    under their RLlib names, as declared in :class:`~rl_zerosync.presets.AlgoSettings`: the type, the
    ``ZeroSyncDQNConfig()`` default and the rule."""
    for key, name in LEARNER_KEYS.items():
        k = ALGO_KEYS[key]
        typ = AlgoSettings.__annotations__[key]
        cls.__annotations__[name] = f"Optional[{typ}]" if k.optional else typ
        setattr(cls, name, field(default=k.api_default, metadata={"rule": k.rule, "optional": k.optional,
                                                                   "algo": key}))
    return cls


@dataclass(frozen=True)
@_with_algo_keys
class LearnerSettings:
    """Settings of the zero-sync learner (see the module docstring for where each comes from)."""

    replay_capacity: int = ruled(100_000, Range(1, MAX_CAPACITY, integer=True))
    """Transitions the device replay holds (preallocated on the learner's device); per learner with DDP."""
    prioritized: bool = ruled(False, BOOL)
    """Proportional prioritized replay (priority ``(|TD| + priority_eps) ** alpha``) instead of uniform."""
    alpha: float = ruled(0.6, Range(0.0, 1.0))
    """Priority exponent of prioritized replay (0 = uniform)."""
    beta: float = ruled(0.4, Range(0.0, 1.0))
    """Importance-weight exponent of prioritized replay: ``w = (N × P) ** -beta / max w in the batch``."""
    priority_eps: float = ruled(1e-6, Range(0.0, lo_open=True))
    """Added to ``|TD|`` before the priority exponent so no transition gets probability 0."""
    graph: bool = ruled(True, BOOL)
    """Capture the whole update in a CUDA graph on CUDA devices (ignored on CPU; eager gives the same
    numbers)."""
    compile: bool = ruled(False, BOOL)
    """Fuse the update's torch ops with ``torch.compile`` inside the graph (CUDA, one learner; not
    bit-identical to eager); the Q network then runs on torch's ops, not the linear kernels.

    Ignored on CPU; see :mod:`rl_zerosync.learner.torch_update`. On, the Q network's forward and backward are
    torch's ops rather than the linear kernels (:mod:`rl_zerosync.learner.mlp`), on every device."""
    tf32: bool = ruled(False, BOOL)
    """TF32 tensor-core matmuls inside the update only (CUDA); the Q network then runs on torch's ops.

    10-bit mantissa inputs, float32 accumulation; ignored on CPU. Scoped to the update: the process's setting
    is left as it is. On, the Q network's forward and backward are torch's ops rather than the float32 linear
    kernels (:mod:`rl_zerosync.learner.mlp`), on every device."""
    graph_warmup: int = ruled(3, Range(1, 1000, integer=True))
    """Eager updates on a side stream before the CUDA graph is captured (they count as updates); with DDP at
    least 11."""
    updates_per_graph: int = ruled(1, Range(1, 1024, integer=True))
    """Updates per graph launch (> 1: a second graph of N updates, replayed wherever no target-network update
    or collapse-warmup switch falls inside the block, the one-update graph elsewhere; the same updates bit for
    bit; one learner; ignored on CPU and with ``graph: false``)."""
    loss: str = ruled("huber", Choice(LOSSES))
    """TD loss: ``huber`` (delta 1) or ``mse``; defaults to the DQNConfig's ``td_error_loss_fn``."""
    loss_clip: float = ruled(1e6, Range(0.0, lo_open=True))
    """A loss above this is clipped (the clipped loss drives the gradient) and counted."""
    divergence_threshold: float = ruled(1e4, Range(0.0, lo_open=True))
    """``|min|`` or ``|max|`` of the batch's per-row max-Q above this (or a non-finite Q) counts as diverged."""
    divergence_patience: int = ruled(3, Range(1, 2**31 - 1, integer=True))
    """Consecutive diverged updates that raise the divergence flag."""
    collapse_multiplier: float = ruled(1.0, Range(0.0))
    """Gradient collapse: global grad norm below ``lr × collapse_multiplier`` after the warmup."""
    collapse_warmup_fraction: float = ruled(0.2, Range(0.0))
    """Collapse is checked only after ``fraction × replay_capacity`` sampled transitions (updates × batch)."""
    nonfinite_policy: str = ruled("skip", Choice(NONFINITE_POLICIES))
    """A non-finite loss or gradient: ``skip`` the step on the device (counted) or ``halt`` at the iteration
    boundary."""
    collapse_policy: str = ruled("warn", Choice(COLLAPSE_POLICIES))
    """Gradient collapse past the warmup: ``warn`` (log) or ``halt`` at the iteration boundary."""
    divergence_policy: str = ruled("halt", Choice(DIVERGENCE_POLICIES))
    """Q divergence past the patience: ``halt`` at the iteration boundary or ``warn``."""
    seed: int = ruled(0, Range(0, 2**64 - 1, integer=True))
    """Seed of the counter-based replay sampling (rank ``r`` samples with ``seed + r``; the Python API's
    default: the config's seed when set)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            rule = f.metadata.get("rule")
            value = getattr(self, f.name)
            if f.name == "lr" and (isinstance(value, (list, tuple)) or not isinstance(value, (int, float))
                                   or isinstance(value, bool)):
                raise LearnerFieldError(
                    "lr", f"lr must be a float (learning-rate schedules are not supported by the zero-sync "
                          f"learner), got {value!r}")
            problem = None if rule is None or (value is None and f.metadata.get("optional")) else \
                rule.problem(f.name, value)
            if problem:
                raise LearnerFieldError(f.name, problem)

    @property
    def collapse_threshold(self) -> float:
        """Grad-norm threshold of the collapse check: ``lr * collapse_multiplier``."""
        return float(self.lr) * float(self.collapse_multiplier)

    @property
    def collapse_warmup_transitions(self) -> int:
        """Sampled transitions (updates x batch) before the collapse check starts."""
        return int(math.ceil(self.collapse_warmup_fraction * self.replay_capacity))

    @classmethod
    def field_names(cls) -> tuple:
        """All field names."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LearnerSettings":
        """Settings from a plain dict; unknown keys raise ValueError listing the allowed ones."""
        if not isinstance(d, Mapping):
            raise ValueError(f"zerosync learner settings must be a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.field_names()))
        if unknown:
            raise ValueError(
                f"unknown zerosync learner setting(s) {unknown}; allowed: {sorted(cls.field_names())}"
            )
        return cls.validated(d)

    @classmethod
    def validated(cls, values: Mapping[str, Any]) -> "LearnerSettings":
        """``cls(**values)``, built and checked once per process for the same values: a later call with
        equal values of the same types (defaults filled in) returns the object built first."""
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        key = None
        if set(values) <= set(defaults):
            full = {**defaults, **values}
            key = (cls,) + tuple((n, type(v), repr(v)) for n, v in full.items())
            built = _VALIDATED.get(key)
            if built is not None:
                return built
        settings = cls(**values)
        if key is not None:
            _VALIDATED[key] = settings
            while len(_VALIDATED) > _VALIDATED_MAX:
                _VALIDATED.popitem(last=False)
        return settings

    @classmethod
    def from_config(cls, config: Any) -> "LearnerSettings":
        """Settings from a DQNConfig: ``learner_config_dict["zerosync"]`` plus the DQN fields."""
        zs = dict((getattr(config, "learner_config_dict", None) or {}).get("zerosync", {}) or {})
        repeated = sorted(set(zs) & set(DQN_FIELDS))
        if repeated:
            raise ValueError(
                f"learner_config_dict['zerosync'] must not set {repeated}: set them on the DQNConfig "
                f"(config.training(...)) instead"
            )
        unknown = sorted(set(zs) - set(cls.field_names()))
        if unknown:
            raise ValueError(
                f"unknown key(s) {unknown} in learner_config_dict['zerosync']; allowed: "
                f"{sorted(set(cls.field_names()) - set(DQN_FIELDS))}"
            )
        clip_by = getattr(config, "grad_clip_by", "global_norm")
        grad_clip = getattr(config, "grad_clip", None)
        if grad_clip is not None and clip_by != "global_norm":
            raise ValueError(
                f"grad_clip_by must be 'global_norm' for the zero-sync learner (it clips by the "
                f"global norm on the device), got {clip_by!r}"
            )
        n_step = getattr(config, "n_step", None)
        if isinstance(n_step, (list, tuple)):
            raise ValueError(
                f"n_step must be an int for the zero-sync learner's device replay, got {n_step!r}"
            )
        if "loss" not in zs:
            zs["loss"] = getattr(config, "td_error_loss_fn", cls.loss)
        if "seed" not in zs and getattr(config, "seed", None) is not None:
            zs["seed"] = config.seed
        for name in DQN_FIELDS:
            if hasattr(config, name):
                zs[name] = getattr(config, name)
        return cls.validated(zs)


_VALIDATED: "OrderedDict[tuple, LearnerSettings]" = OrderedDict()
"""The settings :meth:`LearnerSettings.validated` built in this process, by their values."""

