"""The tables of ``docs/configuration.md`` that are generated from the declarations of the ``algo`` and
``model`` keys (:class:`~rl_zerosync.presets.AlgoSettings`, :class:`~rl_zerosync.presets.ModelSettings`):
each between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``.

``python -m rl_zerosync.config.docs --write`` rewrites them; ``--check`` (the default) exits 1 naming
the tables that differ from what the declarations give (``tests/test_config_docs.py`` runs it).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict

from rl_zerosync.presets import ALGO_KEYS, MODEL_KEYS, RLLIB_ALIASES, REFUSED_RLLIB_NAMES

__all__ = ["DOC", "TABLES", "generated", "stale_tables"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
"""The configuration reference (in a source checkout)."""
_POPULATION = {"live": "searchable; PBT may change it", "search": "searchable"}


def _value(value: Any, top: bool = True) -> str:
    """A default as the docs show it (YAML spelling; a large number alone with thousands separators)."""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int):
        return f"{value:,}" if top and abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(_value(v, top=False).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {_value(v, top=False).strip('`')}" for k, v in value.items()) + "}`"
    return f"`{value}`"


def _meaning(key) -> str:
    return key.doc if key.rule is None else f"{key.doc}; {key.rule.expected}"


def algo_table() -> str:
    rows = ["| key | settings file | `ZeroSyncDQNConfig()` | RLlib name | `population.search` | meaning |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, k in ALGO_KEYS.items():
        api = _value(k.api_default) if k.preset else "–"
        rllib = "– (`learner_config_dict`)" if k.rllib is None else f"`{k.rllib}`"
        population = _POPULATION.get(k.search, "refused: changes shapes" if k.shape else "")
        rows.append(f"| `{name}` | {_value(k.default)} | {api} | {rllib} | {population} | {_meaning(k)} |")
    learner = ", ".join(f"`{name}`" for name, k in ALGO_KEYS.items() if k.learner)
    aliases = ", ".join(f"`{name}`" for name in RLLIB_ALIASES)
    refused = "; ".join(f"`{name}`: {why}" for name, why in REFUSED_RLLIB_NAMES.items())
    return "\n".join(rows) + (
        f"\n\nThe learner reads {learner} and checks them (`LearnerSettings`). RLlib's names {aliases} are "
        f"accepted for the keys they name (one of the two names per key). Refused: {refused}.")


def model_table() -> str:
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for name, k in MODEL_KEYS.items():
        default = _value(k.default)
        if k.preset and k.api_default != k.default:
            default += f" (`ZeroSyncDQNConfig()`: {_value(k.api_default)})"
        rows.append(f"| `{name}` | {default} | {_meaning(k)} |")
    return "\n".join(rows)


TABLES: Dict[str, Callable[[], str]] = {"algo": algo_table, "model": model_table}
"""Generated table name -> the function that writes it."""


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {name} -->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def generated(text: str) -> str:
    """``text`` (the docs) with every generated table written afresh; ValueError if a marker is missing."""
    for name, table in TABLES.items():
        if not _block(name).search(text):
            raise ValueError(f"{DOC.name}: no '<!-- generated: {name} -->' ... '<!-- end generated: {name} -->' block")
        text = _block(name).sub(lambda m, t=table: m.group(1) + t() + "\n" + m.group(3), text)
    return text


def stale_tables(text: str) -> list[str]:
    """The generated tables whose committed text differs from what the declarations give."""
    fresh = generated(text)
    return [name for name in TABLES if _block(name).search(text).group(2) != _block(name).search(fresh).group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_zerosync.config.docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the generated tables in place")
    parser.add_argument("--path", type=Path, default=DOC, help="the configuration reference (default: %(default)s)")
    args = parser.parse_args(argv)
    text = args.path.read_text()
    if args.write:
        args.path.write_text(generated(text))
        return 0
    stale = stale_tables(text)
    if stale:
        print(f"{args.path}: generated tables out of date: {', '.join(stale)}; run python -m rl_zerosync.config.docs "
              f"--write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
