"""The component sections of a settings file (data, env, runner, learner): each read as the keys the
file set and built, at load, into its component's own settings class (:class:`Section`).

The component classes are the one validator of their keys: ``DataSettings`` (:mod:`rl_zerosync.data.data_settings`),
``EnvParams``, ``RunnerSettings`` and ``LearnerSettings``; the runner's seed defaults to ``run.seed``
and the learner's DQN fields come from ``algo`` (:data:`rl_zerosync.presets.LEARNER_KEYS`), exactly as
the components later build themselves from the RLlib config (:func:`runner_config`, :func:`learner_config`).
``LearnerSettings`` checks the learner's ``algo`` keys too: a bad one is reported as ``algo.<key>``.
"""
from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Generic, Iterator, Mapping, TypeVar

from rl_zerosync.config.yaml_values import SettingsError, check, epsilon_numbers, numeric_strings, numeric_strings_in
from rl_zerosync.presets import ALGO_KEYS, LEARNER_KEYS, AlgoSettings, algo_key_of

__all__ = ["DICT_KEYS", "GIVEN_BY", "Section", "build_components", "learner_config", "runner_config"]

T = TypeVar("T")
DICT_KEYS = tuple(key for key, k in ALGO_KEYS.items() if k.learner and k.rllib is None)
"""The learner's ``algo`` keys that DQNConfig has no field for: they travel in ``learner_config_dict``,
and the learner section may set them instead of ``algo`` (not both, differently)."""


@dataclass(frozen=True, eq=False)
class Section(Mapping[str, Any], Generic[T]):
    """A component section (data, env, runner, learner) of a settings file.

    As a read-only mapping it is the keys the file set (numeric strings read as numbers): what the
    component receives in ``env_config`` / ``learner_config_dict`` and what ``settings.yaml`` stores.
    ``typed`` is the component's settings object built from them at load (defaults filled, checked).
    """

    given: Mapping[str, Any]
    """The keys the file set."""
    typed: T
    """The component's settings object (``DataSettings``, ``EnvParams``, ``RunnerSettings`` or
    ``LearnerSettings``)."""

    def __getitem__(self, key: str) -> Any:
        return self.given[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.given)

    def __len__(self) -> int:
        return len(self.given)


GIVEN_BY = {"runner": {"seed": "run.seed", "epsilon": "algo.epsilon"},
            "learner": {"seed": "run.seed", **{key: f"algo.{key}" for key in DICT_KEYS}}}
"""Component keys that a settings file leaving them out gets from another key (:func:`runner_config`,
:func:`learner_config`; the runner's epsilon is the config's ``epsilon``), for the docs tables."""


def runner_config(given: Mapping, seed: int) -> dict:
    """``env_config["runner"]``: the runner section, its seed defaulting to ``seed`` (the run's ``run.seed``)."""
    out = dict(given)
    out.setdefault("seed", seed)
    return out


def learner_config(given: Mapping, seed: int, algo: AlgoSettings) -> dict:
    """``learner_config_dict["zerosync"]``: the learner section, its seed defaulting to ``seed`` (``run.seed``) and
    the learner's ``algo`` keys that DQNConfig lacks (:data:`DICT_KEYS`, e.g. ``weight_decay``) from
    ``algo`` unless only the learner section sets one (``algo`` left at its default)."""
    out = dict(given)
    out.setdefault("seed", seed)
    for key in DICT_KEYS:
        if getattr(algo, key) != ALGO_KEYS[key].default or key not in out:
            out[key] = getattr(algo, key)
    return out


def _read_numbers(section: str, values: dict, cls: type) -> None:
    """Numeric strings -> floats where the component expects a float (in ``data`` also inside
    ``split``, ``features`` and ``synthetic``), and in ``runner.epsilon``."""
    if section == "data":
        from rl_zerosync.data.data_settings import synthetic_keywords
        from rl_zerosync.data.market import FeatureConfig

        hints: dict = {k: float for k in ("periods_per_year", "spread_bps", "min_spread_bps", "max_abs_log_return")}
        hints["window"] = list[float]
        split = values.get("split")
        if isinstance(split, dict):
            numeric_strings_in(split, {k: float for k in split})
        elif isinstance(split, list):
            values["split"] = numeric_strings(split, list[float])
        if isinstance(values.get("features"), dict):
            numeric_strings_in(values["features"], typing.get_type_hints(FeatureConfig))
        if isinstance(values.get("synthetic"), dict):
            numeric_strings_in(values["synthetic"], {k: float for k in synthetic_keywords()})
    else:
        hints = typing.get_type_hints(cls)
    numeric_strings_in(values, hints)
    if section == "runner" and "epsilon" in values:
        values["epsilon"] = epsilon_numbers(values["epsilon"])


