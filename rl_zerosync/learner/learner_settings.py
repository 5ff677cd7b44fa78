"""`LearnerSettings`: the typed, validated settings of `ZeroSyncDQNTorchLearner`.

Two sources, one object (:meth:`LearnerSettings.from_config`):

* ``config.learner_config_dict["zerosync"]`` (a dict): replay, guard, graph and policy fields, and
  ``weight_decay`` (DQNConfig has no weight-decay field; ``algo.weight_decay`` of a settings file
  lands here).
* The DQNConfig itself: :data:`DQN_FIELDS` (the learner's ``algo`` keys under their RLlib names,
  :data:`rl_zerosync.presets.ALGO_KEYS`), ``grad_clip_by`` and ``td_error_loss_fn`` (the default of
  ``loss``). These may not be repeated in the zerosync dict.

The DQN fields default to :data:`rl_zerosync.presets.API` (what ``ZeroSyncDQNConfig()`` sets), so a
``LearnerSettings()`` built without a config matches a fresh config. Every bad value raises
:class:`LearnerFieldError` (a ValueError) naming the field and the allowed values.

Built once per process for the same values (:meth:`LearnerSettings.validated`): a settings file's
are built and checked at load, and the learner of the same process, building its own from the RLlib
config, gets that object back without a second check. A learner in another process (remote learners)
builds and checks its own, once, from the config it received.
"""
from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from rl_zerosync.presets import ALGO_KEYS, API

__all__ = ["LearnerFieldError", "LearnerSettings", "LOSSES", "NONFINITE_POLICIES", "COLLAPSE_POLICIES",
           "DIVERGENCE_POLICIES"]

LOSSES = ("huber", "mse")
NONFINITE_POLICIES = ("skip", "halt")
COLLAPSE_POLICIES = ("warn", "halt")
DIVERGENCE_POLICIES = ("halt", "warn")
MAX_CAPACITY = 2**31 - 1
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


