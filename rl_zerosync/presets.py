"""The schema of a settings file's ``algo`` and ``model`` keys: each key declared once, as one field of
:class:`AlgoSettings` / :class:`ModelSettings`, and everything else derived from the declarations.

A field is ``name: type = algo_key(default, doc, rule=..., ...)`` (:func:`algo_key`, :func:`model_key`):

* **type**: the annotation (what the YAML loader reads the value as);
* **defaults**: ``default`` is a settings file's (``configs/*.yaml``), ``api`` what a Python-API user gets
  from ``ZeroSyncDQNConfig()`` (RLlib's ``DQNConfig`` values, sized for one GPU env runner; left out: the
  same), ``preset=False`` for the scale-out keys neither preset holds. :data:`FILE_DEFAULTS` and
  :data:`API` are the two presets, built from the declarations;
* **rule**: one of the rule helpers (:class:`Range`, :class:`Choice`, :data:`BOOL`, :data:`POSITIVE`,
  :data:`POSITIVE_INTS`), checked at load (naming the file and the key), by ``LearnerSettings`` for the
  keys the learner reads, and by the Q module and ``ZeroSyncDQNConfig.validate`` for the model keys;
  ``algo.epsilon`` has its own rule (:func:`~rl_zerosync.env_runner.epsilon.normalize_epsilon_schedule`),
  ``custom_resources_per_env_runner`` the loader's;
* **doc**: one line, the docs table's (``python -m rl_zerosync.config.docs --write``);
* **RLlib**: ``rllib`` its name on ``ZeroSyncDQNConfig`` (default: the key), ``method`` the
  ``AlgorithmConfig`` method that sets it, ``learner`` whether ``LearnerSettings`` reads it (as a field
  named ``rllib``), ``refused`` RLlib names a file may not use; :data:`ALGO_KEYS`, :data:`LEARNER_KEYS`,
  :data:`RLLIB_ALIASES` and :data:`REFUSED_RLLIB_NAMES` are read off them;
* **population**: ``search`` (``population.search`` may vary it per member; ``"live"``: also while
  members train, PBT's explore step), ``shape`` (it changes shapes the members share: refused in
  ``search``).
"""
from __future__ import annotations

import dataclasses
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from rl_zerosync.actions import ACTION_MODES, DEFAULT_ACTION_MODE

__all__ = ["ALGO_KEYS", "API", "BOOL", "DEFAULT_HIDDEN", "FILE_DEFAULTS", "LEARNER_KEYS", "LIVE_KEYS", "MODEL_KEYS",
           "POSITIVE", "POSITIVE_INTS", "REFUSED_RLLIB_NAMES", "RLLIB_ALIASES", "SEARCH_KEYS", "SHAPE_KEYS", "AlgoKey",
           "AlgoSettings", "Choice", "ModelKey", "ModelSettings", "Preset", "Range", "Rule", "algo_key_of",
           "bounded_repr", "check_model_value", "check_positive_number", "ruled"]

DEFAULT_HIDDEN: Tuple[int, ...] = (256, 256)
"""Hidden layer widths of the Q network (both presets, and a module built outside any config)."""
MAX_CAPACITY = 2**31 - 1
"""The largest batch and replay (rows are indexed with int32)."""

# ---------------------------------------------------------------- bounded values in messages
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


