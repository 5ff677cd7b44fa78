"""Settings YAML: aliases and keys given twice are refused at once, naming the line; values and
messages in settings errors are bounded (CPU, no training)."""
from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml

from rl_zerosync import cli
from rl_zerosync.config.settings import SettingsError, SettingsYAMLError, from_dict, load
from rl_zerosync.config.yaml_values import MAX_MESSAGE_CHARS, load_yaml, parse_override
from rl_zerosync.presets import SHOWN_CHARS, bounded_repr

BASE = "data:\n  source: synthetic\nrun:\n  iterations: 1\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """``model.hidden`` as ``width ** levels`` ints written in about a kilobyte of nested aliases."""
    parts = ["&l0 [" + ", ".join(["16"] * width) + "]"]
    parts += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "model:\n  hidden: [" + ", ".join(parts) + "]\n" + BASE


def test_an_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert len(path.read_text()) < 1200  # 9 ** 9 = 387M ints once expanded
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(SettingsYAMLError) as err:
        load(path)
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert wall < 1.0 and peak < 10 * 2**20, (wall, peak)
    assert str(err.value) == (f"{path}: line 2: YAML alias *l0: aliases are not accepted in settings (write the value "
                              "out)")


def test_anchors_alone_load():
    assert load_yaml("model:\n  hidden: &h [16, 16]\n", "x.yaml") == {"model": {"hidden": [16, 16]}}


@pytest.mark.parametrize("text, line, key, first", [
    ("algo:\n  lr: 0.1\n  gamma: 0.9\n  lr: 0.2\n" + BASE, 4, "'lr'", 2),
    (BASE + "data:\n  source: csv\n", 5, "'data'", 1),
    ("env:\n  fill_prob: {a: 1, a: 2}\n" + BASE, 2, "'a'", 2),
])
def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, text, line, key, first):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(SettingsYAMLError) as err:
        load(path)
    assert str(err.value) == f"{path}: line {line}: key {key} given twice in one mapping (first at line {first}); keep one"
    assert yaml.safe_load(text) is not None  # plain PyYAML keeps the last one silently


def test_set_values_are_read_the_same_way():
    with pytest.raises(SettingsYAMLError, match=r"^--set model\.hidden: line 1: YAML alias \*a"):
        parse_override("model.hidden=[&a [16], *a]")
    with pytest.raises(SettingsYAMLError, match=r"^--set env\.fill_prob: line 1: key 'a' given twice"):
        parse_override("env.fill_prob={a: 1, a: 2}")
    assert parse_override("model.hidden=[32, 32]") == (["model", "hidden"], [32, 32])


def test_the_cli_names_the_line_in_one_error_line_before_anything_starts(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    t0 = time.perf_counter()
    rc = cli.main(["train", "--config", str(path)])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_INPUT and err.count("\n") == 1 and time.perf_counter() - t0 < 5.0
    assert err.startswith(f"error: {path}: line 2: YAML alias *l0")


def test_values_in_settings_errors_are_bounded():
    huge = [[float(i)] * 1000 for i in range(1000)]  # a million floats where ints are expected
    with pytest.raises(SettingsError) as err:
        from_dict({"model": {"hidden": huge}, "data": {"source": "synthetic"}}, source="big.yaml")
    msg = str(err.value)
    assert msg.startswith("big.yaml: model.hidden: expected a list of positive ints, got [[0.0, 0.0,")
    assert len(msg) < 300 and msg.endswith("...")
    with pytest.raises(SettingsError) as err:
        from_dict({"algo": {"batch_size": "x" * 100_000}, "data": {"source": "synthetic"}}, source="s.yaml")
    assert len(str(err.value)) < 300 and "expected int, got 'xxx" in str(err.value)
    assert bounded_repr(0.001) == "0.001" and bounded_repr([16, 16]) == "[16, 16]" and bounded_repr("fast") == "'fast'"
    assert len(bounded_repr({"k": [list(range(50))] * 50})) <= SHOWN_CHARS
    long = SettingsError("x" * (3 * MAX_MESSAGE_CHARS))
    assert len(str(long)) < MAX_MESSAGE_CHARS + 50 and str(long).endswith(f"({2 * MAX_MESSAGE_CHARS} more characters)")


def test_a_runs_settings_yaml_has_no_aliases_and_loads_as_a_config(tmp_path):
    from rl_zerosync.rundir.run_dir import RunDir

    s = from_dict({"data": {"source": "synthetic"}, "run": {"dir": str(tmp_path), "name": "r"}})
    seeds = [0, 1]
    s.population = {"seeds": seeds, "search": {"run.seed": {"choice": seeds}}}  # one list twice (deepcopy keeps it)
    assert "*id001" in yaml.safe_dump(s.to_dict())  # a plain dump writes &id001 ... *id001
    with RunDir.claim(s.run_dir) as rd:
        rd.write_settings(s)
    text = (s.run_dir / "settings.yaml").read_text()
    assert "&" not in text and "*" not in text
    assert load_yaml(text, "settings.yaml")["population"]["search"]["run.seed"]["choice"] == [0, 1]
