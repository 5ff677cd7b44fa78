"""``rl-zerosync train --config POP.yaml --resume <run.dir>/<run.name>``: a population continued.

The members are stepped in lockstep (:mod:`rl_zerosync.population.lockstep`): every member still
training is at the same iteration, validates at the same iterations, and a SIGINT/SIGTERM writes
every member's checkpoint at that iteration. A resume therefore continues the population from its
**last common checkpoint iteration** ``I``: the newest checkpoint iteration that every member still
training has (the smallest of their newest good checkpoints; a member whose newest is later, as after
a kill in the middle of the members' checkpoint writes, is restored from its older checkpoint at
``I``, which the rotation keeps; a member with no checkpoint at all makes ``I`` 0: every member
still training starts again). Each member then replays iterations ``I + 1 ...``: member k is its single
run, so the iterations trained again give the rows and checkpoints they gave before.

A member that had **finished** is read back, not retrained: one stopped early by
``run.early_stop_patience`` (its run state says so; its checkpoint is written when it stops), or every
member when the whole population reached ``run.iterations``. Nothing is left to train then: the
members' evaluations and ``population.json`` are written (an interruption during them is resumed
that way); a population whose ``population.json`` is complete is not touched (a message says so).

The population's one metrics table keeps member k's rows up to its resumed iteration, one per
iteration (:meth:`~rl_zerosync.rundir.metrics_table.MetricsTable.truncate`), and TensorBoard hides the
earlier sessions' events after ``I``: after the resume every member has rows 1..N once.

Refused before anything is written or Ray starts, each named: a changed ``model`` / ``env`` / ``data``
key or data file (:func:`~rl_zerosync.run.resume_settings.compare`, as for a single run); a changed
key that decides the members (``population.seeds``, ``search``, ``num_samples``, ``search_seed``); a
population with PBT (``population.pbt_every``: its explored hyperparameters and lineage are not in the
members' checkpoints) or with ``population.shards`` above 1.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rl_zerosync.config.settings import Settings
from rl_zerosync.population.members import member_dir
from rl_zerosync.population.space import PopulationSettings, parse_population
from rl_zerosync.rundir.checkpoints import (
    CheckpointError, checkpoint_candidates, checkpoint_iteration, read_run_state, verify_checkpoint,
)
from rl_zerosync.rundir.lock import RunDirError
from rl_zerosync.rundir.metrics_table import MetricsTable
from rl_zerosync.rundir.run_dir import RunDir
from rl_zerosync.run.resume_settings import ResumeSettingsError, compare, run_settings_file
from rl_zerosync.run.train import stopped_early

MEMBER_KEYS = ("seeds", "num_samples", "search", "search_seed")
"""``population`` keys that decide which member is which: a resume may not change them."""
REFUSED = (("pbt_every", 0, "PBT's explored hyperparameters and lineage are not in the members' checkpoints"),
           ("shards", 1, "the shards' members are not resumed"))
"""``population`` keys whose value other than the default makes a population not resumable, and why."""
REPORT = "population.json"


@dataclass
class ResumePlan:
    """Where each member continues from (:func:`plan_resume`)."""

    checkpoints: dict[int, Path] = field(default_factory=dict)
    """Member index -> the checkpoint it is restored from (a member absent here starts from scratch)."""
    iteration: int = 0
    """``I``: the last common checkpoint iteration of the members still training (their first trained
    iteration is ``I + 1``)."""
    rows: dict[int, int] = field(default_factory=dict)
    """Member index -> the last iteration whose metrics row is kept."""
    finished: list[int] = field(default_factory=list)
    """Members read back, not trained (stopped early, or the whole population at ``run.iterations``)."""
    training: bool = True
    """Whether any member trains."""
    report: dict | None = None
    """``population.json`` of a finished population (nothing to resume), else None."""

    @property
    def purge_step(self) -> int | None:
        """The first iteration trained again (TensorBoard hides the earlier events from it), or None."""
        return self.iteration + 1 if self.training else None


def check_settings(settings: Settings, pop: PopulationSettings) -> list[str]:
    """The resume's settings against the population's own (``settings.yaml`` of its directory):
    :class:`~rl_zerosync.run.resume_settings.ResumeSettingsError` naming a changed fixed key, a changed
    member key (:data:`MEMBER_KEYS`), a changed data file, or a population that cannot be resumed
    (:data:`REFUSED`); returns the allowed changes as ``key old -> new`` lines."""
    parent = settings.run_dir
    for key, default, why in REFUSED:
        if getattr(pop, key) != default:
            raise ResumeSettingsError(f"--resume {parent}: population.{key} is {getattr(pop, key)}: a population "
                                      f"with population.{key} cannot be resumed ({why}); --overwrite trains it again")
    path = run_settings_file(settings, parent)
    if path is None:
        raise RunDirError(f"--resume {parent}: no settings.yaml there: not a population's directory")
    changes = compare(settings, parent)
    raw = (yaml.safe_load(path.read_text()) or {}).get("population")
    old = parse_population(raw, str(path)) if raw else None
    if old is None:
        raise ResumeSettingsError(f"--resume {parent}: {path} has no population section: the directory holds a "
                                  "single run (train it with --resume and its own config)")
    for key, default, why in REFUSED:
        if getattr(old, key) != default:
            raise ResumeSettingsError(f"--resume {parent}: the population was trained with population.{key} "
                                      f"{getattr(old, key)} ({why}); --overwrite trains it again")
    fixed = [k for k in MEMBER_KEYS if getattr(old, k) != getattr(pop, k)]
    if fixed:
        shown = "; ".join(f"population.{k}: {getattr(old, k)!r} in the run, {getattr(pop, k)!r} now" for k in fixed)
        raise ResumeSettingsError(f"--resume {parent}: the settings change which member is which ({shown}); these "
                                  f"keys must match {path}: train a new population (another run.name) or --overwrite")
    return changes


def finished_report(parent: Path) -> dict | None:
    """``population.json`` of ``parent`` when it is complete (not ``partial``), else None."""
    try:
        report = json.loads((Path(parent) / REPORT).read_text())  # host read: run metadata
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("partial") is False else None


def plan_resume(settings: Settings, pop: PopulationSettings, members: list[Settings]) -> ResumePlan:
    """Every member's resume point (see the module docstring): each member's directory claimed and
    released, its newest good checkpoint found (damaged ones set aside, as a single run's resume does);
    nothing else is written (:func:`apply_plan` cuts the metrics table back)."""
    newest: dict[int, Path | None] = {}
    stopped: list[int] = []
    for m, ms in zip(pop.members, members):
        with RunDir.claim(member_dir(settings.run_dir, m.index), resume=True) as rd:
            try:
                ckpt = rd.resume_point(rd.path)
            except FileNotFoundError:
                ckpt = None  # no checkpoint yet: trained from the start
        newest[m.index] = ckpt
        if ckpt is not None and stopped_early(ms, read_run_state(ckpt)):
            stopped.append(m.index)
    its = {k: (checkpoint_iteration(c) or 0) if c is not None else 0 for k, c in newest.items()}
    total = settings.run.iterations
    training = [k for k in newest if k not in stopped]
    if all(its[k] >= total for k in training):
        return ResumePlan({k: c for k, c in newest.items() if c is not None}, max(its.values(), default=0),
                          dict(its), sorted(newest), training=False)
    common = min(its[k] for k in training)
    plan = ResumePlan(iteration=common, finished=stopped)
    for k in newest:
        at = its[k] if k in stopped else common
        plan.rows[k] = at
        ckpt = newest[k] if its[k] == at else _checkpoint_at(member_dir(settings.run_dir, k), at, its)
        if ckpt is not None:
            plan.checkpoints[k] = ckpt
    return plan


def _checkpoint_at(path: Path, iteration: int, its: dict[int, int]) -> Path | None:
    """The newest good checkpoint of member directory ``path`` at ``iteration`` (None for 0: trained from
    the start); :class:`~rl_zerosync.rundir.lock.RunDirError` naming what it has when there is none."""
    if iteration == 0:
        return None
    found = [c for c in checkpoint_candidates(path, "last") if checkpoint_iteration(c) == iteration]
    for ckpt in found:
        try:
            verify_checkpoint(ckpt, quiet=True)
            return ckpt
        except CheckpointError:
            continue
    have = ", ".join(f"{c.name}/ at {checkpoint_iteration(c)}" for c in checkpoint_candidates(path, "last"))
    newest = ", ".join(f"member{k} {i}" for k, i in sorted(its.items()))
    raise RunDirError(f"--resume: {path} has no good checkpoint at iteration {iteration}, the population's last "
                      f"common one (the members' newest: {newest}; it has {have or 'none'}): the members cannot "
                      "continue in lockstep; --overwrite trains the population again")


def apply_plan(settings: Settings, plan: ResumePlan) -> None:
    """Cut the population's metrics table back to the plan's rows, one line saying where it resumes."""
    dropped = MetricsTable(settings.run_dir).truncate(plan.rows)
    finished = f"; read back (finished): {', '.join(f'member{k}' for k in plan.finished)}" if plan.finished else ""
    where = (f"continues from iteration {plan.iteration}" if plan.training else "has trained every member")
    print(f"resume: the population {where}{finished}"
          + (f" (dropped {dropped} metrics.jsonl rows after it)" if dropped else ""), flush=True)
