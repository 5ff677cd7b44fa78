"""One place per fact: every shipped config loads, each default lives in one place, one epsilon rule.

* Every ``configs/*.yaml`` loads, and the typed sections built at load are exactly what the learner,
  the env runner, the env and the market build from the RLlib config later (so whatever they would
  refuse was refused at load, naming the file and the key).
* Defaults: a settings file's ``algo`` / ``model`` defaults are :data:`rl_zerosync.presets.FILE_DEFAULTS`,
  ``ZeroSyncDQNConfig()``'s are :data:`rl_zerosync.presets.API` (RLlib's DQN values), and the two
  differ only in the documented keys.
* Names: one table between a settings file's ``algo`` names and RLlib's
  (:data:`rl_zerosync.presets.ALGO_KEYS`): every key round-trips through it, and no other module of the
  package spells the mapping out.
* Model keys: one rule (:data:`rl_zerosync.presets.MODEL_KEYS`) at load and in the Q module; a bad
  model key fails at load, naming the file and the key.
* Epsilon: one rule accepts or refuses a schedule the same way at settings load, in the env runner
  and in the Q module, and all three give the same epsilon at every step.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.algorithms.dqn.dqn import DQNConfig

from rl_zerosync import actions
from rl_zerosync.algorithm import ZeroSyncDQNConfig
from rl_zerosync.env_runner.epsilon import DeviceEpsilonSchedule, normalize_epsilon_schedule
from rl_zerosync.env_runner.runner_settings import RunnerSettings
from rl_zerosync.data.data_settings import DataSettings
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.learner.learner_settings import DQN_FIELDS, LearnerSettings
from rl_zerosync.module import make_module_spec
from rl_zerosync.presets import (
    ALGO_KEYS, API, BOOL, FILE_DEFAULTS, LEARNER_KEYS, MODEL_KEYS, POSITIVE, REFUSED_RLLIB_NAMES, RLLIB_ALIASES,
    AlgoKey, Choice, Preset, Range,
)
from rl_zerosync.config.sections import DICT_KEYS
from rl_zerosync.config.settings import (
    AlgoSettings, ModelSettings, RunSettings, SettingsError, from_dict, load, to_rllib_config,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

RLLIB_NAME = {**{key: k.rllib for key, k in ALGO_KEYS.items() if k.rllib is not None}, "dueling": "dueling"}
"""Preset field -> ZeroSyncDQNConfig attribute, from the package's one table (``dueling``, a model key,
is DQNConfig's too; weight_decay and the other model keys are checked apart)."""
PRESET_ON_CONFIG = [f.name for f in dataclasses.fields(Preset) if f.name in RLLIB_NAME]
"""The preset fields ZeroSyncDQNConfig holds under RLlib's names."""
DIFFERENCES = {"n_step", "batch_size", "learning_starts", "target_update_freq", "grad_clip", "epsilon",
               "rollout_length", "dueling"}
"""The preset fields where a settings file's default intentionally differs from ZeroSyncDQNConfig()'s."""


def _config_value(config, name: str):
    value = getattr(config, RLLIB_NAME[name])
    return tuple(tuple(p) for p in value) if name == "epsilon" else value


# ---------------------------------------------------------------- every shipped config loads
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_loads_and_components_build_what_load_built(path):
    s = load(path)
    config = to_rllib_config(s)
    assert LearnerSettings.from_config(config) == s.learner.typed
    assert RunnerSettings.from_env_config(config.env_config) == s.runner.typed
    assert EnvParams.from_dict(config.env_config["env"]) == s.env.typed
    assert DataSettings.from_dict(config.env_config["data"]) == s.data.typed
    # settings.yaml of a checkpoint reloads to the same settings
    again = from_dict(s.to_dict(), source=str(path))
    assert again.to_dict() == s.to_dict() and again.learner.typed == s.learner.typed