# ---------------------------------------------------------------- rule helpers, one per rule
class Rule:
    """A value rule: :meth:`problem` says what is wrong (``"<name> must be ..., got <value>"``) or None;
    :attr:`expected` says what it allows, in words."""

    expected: str = ""

    def problem(self, name: str, value: Any) -> Optional[str]:
        raise NotImplementedError

    def allows(self, value: Any) -> bool:
        return self.problem("value", value) is None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Range(Rule):
    """A number in an interval: an int (``integer``) or a finite float; ``auto`` is one more value
    allowed outside it (``-1``: decide from the hardware)."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    auto: Optional[float] = None

    @property
    def expected(self) -> str:  # type: ignore[override]
        lo, hi = (None if b is None else (str(b) if isinstance(b, int) else f"{b:g}") for b in (self.lo, self.hi))
        kind = "an int" if self.integer else ("a float" if hi is not None else "a finite number")
        if lo is not None and hi is not None:
            text = f"{kind} in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        elif lo is not None:
            text = f"{kind} {'>' if self.lo_open else '>='} {lo}"
        else:
            text = kind
        return text if self.auto is None else f"{self.auto:g} (auto) or {text}"

    def problem(self, name: str, value: Any) -> Optional[str]:
        if self.auto is not None and _is_number(value) and value == self.auto:
            return None
        if self.auto is not None:
            ok = _is_number(value) and math.isfinite(value) and self._inside(value)
            return None if ok else f"{name} must be {self.expected}, got {value}"
        if self.integer:
            if not isinstance(value, int) or isinstance(value, bool) or not self._inside(value):
                if self.hi is None:  # the loader's scale-out ints, read as ints already
                    return f"{name} must be {'>' if self.lo_open else '>='} {self.lo}, got {value}"
                return f"{name} must be an int in [{self.lo}, {self.hi}], got {value!r}"
            return None
        if not _is_number(value) or not math.isfinite(float(value)):
            return f"{name} must be a finite number, got {value!r}"
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return f"{name} must be {'>' if self.lo_open else '>='} {self.lo!r}, got {value!r}"
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return f"{name} must be {'<' if self.hi_open else '<='} {self.hi!r}, got {value!r}"
        return None

    def _inside(self, value: float) -> bool:
        above = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        return above and below


@dataclass(frozen=True)
class Choice(Rule):
    """One of a few values."""

    values: Tuple[Any, ...]

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"one of {self.values}"

    def problem(self, name: str, value: Any) -> Optional[str]:
        return None if value in self.values else f"{name} must be one of {self.values}, got {value!r}"


@dataclass(frozen=True)
class _Bool(Rule):
    expected: str = "a bool (true/false)"

    def problem(self, name: str, value: Any) -> Optional[str]:
        return None if isinstance(value, bool) else f"{name} must be a bool (true/false), got {value!r}"


@dataclass(frozen=True)
class _Positive(Rule):
    expected: str = "a finite number > 0"

    def problem(self, name: str, value: Any) -> Optional[str]:
        if not (_is_number(value) and value > 0):
            return f"{name} must be a number > 0, got {bounded_repr(value)}"
        if not math.isfinite(value):  # an infinite replay ratio or restart wait never ends
            return f"{name} must be a finite number > 0, got {bounded_repr(value)}"
        return None


@dataclass(frozen=True)
class _PositiveInts(Rule):
    expected: str = "a list of positive ints"

    def problem(self, name: str, value: Any) -> Optional[str]:
        ok = (isinstance(value, Sequence) and not isinstance(value, (str, bytes))
              and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value))
        return None if ok else f"{name} must be {self.expected}, got {bounded_repr(value)}"


BOOL: Rule = _Bool()
"""true or false (no 0/1)."""
POSITIVE: Rule = _Positive()
"""A finite number > 0, not a bool."""
POSITIVE_INTS: Rule = _PositiveInts()
"""A list of ints > 0 (may be empty)."""


def check_positive_number(name: str, value: object) -> None:
    """:data:`POSITIVE` wherever ``replay_ratio`` / ``env_runner_restart_timeout_s`` are set (a settings
    file or ``ZeroSyncDQNConfig``): ValueError naming ``name``."""
    problem = POSITIVE.problem(name, value)
    if problem:
        raise ValueError(problem)


# ---------------------------------------------------------------- declarations
_SAME: Any = "<the settings file's>"


@dataclass(frozen=True)
class AlgoKey:
    """The declaration of one ``algo`` key (the metadata of its :class:`AlgoSettings` field)."""

    default: Any
    """A settings file's default (immutable: tuples for lists)."""
    doc: str
    """One line for the docs table."""
    rule: Optional[Rule] = None
    """Its rule helper (None: checked by its own function, see the module docstring)."""
    api: Any = _SAME
    """``ZeroSyncDQNConfig()``'s default."""
    preset: bool = True
    """Held by the two presets (False: a scale-out key, defaulting in :class:`AlgoSettings` alone)."""
    rllib: Optional[str] = _SAME
    """Its name on ``ZeroSyncDQNConfig`` (RLlib's ``DQNConfig`` name, same meaning and unit; left out: the
    key's, resolved in :data:`ALGO_KEYS`); None where DQNConfig has no such field (``weight_decay``
    travels in ``learner_config_dict["zerosync"]``)."""
    method: str = "training"
    """The ``AlgorithmConfig`` method ``to_rllib_config`` sets it with (``method(rllib=value)``)."""
    learner: bool = False
    """The learner reads it, as the ``LearnerSettings`` field named ``rllib`` (the key where ``rllib`` is
    None); ``LearnerSettings`` is then where it is checked."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """RLlib names a settings file may not use for this key, each with the reason; an ``rllib`` name
    that differs from the key and is not refused is accepted as an alias."""
    search: str = ""
    """``"search"``: ``population.search`` may vary it; ``"live"``: PBT may change it while members train."""
    shape: bool = False
    """It changes shapes the members of a population share (refused in ``population.search``)."""
    optional: bool = False
    """None is allowed on ``ZeroSyncDQNConfig`` (RLlib's ``grad_clip=None``: no clip); a file sets a value."""

    @property
    def api_default(self) -> Any:
        return self.default if self.api is _SAME else self.api


@dataclass(frozen=True)
class ModelKey:
    """The declaration of one ``model`` key (the metadata of its :class:`ModelSettings` field); the same
    key and value in RLlib's ``model_config``. Every model key changes the network's shape."""

    default: Any
    doc: str
    rule: Rule
    api: Any = _SAME
    preset: bool = True

    api_default = AlgoKey.api_default

    @property
    def expected(self) -> str:
        return self.rule.expected

    @property
    def choices(self) -> Tuple[Any, ...]:
        return self.rule.values if isinstance(self.rule, Choice) else ()

    def allows(self, value: Any) -> bool:
        return self.rule.allows(value)

    def settings_message(self, value: Any) -> str:
        """What the loader says after ``<file>: model.<key>:``."""
        if self.choices:
            return f"got {bounded_repr(value)}; allowed: {', '.join(self.choices)}"
        return f"expected {self.expected}, got {bounded_repr(value)}"


def _mutable(value: Any) -> Any:
    """A declared (immutable) default as a settings object holds it: lists for tuples, a fresh dict."""
    if isinstance(value, tuple):
        return [_mutable(v) for v in value]
    return dict(value) if isinstance(value, Mapping) else value


def _field(key: AlgoKey | ModelKey) -> Any:
    if isinstance(key.default, (tuple, Mapping)):
        return field(default_factory=lambda: _mutable(key.default), metadata={"key": key})
    return field(default=key.default, metadata={"key": key})


def algo_key(default: Any, doc: str, **declared: Any) -> Any:
    """An :class:`AlgoSettings` field declared by :class:`AlgoKey` (``declared``: its other attributes)."""
    return _field(AlgoKey(default, doc, **declared))


def model_key(default: Any, doc: str, rule: Rule, **declared: Any) -> Any:
    """A :class:`ModelSettings` field declared by :class:`ModelKey`."""
    return _field(ModelKey(default, doc, rule, **declared))


_EPSILON_DOC = ("a constant in [0, 1], or piecewise linear over env steps `[[0, value], [step, value], ...]`: integer "
                "steps starting at 0 and strictly increasing, values in [0, 1] (`env_runner/epsilon.py`)")


@dataclass
class AlgoSettings:
    """DQN hyper-parameters and scale-out: one declared field per ``algo`` key (module docstring)."""

    lr: float = algo_key(5e-4, "Adam learning rate (a float: learning-rate schedules are refused)",
                         rule=Range(0.0, lo_open=True), learner=True, search="live")
    gamma: float = algo_key(0.99, "discount factor", rule=Range(0.0, 1.0), learner=True, search="search")
    n_step: int = algo_key(3, "n-step return horizon", api=1, rule=Range(1, 10_000, integer=True), learner=True,
                           search="search")
    batch_size: int = algo_key(1024, "transitions per update per learner", api=32,
                               rule=Range(1, MAX_CAPACITY, integer=True), rllib="train_batch_size_per_learner",
                               learner=True, shape=True)
    replay_ratio: float = algo_key(
        1.0, "trained transitions (all learners together) per sampled env step: K = `ratio × env steps / "
        "(batch_size × max(num_learners, 1))` updates per iteration, at least 1", rule=POSITIVE,
        refused={"training_intensity": "use algo.replay_ratio (trained transitions per sampled env step)"})
    learning_starts: int = algo_key(10_000, "env steps sampled before the first update", api=1000,
                                    rule=Range(0, integer=True), rllib="num_steps_sampled_before_learning_starts")
    target_update_freq: int = algo_key(
        1000, "**learner updates** (not env steps) between target-network updates: a hard copy when `tau` is 1, a "
        "Polyak step otherwise (RLlib's `target_network_update_freq` counts env steps: `u` updates are "
        "`u × batch_size × max(num_learners, 1) / replay_ratio` env steps)", api=500,
        rule=Range(1, 2**62, integer=True), rllib="target_network_update_freq", learner=True, search="search",
        refused={"target_network_update_freq": "RLlib's target_network_update_freq counts sampled env steps; this "
                                               "project's algo.target_update_freq counts learner updates: set that"})
    tau: float = algo_key(1.0, "target update weight: 1 = hard copy, < 1 = `target += tau × (online − target)`",
                          rule=Range(0.0, 1.0, lo_open=True), learner=True, search="search")
    double_q: bool = algo_key(True, "double-DQN target", rule=BOOL, learner=True)
    grad_clip: float = algo_key(10.0, "global gradient-norm clip", api=40.0, rule=Range(0.0, lo_open=True),
                                learner=True, search="search", optional=True)
    epsilon: Any = algo_key(((0, 1.0), (50_000, 0.05)), _EPSILON_DOC, api=((0, 1.0), (10_000, 0.05)),
                            search="search")
    num_envs_per_runner: int = algo_key(1024, "batched envs per env runner", rule=Range(0, lo_open=True, integer=True),
                                        rllib="num_envs_per_env_runner", method="env_runners", shape=True)
    rollout_length: int = algo_key(64, "steps per env per rollout, T", api=32,
                                   rule=Range(0, lo_open=True, integer=True), rllib="rollout_fragment_length",
                                   method="env_runners", shape=True)
    num_env_runners: int = algo_key(0, "remote env runners; 0 = sample in the driver process", preset=False,
                                    rule=Range(0, integer=True), method="env_runners", shape=True)
    num_learners: int = algo_key(0, "remote learners; 0 = learn in the driver process; > 1 = DDP", preset=False,
                                 rule=Range(0, integer=True), method="learners", shape=True)
    num_gpus_per_learner: float = algo_key(
        -1, "GPUs per learner; -1 = 1 if CUDA is available, else 0; fractions let a runner share the GPU",
        preset=False, rule=Range(0.0, auto=-1), method="learners")
    num_gpus_per_env_runner: float = algo_key(
        -1, "GPUs per remote env runner; -1 = 1 if CUDA is available, else 0 (unused without remote runners)",
        preset=False, rule=Range(0.0, auto=-1), method="env_runners")
    custom_resources_per_env_runner: dict = algo_key(
        {}, "custom Ray resources every remote env runner asks for, e.g. `{runner_node: 1}`: runners start only on "
        "nodes that offer them (`ray start --resources='{\"runner_node\": 4}'` holds four runners; names other "
        "than CPU and GPU, amounts >= 0; ignored without remote env runners)", preset=False, method="env_runners")
    env_runner_restart_timeout_s: float = algo_key(
        300.0, "seconds an iteration waits for a remote env runner to come back when none is healthy (Ray restarts "
        "a runner whose process died; one whose node is gone needs a node with its resources); then the run fails "
        "naming the resources no alive node offers", rule=POSITIVE, method="fault_tolerance")
    weight_decay: float = algo_key(0.0, "decoupled weight decay (AdamW inside the `adam_step` kernel); 0 = Adam",
                                   rule=Range(0.0), rllib=None, learner=True, search="search")


@dataclass
class ModelSettings:
    """The Q network: one declared field per ``model`` key (module docstring)."""

    action_mode: str = model_key(DEFAULT_ACTION_MODE, "`routed`: Q over the 5 exposures, the routing kernel picks "
                                 "order type and urgency; `flat`: Q over all 45 actions; `branching`: action-branching "
                                 "DQN, heads 5 + 3 + 3", Choice(ACTION_MODES), preset=False)
    hidden: list = model_key(DEFAULT_HIDDEN, "hidden layer widths of the Q network (may be empty: a linear Q)",
                             POSITIVE_INTS)
    dueling: bool = model_key(False, "dueling head (routed / flat)", BOOL, api=True)
    layernorm: bool = model_key(False, "LayerNorm after every hidden Linear (before the ReLU)", BOOL)
    dropout: float = model_key(0.0, "dropout probability after every hidden ReLU (training forward only)",
                               Range(0.0, 1.0, hi_open=True))


# ---------------------------------------------------------------- derived: presets, names, population keys
def _declared(cls: type) -> Dict[str, Any]:
    return {f.name: f.metadata["key"] for f in dataclasses.fields(cls)}


ALGO_KEYS: Dict[str, AlgoKey] = {name: dataclasses.replace(k, rllib=name if k.rllib is _SAME else k.rllib)
                                 for name, k in _declared(AlgoSettings).items()}
"""Every ``algo`` key of a settings file (in ``AlgoSettings`` order) -> its declaration, RLlib name
resolved: the one name table. ``target_network_update_freq`` holds learner updates on
``ZeroSyncDQNConfig`` (RLlib's DQN counts env steps), hence refused as a file's spelling."""
MODEL_KEYS: Dict[str, ModelKey] = _declared(ModelSettings)
"""Every ``model`` key (in ``ModelSettings`` order) -> its declaration."""

_PRESET_KEYS = {name: k for name, k in {**ALGO_KEYS, **MODEL_KEYS}.items() if k.preset}
Preset = dataclasses.make_dataclass(
    "Preset", [(name, Any) for name in _PRESET_KEYS], frozen=True, namespace={
        "__doc__": "Default values of one way of starting a run: the declared keys both presets hold.",
        "__module__": __name__})
FILE_DEFAULTS = Preset(**{name: k.default for name, k in _PRESET_KEYS.items()})
"""A settings file's ``algo`` / ``model`` keys left out (the declared defaults)."""
API = Preset(**{name: k.api_default for name, k in _PRESET_KEYS.items()})
"""``ZeroSyncDQNConfig()``: RLlib's ``DQNConfig`` values (tests check they still agree) plus the GPU
sizing, replay ratio 1 and a 300 s runner restart timeout (the declared ``api`` values)."""

LEARNER_KEYS: Dict[str, str] = {key: k.rllib or key for key, k in ALGO_KEYS.items() if k.learner}
"""``algo`` key -> the ``LearnerSettings`` field that reads it."""
RLLIB_ALIASES: Dict[str, str] = {k.rllib: key for key, k in ALGO_KEYS.items()
                                 if k.rllib not in (None, key) and k.rllib not in k.refused}
"""RLlib name -> ``algo`` key, for the RLlib names a settings file may use."""
REFUSED_RLLIB_NAMES: Dict[str, str] = {name: why for k in ALGO_KEYS.values() for name, why in k.refused.items()}
"""RLlib names a settings file's ``algo`` may not use -> why."""
SEARCH_KEYS: Dict[str, str] = {f"algo.{f.name}": {"float": "float", "int": "int"}.get(str(f.type), "schedule")
                               for f in dataclasses.fields(AlgoSettings) if ALGO_KEYS[f.name].search}
"""The keys ``population.search`` may vary -> their type: ``float``, ``int`` or ``schedule`` (an epsilon:
a float or a ``[[step, value], ...]`` list, searched as a whole)."""
LIVE_KEYS: Tuple[str, ...] = tuple(f"algo.{key}" for key, k in ALGO_KEYS.items() if k.search == "live")
"""Keys a member may change while it trains (PBT's explore step)."""
SHAPE_KEYS: Tuple[str, ...] = tuple(f"algo.{name}" for key, k in ALGO_KEYS.items() if k.shape
                                    for name in dict.fromkeys((key, k.rllib)) if name)
"""The ``algo`` keys that change shapes a population's members share, under both their names."""


def algo_key_of(rllib: str) -> Optional[str]:
    """The ``algo`` key whose RLlib name is ``rllib`` (None for none)."""
    return next((key for key, k in ALGO_KEYS.items() if k.rllib == rllib), None)


def check_model_value(key: str, value: Any) -> None:
    """The rule of ``model_config[key]``, wherever it is read (the Q module, ``ZeroSyncDQNConfig.validate``,
    the env runner): ValueError ``model_config['<key>'] must be <expected>, got <value>``."""
    if not MODEL_KEYS[key].allows(value):
        raise ValueError(f"model_config[{key!r}] must be {MODEL_KEYS[key].expected}, got {bounded_repr(value)}")


def ruled(default: Any, rule: Rule) -> Any:
    """A settings dataclass field with its default and its rule helper (``metadata["rule"]``), for the
    component sections' classes whose ``__post_init__`` checks every field by its rule."""
    return field(default=default, metadata={"rule": rule})
