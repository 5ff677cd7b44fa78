"""Every numeric key of every settings dataclass has a stated range, checked at load: NaN, +inf, -inf
and every value outside its range are each a ``SettingsError`` naming the file and the key.

:data:`OUT_OF_RANGE` holds the out-of-range values of every numeric field: generated from the declared rule
helper of every ``run`` / ``algo`` / ``model`` / ``learner`` key (:func:`outside`), written by hand for the
sections their own code checks and for the special cases (:data:`HAND_OUT_OF_RANGE`). The first test fails
when a dataclass gains a numeric field that has neither (so a new key comes with its range); a declared rule
the loader does not enforce fails the refusal tests."""
from __future__ import annotations

import copy
import dataclasses
import types
import typing

import pytest

from rl_zerosync.config.settings import AlgoSettings, ModelSettings, RunSettings, SettingsError, from_dict
from rl_zerosync.data.data_settings import DataSettings
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.data.synthetic import MODEL_RANGES
from rl_zerosync.env_runner.runner_settings import RunnerSettings
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.learner.learner_settings import DQN_FIELDS, LearnerSettings
from rl_zerosync.presets import ALGO_KEYS, BOOL, MODEL_KEYS, POSITIVE, Choice, Range, Rule

NAN, INF = float("nan"), float("inf")
SOURCE = "ranges.yaml"
BASE = {"data": {"source": "synthetic"},
        "algo": {"num_envs_per_runner": 8, "rollout_length": 16, "batch_size": 32},
        "learner": {"replay_capacity": 2000}}
FILE_DATA = {"source": "csv", "paths": ["prices.csv"]}  # nothing is read at load
FILE_KEYS = ("spread_bps", "cs_window", "min_spread_bps", "max_spread_bps")
"""``data`` keys of the file sources (the other numeric ``data`` keys are tried with the synthetic source)."""

HAND_OUT_OF_RANGE: dict[str, dict[str, object]] = {
    "run": {"seed": 2**32},  # MAX_RUN_SEED: checked by the loader, not by the field's rule
    "data": {"periods_per_year": 0.0, "max_abs_log_return": -0.1, "num_assets": 0, "num_bars": 1, "seed": -1,
             "regenerate_every": -1, "heldout_validation_series": -1, "heldout_test_series": -1, "heldout_bars": 1,
             "spread_bps": 10_001.0, "cs_window": 0, "min_spread_bps": -0.1, "max_spread_bps": 0.0},
    "data.features": {"vol_halflife": 0.0, "median_window": 0, "warmup": 1, "ret_clip": 0.0, "vol_floor": 0.0,
                      "ratio_clip": 0.0},
    "data.synthetic": {"vol_mean": 0.0, "vol_persistence": 1.0, "vol_of_vol": -0.1, "p_stay_trend": 1.5,
                       "p_stay_revert": -0.1, "trend_drift": -0.1, "revert_strength": 1.0, "spread_bps": 10_001.0,
                       "spread_vol_elasticity": -0.1, "spread_noise": -0.1},
    "env": {"episode_len": 1, "window": 0, "fee": 1.0, "reward_scale": 0.0, "risk_penalty": -0.1,
            "turnover_penalty": -0.1, "stop_drawdown": 1.0, "seed": 2**64, "execution_lag": 2,
            "maker_rebate_bps": 10_001.0},
    "runner": {"seed": 2**64, "wide": 0.0, "high_vol": 0.0, "low_vol": 0.0},
}
"""Out-of-range values no declared rule gives: the sections whose numbers their own code checks, and
``run.seed``'s upper bound (``MAX_RUN_SEED``, the loader's)."""


def outside(rule: Rule | None) -> list:
    """Out-of-range values of a numeric rule helper. A :class:`Range`: each bound itself where it is open,
    else just past it (1 for an int; 0.1 below a float's lower bound, 0.5 above its upper bound), and the
    midpoint between ``auto`` and the lower bound; :data:`POSITIVE`: 0; another rule: none."""
    if rule is POSITIVE:
        return [0.0]
    if not isinstance(rule, Range):
        return []
    below, above = (1, 1) if rule.integer else (0.1, 0.5)
    out = []
    if rule.lo is not None:
        out.append(rule.lo if rule.lo_open else rule.lo - below)
    if rule.hi is not None:
        out.append(rule.hi if rule.hi_open else rule.hi + above)
    if rule.auto is not None and rule.lo is not None:
        out.append((rule.auto + rule.lo) / 2)
    return out


