"""The README's results tables are exactly what ``benchmarks/tables.py`` prints from the committed JSON.

Each table ``tables.py`` prints (a block of lines starting with ``|``) must appear in the README's
"## Results" section as a whole table, verbatim; and every table of that section must be one that
``tables.py`` prints (no numbers without a JSON behind them). CPU only, a fraction of a second.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_module import bench_module

REPO = Path(__file__).resolve().parents[1]


tables = bench_module("tables")


def _results_section() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"(?ms)^## Results\n(.*?)(?=^## |\Z)", text)
    assert m, "README.md has no '## Results' section"
    return m.group(1)


PRINTED = tables.render(REPO / "benchmarks" / "results")


def test_every_table_json_is_committed():
    assert set(PRINTED) == {name for name, _ in tables.TABLES}, "a results JSON of tables.TABLES is missing"


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_printed_tables_are_in_the_readme(name):
    readme_tables = tables.table_blocks(_results_section())
    blocks = tables.table_blocks(PRINTED[name])
    assert blocks, f"tables.py printed no table for {name}.json"
    for block in blocks:
        assert block in readme_tables, (
            f"README.md '## Results' lacks this table printed from benchmarks/results/{name}.json "
            f"(python -m benchmarks.tables):\n{block}")


def test_readme_tables_all_come_from_tables_py():
    printed = {b for text in PRINTED.values() for b in tables.table_blocks(text)}
    stray = [b for b in tables.table_blocks(_results_section()) if b not in printed]
    assert not stray, "README.md '## Results' has tables that benchmarks/tables.py does not print:\n\n" + \
        "\n\n".join(stray)


def test_table_blocks_are_whole_tables():
    text = "x\n| a | b |\n| --- | --- |\n| 1 | 2 |\ny\n\n| c |\n| --- |\n"
    assert tables.table_blocks(text) == ["| a | b |\n| --- | --- |\n| 1 | 2 |", "| c |\n| --- |"]
