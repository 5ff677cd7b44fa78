"""One place per fact: every shipped config loads, each default lives in one place, one epsilon rule.

* Every ``configs/*.yaml`` loads, and the typed sections built at load are exactly what the learner,
  the env runner, the env and the market build from the RLlib config later (so whatever they would
  refuse was refused at load, naming the file and the key).
* Defaults: a settings file's ``algo`` / ``model`` defaults are :data:`rl_zerosync.presets.SETTINGS_FILE`,
  ``ZeroSyncDQNConfig()``'s are :data:`rl_zerosync.presets.API` (RLlib's DQN values), and the two
  differ only in the documented keys.
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
from rl_zerosync.presets import API, SETTINGS_FILE, Preset
from rl_zerosync.config.settings import (
    AlgoSettings, ModelSettings, RunSettings, SettingsError, from_dict, load, to_rllib_config,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

RLLIB_NAME = {
    "lr": "lr", "gamma": "gamma", "n_step": "n_step", "batch_size": "train_batch_size_per_learner",
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "target_update_freq": "target_network_update_freq", "tau": "tau", "double_q": "double_q",
    "dueling": "dueling", "grad_clip": "grad_clip", "epsilon": "epsilon", "replay_ratio": "replay_ratio",
    "num_envs_per_runner": "num_envs_per_env_runner", "rollout_length": "rollout_fragment_length",
    "env_runner_restart_timeout_s": "env_runner_restart_timeout_s",
}
"""Preset field -> ZeroSyncDQNConfig attribute (weight_decay and hidden are checked apart)."""
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
    dqn = {LEARNER: getattr(s.algo, key) for key, LEARNER in
           (("lr", "lr"), ("gamma", "gamma"), ("n_step", "n_step"), ("batch_size", "train_batch_size_per_learner"),
            ("target_update_freq", "target_network_update_freq"), ("tau", "tau"), ("double_q", "double_q"),
            ("grad_clip", "grad_clip"))}
    assert set(dqn) == set(DQN_FIELDS)
    assert s.learner.typed == LearnerSettings(seed=s.run.seed, **dqn)


def test_settings_file_defaults_are_the_settings_file_preset():
    s = from_dict({}, source="empty.yaml")
    config = to_rllib_config(s)
    for f in dataclasses.fields(Preset):
        want = getattr(SETTINGS_FILE, f.name)
        if f.name == "hidden":
            assert tuple(config.model_config["hidden"]) == want == tuple(ModelSettings().hidden)
        elif f.name == "weight_decay":
            assert config.learner_config_dict["zerosync"]["weight_decay"] == want
        else:
            assert _config_value(config, f.name) == want, f.name


def test_api_defaults_are_the_api_preset_and_rllib_dqn_values():
    fresh, dqn = ZeroSyncDQNConfig(), DQNConfig()
    for name in RLLIB_NAME:
        assert _config_value(fresh, name) == getattr(API, name), name
    for name in ("lr", "gamma", "n_step", "batch_size", "learning_starts", "target_update_freq", "tau",
                 "double_q", "dueling", "grad_clip", "epsilon"):
        assert _config_value(dqn, name) == getattr(API, name), f"RLlib's DQNConfig.{RLLIB_NAME[name]} moved"
    # The learner's defaults are a fresh config's, whether built from it or without one.
    assert LearnerSettings.from_config(fresh) == LearnerSettings()
    assert LearnerSettings().weight_decay == API.weight_decay


def test_the_two_presets_differ_only_where_documented():
    differ = {f.name for f in dataclasses.fields(Preset) if getattr(API, f.name) != getattr(SETTINGS_FILE, f.name)}
    assert differ == DIFFERENCES
    empty, fresh = to_rllib_config(from_dict({}, source="empty.yaml")), ZeroSyncDQNConfig()
    for name in set(RLLIB_NAME) - DIFFERENCES:
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

    with pytest.raises(SettingsError, match=rf"smoke\.yaml: algo\.{key} must be a number > 0, got 0\.0"):
        load(ROOT / "configs" / "smoke.yaml", [f"algo.{key}=0"])
    config = ZeroSyncDQNConfig()
    setattr(config, key, 0.0)
    with pytest.raises(ValueError, match=rf"^{key} must be a number > 0, got 0\.0$"):
        config.validate()
