"""The generated tables of docs/configuration.md (the ``algo`` and ``model`` keys) are what their
declarations in ``rl_zerosync/presets.py`` give (``python -m rl_zerosync.config.docs --write``)."""
from __future__ import annotations

from rl_zerosync.config import docs
from rl_zerosync.presets import ALGO_KEYS, MODEL_KEYS


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