def test_component_sections_read_as_the_keys_given():
    s = from_dict({"runner": {"device": "cpu"}, "env": {"episode_len": 32}}, source="m.yaml")
    assert dict(s.runner) == {"device": "cpu"} and s.runner.get("wide") is None
    assert s.runner.typed.wide == RunnerSettings().wide and s.runner.typed.seed == s.run.seed
    assert s.env["episode_len"] == 32 == s.env.typed.episode_len
    assert not s.learner and s.to_dict()["learner"] == {}


# ---------------------------------------------------------------- each default in one place
def test_empty_file_takes_the_dataclass_defaults():
    s = from_dict({}, source="empty.yaml")
    assert (s.run, s.algo, s.model) == (RunSettings(), AlgoSettings(), ModelSettings())
    assert s.data.typed == DataSettings() and s.env.typed == EnvParams()
    assert s.runner.typed == RunnerSettings(seed=s.run.seed)
    dqn = {field: getattr(s.algo, key) for key, field in LEARNER_KEYS.items() if key not in DICT_KEYS}
    assert set(dqn) == set(DQN_FIELDS)
    assert s.learner.typed == LearnerSettings(seed=s.run.seed, **dqn)


def test_settings_file_defaults_are_the_settings_file_preset():
    s = from_dict({}, source="empty.yaml")
    config = to_rllib_config(s)
    for f in dataclasses.fields(Preset):
        want = getattr(FILE_DEFAULTS, f.name)
        if f.name == "hidden":
            assert tuple(config.model_config["hidden"]) == want == tuple(ModelSettings().hidden)
        elif f.name in ("layernorm", "dropout"):
            assert config.model_config[f.name] == want == getattr(ModelSettings(), f.name)
        elif f.name in DICT_KEYS:  # learner keys DQNConfig lacks: in learner_config_dict
            assert config.learner_config_dict["zerosync"][f.name] == want
        else:
            assert _config_value(config, f.name) == want, f.name


def test_api_defaults_are_the_api_preset_and_rllib_dqn_values():
    fresh, dqn = ZeroSyncDQNConfig(), DQNConfig()
    for name in PRESET_ON_CONFIG:
        assert _config_value(fresh, name) == getattr(API, name), name
    for name in ("lr", "gamma", "n_step", "batch_size", "learning_starts", "target_update_freq", "tau",
                 "double_q", "dueling", "grad_clip", "epsilon"):
        assert _config_value(dqn, name) == getattr(API, name), f"RLlib's DQNConfig.{RLLIB_NAME[name]} moved"
    # The learner's defaults are a fresh config's, whether built from it or without one.
    assert LearnerSettings.from_config(fresh) == LearnerSettings()
    assert LearnerSettings().weight_decay == API.weight_decay


def test_the_two_presets_differ_only_where_documented():
    differ = {f.name for f in dataclasses.fields(Preset) if getattr(API, f.name) != getattr(FILE_DEFAULTS, f.name)}
    assert differ == DIFFERENCES
    empty, fresh = to_rllib_config(from_dict({}, source="empty.yaml")), ZeroSyncDQNConfig()
    for name in set(PRESET_ON_CONFIG) - DIFFERENCES:
        assert _config_value(empty, name) == _config_value(fresh, name), name


def test_module_and_runner_fall_back_to_the_api_epsilon():
    module = make_module_spec(action_mode="flat", observation_space=gym.spaces.Box(-1, 1, (3,), np.float32)).build()
    device = DeviceEpsilonSchedule(ZeroSyncDQNConfig().epsilon, "cpu")
    for t in (0, 2500, 10_000, 50_000):
        assert module.epsilon_schedule.update(t) == pytest.approx(device.value_at(t), abs=1e-6)
    assert device.schedule == API.epsilon


def test_action_modes_are_defined_once():
    import rl_zerosync.env_runner.runner_settings as runner_settings
    import rl_zerosync.module as module
    import rl_zerosync.config.settings as settings

    assert module.ACTION_MODES is runner_settings.ACTION_MODES is settings.ACTION_MODES is actions.ACTION_MODES
    literal = ast.dump(ast.parse(repr(actions.ACTION_MODES)).body[0].value)
    holders = [p.name for p in sorted((ROOT / "rl_zerosync").rglob("*.py"))
               if any(ast.dump(n) == literal for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Tuple))]
    assert holders == ["actions.py"]


