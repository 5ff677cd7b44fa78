"""``rl-zerosync train`` of a population config to the end: one process
(:class:`~rl_zerosync.population.lockstep.Population`) or G shards
(:class:`~rl_zerosync.population.shards.ShardedPopulation`), then the evaluations, the ensemble
and ``population.json``; with ``--resume``, from the members' last common checkpoint
(:mod:`rl_zerosync.population.resume`)."""
from __future__ import annotations

import contextlib

from rl_zerosync.config.settings import Settings
from rl_zerosync.population.leaderboard_plot import POPULATION_PNG, plot_population
from rl_zerosync.population.lockstep import Population
from rl_zerosync.population.members import all_member_settings, member_dir
from rl_zerosync.population.report import leaderboard_lines, population_report, select, write_report
from rl_zerosync.population.space import PopulationSettings, describe, parse_population
from rl_zerosync.rundir.lock import RunExistsError
from rl_zerosync.rundir.progress import Steps, say
from rl_zerosync.rundir.run_dir import RunDir
from rl_zerosync.run.train import _Interrupt, init_ray


def train_population(settings: Settings, overwrite: bool = False, resume: bool = False) -> dict:
    """Train the population of ``settings`` (see the module docstring); returns ``population.json``'s
    content (plus ``interrupted_by`` when a signal stopped it after the checkpoints were written).
    ``resume``: continue the population in ``settings.run_dir`` (:mod:`rl_zerosync.population.resume`)."""
    pop = parse_population(settings.population, settings.source)
    members = all_member_settings(settings, pop)
    parent = settings.run_dir
    again = f"pass --resume {parent} to continue it or --overwrite to train the population again"
    if resume:
        from rl_zerosync.population.resume import check_settings

        changes = check_settings(settings, pop)  # a fixed key changed: refused before anything is written
        print("resume: settings as the population's" if not changes else
              f"resume: changed from the population's settings: {', '.join(changes)}", flush=True)
    elif not overwrite and (parent / "population.json").is_file():
        raise RunExistsError(f"{parent} already holds a population (population.json); {again}", parent)
    with RunDir.claim(parent, overwrite=overwrite, resume=resume, hint=again) as prd:
        from rl_zerosync.population.report import ENSEMBLE_DIR

        prd.record("population.json", POPULATION_PNG, *(member_dir(parent, m.index).name for m in pop.members),
                   *([ENSEMBLE_DIR.format(k=pop.ensemble_top_k)] if pop.ensemble_top_k else []))
        plan = _plan(settings, pop, members) if resume else None
        if plan is not None and plan.report is not None:
            return plan.report
        if plan is None:
            for m in pop.members:  # every member's directory checked before Ray starts
                RunDir.claim(member_dir(parent, m.index), hint=again).close()
        prd.write_settings(settings)
        init_ray(settings)
        print(describe(pop), flush=True)
        if pop.shards > 1:
            from rl_zerosync.population.shards import ShardedPopulation

            sharded = ShardedPopulation(settings, pop)
            try:
                return _run(sharded)
            finally:
                sharded.close()
        with contextlib.ExitStack() as stack:
            population = Population(settings, pop, members, stack, resume=plan)
            print(population.update_line, flush=True)
            print(population.rollout_line, flush=True)
            return _run(population)


def _plan(settings: Settings, pop: PopulationSettings, members: list[Settings]):
    """A resume's :class:`~rl_zerosync.population.resume.ResumePlan`, checked before Ray starts, with the
    metrics table cut back to it; its ``report`` is ``population.json`` when the population had finished
    (nothing is changed then)."""
    from rl_zerosync.population.resume import apply_plan, finished_report, plan_resume

    plan = plan_resume(settings, pop, members)
    report = finished_report(settings.run_dir) if not plan.training else None
    if report is not None:
        say(f"population: {settings.run_dir} is finished (every member trained, population.json complete): "
            "nothing to resume; --overwrite trains it again")
    else:
        apply_plan(settings, plan)
    plan.report = report
    return plan


def evaluate_ensemble(settings: Settings, pop: PopulationSettings, rows: list[dict]) -> dict | None:
    """The mean-Q ensemble of the ``ensemble_top_k`` best members on validation, evaluated like a member
    (validation and test) into ``ensemble_top<k>/evaluation/``; None when no member validated."""
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint
    from rl_zerosync.population.report import ENSEMBLE_DIR, ensemble_entry, ensemble_members

    top = ensemble_members(rows, settings.run.eval_metric, pop.ensemble_top_k)
    if not top:
        return None
    parent = settings.run_dir
    name = ENSEMBLE_DIR.format(k=pop.ensemble_top_k)
    paths = [member_dir(parent, k) for k in top]
    with Steps("evaluate ensemble", total=1).step(f"top {len(top)} {top}"):
        report = evaluate_checkpoint(paths[0], out_dir=parent / name / "evaluation",
                                     which=settings.run.eval_checkpoint, ensemble=paths[1:], quiet=True)
    say(f"ensemble top {len(top)} {top}: {report['summary_line']}")
    return ensemble_entry(top, report, name)


def _run(population) -> dict:
    """Drive a :class:`Population` or a :class:`~rl_zerosync.population.shards.ShardedPopulation` to
    the end: lockstep iterations, the final checkpoints, the evaluations, ``population.json``."""
    settings, pop, parent, metric = population.settings, population.pop, population.parent, population.metric
    with _Interrupt() as interrupt:
        while not population.done and not interrupt.requested:
            population.step()
        population.save()  # inside the handler: a second signal waits for the checkpoints
    rows = population.rows(population.lineage)
    if interrupt.requested:
        report = population_report(pop, metric, rows, parent, partial=True, interrupted_by=interrupt.signum)
        path = write_report(parent, report)
        say(f"population: interrupted at iteration {population.iteration}; checkpoints kept; {path} marked partial")
        return report
    ensemble = None
    if settings.run.evaluate:
        selected = select(rows, metric)  # on validation: its evaluation whole, the others' lean (one pass)
        for line in population.evaluate_members(frozenset() if selected is None else frozenset({selected})):
            say(line)
        rows = population.rows(population.lineage)
        if pop.ensemble_top_k:
            ensemble = evaluate_ensemble(settings, pop, rows)
    report = population_report(pop, metric, rows, parent, ensemble=ensemble)
    report["timing"] = population.timing_summary()
    say(report["timing"]["line"])
    steps = Steps("population report", total=2)
    with steps.step(f"draw {POPULATION_PNG}"):
        plot_population(report, parent, parent / POPULATION_PNG, metric)
    report["plot"] = str(parent / POPULATION_PNG)
    with steps.step("write population.json"):
        path = write_report(parent, report)
    for line in leaderboard_lines(report, metric):
        say(line)
    say(f"population report: {path} | {parent / POPULATION_PNG}")
    return report
