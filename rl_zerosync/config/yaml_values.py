"""How values read from YAML (a settings file or ``--set section.key=value``) become typed values.

PyYAML reads YAML 1.1, where a float needs a dot: ``1e-3`` and ``5e4`` arrive as strings. Where a
settings field expects a float (or an epsilon step), such a numeric string is read as the number;
anything else is left for the field's own check, which then names it. Errors are ValueError with the
``where`` they were given, as :class:`SettingsError` (the loader's ``where`` starts with the file).
"""
from __future__ import annotations

import ast
import math
import types
import typing
from typing import Any

import yaml

__all__ = ["SettingsError", "check", "coerce_field", "epsilon_numbers", "float_text", "numeric_strings",
           "numeric_strings_in", "parse_override"]


class SettingsError(ValueError):
    """A bad key or value in a settings file."""


def check(src: str, key: str, ok: bool, message: str) -> None:
    """SettingsError ``"<src>: <key>: <message>"`` unless ``ok``."""
    if not ok:
        raise SettingsError(f"{src}: {key}: {message}")


def float_text(value: Any) -> float | None:
    """A string that reads as a finite float, as that float; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def coerce_field(value: Any, typ: Any, where: str) -> Any:
    """``value`` checked against a dataclass field type (``Any`` takes anything), ints and numeric
    strings (``"1e-3"``) converted to floats for a float field."""
    origin = typing.get_origin(typ) or typ
    if typ is Any:
        return value
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typ is float and float_text(value) is not None:
        return float_text(value)
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if typ is bool and isinstance(value, bool):
        return value
    if typ is str and isinstance(value, str):
        return value
    if origin is list and isinstance(value, list):
        return value
    if origin is dict and isinstance(value, dict):
        return value
    raise SettingsError(f"{where}: expected {getattr(typ, '__name__', typ)}, got {value!r}")


def _epsilon_pair(pair: Any) -> Any:
    if not isinstance(pair, list) or len(pair) != 2:
        return pair
    step, value = (float_text(x) if float_text(x) is not None else x for x in pair)
    if isinstance(pair[0], str) and isinstance(step, float) and step.is_integer():
        step = int(step)
    return [step, value]


def epsilon_numbers(value: Any) -> Any:
    """An epsilon setting with numeric strings read: ``"5e-2"`` or ``[["0", 1.0], ["5e4", "5e-2"]]``
    (a whole step becomes an int); anything else unchanged (the epsilon rule then names it)."""
    if isinstance(value, list):
        return [_epsilon_pair(p) for p in value]
    number = float_text(value)
    return value if number is None else number


def numeric_strings(value: Any, typ: Any) -> Any:
    """``value`` with numeric strings turned into floats where ``typ`` expects a float (also inside
    ``Optional[float]`` and tuples/lists of floats); anything else unchanged."""
    if typ is float:
        number = float_text(value)
        return value if number is None else number
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType) and float in args:
        return numeric_strings(value, float)
    if origin in (tuple, list) and isinstance(value, (list, tuple)) and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return type(value)(numeric_strings(v, args[0]) for v in value)
        if origin is list:
            return type(value)(numeric_strings(v, args[0]) for v in value)
        if len(args) == len(value):
            return type(value)(numeric_strings(v, t) for v, t in zip(value, args))
    return value


def numeric_strings_in(values: dict, hints: dict) -> None:
    """:func:`numeric_strings` on every key of ``values`` that ``hints`` types, in place."""
    for key, typ in hints.items():
        if key in values:
            values[key] = numeric_strings(values[key], typ)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``section.key=value`` -> (``["section", "key"]``, value parsed as YAML, then as a Python literal)."""
    if "=" not in item:
        raise SettingsError(f"--set {item!r}: expected section.key=value")
    key, text = item.split("=", 1)
    path = key.strip().split(".")
    if len(path) < 2:
        raise SettingsError(f"--set {item!r}: expected section.key=value (e.g. run.iterations=5)")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
    return path, value