# ---------------------------------------------------------------- one name table
ROUND_TRIP_BY_HAND = {"epsilon": [[0, 0.5], [100, 0.1]], "custom_resources_per_env_runner": {"node": 1}}
"""The ``algo`` keys checked by their own function rather than a rule helper (:func:`another_valid_value`
gives them none): a valid value of each, not the default."""


def another_valid_value(k: AlgoKey):
    """A value ``k``'s rule helper allows, other than its default (and its ``auto``): the other bool; the
    first other choice; for an int :class:`Range` one above its lower bound; for a float, the midpoint of a
    bounded range, twice the default or half a unit above the lower bound. None for a key without a rule
    helper (or where none of those is allowed)."""
    rule, default = k.rule, k.default
    if rule is BOOL:
        return not default
    if isinstance(rule, Choice):
        return next((v for v in rule.values if v != default), None)
    if rule is POSITIVE:
        candidates = [default * 2, 1.0]
    elif isinstance(rule, Range) and rule.integer:
        candidates = [(rule.lo or 0) + 1, default + 1]
    elif isinstance(rule, Range):
        lo = 0.0 if rule.lo is None else float(rule.lo)
        candidates = [(lo + rule.hi) / 2] if rule.hi is not None else []
        candidates += [default * 2.0, lo + 0.5]
    else:
        return None
    auto = getattr(rule, "auto", None)
    return next((v for v in candidates if rule.allows(v) and v != default and v != auto), None)


ROUND_TRIP = {key: value for key, k in ALGO_KEYS.items()
              if (value := ROUND_TRIP_BY_HAND.get(key, another_valid_value(k))) is not None}
"""A valid value for every ``algo`` key, none of them the default: generated from the declarations
(:func:`another_valid_value`), by hand where a key has no rule helper."""


def _on_config(config, key: str):
    """The value of ``algo.<key>`` on a ZeroSyncDQNConfig, read through the one table."""
    k = ALGO_KEYS[key]
    value = config.learner_config_dict["zerosync"][key] if k.rllib is None else getattr(config, k.rllib)
    return [list(p) for p in value] if key == "epsilon" else value


def test_every_algo_key_round_trips_through_the_one_name_table():
    """YAML -> ZeroSyncDQNConfig -> YAML by ALGO_KEYS alone gives the same settings; the learner reads its
    keys under the same names; RLlib's names in a file are the same keys, or refused with a reason."""
    assert list(ALGO_KEYS) == [f.name for f in dataclasses.fields(AlgoSettings)]
    assert list(MODEL_KEYS) == [f.name for f in dataclasses.fields(ModelSettings)]
    missing = [key for key in ALGO_KEYS if key not in ROUND_TRIP]
    assert not missing, f"algo keys with neither a rule helper nor a ROUND_TRIP_BY_HAND row: {missing}"
    assert set(ROUND_TRIP) == set(ALGO_KEYS) and all(ROUND_TRIP[f.name] != f.default for f in
                                                     dataclasses.fields(AlgoSettings) if f.default is not dataclasses.MISSING)
    assert all(value != getattr(AlgoSettings(), key) for key, value in ROUND_TRIP.items())  # default_factory's too
    s = from_dict({"algo": ROUND_TRIP}, source="names.yaml")
    config = to_rllib_config(s)
    assert {key: _on_config(config, key) for key in ALGO_KEYS} == ROUND_TRIP
    back = from_dict({"algo": {key: _on_config(config, key) for key in ALGO_KEYS}}, source="names.yaml")
    assert back.algo == s.algo
    learner = LearnerSettings.from_config(config)
    assert {key: getattr(learner, field) for key, field in LEARNER_KEYS.items()} == \
        {key: ROUND_TRIP[key] for key in LEARNER_KEYS}
    for name, key in RLLIB_ALIASES.items():
        assert ALGO_KEYS[key].rllib == name != key
        assert getattr(from_dict({"algo": {name: ROUND_TRIP[key]}}).algo, key) == getattr(s.algo, key)
    for name in REFUSED_RLLIB_NAMES:
        with pytest.raises(SettingsError, match=rf"^names\.yaml: algo\.{name}: "):
            from_dict({"algo": {name: 1}}, source="names.yaml")
    # ZeroSyncDQNConfig() holds the API preset under the same names (its batch as RLlib's train_batch_size).
    fresh = ZeroSyncDQNConfig()
    for key in ALGO_KEYS:
        if ALGO_KEYS[key].rllib is not None and hasattr(API, key):
            want = [list(p) for p in API.epsilon] if key == "epsilon" else getattr(API, key)
            assert (fresh.train_batch_size if key == "batch_size" else _on_config(fresh, key)) == want, key


