"""How values read from YAML (a settings file or ``--set section.key=value``) become typed values.

PyYAML reads YAML 1.1, where a float needs a dot: ``1e-3`` and ``5e4`` arrive as strings. Where a
settings field expects a float (or an epsilon step), such a numeric string is read as the number;
anything else is left for the field's own check, which then names it. Errors are ValueError with the
``where`` they were given, as :class:`SettingsError` (the loader's ``where`` starts with the file).

Settings YAML (a file, a ``--set`` value) is read by :func:`load_yaml`, PyYAML's safe loader with two
refusals, each a :class:`SettingsYAMLError` naming the line: an alias (``*name``; a kilobyte of
nested aliases expands to gigabytes once the values are copied and checked, and a settings file has
no need of them) and a key given twice in one mapping (PyYAML keeps the last silently). The first
alias stops the read before anything is built. Values shown in messages are bounded
(:func:`~rl_zerosync.presets.bounded_repr`), and so is every :class:`SettingsError` message
(``MAX_MESSAGE_CHARS``).
"""
from __future__ import annotations

import ast
import math
import types
import typing
from typing import Any

import yaml

from rl_zerosync.presets import bounded_repr

__all__ = ["SettingsError", "SettingsYAMLError", "check", "coerce_field", "epsilon_numbers", "float_text", "load_yaml",
           "numeric_strings", "numeric_strings_in", "parse_override"]

MAX_MESSAGE_CHARS = 2000
"""The longest :class:`SettingsError` message; a longer one is cut, saying how much was left out."""


class SettingsError(ValueError):
    """A bad key or value in a settings file (the message bounded: ``MAX_MESSAGE_CHARS``)."""

    def __init__(self, message: str = "") -> None:
        message = str(message)
        if len(message) > MAX_MESSAGE_CHARS:
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS} more characters)"
        super().__init__(message)


class SettingsYAMLError(SettingsError):
    """Settings YAML with an alias (``*name``) or a key given twice in one mapping: refused by line."""


class _Refused(Exception):
    """Raised inside the loader; :func:`load_yaml` turns it into a :class:`SettingsYAMLError`."""


def _line(mark) -> str:
    return f"line {mark.line + 1}" if mark is not None else "a line"


class _SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and without repeated keys (module doc)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(f"{_line(event.start_mark)}: YAML alias *{event.anchor}: aliases are not accepted in "
                           "settings (write the value out)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if first is not key_node.start_mark:
                    raise _Refused(f"{_line(key_node.start_mark)}: key {bounded_repr(key)} given twice in one mapping "
                                   f"(first at {_line(first)}); keep one")
        return super().construct_mapping(node, deep)


def load_yaml(text: str, where: str) -> Any:
    """``text`` read as settings YAML (module doc): :class:`SettingsYAMLError` ``"<where>: line N: ..."``
    for an alias or a repeated key; ``yaml.YAMLError`` for text that is not YAML."""
    try:
        return yaml.load(text, Loader=_SettingsLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as err:
        raise SettingsYAMLError(f"{where}: {err}") from None


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
    raise SettingsError(f"{where}: expected {getattr(typ, '__name__', typ)}, got {bounded_repr(value)}")


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
        value = load_yaml(text, f"--set {key.strip()}")
    except yaml.YAMLError:
        value = text
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
    return path, value
