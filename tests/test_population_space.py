"""The ``population:`` section (rl_zerosync.population.space): Tune's points (same ones every time, the
count and order Tune gives), member order, one-line named errors, and ``--set`` overrides that rebuild
every member's settings exactly (CPU, no Ray instance)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_zerosync.config.settings import apply_overrides, from_dict
from rl_zerosync.config.yaml_values import SettingsError, parse_override
from rl_zerosync.population.space import (MAX_MEMBERS, SEARCH_KEYS, describe, member_overrides,
                                          parse_population)

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
SECTION = """
population:
  seeds: [0, 1, 2, 3]
  num_samples: 3
  search:
    algo.lr: {loguniform: [1e-4, 1e-3]}     # YAML 1.1 strings, read as numbers like the settings loader does
    algo.gamma: {grid_search: [0.98, 0.99]}
    algo.tau: {choice: [0.5, 1.0]}
    algo.n_step: {randint: [1, 4]}
  search_seed: 0
"""


def section(**changes) -> dict:
    raw = yaml.safe_load(SECTION)["population"]
    raw.update(changes)
    return raw


def test_absent_section_is_none():
    assert parse_population(None, "x.yaml") is None
    assert parse_population(yaml.safe_load("population:\n")["population"], "x.yaml") is None


def test_count_is_grid_combinations_times_num_samples_times_seeds():
    pop = parse_population(section(), "x.yaml")
    assert len(pop.points) == 2 * 3 and pop.size == 6 * 4 == len(pop.members)
    assert all(set(p) == {"algo.lr", "algo.gamma", "algo.tau", "algo.n_step"} for p in pop.points)


def test_same_file_same_points_other_search_seed_other_samples():
    a, b = parse_population(section(), "x.yaml"), parse_population(section(), "x.yaml")
    assert a.points == b.points
    c = parse_population(section(search_seed=1), "x.yaml")
    assert [p["algo.gamma"] for p in c.points] == [p["algo.gamma"] for p in a.points]
    assert [p["algo.lr"] for p in c.points] != [p["algo.lr"] for p in a.points]


def test_points_are_what_tunes_basic_variant_generator_draws(tmp_path):
    from ray import tune
    from ray.tune.experiment import Experiment
    from ray.tune.search.basic_variant import BasicVariantGenerator

    pop = parse_population(section(search_seed=7), "x.yaml")
    space = {"algo.lr": tune.loguniform(1e-4, 1e-3), "algo.gamma": tune.grid_search([0.98, 0.99]),
             "algo.tau": tune.choice([0.5, 1.0]), "algo.n_step": tune.randint(1, 4)}
    generator = BasicVariantGenerator(random_state=7)
    generator.add_configurations([Experiment("space", lambda config: None, config=space, num_samples=3,
                                             storage_path=str(tmp_path))])
    configs = []
    while (trial := generator.next_trial()) is not None:
        configs.append(trial.config)
    assert configs == pop.points


def test_grid_order_and_sample_passes():
    """Grid keys sorted by name, the first changing fastest; one full grid per sample pass."""
    raw = section(num_samples=2)
    raw["search"]["algo.target_update_freq"] = {"grid_search": [10, 20, 30]}
    pop = parse_population(raw, "x.yaml")
    grid = [(p["algo.gamma"], p["algo.target_update_freq"]) for p in pop.points]
    one_pass = [(g, t) for t in (10, 20, 30) for g in (0.98, 0.99)]
    assert grid == one_pass + one_pass


def test_member_order_and_types():
    pop = parse_population(section(seeds=[5, 3, 9]), "x.yaml")
    for k, m in enumerate(pop.members):
        assert (m.index, m.point, m.seed) == (k, k // 3, [5, 3, 9][k % 3])
        assert m.overrides == pop.points[m.point]
    for p in pop.points:
        assert type(p["algo.n_step"]) is int and 1 <= p["algo.n_step"] <= 3  # Tune's randint: hi exclusive
        assert type(p["algo.lr"]) is float and 1e-4 <= p["algo.lr"] <= 1e-3
    ints_for_a_float = parse_population({"seeds": [0], "search": {"algo.grad_clip": {"randint": [1, 10]}}}, "x")
    assert all(type(p["algo.grad_clip"]) is float for p in ints_for_a_float.points)


def test_fixed_values_and_no_search():
    pop = parse_population({"seeds": [0, 1], "search": {"algo.lr": 0.0005, "algo.epsilon": 0.1}}, "x.yaml")
    assert pop.points == [{"algo.lr": 0.0005, "algo.epsilon": 0.1}] and pop.size == 2
    assert parse_population({"seeds": [4]}, "x.yaml").points == [{}]


def test_describe():
    raw = {"seeds": [0, 1, 2, 3], "search": {"algo.lr": {"loguniform": [0.0001, 0.001]},
                                             "algo.gamma": {"grid_search": [0.98, 0.99]}}}
    assert describe(parse_population(raw, "x.yaml")) == \
        "population: 8 members = 2 points x 4 seeds | search algo.lr loguniform, algo.gamma grid | shards 1"
    line = describe(parse_population({**raw, "ensemble_top_k": 3, "pbt_every": 2, "shards": 2}, "x.yaml"))
    assert line.endswith("| ensemble top 3 | pbt every 2 validations (quantile 0.25) | shards 2")


ERRORS = [
    ({"seeds": None}, "population.seeds"),
    ({"seeds": []}, "population.seeds"),
    ({"seeds": [0, 1, 1]}, "population.seeds"),
    ({"seeds": [-1]}, "population.seeds"),
    ({"seeds": [True]}, "population.seeds"),
    ({"seeds": [0.0]}, "population.seeds"),
    ({"num_samples": 0}, "population.num_samples"),
    ({"num_samples": True}, "population.num_samples"),
    ({"seed": 3}, "population.seed: unknown key"),
    ({"search": {"algo.lr": {"loguniform": [1e-3]}}}, "population.search.algo.lr.loguniform"),
    ({"search": {"algo.lr": {"uniform": [0.5, 0.5]}}}, "population.search.algo.lr.uniform"),
    ({"search": {"algo.lr": {"loguniform": [0.0, 0.1]}}}, "population.search.algo.lr.loguniform"),
    ({"search": {"algo.lr": {"quniform": [0.0, 0.001, 0.0003]}}}, "population.search.algo.lr.quniform"),
    ({"search": {"algo.lr": {"uniform": [0.1, 0.2], "choice": [0.1]}}}, "population.search.algo.lr"),
    ({"search": {"algo.lr": {"normal": [0.1, 0.2]}}}, "population.search.algo.lr"),
    ({"search": {"algo.lr": {"choice": []}}}, "population.search.algo.lr.choice"),
    ({"search": {"algo.n_step": {"uniform": [1, 4]}}}, "algo.n_step"),
    ({"search": {"algo.target_update_freq": {"choice": [10, 20.5]}}}, "algo.target_update_freq"),
    ({"search": {"algo.epsilon": {"choice": [[[0, "high"]]]}}}, "algo.epsilon"),
    ({"search": {"algo.double_q": {"choice": [True, False]}}}, "population.search.algo.double_q"),
    ({"search": {"run.seed": {"choice": [1, 2]}}}, "population.seeds"),
    ({"search": ["algo.lr"]}, "population.search"),
    ({"search": {"algo.gamma": {"grid_search": [0.98, 0.99]}}, "num_samples": 2}, "population.num_samples"),
    ({"ensemble_top_k": -1}, "population.ensemble_top_k"),
    ({"ensemble_top_k": 25}, "population.ensemble_top_k"),
    ({"pbt_every": -1}, "population.pbt_every"),
    ({"pbt_quantile": 0}, "population.pbt_quantile"),
    ({"pbt_quantile": 0.6}, "population.pbt_quantile"),
    ({"pbt_quantile": True}, "population.pbt_quantile"),
    ({"shards": 0}, "population.shards"),
    ({"shards": 25}, "population.shards"),
    ({"seeds": list(range(MAX_MEMBERS // 6 + 1))}, f"at most {MAX_MEMBERS}"),
]


@pytest.mark.parametrize("changes,named", ERRORS, ids=[f"{i}-{n}" for i, (_, n) in enumerate(ERRORS)])
def test_errors_are_one_named_line(changes, named):
    with pytest.raises(SettingsError) as e:
        parse_population(section(**changes), "x.yaml")
    msg = str(e.value)
    assert msg.startswith("x.yaml: population") and named in msg and "\n" not in msg


def test_unknown_search_key_lists_the_allowed_ones():
    with pytest.raises(SettingsError) as e:
        parse_population({"seeds": [0], "search": {"algo.lr_rate": 0.1}}, "x.yaml")
    assert all(key in str(e.value) for key in SEARCH_KEYS)


@pytest.mark.parametrize("key", ["model.hidden", "model.dueling", "env.window", "algo.batch_size",
                                 "algo.num_envs_per_runner", "algo.rollout_length", "learner.replay_capacity",
                                 "algo.num_env_runners", "algo.num_learners"])
def test_shape_keys_ask_for_separate_populations(key):
    with pytest.raises(SettingsError) as e:
        parse_population({"seeds": [0], "search": {key: {"grid_search": [1, 2]}}}, "x.yaml")
    msg = str(e.value)
    assert f"x.yaml: population.search.{key}: changes the shapes the members share" in msg
    assert "separate populations" in msg and "\n" not in msg


@pytest.mark.parametrize("value", [1e-05, 0.1 + 0.2, 1e16, 123456789.12345679, 3, [[0, 1.0], [20000, 2.5e-07]]])
def test_override_text_reads_back_identical(value):
    from rl_zerosync.population.space import Member

    item = member_overrides(Member(index=0, seed=0, point=0, overrides={"algo.x": value}))[0]
    parsed = parse_override(item)[1]
    assert parsed == value and repr(parsed) == repr(value)  # same floats, same int/float types


def test_member_overrides_rebuild_every_member_exactly():
    raw = {"seeds": [0, 2], "num_samples": 2, "search": {
        "algo.lr": {"choice": [1e-05, 0.0003]},
        "algo.weight_decay": {"loguniform": [1e-6, 1e-3]},
        "algo.gamma": {"grid_search": [0.98, 0.99]},
        "algo.n_step": {"randint": [1, 4]},
        "algo.epsilon": {"choice": [[[0, 1.0], [2000, 0.1]], [[0, 1.0], [4000, 0.05]]]},
        "algo.target_update_freq": {"choice": [10, 40]},
        "algo.tau": {"uniform": [0.005, 1.0]},
        "algo.grad_clip": {"qloguniform": [1, 100, 1]}}}
    pop = parse_population(raw, "x.yaml")
    assert pop.size == 2 * 2 * 2
    base = yaml.safe_load(SMOKE.read_text())
    for member in pop.members:
        s = from_dict(apply_overrides(base, member_overrides(member)), source=str(SMOKE))
        for key, value in member.overrides.items():
            got = getattr(s.algo, key.split(".", 1)[1])
            assert got == value and type(got) is type(value), (member.index, key, got, value)
        assert s.run.seed == s.learner.typed.seed == s.runner.typed.seed == member.seed
        assert s.learner.typed.weight_decay == member.overrides["algo.weight_decay"]
