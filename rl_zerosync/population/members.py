"""A population's members as single runs: member k's settings, its run directory and its training loop.

Member k of a population is exactly the single run of the base config with member k's seed and
hyperparameters (:func:`member_settings`): ``rl-zerosync train --config BASE --set run.seed=S --set
algo.lr=...`` trains the same agent, bit for bit on a CPU. Its run directory is
``<run.dir>/<run.name>/member<k>/``, a run directory like any other (``evaluate``, ``export`` and
``--resume`` read it as they read a single run's), except that its metrics rows go to the population's
one table (:class:`MemberRunDir`, :class:`~rl_zerosync.rundir.metrics_table.MetricsTable`).
"""
from __future__ import annotations

from pathlib import Path

from rl_zerosync.config.settings import Settings, SettingsError, apply_overrides, from_dict
from rl_zerosync.population.space import Member, PopulationSettings, member_overrides
from rl_zerosync.rundir.metrics_table import MEMBER_COLUMN
from rl_zerosync.rundir.run_dir import RunDir, metrics_row

MEMBER_DIR = "member{index}"
"""A member's run directory inside the population's directory."""
SEEDED_ELSEWHERE = (("runner", "seed"), ("learner", "seed"))
"""Keys that would give every member the same seed: members take theirs from ``population.seeds``."""


def member_dir(parent: Path, index: int) -> Path:
    """Member ``index``'s run directory under the population directory ``parent``."""
    return Path(parent) / MEMBER_DIR.format(index=index)


def check_base(settings: Settings) -> None:
    """The base config may not pin a seed the members must differ in (a named error)."""
    for section, key in SEEDED_ELSEWHERE:
        if key in getattr(settings, section).given:
            raise SettingsError(f"{settings.source}: {section}.{key}: set with a population; every member takes "
                                f"its seed from population.seeds (run.seed per member): remove {section}.{key}")


def member_settings(settings: Settings, member: Member) -> Settings:
    """Member ``member``'s single-run settings: the base settings, its seed and hyperparameters,
    its run directory ``<run.dir>/<run.name>/member<k>``; no ``population`` section."""
    raw = settings.to_dict()
    raw.pop("population", None)
    overrides = member_overrides(member) + [f"run.dir={settings.run_dir}",
                                            f"run.name={MEMBER_DIR.format(index=member.index)}"]
    return from_dict(apply_overrides(raw, overrides), source=f"{settings.source} (member {member.index})")


def all_member_settings(settings: Settings, pop: PopulationSettings) -> list[Settings]:
    """Every member's settings, in member order (checked at once, before anything is built)."""
    check_base(settings)
    return [member_settings(settings, m) for m in pop.members]


class MemberRunDir(RunDir):
    """A member's run directory: a :class:`~rl_zerosync.rundir.run_dir.RunDir` (its lock, settings,
    checkpoints, validation returns) whose metrics rows go to the population's one table instead of a
    ``metrics.jsonl`` and TensorBoard writer of its own: :meth:`log` appends the row (the single run's
    :func:`~rl_zerosync.rundir.run_dir.metrics_row` with a ``member`` column) to ``rows``, a list the
    population shares between its members and writes once per iteration. Bind it with :meth:`bind`
    after :meth:`~rl_zerosync.rundir.run_dir.RunDir.claim`."""

    member: int | None = None
    rows: list | None = None

    def bind(self, member: int, rows: list) -> "MemberRunDir":
        """Member ``member``'s rows go to ``rows`` (the population's list for this iteration)."""
        self.member, self.rows = int(member), rows
        return self

    def open_log(self) -> None:
        """Nothing to open: the population's table is opened once for every member."""

    def close_log(self) -> None:
        """Nothing to close (see :meth:`open_log`)."""

    def log(self, result: dict) -> None:
        """This iteration's row of the member, kept for the population's table."""
        if self.rows is None:
            raise RuntimeError(f"{self.path}: a member's run directory logged before bind(member, rows)")
        self.check_present()
        self.rows.append({MEMBER_COLUMN: self.member, **metrics_row(result)})