@dataclass(frozen=True)
class LearnerSettings:
    """Settings of the zero-sync learner (see the module docstring for where each comes from)."""

    replay_capacity: int = 100_000
    """Transitions the device replay buffer holds (preallocated on the learner's device)."""
    prioritized: bool = False
    """Proportional prioritized replay (priority ``(|TD| + priority_eps) ** alpha``) instead of uniform."""
    alpha: float = 0.6
    """Priority exponent of prioritized replay (0 = uniform)."""
    beta: float = 0.4
    """Importance-weight exponent of prioritized replay: ``w = (N * P) ** -beta / max(w in batch)``."""
    priority_eps: float = 1e-6
    """Added to ``|TD|`` before the priority exponent so no transition gets probability 0."""
    graph: bool = True
    """Capture the whole update in a CUDA graph on CUDA devices (ignored on CPU; eager gives the same numbers)."""
    compile: bool = False
    """Fuse the update's torch ops with ``torch.compile`` on CUDA devices (ignored on CPU; not
    bit-identical to eager, see :mod:`rl_zerosync.learner.update_parts`; single learner only). On, the
    Q network's forward and backward are torch's ops rather than the linear kernels
    (:mod:`rl_zerosync.learner.mlp`), on every device."""
    tf32: bool = False
    """Let the update's float32 matmuls use TF32 tensor cores on CUDA (10-bit mantissa inputs, float32
    accumulation; ignored on CPU). Scoped to the update: the process's setting is left as it is. On,
    the Q network's forward and backward are torch's ops rather than the float32 linear kernels
    (:mod:`rl_zerosync.learner.mlp`), on every device."""
    graph_warmup: int = 3
    """Eager updates run on a side stream before the CUDA graph is captured (they count as updates)."""
    updates_per_graph: int = 1
    """Updates captured in one CUDA graph launch (> 1: a second graph of that many updates is captured
    and ``train(K)`` replays it wherever no target-network update or collapse-warmup switch falls
    inside the block, the one-update graph elsewhere, so the updates are the same bit for bit;
    single learner only; ignored on CPU and with ``graph: false``)."""
    loss: str = "huber"
    """TD loss: "huber" (delta 1) or "mse"; defaults to the DQNConfig's ``td_error_loss_fn``."""
    loss_clip: float = 1e6
    """A loss above this is clipped: the clipped loss drives the gradient and a clip event is counted."""
    divergence_threshold: float = 1e4
    """|min| or |max| of the batch's per-row max-Q above this (or any non-finite Q) counts as diverged."""
    divergence_patience: int = 3
    """Consecutive diverged updates that raise the divergence flag."""
    collapse_multiplier: float = 1.0
    """Gradient collapse: global grad norm below ``lr * collapse_multiplier`` (after the warmup)."""
    collapse_warmup_fraction: float = 0.2
    """Collapse is checked only after ``fraction * replay_capacity`` sampled transitions (updates x batch)."""
    nonfinite_policy: str = "skip"
    """Non-finite loss or gradient: "skip" the step (counted) or "halt" at the next boundary."""
    collapse_policy: str = "warn"
    """Gradient collapse past the warmup: "warn" (log) or "halt" at the next boundary."""
    divergence_policy: str = "halt"
    """Q divergence past the patience: "halt" at the next boundary or "warn"."""
    weight_decay: float = API.weight_decay
    """Decoupled weight decay of the optimizer: > 0 = AdamW (``p *= 1 - lr * weight_decay`` on every
    parameter inside ``adam_step``, skipped with the rest of a guarded step); 0 = Adam (the default)."""
    seed: int = 0
    """Seed of the counter-based replay sampling (defaults to the AlgorithmConfig's seed when set)."""
    gamma: float = API.gamma
    """Discount (from DQNConfig.gamma)."""
    n_step: int = API.n_step
    """n-step return length of the device replay (from DQNConfig.n_step; an int)."""
    lr: float = API.lr
    """Adam learning rate (from DQNConfig.lr; a float, schedules are not supported)."""
    grad_clip: Optional[float] = API.grad_clip
    """Global-norm gradient clip (from DQNConfig.grad_clip; None = no clip)."""
    target_network_update_freq: int = API.target_update_freq
    """Target update (hard copy, or a Polyak step when ``tau < 1``) every this many ``train()`` updates
    (from DQNConfig; drop-in ``update()`` keeps RLlib's env-step meaning)."""
    tau: float = API.tau
    """Target update weight: 1.0 = hard copy, < 1 = Polyak ``target += tau * (online - target)`` (from DQNConfig.tau)."""
    double_q: bool = API.double_q
    """Double DQN: the online net picks the next action, the target net values it (from DQNConfig.double_q)."""
    train_batch_size_per_learner: int = API.batch_size
    """Transitions per update sampled from the device replay (from DQNConfig.train_batch_size_per_learner)."""

    def __post_init__(self) -> None:
        _int("replay_capacity", self.replay_capacity, 1, MAX_CAPACITY)
        _bool("prioritized", self.prioritized)
        _float("alpha", self.alpha, lo=0.0, hi=1.0)
        _float("beta", self.beta, lo=0.0, hi=1.0)
        _float("priority_eps", self.priority_eps, lo=0.0, strict=True)
        _bool("graph", self.graph)
        _bool("compile", self.compile)
        _bool("tf32", self.tf32)
        _int("graph_warmup", self.graph_warmup, 1, 1000)
        _int("updates_per_graph", self.updates_per_graph, 1, 1024)
        _choice("loss", self.loss, LOSSES)
        _float("loss_clip", self.loss_clip, lo=0.0, strict=True)
        _float("divergence_threshold", self.divergence_threshold, lo=0.0, strict=True)
        _int("divergence_patience", self.divergence_patience, 1, 2**31 - 1)
        _float("collapse_multiplier", self.collapse_multiplier, lo=0.0)
        _float("collapse_warmup_fraction", self.collapse_warmup_fraction, lo=0.0)
        _choice("nonfinite_policy", self.nonfinite_policy, NONFINITE_POLICIES)
        _choice("collapse_policy", self.collapse_policy, COLLAPSE_POLICIES)
        _choice("divergence_policy", self.divergence_policy, DIVERGENCE_POLICIES)
        _float("weight_decay", self.weight_decay, lo=0.0)
        _int("seed", self.seed, 0, 2**64 - 1)
        _float("gamma", self.gamma, lo=0.0, hi=1.0)
        _int("n_step", self.n_step, 1, 10_000)
        if isinstance(self.lr, (list, tuple)) or not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool):
            raise LearnerFieldError(
                "lr", f"lr must be a float (learning-rate schedules are not supported by the zero-sync "
                      f"learner), got {self.lr!r}"
            )
        _float("lr", self.lr, lo=0.0, strict=True)
        if self.grad_clip is not None:
            _float("grad_clip", self.grad_clip, lo=0.0, strict=True)
        _int("target_network_update_freq", self.target_network_update_freq, 1, 2**62)
        _float("tau", self.tau, lo=0.0, hi=1.0, strict=True)
        _bool("double_q", self.double_q)
        _int("train_batch_size_per_learner", self.train_batch_size_per_learner, 1, MAX_CAPACITY)

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


def _bool(name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise LearnerFieldError(name, f"{name} must be a bool (true/false), got {v!r}")


def _choice(name: str, v: Any, allowed: tuple) -> None:
    if v not in allowed:
        raise LearnerFieldError(name, f"{name} must be one of {allowed}, got {v!r}")


def _int(name: str, v: Any, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise LearnerFieldError(name, f"{name} must be an int in [{lo}, {hi}], got {v!r}")


def _float(name: str, v: Any, *, lo: Optional[float] = None, hi: Optional[float] = None, strict: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise LearnerFieldError(name, f"{name} must be a finite number, got {v!r}")
    if lo is not None and (v <= lo if strict else v < lo):
        raise LearnerFieldError(name, f"{name} must be {'>' if strict else '>='} {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise LearnerFieldError(name, f"{name} must be <= {hi}, got {v!r}")
