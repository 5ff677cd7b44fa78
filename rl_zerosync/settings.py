"""One typed settings object for a run, loaded from a YAML file.

A YAML file has up to seven top-level sections::

    run:      RunSettings      (where to write, how long, checkpoints)
    algo:     AlgoSettings     (DQN hyper-parameters, scale-out, replay ratio)
    model:    ModelSettings    (action mode, network)
    data:     dict -> rl_zerosync.envs.make_market
    env:      dict -> rl_zerosync.envs.EnvParams
    runner:   dict -> rl_zerosync.env_runner.RunnerSettings
    learner:  dict -> rl_zerosync.learner.LearnerSettings

Unknown keys and bad values raise :class:`SettingsError` naming the key, the file and what is
allowed. :func:`to_rllib_config` is the one place where settings become a ``ZeroSyncDQNConfig``.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rl_zerosync.checkpoints import KEEP_LAST

ACTION_MODES = ("routed", "flat", "branching")
EVAL_METRICS = ("sharpe", "sortino", "total_return", "annualized_return", "calmar")
"""Validation metrics a run may select its best checkpoint by (higher is better)."""
EVAL_CHECKPOINTS = ("best", "last")


class SettingsError(ValueError):
    """A bad key or value in a settings file."""


@dataclass
class RunSettings:
    name: str = "run"
    """Run name; the run directory is ``<dir>/<name>``."""
    dir: str = "runs"
    """Parent directory of run directories."""
    iterations: int = 100
    """Training iterations (one iteration = one rollout per runner + K updates)."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many iterations (and at the end); 0 = only at the end."""
    seed: int = 0
    """Global seed (env offsets, exploration, network init, replay sampling)."""
    evaluate: bool = True
    """Evaluate the greedy policy on the validation and test segments at the end."""
    num_cpus: int = 0
    """CPUs for a local Ray instance; 0 = let Ray decide (ignored when a cluster is running)."""
    eval_every: int = 0
    """Validate the greedy policy every this many iterations (and after the last one); 0 = auto,
    ``max(1, iterations // 20)`` (about 20 validation passes per run)."""
    eval_metric: str = "sharpe"
    """Validation metric (mean over assets, higher is better) that selects ``checkpoint_best/``:
    one of EVAL_METRICS."""
    early_stop_patience: int = 0
    """Stop after this many validation passes without a new best; 0 = never stop early."""
    keep_checkpoints: int = KEEP_LAST
    """Last checkpoints kept (``checkpoint/``, ``checkpoint.1/``, ...), besides ``checkpoint_best/``."""
    eval_checkpoint: str = "best"
    """Checkpoint the end-of-run test evaluates: "best" (by validation) or "last"."""


