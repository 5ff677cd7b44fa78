"""The generated tables of docs/configuration.md are what the declarations give (``python -m
rl_zerosync.config.docs --write``): the ``algo`` and ``model`` keys of ``rl_zerosync/presets.py``, and
the fields (default, docstring, rule) of the run, env, runner and learner settings classes."""
from __future__ import annotations

import dataclasses

from rl_zerosync.config import docs
from rl_zerosync.learner.learner_settings import DQN_FIELDS, LearnerSettings
from rl_zerosync.presets import ALGO_KEYS, MODEL_KEYS, Range


def test_committed_tables_are_the_generated_ones():
    assert docs.stale_tables(docs.DOC.read_text()) == [], "run: python -m rl_zerosync.config.docs --write"
    assert docs.main(["--path", str(docs.DOC)]) == 0


def test_a_changed_declaration_makes_the_committed_tables_stale(tmp_path, monkeypatch):
    text = docs.DOC.read_text()
    for key in ALGO_KEYS:
        assert f"| `{key}` |" in text
    for key in MODEL_KEYS:
        assert f"| `{key}` |" in text
    monkeypatch.setitem(docs.TABLES, "model", lambda: docs.model_table().replace("dueling head", "dueling heads"))
    assert docs.stale_tables(text) == ["model"]
    path = tmp_path / "configuration.md"
    path.write_text(text)
    assert docs.main(["--path", str(path)]) == 1
    assert docs.main(["--path", str(path), "--write"]) == 0 and docs.main(["--path", str(path)]) == 0
    assert "dueling heads" in path.read_text()


def test_a_missing_block_is_named():
    try:
        docs.generated("# no markers\n")
    except ValueError as err:
        assert "<!-- generated: algo -->" in str(err)
    else:
        raise AssertionError("a docs file without the markers was accepted")


def test_component_rows_come_from_the_fields():
    """Every field a section may set has its row; a learner field's rule is its row's range."""
    learner = docs.TABLES["learner"]()
    for f in dataclasses.fields(LearnerSettings):
        assert (f"| `{f.name}` |" in learner) == (f.name not in DQN_FIELDS), f.name
        if isinstance(f.metadata.get("rule"), Range) and "algo" not in f.metadata:
            assert f"; {f.metadata['rule'].expected} |" in learner, f.name
    assert "| `seed` | `run.seed` |" in learner and "| `seed` | `run.seed` |" in docs.TABLES["runner"]()
    assert "| `replay_capacity` | 100,000 |" in learner
    docstring = docs.field_docs(LearnerSettings)["prioritized"]
    assert docstring.startswith("Proportional prioritized replay (priority `(\\|TD\\| + priority_eps)")
