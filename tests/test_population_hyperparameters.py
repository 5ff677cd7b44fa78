"""The members' hyperparameters as one typed [P] table (``population/hyperparameters.py``): columns are
the searchable keys typed by their settings fields, filled from every member's settings; a live key is
written in place with its history; every other write is a named error (CPU, no Ray)."""
from __future__ import annotations

import numpy as np
import pytest

from rl_zerosync.config.settings import from_dict
from rl_zerosync.population.hyperparameters import LIVE, HyperparameterTable
from rl_zerosync.population.members import all_member_settings
from rl_zerosync.population.space import SEARCH_KEYS, parse_population
from tiny_run import tiny_raw


def _table() -> tuple[HyperparameterTable, list]:
    raw = tiny_raw({"name": "pop", "dir": "/nonexistent"})
    raw["population"] = {"seeds": [0, 1], "search": {"algo.lr": {"grid_search": [1e-3, 3e-4]},
                                                     "algo.n_step": {"grid_search": [1, 3]},
                                                     "algo.epsilon": 0.05}}
    settings = from_dict(raw, "pop.yaml")
    members = all_member_settings(settings, parse_population(settings.population, settings.source))
    return HyperparameterTable(members), members


def test_columns_are_the_searchable_keys_typed_by_the_settings():
    table, members = _table()
    assert table.size == len(members) == 8
    assert table.keys == tuple(SEARCH_KEYS)
    assert table.columns["algo.lr"].dtype == np.float64 and table.columns["algo.n_step"].dtype == np.int64
    assert table.columns["algo.epsilon"].dtype == object
    for k, ms in enumerate(members):  # every member's own values, by member index
        assert table.row(k) == {key: getattr(ms.algo, key.split(".", 1)[1]) for key in table.keys}
    assert sorted(set(table.columns["algo.lr"])) == [3e-4, 1e-3] and set(table.columns["algo.n_step"]) == {1, 3}
    assert isinstance(table.get(0, "algo.n_step"), int) and table.get(0, "algo.epsilon") == [[0, 0.05]]


def test_a_live_key_is_written_in_place_with_its_history():
    table, _ = _table()
    column = table.columns["algo.lr"]
    others = column.copy()
    before = table.set(3, "algo.lr", 2.5e-3, reason="pbt", copied_from=1)
    assert table.columns["algo.lr"] is column and table.get(3, "algo.lr") == 2.5e-3
    assert before == others[3]
    assert np.array_equal(np.delete(column, 3), np.delete(others, 3))  # the others untouched
    assert table.history == [{"member": 3, "key": "algo.lr", "before": others[3], "after": 2.5e-3,
                              "reason": "pbt", "copied_from": 1}]
    assert LIVE == ("algo.lr",)


@pytest.mark.parametrize("k,key,value,error,match", [
    (0, "algo.gamma", 0.9, ValueError, r"algo.gamma cannot change while a member trains; expected one of \['algo.lr'\]"),
    (0, "algo.lr", 0.0, ValueError, "algo.lr of member 0 must be a finite number > 0, got 0.0"),
    (0, "algo.lr", float("nan"), ValueError, "must be a finite number > 0, got nan"),
    (0, "algo.lr", True, ValueError, "must be a finite number > 0, got True"),
    (8, "algo.lr", 1e-3, IndexError, r"member 8 out of range 0..7"),
    (0, "algo.momentum", 1e-3, KeyError, "no column 'algo.momentum'"),
])
def test_bad_writes_are_named_errors(k, key, value, error, match):
    table, _ = _table()
    with pytest.raises(error, match=match):
        table.set(k, key, value)
    assert table.history == []
