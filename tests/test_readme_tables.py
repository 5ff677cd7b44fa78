"""The results tables of ``docs/results.md`` are exactly what ``benchmarks/tables.py`` prints from the
committed JSON, and the README's headlines quote that page.

* Each table ``tables.py`` prints (a block of lines starting with ``|``) must appear in
  ``docs/results.md`` as a whole table, verbatim, and every other line it prints (block headers,
  summary lines) as a line of the page; every table of the page must be one that ``tables.py``
  prints (no numbers without a JSON behind them).
* The page's "## Headlines" section (one line per result) holds no table, and every number in it
  appears in the rest of the page; the README holds no results section and no changelog (they
  live in ``docs/results.md`` and ``CHANGELOG.md``).
* Relative links of README.md and docs/*.md point to files that exist.

CPU only, a fraction of a second.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_module import bench_module

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results.md"

tables = bench_module("tables")

PRINTED = tables.render(REPO / "benchmarks" / "results")


def _results_page() -> str:
    assert RESULTS.is_file(), "docs/results.md is missing"
    return RESULTS.read_text()


def _headlines(page: str) -> tuple[str, str]:
    """(the page's '## Headlines' section, the page without it)."""
    m = re.search(r"(?ms)^## Headlines\n(.*?)(?=^## |\Z)", page)
    assert m, "docs/results.md has no '## Headlines' section"
    return m.group(1), page[:m.start()] + page[m.end():]


def test_every_table_json_is_committed():
    assert set(PRINTED) == {name for name, _ in tables.TABLES}, "a results JSON of tables.TABLES is missing"


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_printed_tables_are_in_the_results_page(name):
    page_tables = tables.table_blocks(_results_page())
    blocks = tables.table_blocks(PRINTED[name])
    assert blocks, f"tables.py printed no table for {name}.json"
    for block in blocks:
        assert block in page_tables, (
            f"docs/results.md lacks this table printed from benchmarks/results/{name}.json "
            f"(python -m benchmarks.tables):\n{block}")


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_printed_lines_are_in_the_results_page(name):
    lines = set(_results_page().splitlines())
    missing = [line for line in tables.other_lines(PRINTED[name]) if line not in lines]
    assert not missing, (f"docs/results.md lacks these lines printed from benchmarks/results/{name}.json "
                         f"(python -m benchmarks.tables):\n" + "\n".join(missing))


def test_results_page_tables_all_come_from_tables_py():
    printed = {b for text in PRINTED.values() for b in tables.table_blocks(text)}
    stray = [b for b in tables.table_blocks(_results_page()) if b not in printed]
    assert not stray, "docs/results.md has tables that benchmarks/tables.py does not print:\n\n" + \
        "\n\n".join(stray)


def test_differences_is_empty_for_the_committed_page():
    assert tables.differences(_results_page(), PRINTED) == []


def _without_link_targets(text: str) -> str:
    return re.sub(r"\]\([^)]*\)", "]", text)


NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def test_headlines_quote_the_rest_of_the_results_page():
    section, rest = _headlines(_results_page())
    assert not tables.table_blocks(section), "docs/results.md '## Headlines' holds a table: tables go to their section"
    missing = sorted({n for n in NUMBER.findall(_without_link_targets(section)) if n not in rest})
    assert not missing, f"docs/results.md '## Headlines' quotes numbers that the rest of the page does not have: {missing}"


def test_readme_has_no_results_section_and_no_changelog():
    readme = (REPO / "README.md").read_text()
    headings = re.findall(r"(?m)^## (.*)$", readme)
    assert "Results" not in headings, "README.md has a '## Results' section: results go to docs/results.md"
    assert not any("Fixed" in h or "Changelog" in h or "Changes" in h for h in headings), \
        "README.md has a changelog section: changes go to CHANGELOG.md"
    assert (REPO / "CHANGELOG.md").is_file()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _links(path: Path):
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if not re.match(r"[a-z]+:", target):
            yield target


def _docs():
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc):
    bad = []
    for target in _links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md":
            anchors = {_anchor(h) for h in re.findall(r"(?m)^#+ (.*)$", dest.read_text())}
            if anchor not in anchors:
                bad.append(f"{target}: no heading with that anchor in {dest.relative_to(REPO)}")
    assert not bad, f"{doc.relative_to(REPO)}: broken links:\n  " + "\n  ".join(bad)


def test_anchor_follows_github():
    assert _anchor("Real data: GOOGL walk-forward") == "real-data-googl-walk-forward"
    assert _anchor("`rl_zerosync.kernels`") == "rl_zerosynckernels"


def test_table_blocks_are_whole_tables():
    text = "x\n| a | b |\n| --- | --- |\n| 1 | 2 |\ny\n\n| c |\n| --- |\n"
    assert tables.table_blocks(text) == ["| a | b |\n| --- | --- |\n| 1 | 2 |", "| c |\n| --- |"]