@dataclass
class AlgoSettings:
    lr: float = 5e-4
    """Adam learning rate (a float; schedules are not supported by the zero-sync learner)."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """n-step return horizon."""
    batch_size: int = 1024
    """Transitions per update per learner (RLlib: ``train_batch_size_per_learner``, accepted too)."""
    replay_ratio: float = 1.0
    """Trained transitions (all learners together) per sampled env step:
    K = ratio * env steps / (batch_size * max(num_learners, 1)) updates per iteration, >= 1."""
    learning_starts: int = 10_000
    """Env steps sampled before the first update (RLlib: ``num_steps_sampled_before_learning_starts``)."""
    target_update_freq: int = 1000
    """Learner updates between hard target-network updates (used when tau == 1). RLlib's
    ``target_network_update_freq`` counts sampled env steps instead: ``u`` updates are
    ``u * batch_size / replay_ratio`` env steps."""
    tau: float = 1.0
    """Polyak coefficient (1.0 = hard updates)."""
    double_q: bool = True
    """Double DQN target."""
    grad_clip: float = 10.0
    """Global gradient-norm clip."""
    epsilon: list = field(default_factory=lambda: [[0, 1.0], [50_000, 0.05]])
    """Piecewise-linear epsilon schedule over env steps: [[step, value], ...]."""
    num_envs_per_runner: int = 1024
    """Batched envs per env runner (RLlib: ``num_envs_per_env_runner``)."""
    rollout_length: int = 64
    """Steps per env per rollout (T; RLlib: ``rollout_fragment_length``)."""
    num_env_runners: int = 0
    """Remote env runners (0 = sample in the driver process)."""
    num_learners: int = 0
    """Remote learners (0 = learn in the driver process)."""
    num_gpus_per_learner: float = -1
    """GPUs per learner; -1 = 1 if CUDA is available, else 0. Fractions let a runner share it."""
    num_gpus_per_env_runner: float = -1
    """GPUs per remote env runner; -1 = 1 if CUDA is available, else 0."""
    custom_resources_per_env_runner: dict = field(default_factory=dict)
    """Custom Ray resources every remote env runner asks for, e.g. ``{runner_node: 1}``: the runners
    then start only on nodes that offer them (``ray start --resources='{"runner_node": 4}'`` holds
    four runners). Names other than CPU and GPU (``num_gpus_per_env_runner`` asks for GPUs); amounts
    >= 0. Ignored without remote env runners."""
    env_runner_restart_timeout_s: float = 300.0
    """Seconds an iteration waits for a remote env runner to come back when none is healthy (Ray
    restarts a runner whose process died; a runner whose node is gone needs a node with its
    resources). Past it the run fails with an error naming the resources no alive node offers."""
    weight_decay: float = 0.0
    """Decoupled weight decay (fused AdamW); 0 = plain Adam behaviour."""


@dataclass
class ModelSettings:
    action_mode: str = "routed"
    """routed (Q over 5 exposures + routing kernel), flat (Q over 45) or branching (BDQ 5x3x3)."""
    hidden: list = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of the Q network."""
    dueling: bool = False
    """Dueling head (routed/flat)."""
    layernorm: bool = False
    """LayerNorm after every hidden Linear (before the ReLU)."""
    dropout: float = 0.0
    """Dropout probability after every hidden ReLU (training forward only; 0 = off)."""


