"""The tables of ``docs/configuration.md`` generated from the settings' declarations, each between
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``:

* ``algo`` and ``model``: the declared keys (:class:`~rl_zerosync.presets.AlgoSettings`,
  :class:`~rl_zerosync.presets.ModelSettings`): both defaults, RLlib name, population search, doc, rule;
* ``run``, ``env``, ``runner``, ``learner``: one row per field of the section's class: its default
  (or the key a settings file takes it from, :data:`~rl_zerosync.config.sections.GIVEN_BY`), the
  first paragraph of its docstring, and its rule where the field declares one (``ruled``).

``python -m rl_zerosync.config.docs --write`` rewrites them; ``--check`` (the default) exits 1 naming
the tables that differ from what the declarations give (``tests/test_config_docs.py`` runs it).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict

from rl_zerosync.config.sections import DICT_KEYS, GIVEN_BY
from rl_zerosync.config.settings import RunSettings
from rl_zerosync.presets import ALGO_KEYS, MODEL_KEYS, RLLIB_ALIASES, REFUSED_RLLIB_NAMES, BOOL, Choice

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
        return f"{value:g}" if value and not 1e-3 <= abs(value) < 1e5 else repr(value)
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(_value(v, top=False).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {_value(v, top=False).strip('`')}" for k, v in value.items()) + "}`"
    return f"`{value}`"


def _meaning(key) -> str:
    return key.doc + _rule_text(key.rule, key.doc)


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


def field_docs(cls: type) -> Dict[str, str]:
    """Field name -> the first paragraph of its docstring (the string right below the field), as markdown."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    out = {}
    for node, doc in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            first = " ".join(doc.value.value.split("\n\n")[0].split())
            first = re.sub(r":\w+:`~?([\w.]+)`", lambda m: "``" + m.group(1).rsplit(".", 1)[-1] + "``", first)
            out[node.target.id] = first.replace("``", "`").replace("|", "\\|")
    return out


def _component_default(section: str, f: dataclasses.Field) -> str:
    if f.name in GIVEN_BY.get(section, {}):
        return f"`{GIVEN_BY[section][f.name]}`"
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return "none" if value is None else _value(value)


def _rule_text(rule: Any, meaning: str) -> str:
    """What a rule adds to a row: what it allows, but a bool's and the choices the text names already."""
    if rule is None or rule is BOOL:
        return ""
    if isinstance(rule, Choice):
        named = all(f"`{v}`" in meaning for v in rule.values)
        return "" if named else "; one of " + ", ".join(f"`{v}`" for v in rule.values)
    return f"; {rule.expected}"


def component_table(section: str, cls: type) -> str:
    """The rows of the fields of ``cls`` a settings file's ``section`` may set (the learner's ``algo`` keys
    only where the section may set them: :data:`~rl_zerosync.config.sections.DICT_KEYS`)."""
    docs = field_docs(cls)
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        algo = f.metadata.get("algo")
        if algo is not None and algo not in DICT_KEYS:
            continue
        if algo is not None:
            meaning = f"Set it in `algo` (`algo.{algo}`); here only while `algo.{algo}` is at its default (two " \
                      f"different values are refused)"
        else:
            meaning = docs[f.name].rstrip(".")
            meaning += _rule_text(f.metadata.get("rule"), meaning)
        rows.append(f"| `{f.name}` | {_component_default(section, f)} | {meaning} |")
    if section == "learner":
        dqn = ", ".join(f"`{key}`" for key, k in ALGO_KEYS.items() if k.learner and key not in DICT_KEYS)
        rows.insert(0, f"The learner's DQN fields come from `algo` ({dqn}); setting them here is refused with a "
                       f"pointer to the `algo` key.\n")
    return "\n".join(rows)


def _components() -> Dict[str, type]:
    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.envs.params import EnvParams
    from rl_zerosync.learner.learner_settings import LearnerSettings

    return {"run": RunSettings, "env": EnvParams, "runner": RunnerSettings, "learner": LearnerSettings}


TABLES: Dict[str, Callable[[], str]] = {
    "algo": algo_table, "model": model_table,
    **{section: (lambda s=section: component_table(s, _components()[s])) for section in ("run", "env", "runner",
                                                                                         "learner")}}
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
