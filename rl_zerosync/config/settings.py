"""One typed settings object for a run, loaded from a YAML file.

A YAML file has up to seven top-level sections, each mapped onto one typed object::

    run:      RunSettings      (where to write, how long, checkpoints)
    algo:     AlgoSettings     (DQN hyper-parameters, scale-out, replay ratio)
    model:    ModelSettings    (action mode, network)
    data:     Section[DataSettings]    (rl_zerosync.data.data_settings: what make_market reads)
    env:      Section[EnvParams]       (rl_zerosync.envs.params)
    runner:   Section[RunnerSettings]  (rl_zerosync.env_runner.runner_settings)
    learner:  Section[LearnerSettings] (rl_zerosync.learner.learner_settings)

A key left out takes its default from one place: ``algo`` and ``model`` from
:data:`rl_zerosync.presets.FILE_DEFAULTS`, the component sections from their component's class. The
four component sections are :class:`Section` objects: the keys the file set, read as a mapping (what
the component receives through ``env_config`` / ``learner_config_dict``), plus ``typed``, the
component's own settings object built from them at load (``settings.runner.typed.device``).

Every value is checked once, at load, by its one validator (the component's class for the component
sections, ``LearnerSettings`` for the learner's ``algo`` keys, the epsilon rule of
:mod:`rl_zerosync.env_runner.epsilon` for ``algo.epsilon``, :data:`rl_zerosync.presets.MODEL_KEYS` for
``model``, the rule the Q module applies later); unknown keys and bad values raise
:class:`SettingsError` naming the file, the key and what is allowed. ``algo`` takes RLlib's names of its
keys too, by the one name table :data:`rl_zerosync.presets.ALGO_KEYS`; :func:`to_rllib_config` is the
one place where settings become a ``ZeroSyncDQNConfig``, through the same table.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rl_zerosync.actions import ACTION_MODES  # noqa: F401 - the one tuple, re-exported (tests check it is)
from rl_zerosync.rundir.checkpoints import KEEP_LAST
from rl_zerosync.presets import (
    ALGO_KEYS, MODEL_KEYS, REFUSED_RLLIB_NAMES, RLLIB_ALIASES, AlgoSettings, Choice, ModelSettings, Range, Rule,
    bounded_repr, ruled,
)
from rl_zerosync.config.storage import job_run_dir
from rl_zerosync.config.sections import Section, build_components, learner_config, runner_config
from rl_zerosync.config.yaml_values import (
    SettingsError, SettingsYAMLError, check, coerce_field, epsilon_numbers, float_text, load_yaml, parse_override,
)

__all__ = ["AlgoSettings", "ModelSettings", "RunSettings", "Section", "Settings", "SettingsError", "SettingsYAMLError",
           "apply_overrides", "from_dict", "load", "to_rllib_config"]

if TYPE_CHECKING:
    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.data.data_settings import DataSettings
    from rl_zerosync.envs.params import EnvParams
    from rl_zerosync.learner.learner_settings import LearnerSettings

EVAL_METRICS = ("sharpe", "sortino", "total_return", "annualized_return", "calmar")
"""Validation metrics a run may select its best checkpoint by (higher is better)."""
EVAL_CHECKPOINTS = ("best", "last")
MIN_EPISODE_LEN = 2
"""Shortest ``env.episode_len`` of a training run (the per-episode Sharpe needs two returns)."""
MAX_RUN_SEED = 2**32 - 1
"""Largest ``run.seed``: RLlib seeds numpy's global generator with it (``np.random.seed``)."""


