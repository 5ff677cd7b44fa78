"""``rl-zerosync train --config FILE`` where FILE has a ``population:`` section: P members in one program.

The members (:mod:`rl_zerosync.population.members`: member k = the single run with its seed and
hyperparameters) are built in one process, on one device, and stepped in lockstep: iteration i of
every member, then iteration i + 1. One validation segment and its rule baselines are built once and
shared (the members' network shapes agree); every member validates at the same iterations, keeps
its own best checkpoint (policy only) and its own metrics, TensorBoard and checkpoints in
``<run.dir>/<run.name>/member<k>/``. After every validation pass a one-line summary of the
population is printed; with ``population.pbt_every`` the exploit/explore step of
:mod:`rl_zerosync.population.pbt` runs on the members' learners. At the end every member's final
checkpoint is written, each is evaluated (the test segment, read once, for the report), and
``population.json`` (:mod:`rl_zerosync.population.report`) and the leaderboard are written.

A member here is one RLlib algorithm (its own learner and env runner); the members share the
process, the device, the validation data and Ray, not yet one batched update: a learner and a
runner with a member dimension are later steps (see ``docs/population.md``).
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

from rl_zerosync.config.settings import Settings, to_rllib_config
from rl_zerosync.population.members import all_member_settings, member_dir
from rl_zerosync.population.memory import check_fits
from rl_zerosync.population.report import leaderboard_lines, member_row, population_report, write_report
from rl_zerosync.population.space import PopulationSettings, describe, parse_population
from rl_zerosync.rundir.run_dir import RunDir
from rl_zerosync.run.train import TrainLoop, _Interrupt, init_ray


def _pass_line(iteration: int, total: int, loops: list[TrainLoop], metric: str, t0: float) -> str:
    """After a validation pass: the best and median member by this pass's validation metric."""
    values = [(loop.result.get("eval", {}).get(f"validation_{metric}"), k) for k, loop in enumerate(loops)]
    values = sorted([(v, k) for v, k in values if v is not None and v == v], reverse=True)
    if not values:
        return f"population it {iteration}/{total} | {time.perf_counter() - t0:.0f}s | no member validated"
    median = values[len(values) // 2][0]
    return (f"population it {iteration}/{total} | {time.perf_counter() - t0:.0f}s | validation {metric}: best "
            f"member{values[0][1]} {values[0][0]:+.3f}, median {median:+.3f} over {len(values)} member(s)")


def _rows(pop: PopulationSettings, loops: list[TrainLoop], lineage: dict[int, list]) -> list[dict]:
    return [member_row(m, loop.selection, loop.run_dir.path, lineage.get(m.index, []))
            for m, loop in zip(pop.members, loops)]


def train_population(settings: Settings, overwrite: bool = False) -> dict:
    """Train the population of ``settings`` (see the module docstring); returns ``population.json``'s
    content (plus ``interrupted_by`` when a signal stopped it after the checkpoints were written)."""
    pop = parse_population(settings.population, settings.source)
    members = all_member_settings(settings, pop)
    parent = settings.run_dir
    with RunDir.claim(parent, overwrite=overwrite) as prd:
        prd.record("population.json", *(member_dir(parent, m.index).name for m in pop.members))
        prd.write_settings(settings)
        init_ray(settings)
        print(describe(pop), flush=True)
        with contextlib.ExitStack() as stack:
            loops = _build(members, pop, stack)
            return _run(settings, pop, loops, parent)


def _build(members: list[Settings], pop: PopulationSettings, stack: contextlib.ExitStack) -> list[TrainLoop]:
    """Every member's run directory, algorithm and loop (closed by ``stack``, last first)."""
    loops: list[TrainLoop] = []
    validator = None
    for k, ms in enumerate(members):
        rd = stack.enter_context(RunDir.claim(ms.run_dir))
        rd.write_settings(ms)
        algo = to_rllib_config(ms).build_algo()
        stack.callback(algo.stop)
        if k == 0:
            check_fits(algo, pop.size, ms)
        loop = TrainLoop(ms, rd, algo, validator=validator, show=False)
        stack.callback(loop.close)
        validator = validator or loop.validator
        loops.append(loop)
    return loops


def _run(settings: Settings, pop: PopulationSettings, loops: list[TrainLoop], parent: Path) -> dict:
    from rl_zerosync.population.pbt import Pbt

    metric = settings.run.eval_metric
    total = settings.run.iterations
    pbt = Pbt(pop, metric) if pop.pbt_every else None
    t0 = time.perf_counter()
    passes = 0
    with _Interrupt() as interrupt:
        while not all(loop.done for loop in loops) and not interrupt.requested:
            stepped = [loop for loop in loops if not loop.done]
            for loop in stepped:
                loop.step()
            it = max(loop.algo.iteration for loop in stepped)
            if any("eval" in loop.result for loop in stepped):
                passes += 1
                print(_pass_line(it, total, loops, metric, t0), flush=True)
                if pbt is not None and passes % pop.pbt_every == 0:
                    for line in pbt.exploit_explore(loops, passes, it):
                        print(line, flush=True)
        for loop in loops:  # inside the handler: a second signal waits for the checkpoints
            loop.save()
    lineage = pbt.lineage if pbt is not None else {}
    if interrupt.requested:
        report = population_report(pop, metric, _rows(pop, loops, lineage), parent, partial=True,
                                   interrupted_by=interrupt.signum)
        path = write_report(parent, report)
        print(f"population: interrupted at iteration {max(lp.algo.iteration for lp in loops)}; checkpoints "
              f"kept; {path} marked partial", flush=True)
        return report
    if settings.run.evaluate:
        for k, loop in enumerate(loops):
            report = loop.evaluate()
            print(f"member{k}: {report['summary_line']}", flush=True)
    report = population_report(pop, metric, _rows(pop, loops, lineage), parent)
    path = write_report(parent, report)
    for line in leaderboard_lines(report, metric):
        print(line, flush=True)
    print(f"population report: {path}", flush=True)
    return report
