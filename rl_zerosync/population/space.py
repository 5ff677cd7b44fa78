"""The ``population:`` section of a settings file: P members (seeds x hyperparameter points) and the
search space of the points, written in Ray Tune's syntax and resolved by Tune::

    population:
      seeds: [0, 1, 2, 3]                      # every point is trained once per seed
      num_samples: 2                           # Tune's num_samples (see below)
      search:                                  # dotted keys -> Tune's search-space syntax
        algo.lr: {loguniform: [0.0001, 0.001]}
        algo.gamma: {grid_search: [0.98, 0.99]}
        algo.tau: {choice: [0.5, 1.0]}
        algo.n_step: {randint: [1, 4]}         # Tune's randint: upper bound exclusive (1, 2 or 3)
      search_seed: 0
      ensemble_top_k: 0
      pbt_every: 0
      pbt_quantile: 0.25
      shards: 1
      update: auto                             # batched | per_member | auto (learner/population_update.py)
      rollout: together                        # together | apart (env_runner/population_rollout.py)
      eval_processes: auto                     # 1 (auto): one pass over the members; N: all whole, N processes

Each value of ``search`` is one of :data:`DISTRIBUTIONS` (``{name: args}``, made into the Tune object
of that name: ``tune.grid_search``, ``tune.choice``, ``tune.uniform``, ...) or a plain value (fixed).
The points are what Tune's ``BasicVariantGenerator(random_state=search_seed)`` draws for
``num_samples``: ``generate_variants`` run ``num_samples`` times on one seeded generator, each pass
yielding every grid combination (the grid keys sorted by name, the first one changing fastest) with
the sampled keys drawn afresh for each; so ``grid combinations x num_samples`` points, sample pass
outermost. Member ``k = point * len(seeds) + seed position`` (the members of a point are consecutive).

Only per-member hyperparameters that keep the shapes all members share may be searched
(:data:`SEARCH_KEYS`: the ``algo`` keys declared ``search`` in :class:`~rl_zerosync.presets.AlgoSettings`,
typed by their field); their values keep the key's type (an int key takes ints only). Values are read
here for their shape and type; their ranges are checked by the settings loader when a member's
settings are built from :func:`member_overrides`. Errors are one-line :class:`SettingsError`
``"<file>: population.<key>: ..."``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray import tune
from ray.tune.search.variant_generator import generate_variants

from rl_zerosync.config.yaml_values import SettingsError, epsilon_numbers, float_text
from rl_zerosync.learner.population_update import UPDATE_MODES
from rl_zerosync.presets import SEARCH_KEYS
from rl_zerosync.presets import SHAPE_KEYS as ALGO_SHAPE_KEYS

__all__ = ["DISTRIBUTIONS", "MAX_MEMBERS", "Member", "PopulationSettings", "SEARCH_KEYS", "SHAPE_KEYS", "describe",
           "member_overrides", "parse_population"]

MAX_MEMBERS = 4096
"""Most members one population may hold (points x seeds)."""
SHAPE_KEYS = ("env.window", *ALGO_SHAPE_KEYS, "learner.replay_capacity")
"""Keys (besides every ``model.*``) that change the shapes the members share: refused in ``search``. The
``algo`` ones are declared (``shape=True``) in :class:`~rl_zerosync.presets.AlgoSettings`; the
component sections' are listed here."""
DISTRIBUTIONS = {"grid_search": tune.grid_search, "choice": tune.choice, "uniform": tune.uniform,
                 "loguniform": tune.loguniform, "quniform": tune.quniform, "qloguniform": tune.qloguniform,
                 "randint": tune.randint}
"""The distribution names of ``search`` -> the Tune function that builds each."""
_BOUNDS = {"uniform": 2, "loguniform": 2, "quniform": 3, "qloguniform": 3, "randint": 2}
"""Arguments of the ranged distributions: ``[lo, hi]`` or ``[lo, hi, q]``."""
ROLLOUT_MODES = ("together", "apart")
"""``population.rollout``: the members' envs as one batch, or each member's runner alone."""
_FIELDS = ("seeds", "num_samples", "search", "search_seed", "ensemble_top_k", "pbt_every", "pbt_quantile",
           "shards", "update", "rollout", "eval_processes")


@dataclass(frozen=True)
class Member:
    """One member of a population: a point of the search space trained with one seed."""

    index: int
    """Its place in the population, ``point * len(seeds) + seed position``."""
    seed: int
    """Its ``run.seed``."""
    point: int
    """The index of its point in :attr:`PopulationSettings.points`."""
    overrides: dict
    """Its point: dotted key -> value (what it changes in the base settings besides the seed)."""