def _name_pairs_spelled_out(source: str, pairs: set) -> list:
    """Places that restate a (settings name, RLlib name) pair: ``{"a": "b"}`` string pairs (either way),
    ``f(rllib=x.key)`` keywords and ``x.rllib = y.key`` assignments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and \
                        ({(k.value, v.value), (v.value, k.value)} & pairs):
                    found.append((node.lineno, k.value, v.value))
        elif isinstance(node, ast.keyword) and isinstance(node.value, ast.Attribute):
            if (node.value.attr, node.arg) in pairs:
                found.append((node.value.lineno, node.value.attr, node.arg))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and (node.value.attr, target.attr) in pairs:
                    found.append((node.lineno, node.value.attr, target.attr))
    return found


def test_the_name_table_is_the_only_one():
    pairs = {(key, k.rllib) for key, k in ALGO_KEYS.items() if k.rllib not in (None, key)}
    assert len(pairs) == 5
    planted = 'T = {"batch_size": "train_batch_size_per_learner"}\nc.training(rollout_fragment_length=a.rollout_length)\n' \
              'self.num_envs_per_env_runner = p.num_envs_per_runner\n'
    assert sorted(line for line, *_ in _name_pairs_spelled_out(planted, pairs)) == [1, 2, 3]
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "rl_zerosync").rglob("*.py"))
             if p.name != "presets.py" and (hits := _name_pairs_spelled_out(p.read_text(), pairs))}
    assert not found, f"algo <-> RLlib names spelled out outside presets.ALGO_KEYS: {found}"


# ---------------------------------------------------------------- one rule per model key, checked at load
@pytest.mark.parametrize("model, needle", [
    ({"hidden": [True]}, "model.hidden: expected a list of positive ints, got [True]"),
    ({"hidden": [64, 0]}, "model.hidden: expected a list of positive ints, got [64, 0]"),
    ({"dropout": 1.5}, "model.dropout: expected a float in [0, 1), got 1.5"),
    ({"action_mode": "hybrid"}, "model.action_mode: got 'hybrid'; allowed: routed, flat, branching"),
    ({"layernorm": 1}, "model.layernorm: expected bool, got 1"),
    ({"hiden": [64]}, "model.hiden: unknown key; allowed: action_mode, hidden, dueling, layernorm, dropout"),
])
def test_bad_model_keys_fail_at_load_naming_the_file_and_key(tmp_path, model, needle):
    import yaml

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"model": model}))
    with pytest.raises(SettingsError) as err:
        load(path)
    assert str(err.value) == f"{path}: {needle}"
    with pytest.raises(SettingsError) as err:
        from_dict({"model": model}, source="m.yaml")
    assert str(err.value) == f"m.yaml: {needle}"


MODEL_VALUES = {
    "action_mode": ["routed", "flat", "branching", "hybrid", 3],
    "hidden": [[16], [16, 8], [], [True], [0], [-4], [16.0], "16", [[16]]],
    "dueling": [True, False, 1, "yes", None],
    "layernorm": [True, False, 1, 0.0, "no"],
    "dropout": [0.0, 0, 0.25, 1.0, -0.1, True, 1],
}
"""Values as a settings file's YAML and a model_config can both hold (no numeric strings: a file reads
``"1e-1"`` as a number first, YAML 1.1's floats without a dot)."""


@pytest.mark.parametrize("key, value", [(k, v) for k, vs in MODEL_VALUES.items() for v in vs],
                         ids=[f"{k}={v!r}" for k, vs in MODEL_VALUES.items() for v in vs])