def declared_rules() -> dict[str, dict[str, Rule | None]]:
    """Section -> key -> the rule helper it is declared with: ``algo`` / ``model`` (:mod:`rl_zerosync.presets`),
    ``run`` and ``learner`` (their fields' ``metadata["rule"]``; the learner's DQN fields are ``algo`` keys)."""
    def of(cls, skip=()):
        return {f.name: f.metadata.get("rule") for f in dataclasses.fields(cls) if f.name not in skip}
    return {"run": of(RunSettings), "algo": {key: k.rule for key, k in ALGO_KEYS.items()},
            "model": {key: k.rule for key, k in MODEL_KEYS.items()}, "learner": of(LearnerSettings, DQN_FIELDS)}


def out_of_range_values() -> dict[str, dict[str, list]]:
    """Section -> key -> out-of-range values: the generated ones (:func:`outside` of each declared rule),
    then :data:`HAND_OUT_OF_RANGE`'s."""
    table: dict[str, dict[str, list]] = {}
    for section, rules in declared_rules().items():
        for key, rule in rules.items():
            if outside(rule):
                table.setdefault(section, {})[key] = outside(rule)
    for section, keys in HAND_OUT_OF_RANGE.items():
        for key, bad in keys.items():
            table.setdefault(section, {}).setdefault(key, []).append(bad)
    return table


OUT_OF_RANGE = out_of_range_values()
"""Section -> key -> the out-of-range values tried (each besides NaN, +inf and -inf)."""

AT_THE_BOUNDS: dict[str, dict[str, object]] = {
    "run": {"seed": 2**32 - 1},
    "algo": {"num_gpus_per_learner": 0.0, "gamma": 1.0},
    "data": {"num_assets": 1, "num_bars": 2},
    "data.synthetic": {"p_stay_trend": 1.0, "spread_bps": 10_000.0},
    "env": {"fee": 0.999, "maker_rebate_bps": 10_000.0, "seed": 2**64 - 1},
    "runner": {"seed": 2**64 - 1},
    "learner": {"alpha": 1.0, "beta": 1.0, "collapse_warmup_fraction": 2.0},
    "data.files": {"spread_bps": 10_000.0, "min_spread_bps": 10_000.0, "max_spread_bps": 10_000.0},
}


def _numeric(typ) -> bool:
    """An int or float field (also inside Optional / Union), not a bool."""
    if typ in (int, float):
        return True
    origin = typing.get_origin(typ)
    return origin in (typing.Union, types.UnionType) and any(a in (int, float) for a in typing.get_args(typ))


def numeric_fields() -> set[tuple[str, str]]:
    """(section, key) of every numeric field of every settings dataclass (the learner's DQN fields
    are ``algo`` keys; ``data.synthetic`` holds the generator's model keywords)."""
    classes = {"run": RunSettings, "algo": AlgoSettings, "model": ModelSettings, "data": DataSettings,
               "data.features": FeatureConfig, "env": EnvParams, "runner": RunnerSettings, "learner": LearnerSettings}
    out = set()
    for section, cls in classes.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if _numeric(hints[f.name]) and not (section == "learner" and f.name in DQN_FIELDS):
                out.add((section, f.name))
    return out | {("data.synthetic", k) for k in MODEL_RANGES}


def raw_with(section: str, key: str, value) -> dict:
    raw = copy.deepcopy(BASE)
    if section == "data.features":
        raw["data"]["features"] = {key: value}
    elif section == "data.synthetic":
        raw["data"]["synthetic"] = {key: value}
    elif section in ("data", "data.files") and key in FILE_KEYS:
        raw["data"] = {**FILE_DATA, key: value}
    else:
        raw.setdefault(section, {})[key] = value
    return raw


def names_the_key(message: str, section: str, key: str) -> bool:
    """``<file>: <section>.<key>`` somewhere in the one-line message (the env's own messages say
    ``env: EnvParams.<key>``)."""
    return message.startswith(f"{SOURCE}: ") and "\n" not in message and (
        f"{section}.{key}" in message or (section == "env" and f"env: EnvParams.{key}" in message))


def test_every_numeric_field_has_an_out_of_range_value():
    stated = {(section, key) for section, keys in OUT_OF_RANGE.items() for key in keys}
    missing, stale = sorted(numeric_fields() - stated), sorted(stated - numeric_fields())
    assert not missing and not stale, f"numeric fields without a stated range: {missing}; stale: {stale}"


