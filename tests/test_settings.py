"""YAML settings: every shipped config loads; unknown keys and bad values name key, file, allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from rl_zerosync.config.settings import SettingsError, apply_overrides, from_dict, load, to_rllib_config

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load_and_map(path):
    s = load(path)
    config = to_rllib_config(s)
    assert config.train_batch_size_per_learner == s.algo.batch_size
    assert config.num_envs_per_env_runner == s.algo.num_envs_per_runner
    assert config.rollout_fragment_length == s.algo.rollout_length
    assert config.model_config["action_mode"] == s.model.action_mode
    assert config.learner_config_dict["zerosync"]["seed"] == s.run.seed
    assert config.replay_ratio == s.algo.replay_ratio


def test_unknown_key_names_key_file_and_allowed(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("algo:\n  batch_sise: 3\n")
    with pytest.raises(SettingsError) as e:
        load(p)
    msg = str(e.value)
    assert "x.yaml" in msg and "batch_sise" in msg and "batch_size" in msg


def test_unknown_section(tmp_path):
    p = tmp_path / "y.yaml"
    p.write_text("trainer:\n  lr: 1\n")
    with pytest.raises(SettingsError, match=r"y\.yaml: trainer: unknown section; allowed: run, algo"):
        load(p)


@pytest.mark.parametrize(
    "raw, needle",
    [
        ({"model": {"action_mode": "hybrid"}}, "model.action_mode: got 'hybrid'; allowed: routed, flat, branching"),
        ({"algo": {"lr": "fast"}}, "algo.lr: expected float"),
        ({"algo": {"gamma": 1.5}}, "algo.gamma: must be <= 1.0"),
        ({"algo": {"epsilon": [[10, 1.0], [0, 0.1]]}}, "algo.epsilon"),
        ({"env": {"episode_length": 3}}, "env.episode_length: unknown key; allowed:"),
        ({"runner": {"output": "frames"}}, "runner"),
        ({"learner": {"loss": "l1"}}, "learner"),
        ({"data": {}}, "data.source"),
        ({"data": {"source": "synthetic", "num_bar": 10}}, "data: unknown key(s) ['num_bar']"),
        ({"data": {"source": "sql"}}, "data.source: expected one of"),
    ],
)
def test_bad_values(raw, needle):
    with pytest.raises(SettingsError) as e:
        from_dict(raw, source="cfg.yaml")
    assert "cfg.yaml" in str(e.value) and needle in str(e.value)


def test_overrides_parse_yaml_values():
    raw = apply_overrides({"run": {"iterations": 3}},
                          ["run.iterations=7", "algo.epsilon=[[0, 0.5]]", "run.name=abc", "algo.double_q=false"])
    assert raw["run"]["iterations"] == 7
    assert raw["algo"]["epsilon"] == [[0, 0.5]]
    assert raw["run"]["name"] == "abc"
    assert raw["algo"]["double_q"] is False
    with pytest.raises(SettingsError, match="section.key=value"):
        apply_overrides({}, ["iterations"])



def test_rllib_names_are_accepted_in_algo(tmp_path):
    from rl_zerosync.config.settings import SettingsError, from_dict, load

    s = from_dict({"algo": {"train_batch_size_per_learner": 256, "num_steps_sampled_before_learning_starts": 500,
                            "rollout_fragment_length": 16, "num_envs_per_env_runner": 8}})
    assert (s.algo.batch_size, s.algo.learning_starts, s.algo.rollout_length, s.algo.num_envs_per_runner) == \
        (256, 500, 16, 8)
    with pytest.raises(SettingsError, match=r"algo.train_batch_size_per_learner: given twice"):
        from_dict({"algo": {"batch_size": 64, "train_batch_size_per_learner": 256}})
    with pytest.raises(SettingsError, match=r"algo.target_network_update_freq: .*counts learner updates"):
        from_dict({"algo": {"target_network_update_freq": 500}})
    # --set replaces the key under either name
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo:\n  batch_size: 64\n")
    assert load(cfg, ["algo.train_batch_size_per_learner=128"]).algo.batch_size == 128
    cfg.write_text("algo:\n  train_batch_size_per_learner: 64\n")
    assert load(cfg, ["algo.batch_size=32"]).algo.batch_size == 32