def test_model_rule_is_the_same_at_load_in_the_config_and_in_the_module(key, value):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rl_zerosync.module import ZeroSyncQModule

    try:
        from_dict({"model": {key: value}}, source="m.yaml")
        at_load = True
    except SettingsError as err:
        assert str(err).startswith(f"m.yaml: model.{key}: "), err
        at_load = False
    n = 5 if value == "routed" else 45
    spec = RLModuleSpec(module_class=ZeroSyncQModule, observation_space=gym.spaces.Box(-1, 1, (3,), np.float32),
                        action_space=gym.spaces.Discrete(n), model_config={key: value})
    try:
        spec.build()
        in_module = True
    except ValueError as err:
        assert str(err).startswith(f"model_config[{key!r}] must be "), err
        in_module = False
    config = ZeroSyncDQNConfig().rl_module(model_config={key: value})
    try:
        config.validate()
        in_config = True
    except ValueError as err:
        assert str(err).startswith(f"model_config[{key!r}] must be "), err
        in_config = False
    if value is None:  # left to the module's default, in a model_config
        assert not at_load and in_module and in_config
    else:
        assert at_load == in_module == in_config, (at_load, in_module, in_config)


# ---------------------------------------------------------------- learner settings built once
def test_learner_settings_are_built_once_per_run(monkeypatch):
    """Load builds and checks them; the learner of the same process gets that object back."""
    built = []
    check = LearnerSettings.__post_init__
    monkeypatch.setattr(LearnerSettings, "__post_init__", lambda self: (built.append(self), check(self))[1])
    s = from_dict({"algo": {"lr": 1.5e-3, "gamma": 0.97, "batch_size": 40, "num_envs_per_runner": 16,
                            "rollout_length": 32},
                   "learner": {"replay_capacity": 4321}, "run": {"seed": 11}}, source="once.yaml")
    assert len(built) <= 1  # 0 when an earlier test of this process loaded the same values
    assert LearnerSettings.from_config(to_rllib_config(s)) is s.learner.typed
    assert len(built) <= 1
    changed = to_rllib_config(s).training(gamma=0.5)
    assert LearnerSettings.from_config(changed).gamma == 0.5 and len(built) <= 2


def test_a_learner_field_error_names_its_field_and_pickles():
    """What load reports as algo.<key>; it also travels from a remote learner to the driver."""
    import pickle

    with pytest.raises(ValueError) as err:
        LearnerSettings(train_batch_size_per_learner=0)
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is type(err.value) and (again.field, str(again)) == ("train_batch_size_per_learner",
                                                                           str(err.value))


# ---------------------------------------------------------------- one epsilon rule
VALID = [0.1, 1, [[0, 1.0]], [[0, 1.0], [100, 0.1]], [(0, 1), (5e4, 0.05)], [[0, 0.5], [10, 1.0], [20, 0.0]]]
INVALID = [[[10, 1.0], [100, 0.1]], [[0, 1.0], [0, 0.5]], [[0, 1.0], [100, 0.1], [100, 0.05]], [[0, 1.5]], [],
           [[0, 1.0, 2]], [[-1, 1.0]], [[0, 1.0], [0.5, 0.2]], [[0, float("nan")]], [[0, 1.0], [float("inf"), 0.1]],
           1.5, True, "soon"]


def _outcomes(value):
    """(accepted?, epsilon at a few steps) at settings load, in the runner and in the module."""
    out = {}
    steps = (0, 7, 50, 100, 10**6)
    try:
        eps = from_dict({"algo": {"epsilon": value}}, source="e.yaml").algo.epsilon
        sched = DeviceEpsilonSchedule(eps, "cpu")
        out["settings"] = [round(sched.value_at(t), 6) for t in steps]
    except SettingsError:
        out["settings"] = None
    try:
        sched = DeviceEpsilonSchedule(RunnerSettings(epsilon=value).epsilon, "cpu")
        out["runner"] = [round(sched.value_at(t), 6) for t in steps]
    except ValueError:
        out["runner"] = None
    try:
        spec = make_module_spec(action_mode="flat", observation_space=gym.spaces.Box(-1, 1, (3,), np.float32),
                                epsilon=value)
        module = spec.build()
        out["module"] = [round(float(module.epsilon_schedule.update(t)), 6) for t in steps]
    except ValueError:
        out["module"] = None
    return out