@dataclass
class Settings:
    run: RunSettings = field(default_factory=RunSettings)
    algo: AlgoSettings = field(default_factory=AlgoSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    data: dict = field(default_factory=lambda: {"source": "synthetic"})
    env: dict = field(default_factory=dict)
    runner: dict = field(default_factory=dict)
    learner: dict = field(default_factory=dict)
    source: str = "<defaults>"
    """The file these settings came from (for error messages)."""

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) / self.run.name

    @property
    def eval_every(self) -> int:
        """Iterations between validation passes (``run.eval_every``, 0 = auto)."""
        return self.run.eval_every or max(1, self.run.iterations // 20)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


_TYPED_SECTIONS = {"run": RunSettings, "algo": AlgoSettings, "model": ModelSettings}
_DICT_SECTIONS = ("data", "env", "runner", "learner")


def _float_text(value: Any) -> float | None:
    """A string that reads as a finite float (PyYAML leaves ``1e-3`` a string: YAML 1.1 floats need
    a dot), as that float; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _coerce(value: Any, typ: Any, where: str) -> Any:
    """Check ``value`` against a dataclass field type, converting ints and numeric strings
    (``"1e-3"``) to floats."""
    origin = typing.get_origin(typ) or typ
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typ is float and _float_text(value) is not None:
        return _float_text(value)
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if typ is bool and isinstance(value, bool):
        return value
    if typ is str and isinstance(value, str):
        return value
    if origin is list and isinstance(value, list):
        return value
    if origin is dict and isinstance(value, dict):
        return value
    raise SettingsError(f"{where}: expected {getattr(typ, '__name__', typ)}, got {value!r}")


RLLIB_NAMES = {
    "train_batch_size_per_learner": "batch_size",
    "num_steps_sampled_before_learning_starts": "learning_starts",
    "rollout_fragment_length": "rollout_length",
    "num_envs_per_env_runner": "num_envs_per_runner",
}
"""``algo`` keys under RLlib's ``DQNConfig`` names, accepted as the project's names (same meaning
and unit)."""
_NOT_RLLIB = {
    "target_network_update_freq": "RLlib's target_network_update_freq counts sampled env steps; this "
                                  "project's algo.target_update_freq counts learner updates: set that",
    "training_intensity": "use algo.replay_ratio (trained transitions per sampled env step)",
}


def _rllib_names(values: dict, where: str) -> dict:
    """``algo`` values with RLlib's names mapped to the project's (an error when both are given, or
    for an RLlib name whose unit differs here)."""
    out = {}
    for key, value in values.items():
        if key in _NOT_RLLIB:
            raise SettingsError(f"{where}.{key}: {_NOT_RLLIB[key]}")
        name = RLLIB_NAMES.get(key, key)
        if name in out:
            raise SettingsError(f"{where}.{key}: given twice (as {name!r} and as RLlib's {key!r}); keep one")
        out[name] = value
    return out


def _build_section(cls: type, values: dict, where: str) -> Any:
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in dataclasses.fields(cls)]
    if cls is AlgoSettings:
        values = _rllib_names(values, where)
    kwargs = {}
    for key, value in values.items():
        if key not in allowed:
            raise SettingsError(f"{where}.{key}: unknown key; allowed: {', '.join(allowed)}")
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}")
    return cls(**kwargs)


def _epsilon_pair(pair: Any) -> Any:
    """``[step, value]`` of ``algo.epsilon`` with numeric strings read (``["5e4", 0.05]``: a whole
    step becomes an int)."""
    if not isinstance(pair, list) or len(pair) != 2:
        return pair
    step, value = (_float_text(x) if _float_text(x) is not None else x for x in pair)
    if isinstance(pair[0], str) and isinstance(step, float) and step.is_integer():
        step = int(step)
    return [step, value]


def _validate(s: Settings) -> None:
    src = s.source
    if s.run.eval_metric not in EVAL_METRICS:
        raise SettingsError(f"{src}: run.eval_metric: got {s.run.eval_metric!r}; allowed: {', '.join(EVAL_METRICS)}")
    if s.run.eval_checkpoint not in EVAL_CHECKPOINTS:
        raise SettingsError(
            f"{src}: run.eval_checkpoint: got {s.run.eval_checkpoint!r}; allowed: {', '.join(EVAL_CHECKPOINTS)}"
        )
    if not 0.0 <= s.model.dropout < 1.0:
        raise SettingsError(f"{src}: model.dropout: must be in [0, 1), got {s.model.dropout}")
    if s.algo.weight_decay < 0.0:
        raise SettingsError(f"{src}: algo.weight_decay: must be >= 0, got {s.algo.weight_decay}")
    if "weight_decay" in s.learner and s.algo.weight_decay and s.learner["weight_decay"] != s.algo.weight_decay:
        raise SettingsError(
            f"{src}: learner.weight_decay: conflicts with algo.weight_decay ({s.learner['weight_decay']!r} "
            f"vs {s.algo.weight_decay!r}); set only algo.weight_decay"
        )
    if s.model.action_mode not in ACTION_MODES:
        raise SettingsError(
            f"{src}: model.action_mode: got {s.model.action_mode!r}; allowed: {', '.join(ACTION_MODES)}"
        )
    if not s.model.hidden or not all(isinstance(h, int) and h > 0 for h in s.model.hidden):
        raise SettingsError(f"{src}: model.hidden: expected a non-empty list of positive ints")
    positive = {
        "run.iterations": s.run.iterations, "run.keep_checkpoints": s.run.keep_checkpoints, "algo.batch_size": s.algo.batch_size,
        "algo.n_step": s.algo.n_step, "algo.num_envs_per_runner": s.algo.num_envs_per_runner,
        "algo.rollout_length": s.algo.rollout_length, "algo.lr": s.algo.lr,
        "algo.replay_ratio": s.algo.replay_ratio, "algo.target_update_freq": s.algo.target_update_freq,
        "algo.env_runner_restart_timeout_s": s.algo.env_runner_restart_timeout_s,
    }
    for key, value in positive.items():
        if not value > 0:
            raise SettingsError(f"{src}: {key}: must be > 0, got {value}")
    non_negative = {
        "run.checkpoint_every": s.run.checkpoint_every, "algo.learning_starts": s.algo.learning_starts,
        "algo.num_env_runners": s.algo.num_env_runners, "algo.num_learners": s.algo.num_learners,
        "run.num_cpus": s.run.num_cpus, "run.eval_every": s.run.eval_every,
        "run.early_stop_patience": s.run.early_stop_patience,
    }
    for key, value in non_negative.items():
        if value < 0:
            raise SettingsError(f"{src}: {key}: must be >= 0, got {value}")
    if not 0.0 <= s.algo.gamma <= 1.0:
        raise SettingsError(f"{src}: algo.gamma: must be in [0, 1], got {s.algo.gamma}")
    if not 0.0 < s.algo.tau <= 1.0:
        raise SettingsError(f"{src}: algo.tau: must be in (0, 1], got {s.algo.tau}")
    eps = s.algo.epsilon = [_epsilon_pair(p) for p in s.algo.epsilon]
    ok = all(isinstance(p, (list, tuple)) and len(p) == 2 for p in eps) and len(eps) >= 1
    ok = ok and all(isinstance(x, (int, float)) and not isinstance(x, bool) for p in eps for x in p)
    if ok:
        steps = [p[0] for p in eps]
        ok = steps == sorted(steps) and all(0.0 <= float(p[1]) <= 1.0 for p in eps)
    if not ok:
        raise SettingsError(
            f"{src}: algo.epsilon: expected [[step, value], ...] with increasing steps and values "
            f"in [0, 1], got {eps!r}"
        )
    for name in ("num_gpus_per_learner", "num_gpus_per_env_runner"):
        value = getattr(s.algo, name)
        if value != -1 and value < 0:
            raise SettingsError(f"{src}: algo.{name}: must be -1 (auto) or >= 0, got {value}")
    _validate_runner_resources(s)
    _validate_components(s)


def _validate_runner_resources(s: Settings) -> None:
    """``algo.custom_resources_per_env_runner``: Ray resource names (not CPU/GPU) -> amounts >= 0."""
    key = f"{s.source}: algo.custom_resources_per_env_runner"
    for name, amount in s.algo.custom_resources_per_env_runner.items():
        if not isinstance(name, str) or not name:
            raise SettingsError(f"{key}: resource names must be non-empty strings, got {name!r}")
        if name in ("CPU", "GPU"):
            raise SettingsError(f"{key}: {name} is not a custom resource; runners take 1 CPU each and "
                                f"algo.num_gpus_per_env_runner GPUs")
        number = _float_text(amount) if isinstance(amount, str) else amount
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 <= number < math.inf:
            raise SettingsError(f"{key}: {name}: expected a number >= 0, got {amount!r}")
        s.algo.custom_resources_per_env_runner[name] = number


def _numeric_strings(value: Any, typ: Any) -> Any:
    """``value`` with numeric strings turned into floats where ``typ`` expects a float (also inside
    ``Optional[float]`` and tuples/lists of floats); anything else unchanged (the component's own
    check then names it)."""
    if typ is float:
        number = _float_text(value)
        return value if number is None else number
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType) and float in args:
        return _numeric_strings(value, float)
    if origin in (tuple, list) and isinstance(value, (list, tuple)) and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return type(value)(_numeric_strings(v, args[0]) for v in value)
        if origin is list:
            return type(value)(_numeric_strings(v, args[0]) for v in value)
        if len(args) == len(value):
            return type(value)(_numeric_strings(v, t) for v, t in zip(value, args))
    return value


def _numeric_strings_in(values: dict, hints: dict) -> None:
    for key, typ in hints.items():
        if key in values:
            values[key] = _numeric_strings(values[key], typ)


def _coerce_dict_sections(s: Settings) -> None:
    """Numeric strings -> floats in the dict sections where the component expects a float: the
    float fields of ``env``, ``runner`` and ``learner``, and in ``data`` the float keys, ``split``,
    ``window``, ``features`` and ``synthetic`` (the generator's float keywords)."""
    import inspect

    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.envs.market import FeatureConfig
    from rl_zerosync.envs.synthetic import synthetic_series
    from rl_zerosync.learner.learner_settings import LearnerSettings

    for section, cls in (("env", EnvParams), ("runner", RunnerSettings), ("learner", LearnerSettings)):
        values = getattr(s, section)
        if isinstance(values, dict):
            _numeric_strings_in(values, typing.get_type_hints(cls))
    data = s.data
    if not isinstance(data, dict):
        return
    _numeric_strings_in(data, {k: float for k in ("periods_per_year", "spread_bps", "min_spread_bps",
                                                  "max_abs_log_return")})
    _numeric_strings_in(data, {"window": list[float]})
    split = data.get("split")
    if isinstance(split, dict):
        _numeric_strings_in(split, {k: float for k in split})
    elif isinstance(split, list):
        data["split"] = _numeric_strings(split, list[float])
    if isinstance(data.get("features"), dict):
        _numeric_strings_in(data["features"], typing.get_type_hints(FeatureConfig))
    if isinstance(data.get("synthetic"), dict):
        floats = {name: float for name, p in inspect.signature(synthetic_series).parameters.items()
                  if isinstance(p.default, float)}
        _numeric_strings_in(data["synthetic"], floats)


def _validate_components(s: Settings) -> None:
    """Build the component settings once so their own checks run now, naming the file."""
    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.learner.learner_settings import LearnerSettings

    _coerce_dict_sections(s)
    for section, cls in (("env", EnvParams), ("runner", RunnerSettings), ("learner", LearnerSettings)):
        values = getattr(s, section)
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in allowed:
                raise SettingsError(
                    f"{s.source}: {section}.{key}: unknown key; allowed: {', '.join(allowed)}"
                )
        try:
            cls(**values)
        except (TypeError, ValueError) as err:
            raise SettingsError(f"{s.source}: {section}: {err}") from err
    if not isinstance(s.data, dict) or "source" not in s.data:
        raise SettingsError(f"{s.source}: data.source: required (synthetic, csv or parquet)")
    from rl_zerosync.envs.config import check_data_keys

    try:
        check_data_keys(s.data)
    except ValueError as err:
        raise SettingsError(f"{s.source}: {err}") from err


def from_dict(raw: dict, source: str = "<dict>") -> Settings:
    """Build and validate :class:`Settings` from a plain dict."""
    if not isinstance(raw, dict):
        raise SettingsError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    allowed = list(_TYPED_SECTIONS) + list(_DICT_SECTIONS)
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in allowed:
            raise SettingsError(f"{source}: {key}: unknown section; allowed: {', '.join(allowed)}")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise SettingsError(f"{source}: {key}: expected a mapping, got {value!r}")
        if key in _TYPED_SECTIONS:
            kwargs[key] = _build_section(_TYPED_SECTIONS[key], value, f"{source}: {key}")
        else:
            kwargs[key] = copy.deepcopy(value)
    s = Settings(**kwargs, source=source)
    _validate(s)
    return s


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise SettingsError(f"--set {item!r}: expected section.key=value")
    key, text = item.split("=", 1)
    path = key.strip().split(".")
    if len(path) < 2:
        raise SettingsError(f"--set {item!r}: expected section.key=value (e.g. run.iterations=5)")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
    return path, value


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``section.key=value`` overrides (YAML-parsed values) to a raw settings dict."""
    raw = copy.deepcopy(raw)
    for item in overrides or []:
        path, value = _parse_override(item)
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SettingsError(f"--set {item!r}: {part} is not a section")
        key = path[-1]
        if path[:-1] == ["algo"] and key not in _NOT_RLLIB:
            # An override replaces the key under either name (RLlib's or the project's).
            key = RLLIB_NAMES.get(key, key)
            for alias in [k for k in node if RLLIB_NAMES.get(k) == key]:
                del node[alias]
        node[key] = value
    return raw


def load(path: str | Path, overrides: list[str] | None = None) -> Settings:
    """Load a YAML settings file, apply ``--set`` overrides and validate."""
    path = Path(path)
    if not path.is_file():
        raise SettingsError(f"{path}: settings file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise SettingsError(f"{path}: not valid YAML: {err}") from err
    return from_dict(apply_overrides(raw, overrides or []), source=str(path))


def _gpus(value: float) -> float:
    """-1 means 'one GPU if CUDA is available here, else none'."""
    if value == -1:
        import torch

        return 1.0 if torch.cuda.is_available() else 0.0
    return float(value)


def to_rllib_config(s: Settings):
    """Map settings onto a :class:`~rl_zerosync.algorithm.ZeroSyncDQNConfig` (the only mapping)."""
    from rl_zerosync.algorithm import ZeroSyncDQNConfig
    from rl_zerosync.envs.gym_twin import ENV_ID_IMPORTABLE

    a = s.algo
    learner_cfg = dict(s.learner)
    learner_cfg.setdefault("seed", s.run.seed)
    if a.weight_decay or "weight_decay" not in learner_cfg:
        learner_cfg["weight_decay"] = a.weight_decay  # DQNConfig has no field: the zerosync dict
    runner_cfg = dict(s.runner)
    runner_cfg.setdefault("seed", s.run.seed)
    gpus_learner = _gpus(a.num_gpus_per_learner)
    gpus_runner = _gpus(a.num_gpus_per_env_runner) if a.num_env_runners > 0 else 0.0
    config = (
        ZeroSyncDQNConfig()
        .environment(
            ENV_ID_IMPORTABLE,
            env_config={"data": s.data, "env": s.env, "runner": runner_cfg,
                        "action_mode": s.model.action_mode},
        )
        .env_runners(
            num_env_runners=a.num_env_runners,
            num_envs_per_env_runner=a.num_envs_per_runner,
            rollout_fragment_length=a.rollout_length,
            num_gpus_per_env_runner=gpus_runner,
            custom_resources_per_env_runner=dict(a.custom_resources_per_env_runner),
        )
        .fault_tolerance(env_runner_restart_timeout_s=a.env_runner_restart_timeout_s)
        .learners(
            num_learners=a.num_learners,
            num_gpus_per_learner=gpus_learner,
            learner_config_dict={"zerosync": learner_cfg},
        )
        .training(
            lr=a.lr,
            gamma=a.gamma,
            n_step=a.n_step,
            train_batch_size_per_learner=a.batch_size,
            replay_ratio=a.replay_ratio,
            num_steps_sampled_before_learning_starts=a.learning_starts,
            target_network_update_freq=a.target_update_freq,
            tau=a.tau,
            double_q=a.double_q,
            dueling=s.model.dueling,
            grad_clip=a.grad_clip,
            grad_clip_by="global_norm",
            epsilon=[tuple(p) for p in a.epsilon],
        )
        .rl_module(
            model_config={"action_mode": s.model.action_mode, "hidden": list(s.model.hidden),
                          "dueling": s.model.dueling, "layernorm": s.model.layernorm,
                          "dropout": s.model.dropout},
        )
        .debugging(seed=s.run.seed)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
    )
    return config