def _check_keys(section: str, given: Mapping, cls: type, src: str) -> None:
    """Unknown keys of the env, runner and learner sections (data: :class:`DataSettings` names them);
    the learner's DQN fields are ``algo`` keys."""
    from rl_zerosync.learner.learner_settings import DQN_FIELDS

    allowed = [f.name for f in dataclasses.fields(cls) if section != "learner" or f.name not in DQN_FIELDS]
    for key in given:
        if key in DQN_FIELDS and section == "learner":
            raise SettingsError(f"{src}: learner.{key}: unknown key; set algo.{algo_key_of(key)} (the learner "
                                f"reads it from the DQN config)")
        if key not in allowed:
            raise SettingsError(f"{src}: {section}.{key}: unknown key; allowed: {', '.join(allowed)}")


def _dqn_fields(algo: AlgoSettings) -> dict:
    """The learner's DQN fields, from ``algo`` (what ``to_rllib_config`` puts on the DQNConfig)."""
    return {name: getattr(algo, key) for key, name in LEARNER_KEYS.items() if ALGO_KEYS[key].rllib is not None}


def _algo_error(err: Exception, given: Mapping, algo: AlgoSettings, src: str) -> SettingsError | None:
    """A ``LearnerSettings`` error in a field the learner reads from ``algo`` (its DQN fields, and
    :data:`DICT_KEYS` unless only the learner section set one), as ``algo.<key>``; None for another."""
    from rl_zerosync.learner.learner_settings import LearnerFieldError

    if not isinstance(err, LearnerFieldError):
        return None
    key = next((k for k, name in LEARNER_KEYS.items() if name == err.field), None)
    only_learner_section = key in DICT_KEYS and getattr(algo, key) == ALGO_KEYS[key].default and key in given
    if key is None or only_learner_section:
        return None
    return SettingsError(f"{src}: algo.{key}: {str(err).removeprefix(err.field + ' ')}")


def _section_error(err: Exception, section: str, src: str) -> SettingsError:
    """A component class's error as ``<src>: <section>.<key>: ...`` where it names its field (data's
    messages and a learner field's), else ``<src>: <section>: <message>``."""
    from rl_zerosync.learner.learner_settings import LearnerFieldError

    if section == "data":
        return SettingsError(f"{src}: {err}")
    if isinstance(err, LearnerFieldError):
        return SettingsError(f"{src}: {section}.{err.field}: {str(err).removeprefix(err.field + ' ')}")
    return SettingsError(f"{src}: {section}: {err}")


def build_components(raw: dict, seed: int, algo: AlgoSettings, src: str) -> dict[str, Section]:
    """The four component sections, each built and checked by its component's class; ``seed`` is
    ``run.seed``, the runner's and the learner's default seed."""
    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.data.data_settings import DataSettings
    from rl_zerosync.envs.params import EnvParams
    from rl_zerosync.learner.learner_settings import LearnerSettings

    builders = {
        "data": (DataSettings, DataSettings.from_dict),
        "env": (EnvParams, lambda g: EnvParams(**g)),
        "runner": (RunnerSettings, lambda g: RunnerSettings(**runner_config(g, seed))),
        "learner": (LearnerSettings, lambda g: LearnerSettings.validated({**learner_config(g, seed, algo),
                                                                           **_dqn_fields(algo)})),
    }
    out = {}
    for section, (cls, build) in builders.items():
        given = copy.deepcopy(raw.get(section, {"source": "synthetic"} if section == "data" else {}))
        _read_numbers(section, given, cls)
        if section == "data":
            check(src, "data.source", "source" in given, "required (synthetic, csv or parquet)")
        else:
            _check_keys(section, given, cls, src)
        for key in DICT_KEYS if section == "learner" else ():
            mine, theirs = given.get(key, getattr(algo, key)), getattr(algo, key)
            check(src, f"learner.{key}", theirs == ALGO_KEYS[key].default or key not in given or mine == theirs,
                  f"conflicts with algo.{key} ({mine!r} vs {theirs!r}); set only algo.{key}")
        try:
            typed = build(given)
        except (TypeError, ValueError) as err:  # data's messages name data.<key> already
            algo_err = _algo_error(err, given, algo, src) if section == "learner" else None
            if algo_err is not None:
                raise algo_err from None
            raise _section_error(err, section, src) from err
        out[section] = Section(given=given, typed=typed)
    return out