@pytest.mark.parametrize("value, valid", [(v, True) for v in VALID] + [(v, False) for v in INVALID],
                         ids=[repr(v) for v in VALID + INVALID])
def test_epsilon_rule_is_the_same_at_load_in_the_runner_and_in_the_module(value, valid):
    out = _outcomes(value)
    assert out["settings"] == out["runner"] == out["module"], out
    assert (out["settings"] is not None) == valid


def test_normalized_schedule_is_what_every_consumer_sees():
    assert normalize_epsilon_schedule([(0, 1), (5e4, 0.05)]) == ((0, 1.0), (50_000, 0.05))
    s = from_dict({"algo": {"epsilon": 0.25}, "runner": {"epsilon": [["0", "1"], ["5e2", "5e-2"]]}}, source="e.yaml")
    assert s.algo.epsilon == [[0, 0.25]] and s.runner.typed.epsilon == ((0, 1.0), (500, 0.05))
    assert to_rllib_config(s).epsilon == [(0, 0.25)]


def test_invalid_epsilon_in_yaml_names_the_file_and_key(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("algo:\n  epsilon: [[10, 1.0], [100, 0.1]]\n")
    with pytest.raises(SettingsError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: algo.epsilon")
    assert "step must be 0" in str(err.value)
    path.write_text("runner:\n  epsilon: [[0, 1.0], [0, 0.5]]\n")
    with pytest.raises(SettingsError, match=r"x\.yaml: runner: runner\.epsilon steps must be strictly increasing"):
        load(path)


# ---------------------------------------------------------------- errors at load, naming file and key
@pytest.mark.parametrize("raw, needle", [
    ({"algo": {"grad_clip": 0}}, "algo.grad_clip: must be > 0.0"),
    ({"algo": {"batch_size": 0}}, "algo.batch_size: must be an int in [1,"),
    ({"algo": {"tau": 0.0}}, "algo.tau: must be > 0.0"),
    ({"algo": {"lr": float("inf")}}, "algo.lr: must be a finite number"),
    ({"learner": {"gamma": 0.5}}, "learner.gamma: unknown key; set algo.gamma"),
    ({"learner": {"train_batch_size_per_learner": 8}}, "set algo.batch_size"),
    ({"run": {"seed": -1}}, "run.seed: must be >= 0"),
    ({"data": {"source": "synthetic", "split": [0.5, 0.4]}}, "data.split"),
    ({"data": {"source": "synthetic", "synthetic": {"drift": 0.1}}}, "data.synthetic: unknown model keyword"),
    ({"data": {"source": "csv"}}, "data.paths: required"),
])
def test_errors_the_components_would_raise_later_are_raised_at_load(raw, needle):
    with pytest.raises(SettingsError) as err:
        from_dict(raw, source="late.yaml")
    assert str(err.value).startswith("late.yaml: ") and needle in str(err.value)


@pytest.mark.parametrize("key", ["replay_ratio", "env_runner_restart_timeout_s"])
def test_positive_number_rule_is_the_same_in_a_file_and_in_the_config(key):
    """One rule (presets.check_positive_number) for a settings file and for ZeroSyncDQNConfig."""
    from rl_zerosync.algorithm import ZeroSyncDQNConfig
    from rl_zerosync.config.settings import SettingsError, load

    with pytest.raises(SettingsError, match=rf"smoke\.yaml: algo\.{key}: must be a number > 0, got 0\.0"):
        load(ROOT / "configs" / "smoke.yaml", [f"algo.{key}=0"])
    config = ZeroSyncDQNConfig()
    setattr(config, key, 0.0)
    with pytest.raises(ValueError, match=rf"^{key} must be a number > 0, got 0\.0$"):
        config.validate()