CASES = [pytest.param(section, key, value, id=f"{section}.{key}={label}")
         for section, keys in OUT_OF_RANGE.items() for key, bads in keys.items()
         for label, value in (("nan", NAN), ("inf", INF), ("-inf", -INF), *((f"out_of_range_{b!r}", b) for b in bads))]


@pytest.mark.parametrize("section, key, value", CASES)
def test_a_bad_number_is_refused_naming_the_key(section, key, value):
    with pytest.raises(SettingsError) as err:
        from_dict(raw_with(section, key, value), source=SOURCE)
    assert names_the_key(str(err.value), section, key), str(err.value)


def of_the_wrong_kind(rule: Rule | None):
    """A value a rule helper refuses whatever its bounds: a float for an int :class:`Range` (inside the range),
    an int for :data:`BOOL`, a string not among a :class:`Choice`'s values; None for another rule."""
    if isinstance(rule, Range) and rule.integer:
        return (rule.lo or 0) + 1.5
    if rule is BOOL:
        return 1
    if isinstance(rule, Choice):
        return "|".join(map(str, rule.values))
    return None


WRONG_KIND = [pytest.param(section, key, bad, id=f"{section}.{key}={bad!r}")
              for section, rules in declared_rules().items() for key, rule in rules.items()
              if (bad := of_the_wrong_kind(rule)) is not None]


def test_every_int_bool_and_choice_rule_gets_a_wrong_kind_value():
    kinds = {(p.values[0], p.values[1]) for p in WRONG_KIND}
    assert {("algo", "n_step"), ("algo", "double_q"), ("model", "action_mode"), ("model", "layernorm"),
            ("learner", "loss"), ("learner", "prioritized"), ("run", "eval_metric"), ("run", "iterations")} <= kinds


@pytest.mark.parametrize("section, key, value", WRONG_KIND)
def test_a_value_of_the_wrong_kind_is_refused_naming_the_key(section, key, value):
    assert not declared_rules()[section][key].allows(value)
    with pytest.raises(SettingsError) as err:
        from_dict(raw_with(section, key, value), source=SOURCE)
    assert names_the_key(str(err.value), section, key), str(err.value)


@pytest.mark.parametrize("section, key, value", [
    pytest.param(section, key, value, id=f"{section}.{key}") for section, keys in AT_THE_BOUNDS.items()
    for key, value in keys.items()])
def test_values_at_the_bounds_load(section, key, value):
    from_dict(raw_with(section, key, value), source=SOURCE)


def _row(table: str, o: int, row) -> list:
    rows = [list(r) for r in getattr(EnvParams(), table)]
    rows[o] = list(row)
    return rows


@pytest.mark.parametrize("section, key, value", [
    # numbers inside lists and tables: NaN / inf elements and one out-of-range element each
    *[("env", "exposure_levels", [v, -0.5, 0.0, 0.5, 1.0]) for v in (NAN, INF, -11.0)],
    *[("env", "fill_prob", _row("fill_prob", 1, [0.5, 0.7, v])) for v in (NAN, INF, 1.5)],
    *[("env", "spread_frac", _row("spread_frac", 0, row)) for row in ([NAN, 0.5, 0.5], [0.5, 0.5, INF],
                                                                        [0.5, 0.4, 0.3])],
    *[("env", "impact", _row("impact", 2, [v, 0.0, 0.0])) for v in (NAN, -INF, -0.1)],
    *[("data", "split", [v, 0.15, 0.15]) for v in (NAN, INF, 1.5)],
    *[("data", "window", [0.0, v]) for v in (NAN, INF, 1.5)],
    *[("algo", "epsilon", v) for v in (NAN, INF, 1.5, [[0, 1.0], [100, NAN]])],
    *[("runner", "epsilon", v) for v in (NAN, -0.5)],
    *[("algo", "custom_resources_per_env_runner", {"node": v}) for v in (NAN, INF, -1)],
    ("model", "hidden", [32, 0]),
])
def test_numbers_in_lists_and_tables_are_checked(section, key, value):
    with pytest.raises(SettingsError) as err:
        from_dict(raw_with(section, key, value), source=SOURCE)
    assert names_the_key(str(err.value), section, key), str(err.value)