@dataclass
class RunSettings:
    """Where a run writes, how long it trains, its checkpoints and validation."""

    name: str = "run"
    """Run name; the run directory is ``<dir>/<name>``."""
    dir: str = "runs"
    """Parent directory of run directories; inside a Ray job a relative one resolves against
    ``$RL_ZEROSYNC_STORAGE``, else ``~/ray_results/rl_zerosync`` (``config/storage.py``)."""
    iterations: int = ruled(100, Range(0, lo_open=True, integer=True))
    """Training iterations (one iteration = one rollout per runner + K updates)."""
    checkpoint_every: int = ruled(10, Range(0, integer=True))
    """Write a checkpoint every this many iterations (and at the end); 0 = only at the end."""
    seed: int = ruled(0, Range(0, integer=True))
    """Global seed: env offsets, exploration, network init, replay sampling; at most 2**32 − 1 (RLlib seeds
    numpy's generator with it)."""
    evaluate: bool = True
    """Evaluate the greedy policy on the validation and test segments at the end."""
    num_cpus: int = ruled(0, Range(0, integer=True))
    """CPUs for a local Ray instance; 0 = let Ray decide (ignored when a cluster is running)."""
    eval_every: int = ruled(0, Range(0, integer=True))
    """Validate the greedy policy every this many iterations (and after the last one); 0 = auto, ``max(1,
    iterations // 20)`` (about 20 validation passes per run)."""
    eval_metric: str = ruled("sharpe", Choice(EVAL_METRICS))
    """Validation metric (mean over assets, higher is better) that selects ``checkpoint_best/``."""
    early_stop_patience: int = ruled(0, Range(0, integer=True))
    """Stop after this many validation passes without a new best; 0 = never stop early."""
    keep_checkpoints: int = ruled(KEEP_LAST, Range(0, lo_open=True, integer=True))
    """Last checkpoints kept (``checkpoint/``, ``checkpoint.1/``, ...) besides ``checkpoint_best/``."""
    eval_checkpoint: str = ruled("best", Choice(EVAL_CHECKPOINTS))
    """Checkpoint the end-of-run test evaluates: ``best`` (by validation) or ``last``."""