@dataclass
class PopulationSettings:
    """A settings file's ``population:`` section, resolved into points and members."""

    seeds: list[int]
    """Seeds every point is trained with (distinct, >= 0); a member's ``run.seed``."""
    num_samples: int = 1
    """Tune's ``num_samples``: the sampled (non-grid) keys are drawn this many times per grid combination."""
    search: dict[str, Any] = field(default_factory=dict)
    """The search space as the file wrote it: dotted key -> ``{distribution: args}`` or a fixed value."""
    search_seed: int = 0
    """Seed of the sampling of the search space (the same file gives the same points)."""
    ensemble_top_k: int = 0
    """0 = off; else the Q values of the k best members on validation are averaged (1 <= k <= P)."""
    pbt_every: int = 0
    """0 = off; else a PBT exploit/explore step every this many validation passes."""
    pbt_quantile: float = 0.25
    """Fraction of members in PBT's bottom (replaced) and top (copied) groups, in (0, 0.5]."""
    shards: int = 1
    """Learner actors the members are spread over (1 <= shards <= P)."""
    update: str = "auto"
    """How the members' learner updates run (``learner/population_update.py``): ``batched`` (one update of
    all members, batched GEMMs), ``per_member`` (each member's own update: bit for bit its single run) or
    ``auto`` (``batched`` on CUDA from ``BATCHED_FROM`` members where it can run, else ``per_member``)."""
    rollout: str = "together"
    """How the members' rollouts run (``env_runner/population_rollout.py``): ``together`` (every member's
    envs stepped as one batch of P x N envs, one rollout; its Q forward batched when the update is) or
    ``apart`` (each member's runner steps its own envs, the rollouts launched back to back)."""
    eval_processes: int | str = "auto"
    """The members' end-of-run evaluations: 1 = one pass over all members in this process
    (:mod:`rl_zerosync.evaluation.population_pass`: whole for the member selected on validation, lean
    for the others); N > 1 = every member's whole ``evaluate_checkpoint``, N processes at once (the
    pass's whole evaluations are the same files); ``auto`` = 1 (:func:`eval_processes`)."""
    points: list[dict[str, Any]] = field(default_factory=list)
    """The resolved points, each a dict dotted key -> concrete value, in Tune's order."""
    members: list[Member] = field(default_factory=list)
    """The members, by index (points x seeds)."""

    @property
    def size(self) -> int:
        """P, the number of members."""
        return len(self.members)


def _fail(source: str, key: str, message: str) -> SettingsError:
    return SettingsError(f"{source}: population.{key}: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> float | int | None:
    """A finite int or float (a numeric string read as a float, as the settings loader reads it)."""
    if _is_int(value):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return float_text(value)


def _value(key: str, value: Any, where: str, source: str) -> Any:
    """``value`` as the type of search key ``key`` takes (float, int or an epsilon schedule)."""
    kind = SEARCH_KEYS[key]
    number = _number(value)
    if kind == "int":
        if not _is_int(value):
            raise _fail(source, where, f"{key} takes an int, got {value!r}")
        return value
    if number is not None:
        return float(number)
    if kind == "schedule" and isinstance(value, list) and value:
        pairs = epsilon_numbers(value)
        if all(isinstance(p, list) and len(p) == 2 and _is_int(p[0]) and _number(p[1]) is not None for p in pairs):
            return [[p[0], float(p[1])] for p in pairs]
    expected = "a float or a [[step, value], ...] schedule" if kind == "schedule" else "a number"
    raise _fail(source, where, f"{key} takes {expected}, got {value!r}")


def _domain(key: str, spec: Any, source: str) -> Any:
    """One ``search`` entry as Tune's object (or the fixed value itself)."""
    where = f"search.{key}"
    if not isinstance(spec, dict):
        return _value(key, spec, where, source)
    example = "e.g. {loguniform: [0.0001, 0.001]}"
    if len(spec) != 1:
        raise _fail(source, where, f"expected one distribution, got {sorted(map(str, spec))}; {example}")
    name, args = next(iter(spec.items()))
    if name not in DISTRIBUTIONS:
        raise _fail(source, where, f"unknown distribution {name!r}; allowed: {', '.join(DISTRIBUTIONS)}")
    where = f"{where}.{name}"
    if name in ("grid_search", "choice"):
        if not isinstance(args, list) or not args:
            raise _fail(source, where, f"expected a non-empty list of values, got {args!r}")
        return DISTRIBUTIONS[name]([_value(key, v, f"{where}[{i}]", source) for i, v in enumerate(args)])
    n = _BOUNDS[name]
    shape = "[lo, hi]" if n == 2 else "[lo, hi, q]"
    numbers = [_number(a) for a in args] if isinstance(args, list) else []
    if len(numbers) != n or None in numbers:
        raise _fail(source, where, f"expected {shape} (numbers), got {args!r}")
    if name == "randint" and not all(_is_int(a) for a in args):
        raise _fail(source, where, f"expected {shape} ints (hi exclusive), got {args!r}")
    if name != "randint" and SEARCH_KEYS[key] == "int":
        raise _fail(source, where, f"{name} draws floats and {key} takes an int; use randint, choice or grid_search")
    lo, hi = numbers[0], numbers[1]
    if lo >= hi:
        raise _fail(source, where, f"expected lo < hi, got {args!r}")
    if name in ("loguniform", "qloguniform") and lo <= 0:
        raise _fail(source, where, f"expected lo > 0 (a log scale), got {args!r}")
    if n == 3:
        q = numbers[2]
        if q <= 0 or not all(math.isclose(b / q, round(b / q)) for b in (lo, hi)):
            raise _fail(source, where, f"expected q > 0 that divides lo and hi, got {args!r}")
        return DISTRIBUTIONS[name](float(lo), float(hi), float(q))
    return DISTRIBUTIONS[name](lo, hi) if name == "randint" else DISTRIBUTIONS[name](float(lo), float(hi))


def _check_search_key(key: Any, source: str) -> None:
    if not isinstance(key, str):
        raise _fail(source, f"search.{key}", f"expected a dotted key such as algo.lr, got {key!r}")
    if key == "run.seed":
        raise _fail(source, "search.run.seed", "the seeds are population.seeds (every point is trained once "
                                               "per seed); list them there")
    if key.startswith("model.") or key in SHAPE_KEYS:
        raise _fail(source, f"search.{key}", "changes the shapes the members share; run separate populations "
                                             "(one per value)")
    if key not in SEARCH_KEYS:
        raise _fail(source, f"search.{key}", f"not a per-member hyperparameter; allowed: {', '.join(SEARCH_KEYS)}")


def _int_field(raw: dict, key: str, default: int, lo: int, hi: int | None, source: str) -> int:
    value = raw.get(key, default)
    bounds = f">= {lo}" if hi is None else f"in {lo}..{hi}"
    if not _is_int(value) or value < lo or (hi is not None and value > hi):
        raise _fail(source, key, f"expected an int {bounds}, got {value!r}")
    return value


def _seeds(raw: dict, source: str) -> list[int]:
    seeds = raw.get("seeds")
    expected = "a non-empty list of distinct ints >= 0, e.g. [0, 1, 2, 3]"
    if not isinstance(seeds, list) or not seeds or not all(_is_int(s) and s >= 0 for s in seeds):
        raise _fail(source, "seeds", f"expected {expected}, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _fail(source, "seeds", f"expected {expected}; {sorted({s for s in seeds if seeds.count(s) > 1})} "
                                     f"given more than once")
    return list(seeds)


def _resolve(space: dict, num_samples: int, search_seed: int, source: str) -> list[dict[str, Any]]:
    """The points: Tune's variants of ``space``, ``num_samples`` passes on one seeded generator."""
    rng = np.random.default_rng(search_seed)  # what BasicVariantGenerator(random_state=search_seed) holds
    points = []
    for _ in range(num_samples):
        for _, spec in generate_variants(space, random_state=rng):
            points.append({key: _value(key, spec[key], f"search.{key}", source) for key in space})
    return points


def parse_population(raw: dict | None, source: str) -> PopulationSettings | None:
    """The ``population:`` section of settings file ``source``, checked and resolved; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SettingsError(f"{source}: population: expected a mapping, got {raw!r}")
    for key in raw:
        if key not in _FIELDS:
            raise _fail(source, str(key), f"unknown key; allowed: {', '.join(_FIELDS)}")
    seeds = _seeds(raw, source)
    num_samples = _int_field(raw, "num_samples", 1, 1, None, source)
    search_seed = _int_field(raw, "search_seed", 0, 0, None, source)
    search = raw.get("search") or {}
    if not isinstance(search, dict):
        raise _fail(source, "search", f"expected a mapping of dotted keys (e.g. algo.lr) to values, got {search!r}")
    for key in search:
        _check_search_key(key, source)
    space = {key: _domain(key, spec, source) for key, spec in search.items()}
    grid = math.prod(len(spec["grid_search"]) for spec in search.values()
                     if isinstance(spec, dict) and "grid_search" in spec)
    sampled = any(isinstance(spec, dict) and "grid_search" not in spec for spec in search.values())
    if num_samples > 1 and not sampled:
        raise _fail(source, "num_samples", f"{num_samples} repeats identical points: the search samples no key "
                                           f"(only grid_search or fixed values); set 1, or list more seeds")
    size = grid * num_samples * len(seeds)
    if size > MAX_MEMBERS:
        raise SettingsError(f"{source}: population: {size} members ({grid} grid combinations x num_samples "
                            f"{num_samples} x {len(seeds)} seeds); at most {MAX_MEMBERS}")
    pbt_quantile = raw.get("pbt_quantile", 0.25)
    number = None if isinstance(pbt_quantile, bool) else _number(pbt_quantile)
    if number is None or not 0 < number <= 0.5:
        raise _fail(source, "pbt_quantile", f"expected a float in (0, 0.5], got {pbt_quantile!r}")
    update = raw.get("update", "auto")
    if update not in UPDATE_MODES:
        raise _fail(source, "update", f"expected one of {', '.join(UPDATE_MODES)}, got {update!r}")
    rollout = raw.get("rollout", "together")
    if rollout not in ROLLOUT_MODES:
        raise _fail(source, "rollout", f"expected one of {', '.join(ROLLOUT_MODES)}, got {rollout!r}")
    eval_procs = raw.get("eval_processes", "auto")
    if eval_procs != "auto" and (not _is_int(eval_procs) or eval_procs < 1):
        raise _fail(source, "eval_processes", f"expected 'auto' or an int >= 1, got {eval_procs!r}")
    points = _resolve(space, num_samples, search_seed, source)
    members = [Member(index=p * len(seeds) + i, seed=seed, point=p, overrides=point)
               for p, point in enumerate(points) for i, seed in enumerate(seeds)]
    return PopulationSettings(
        seeds=seeds, num_samples=num_samples, search=dict(search), search_seed=search_seed,
        ensemble_top_k=_int_field(raw, "ensemble_top_k", 0, 0, size, source),
        pbt_every=_int_field(raw, "pbt_every", 0, 0, None, source), pbt_quantile=float(number),
        shards=_int_field(raw, "shards", 1, 1, size, source), update=update, rollout=rollout,
        eval_processes=eval_procs, points=points, members=members)


def _text(value: Any) -> str:
    """``value`` as ``--set`` text that reads back identical: repr of a float, with ``.0`` before a bare
    exponent (``1e-05`` -> ``1.0e-05``) so YAML 1.1 reads it as that float at any depth."""
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    return repr(value)


def member_overrides(member: Member) -> list[str]:
    """The ``--set`` strings (``"algo.lr=0.0003"``, ``"run.seed=2"``) that turn the base settings into
    ``member``'s own single-run settings."""
    return [f"{key}={_text(value)}" for key, value in member.overrides.items()] + [f"run.seed={member.seed}"]


def _kind(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "fixed"
    name = next(iter(spec))
    return "grid" if name == "grid_search" else name


def describe(pop: PopulationSettings) -> str:
    """One header line, e.g. ``population: 8 members = 2 points x 4 seeds | search algo.lr loguniform,
    algo.gamma grid | shards 1``."""
    def count(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    search = ", ".join(f"{key} {_kind(spec)}" for key, spec in pop.search.items()) or "none"
    parts = [f"population: {count(pop.size, 'member')} = {count(len(pop.points), 'point')} x "
             f"{count(len(pop.seeds), 'seed')}", f"search {search}"]
    if pop.ensemble_top_k:
        parts.append(f"ensemble top {pop.ensemble_top_k}")
    if pop.pbt_every:
        parts.append(f"pbt every {pop.pbt_every} validations (quantile {pop.pbt_quantile:g})")
    parts.append(f"shards {pop.shards}")
    return " | ".join(parts)


def eval_processes(setting: int | str, members: int) -> int:
    """The processes of the members' end-of-run evaluations: ``setting`` when an int (at most
    ``members``); ``auto``: 1 (in the population's process). Several processes are an explicit choice:
    their speed beside a GPU is not measured yet (docs/population.md)."""
    if setting != "auto":
        return max(1, min(int(setting), members))
    return 1