@dataclass(kw_only=True)
class Settings:
    """A run's settings: the typed sections of one settings file (built by :func:`from_dict` / :func:`load`)."""

    run: RunSettings = field(default_factory=RunSettings)
    algo: AlgoSettings = field(default_factory=AlgoSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    data: Section[DataSettings]
    """What :func:`rl_zerosync.envs.make_market` reads."""
    env: Section[EnvParams]
    """The trading env's parameters."""
    runner: Section[RunnerSettings]
    """The GPU env runner's settings (``typed.seed`` defaults to ``run.seed``)."""
    learner: Section[LearnerSettings]
    """The zero-sync learner's settings; ``typed`` is what the learner builds from the RLlib config
    (its DQN fields come from ``algo``, its seed defaults to ``run.seed``), built and checked once, at
    load: a learner in this process gets this object back from ``LearnerSettings.from_config``."""
    population: dict | None = None
    """The file's ``population:`` section as written (None: a single run); parsed and checked by
    :func:`rl_zerosync.population.space.parse_population`, which turns it into members."""
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
        """Plain data for ``settings.yaml``: every field of run/algo/model, the keys the file set in
        the component sections."""
        d = {name: dataclasses.asdict(getattr(self, name)) for name in _TYPED_SECTIONS}
        d.update({name: copy.deepcopy(dict(getattr(self, name).given)) for name in _COMPONENT_SECTIONS})
        # recorded always: a settings.yaml without it is read as an earlier version's same-bar run
        d["env"].setdefault("execution_lag", self.env.typed.execution_lag)
        if self.population is not None:
            d["population"] = copy.deepcopy(self.population)
        return d


_TYPED_SECTIONS = {"run": RunSettings, "algo": AlgoSettings, "model": ModelSettings}
_COMPONENT_SECTIONS = ("data", "env", "runner", "learner")
POPULATION_SECTION = "population"
"""The optional section that turns a run into a population (kept as written, see ``Settings.population``)."""

def _rllib_names(values: dict, where: str) -> dict:
    """``algo`` values with RLlib's names mapped to the project's (an error when both are given, or
    for an RLlib name whose unit differs here)."""
    out = {}
    for key, value in values.items():
        if key in REFUSED_RLLIB_NAMES:
            raise SettingsError(f"{where}.{key}: {REFUSED_RLLIB_NAMES[key]}")
        name = RLLIB_ALIASES.get(key, key)
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
        kwargs[key] = coerce_field(value, hints[key], f"{where}.{key}")
    return cls(**kwargs)


MAX_RUN_NAME_BYTES = 200
"""The longest ``run.name`` in UTF-8 bytes: a directory name is at most 255 bytes, and the names made
from it (``<name>.tmp`` and the like) need room."""


def check_run_name(name: str, src: str) -> None:
    """``run.name``: one non-empty relative path component (no separators, no ``..``, no leading
    dot) of at most :data:`MAX_RUN_NAME_BYTES` bytes, so the run directory is a folder of its own
    inside ``run.dir``, never ``run.dir`` itself or a folder outside it (:class:`SettingsError` naming
    the key)."""
    expected = "expected a non-empty name without '/', '\\' or a leading '.', e.g. 'run'"
    check(src, "run.name", isinstance(name, str) and name.strip() != "", f"got {name!r}; {expected}")
    check(src, "run.name", not any(sep in name for sep in ("/", "\\", "\0")) and not name.startswith("."),
          f"got {name!r}; {expected}")
    check(src, "run.name", name == name.strip(), f"got {name!r} (leading or trailing spaces); {expected}")
    size = len(name.encode("utf-8", errors="surrogatepass"))
    check(src, "run.name", size <= MAX_RUN_NAME_BYTES,
          f"got a name of {len(name)} characters ({size} bytes, starting {name[:20]!r}); expected at most "
          f"{MAX_RUN_NAME_BYTES} bytes (a directory name is at most 255)")


def _check_rule(rule: Rule | None, key: str, value: Any, src: str) -> None:
    """``value`` of ``key`` (``section.name``) by its rule helper: SettingsError ``"<src>: <key>: got <value>;
    allowed: ..."`` for a choice, ``"<src>: <key>: must be ..., got <value>"`` for another rule."""
    if isinstance(rule, Choice):
        check(src, key, rule.allows(value), f"got {value!r}; allowed: {', '.join(map(str, rule.values))}")
    elif rule is not None:
        name = key.split(".", 1)[1]
        problem = rule.problem(name, value)
        check(src, key, problem is None, (problem or "").removeprefix(f"{name} "))


def _validate_run_and_model(run: RunSettings, model: ModelSettings, src: str) -> None:
    check_run_name(run.name, src)
    check(src, "run.dir", isinstance(run.dir, str) and run.dir.strip() != "",
          f"got {run.dir!r}; expected a directory path (e.g. 'runs')")
    for f in dataclasses.fields(run):
        _check_rule(f.metadata.get("rule"), f"run.{f.name}", getattr(run, f.name), src)
    check(src, "run.seed", run.seed <= MAX_RUN_SEED,
          f"must be <= 2**32 - 1 (RLlib seeds numpy with it), got {run.seed}")
    for key, rule in MODEL_KEYS.items():  # the Q module's rules
        value = getattr(model, key)
        check(src, f"model.{key}", rule.allows(value), rule.settings_message(value))


def _validate_algo(a: AlgoSettings, src: str) -> None:
    """The ``algo`` keys: epsilon by the epsilon rule, the custom resources here, the others by their
    declared rules (:data:`rl_zerosync.presets.ALGO_KEYS`): here, but those the learner reads, which
    ``LearnerSettings`` checks when the learner section is built (:func:`build_components`)."""
    from rl_zerosync.env_runner.epsilon import normalize_epsilon_schedule

    try:
        eps = normalize_epsilon_schedule(epsilon_numbers(a.epsilon), field="algo.epsilon")
    except ValueError as err:
        raise SettingsError(f"{src}: {err}") from None
    a.epsilon = [list(p) for p in eps]
    for key, k in ALGO_KEYS.items():  # the declared rules of the keys the learner does not read
        _check_rule(None if k.learner else k.rule, f"algo.{key}", getattr(a, key), src)
    where = "algo.custom_resources_per_env_runner"
    for name, amount in a.custom_resources_per_env_runner.items():
        check(src, where, isinstance(name, str) and bool(name),
               f"resource names must be non-empty strings, got {name!r}")
        check(src, where, name not in ("CPU", "GPU"), f"{name} is not a custom resource; runners take 1 CPU "
                                                       f"each and algo.num_gpus_per_env_runner GPUs")
        number = float_text(amount) if isinstance(amount, str) else amount
        check(src, where, not isinstance(number, bool) and isinstance(number, (int, float)) and 0 <= number < math.inf,
               f"{name}: expected a number >= 0, got {amount!r}")
        a.custom_resources_per_env_runner[name] = number


def from_dict(raw: dict, source: str = "<dict>") -> Settings:
    """Build and validate :class:`Settings` from a plain dict (every check runs here)."""
    if not isinstance(raw, dict):
        raise SettingsError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    allowed = list(_TYPED_SECTIONS) + list(_COMPONENT_SECTIONS) + [POPULATION_SECTION]
    sections: dict[str, dict] = {}
    population = raw.get(POPULATION_SECTION)
    for key, value in raw.items():
        if key not in allowed:
            raise SettingsError(f"{source}: {key}: unknown section; allowed: {', '.join(allowed)}")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise SettingsError(f"{source}: {key}: expected a mapping, got {bounded_repr(value)}")
        sections[key] = value
    typed = {k: _build_section(cls, sections.get(k, {}), f"{source}: {k}") for k, cls in _TYPED_SECTIONS.items()}
    _validate_run_and_model(typed["run"], typed["model"], source)
    _validate_algo(typed["algo"], source)
    components = build_components(sections, typed["run"].seed, typed["algo"], source)
    _validate_replay(typed["algo"], components["learner"].typed.replay_capacity, source)
    episode_len = components["env"].typed.episode_len
    check(source, "env.episode_len", episode_len >= MIN_EPISODE_LEN,
          f"expected an int >= {MIN_EPISODE_LEN} (a one-step episode has no return series to score), got {episode_len}")
    return Settings(**typed, **components, population=copy.deepcopy(population), source=source)


def _validate_replay(a: AlgoSettings, capacity: int, src: str) -> None:
    """``learner.replay_capacity`` holds one batch and one iteration's transitions per learner
    (``num_envs_per_runner * rollout_length * runners / learners``): a smaller replay samples
    transitions it has already overwritten, or one row over and over."""
    check(src, "learner.replay_capacity", capacity >= a.batch_size,
          f"{capacity} is smaller than one batch (algo.batch_size {a.batch_size}); expected >= {a.batch_size}")
    per_learner = math.ceil(a.num_envs_per_runner * a.rollout_length * max(a.num_env_runners, 1)
                            / max(a.num_learners, 1))
    check(src, "learner.replay_capacity", capacity >= per_learner,
          f"{capacity} is smaller than one iteration's transitions per learner ({per_learner} = "
          f"algo.num_envs_per_runner {a.num_envs_per_runner} x algo.rollout_length {a.rollout_length} x "
          f"{max(a.num_env_runners, 1)} runner(s) / {max(a.num_learners, 1)} learner(s)); expected >= {per_learner}")


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``section.key=value`` overrides (YAML-parsed values) to a raw settings dict."""
    raw = copy.deepcopy(raw)
    for item in overrides or []:
        path, value = parse_override(item)
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SettingsError(f"--set {item!r}: {part} is not a section")
        key = path[-1]
        if path[:-1] == ["algo"] and key not in REFUSED_RLLIB_NAMES:
            # An override replaces the key under either name (RLlib's or the project's).
            key = RLLIB_ALIASES.get(key, key)
            for alias in [k for k in node if RLLIB_ALIASES.get(k) == key]:
                del node[alias]
        node[key] = value
    return raw


def load(path: str | Path, overrides: list[str] | None = None) -> Settings:
    """Load a YAML settings file, apply ``--set`` overrides and validate."""
    path = Path(path)
    if not path.is_file():
        raise SettingsError(f"{path}: settings file not found")
    try:
        raw = load_yaml(path.read_text(), str(path)) or {}  # no aliases, no repeated keys (SettingsYAMLError)
    except yaml.YAMLError as err:
        raise SettingsError(f"{path}: not valid YAML: {err}") from err
    settings = from_dict(apply_overrides(raw, overrides or []), source=str(path))
    settings.run.dir = job_run_dir(settings.run.dir)  # inside a Ray job: persistent storage (config/storage.py)
    return settings


def _gpus(value: float) -> float:
    """-1 means 'one GPU if CUDA is available here, else none'."""
    if value == -1:
        import torch

        return 1.0 if torch.cuda.is_available() else 0.0
    return float(value)


def _rllib_values(a: AlgoSettings) -> dict:
    """Every ``algo`` value as RLlib takes it, by ``algo`` key: GPUs -1 resolved here, none for env
    runners that do not exist, epsilon as ``(step, value)`` tuples, the resources a copy."""
    values = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    values["num_gpus_per_learner"] = _gpus(a.num_gpus_per_learner)
    values["num_gpus_per_env_runner"] = _gpus(a.num_gpus_per_env_runner) if a.num_env_runners > 0 else 0.0
    values["epsilon"] = [tuple(p) for p in a.epsilon]
    values["custom_resources_per_env_runner"] = dict(a.custom_resources_per_env_runner)
    return values


def to_rllib_config(s: Settings):
    """Map settings onto a :class:`~rl_zerosync.algorithm.ZeroSyncDQNConfig` (the only mapping): every
    ``algo`` key under its RLlib name, through the ``AlgorithmConfig`` method that
    :data:`rl_zerosync.presets.ALGO_KEYS` names (``weight_decay``, which DQNConfig lacks, in
    ``learner_config_dict``); the ``model`` keys as ``model_config`` (``dueling`` also as DQNConfig's)."""
    from rl_zerosync.algorithm import ZeroSyncDQNConfig
    from rl_zerosync.envs.gym_twin import ENV_ID_IMPORTABLE
    from rl_zerosync.rundir.run_dir import RLLIB_LOG_DIR

    values = _rllib_values(s.algo)
    calls: dict[str, dict] = {"env_runners": {}, "fault_tolerance": {}, "learners": {}, "training": {}}
    for key, k in ALGO_KEYS.items():
        if k.rllib is not None:
            calls[k.method][k.rllib] = values[key]
    env_config = {"data": copy.deepcopy(dict(s.data)), "env": copy.deepcopy(dict(s.env)),
                  "runner": copy.deepcopy(runner_config(s.runner, s.run.seed)), "action_mode": s.model.action_mode}
    config = (
        ZeroSyncDQNConfig()
        .environment(ENV_ID_IMPORTABLE, env_config=env_config)
        .env_runners(**calls["env_runners"])
        .fault_tolerance(**calls["fault_tolerance"])
        .learners(**calls["learners"],
                  learner_config_dict={"zerosync": copy.deepcopy(learner_config(s.learner, s.run.seed, s.algo))})
        .training(**calls["training"], dueling=s.model.dueling, grad_clip_by="global_norm")
        .rl_module(model_config={key: copy.deepcopy(getattr(s.model, key)) for key in MODEL_KEYS})
        .debugging(seed=s.run.seed)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
        .log_to(str(s.run_dir / RLLIB_LOG_DIR))  # not a new ~/ray_results/<timestamp>/ per run
    )
    return config
