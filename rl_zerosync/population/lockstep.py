"""P members in one program, stepped in lockstep (``rl-zerosync train`` of a config with a
``population:`` section runs it through :mod:`rl_zerosync.population.drive`).

The members (:mod:`rl_zerosync.population.members`: member k = the single run with its seed and
hyperparameters) are built in one process, on one device, and stepped in lockstep: iteration i of
every member, then iteration i + 1. One validation segment and its rule baselines are built once and
shared (the members' network shapes agree); every member validates at the same iterations, keeps
its own best checkpoint (policy only) and its checkpoints in ``<run.dir>/<run.name>/member<k>/``; the
members' metrics rows go to one table, ``<run.dir>/<run.name>/metrics.jsonl`` with a ``member`` column,
and one TensorBoard writer (``member<k>/...`` tags; :class:`~rl_zerosync.rundir.metrics_table.MetricsTable`).
After every validation pass a one-line summary of the population is printed; with ``population.pbt_every`` the exploit/explore step of
:mod:`rl_zerosync.population.pbt` runs on the members' learners. A member stopped early by
``run.early_stop_patience`` writes its checkpoint at once. At the end (or at a SIGINT/SIGTERM) every
member's final checkpoint is written, all at one iteration, which is where ``train --resume`` continues
the population from (:mod:`rl_zerosync.population.resume`); at the end each is evaluated (the test
segment, read once, for the report), and ``population.json`` (:mod:`rl_zerosync.population.report`) and the leaderboard are written.

A member here is one RLlib algorithm (its own learner and env runner; a
:class:`~rl_zerosync.population.member_algorithm.PopulationMemberDQN`, whose iteration is split around
the population's update); the members share the process, the device, the validation data and Ray.
The member dimension of an iteration (one rollout of every member's envs, one readback, one
:class:`~rl_zerosync.learner.population_update.PopulationUpdate`, one readback of every member's
metrics, one validation pass) is owned by one object,
:class:`~rl_zerosync.population.iteration.PopulationIteration`. PBT and the shards touch a member
through :class:`~rl_zerosync.population.member.Member`; the members' searchable hyperparameters are
one typed table (:class:`~rl_zerosync.population.hyperparameters.HyperparameterTable`).
"""
from __future__ import annotations

import contextlib
import os
import time

from rl_zerosync.config.settings import Settings, to_rllib_config
from rl_zerosync.population.iteration import PopulationIteration, summarize_timing
from rl_zerosync.population.memory import check_fits
from rl_zerosync.population.report import member_row
from rl_zerosync.population.space import PopulationSettings
from rl_zerosync.rundir.metrics_table import MetricsTable
from rl_zerosync.rundir.progress import Steps
from rl_zerosync.run.train import TrainLoop


def pass_line(iteration: int, total: int, values: list, metric: str, t0: float) -> str:
    """After a validation pass: the best and median member by this pass's validation metric."""
    ranked = sorted([(v, k) for k, v in enumerate(values) if v is not None and v == v], reverse=True)
    if not ranked:
        return f"population it {iteration}/{total} | {time.perf_counter() - t0:.0f}s | no member validated"
    median = ranked[len(ranked) // 2][0]
    return (f"population it {iteration}/{total} | {time.perf_counter() - t0:.0f}s | validation {metric}: best "
            f"member{ranked[0][1]} {ranked[0][0]:+.3f}, median {median:+.3f} over {len(ranked)} member(s)")


class Population:
    """The members' loops stepped in lockstep (see the module docstring); ``train_population`` drives it,
    tests step it, a shard (:mod:`rl_zerosync.population.shards`) holds one with its part of the members
    (``indices``). Built inside ``stack`` (every member's run directory, algorithm and log closed by it).
    ``table``: write the members' metrics rows into the population's one table (:attr:`table`); a shard
    passes False and hands each iteration's rows (:attr:`last_rows`) to the driver, which writes them.
    ``resume``: a resumed population's :class:`~rl_zerosync.population.resume.ResumePlan` (each member
    restored from its checkpoint; the finished ones read back, never trained or saved again)."""

    def __init__(self, settings: Settings, pop: PopulationSettings, members: list[Settings],
                 stack: contextlib.ExitStack, indices: list[int] | None = None, table: bool = True,
                 resume=None) -> None:
        from rl_zerosync.population.hyperparameters import HyperparameterTable
        from rl_zerosync.population.member import Member
        from rl_zerosync.population.pbt import Pbt

        t_build = time.perf_counter()
        self.settings, self.pop, self.parent = settings, pop, settings.run_dir
        self.indices = list(range(pop.size)) if indices is None else list(indices)
        self.metric = settings.run.eval_metric
        self._rows: list[dict] = []  # this iteration's metrics rows, appended by the members' run directories
        self.last_rows: list[dict] = []
        """The members' metrics rows of the last iteration (``member`` column), in member order."""
        self.loops = _build(members, pop, stack, self.indices, self._rows,
                            resume.checkpoints if resume is not None else None)
        self.read_back = set(resume.finished) if resume is not None else set()
        """Members restored as finished: read back, not trained, their checkpoints not written again."""
        self.hyperparameters = HyperparameterTable(members)
        """The members' searchable hyperparameters, one typed ``[P]`` table (PBT writes it)."""
        self.members = [Member(loop, slot, self.hyperparameters) for slot, loop in enumerate(self.loops)]
        """Each member as PBT and the shards touch it (:class:`~rl_zerosync.population.member.Member`)."""
        self.member_iteration = PopulationIteration(self.loops, pop.update, pop.rollout)
        """The member dimension of every iteration: one rollout, one update, one readback of each."""
        self.update, self.rollout = self.member_iteration.update, self.member_iteration.rollout
        self.update_line, self.rollout_line = self.member_iteration.update_line, self.member_iteration.rollout_line
        self.timing = self.member_iteration.timing
        self.pbt = Pbt(pop, self.metric) if pop.pbt_every else None
        self.passes = 0
        purge = resume.purge_step if resume is not None else None
        self.table = MetricsTable(self.parent).open(purge_step=purge) if table else None
        """The population's one metrics table and TensorBoard writer (None in a shard)."""
        if self.table is not None:
            stack.callback(self.table.close)
        self._t0 = time.perf_counter()
        self.timing["build_s"] = self._t0 - t_build

    @property
    def rollouts_read_together(self) -> bool:
        """Whether the last iteration read every member's rollout back in one readback."""
        return self.member_iteration.rollouts_read_together

    @property
    def done(self) -> bool:
        return all(loop.done for loop in self.loops)

    @property
    def lineage(self) -> dict[int, list]:
        return self.pbt.lineage if self.pbt is not None else {}

    def step_members(self) -> bool:
        """One iteration of every member still training (:meth:`PopulationIteration.step
        <rl_zerosync.population.iteration.PopulationIteration.step>`), then the members' metrics rows into
        the one table (their time counted in ``timing["logs_checkpoints_s"]``); True when it ended with a
        validation pass."""
        training = [loop for loop in self.loops if not loop.done]
        validated = self.member_iteration.step()
        t = time.perf_counter()
        for loop in training:
            if loop.stopped:  # stopped early now: its final checkpoint at once, so a resume reads it back
                loop.save()
        self.last_rows = list(self._rows)
        self._rows.clear()
        if self.table is not None:
            self.table.write(self.last_rows)
        self.timing["logs_checkpoints_s"] += time.perf_counter() - t
        return validated

    def timing_summary(self) -> dict:
        """``population.json``'s ``timing``: :attr:`timing` with the training rates, the CUDA graphs the
        population update captured (``graph_captures``) and a one-line summary."""
        return summarize_timing({**self.timing, "graph_captures": self.graph_captures})

    @property
    def graph_captures(self) -> int:
        """CUDA graphs the population update captured so far (a PBT step with ``batched`` adds none)."""
        return self.member_iteration.graph_captures

    def values(self) -> list:
        """This iteration's validation metric per member here (None: it did not validate)."""
        return [loop.result.get("eval", {}).get(f"validation_{self.metric}") for loop in self.loops]

    @property
    def iteration(self) -> int:
        return max(loop.algo.iteration for loop in self.loops)

    def step(self) -> list[str]:
        """:meth:`step_members`, then (after a validation pass) the summary line and PBT when due;
        returns the lines printed."""
        from rl_zerosync.population.pbt import LocalMembers

        lines = []
        if self.step_members():
            self.passes += 1
            values = self.values()
            lines.append(pass_line(self.iteration, self.settings.run.iterations, values, self.metric, self._t0))
            if self.pbt is not None and self.passes % self.pop.pbt_every == 0:
                lines += self.pbt.exploit_explore(LocalMembers(self.members), values, self.passes, self.iteration)
        for line in lines:
            print(line, flush=True)
        return lines

    def save(self) -> None:
        """Every member's final checkpoint (a member read back at a resume keeps the one it has)."""
        for k, loop in zip(self.indices, self.loops):
            if k not in self.read_back:
                loop.save()

    def evaluate_members(self, full: frozenset[int] = frozenset()) -> list[str]:
        """Every member's end-of-run evaluation (the test segment, read once); their summary lines. By
        default one pass over all members (:mod:`rl_zerosync.evaluation.population_pass`: each segment
        walked once for every member, the rules and the oracle once), whole for the members in ``full``
        (e.g. the one selected on validation), lean for the others. With ``population.eval_processes``
        above 1 every member's whole evaluation instead, in that many spawned processes at once (each
        member's ``evaluate_checkpoint`` of its own run directory)."""
        from rl_zerosync.evaluation.population_pass import evaluate_members
        from rl_zerosync.population.space import eval_processes
        from rl_zerosync.rundir.checkpoints import best_or_last
        from rl_zerosync.rundir.run_dir import EVALUATION_NAMES

        procs = eval_processes(self.pop.eval_processes, len(self.loops))
        if procs > 1:
            reports = _evaluate_apart(self.loops, procs, Steps("evaluate member", total=len(self.loops), eta=True),
                                      self.indices)
        else:
            for loop in self.loops:
                loop.run_dir.record(*EVALUATION_NAMES)
            which = [best_or_last(loop.run_dir.path, loop.settings.run.eval_checkpoint) for loop in self.loops]
            whole = [k for k in self.indices if k in full]
            with Steps("evaluate members", total=1).step(f"{len(self.loops)} in one pass (whole: {whole or 'none'})"):
                reports = evaluate_members([loop.run_dir.path for loop in self.loops], which,
                                           full=[k in full for k in self.indices])
        return [f"member{k}: {r['summary_line']}" for k, r in zip(self.indices, reports)]

    def rows(self, lineage: dict[int, list]) -> list[dict]:
        """``population.json``'s row of every member here."""
        return [member_row(self.pop.members[k], loop.selection, loop.run_dir.path, lineage.get(k, []))
                for k, loop in zip(self.indices, self.loops)]


def _evaluate_apart(loops: list[TrainLoop], procs: int, steps: Steps, indices: list[int]) -> list[dict]:
    """Every member's end-of-run evaluation, ``procs`` spawned processes at once; the reports by member,
    a progress line of ``steps`` as each is collected (in member order)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from rl_zerosync.rundir.checkpoints import best_or_last
    from rl_zerosync.rundir.run_dir import EVALUATION_DIR, EVALUATION_NAMES

    for loop in loops:
        loop.run_dir.record(*EVALUATION_NAMES)
    jobs = [(str(loop.run_dir.path), str(loop.run_dir.path / EVALUATION_DIR),
             best_or_last(loop.run_dir.path, loop.settings.run.eval_checkpoint)) for loop in loops]
    threads = max(1, (os.cpu_count() or 1) // procs)  # the cores shared out: no oversubscribed thread pools
    with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_threads,
                             initargs=(threads,)) as pool:
        reports = []
        for k, future in zip(indices, [pool.submit(_evaluate_one, job) for job in jobs]):
            with steps.step(f"member{k} ({procs} processes)"):
                reports.append(future.result())
        return reports


def _worker_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _evaluate_one(job: tuple[str, str, str]) -> dict:
    """One member's ``evaluate_checkpoint`` in an evaluation process (:func:`_evaluate_apart`)."""
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

    path, out_dir, which = job
    return evaluate_checkpoint(path, out_dir=out_dir, which=which, quiet=True)


def _build(members: list[Settings], pop: PopulationSettings, stack: contextlib.ExitStack, indices: list[int],
           rows: list, checkpoints: dict | None = None) -> list[TrainLoop]:
    """Every member's run directory (a :class:`~rl_zerosync.population.members.MemberRunDir` logging into
    ``rows``), algorithm (:class:`~rl_zerosync.population.member_algorithm.PopulationMemberDQN`) and loop
    (closed by ``stack``, last first). ``checkpoints``: a resume (member index -> the checkpoint it is
    restored from; a member without one starts from scratch)."""
    from rl_zerosync.population.member_algorithm import PopulationMemberDQN
    from rl_zerosync.population.members import MemberRunDir

    loops: list[TrainLoop] = []
    validator = None
    for k, (index, ms) in enumerate(zip(indices, members)):
        rd = stack.enter_context(MemberRunDir.claim(ms.run_dir, resume=checkpoints is not None,
                                                    hint="pass --overwrite to train the population again"))
        rd.bind(index, rows)
        rd.write_settings(ms)
        config = to_rllib_config(ms)
        config.algo_class = PopulationMemberDQN  # a ZeroSyncDQN whose iteration the population splits
        algo = config.build_algo()
        stack.callback(algo.stop)
        if k == 0:
            check_fits(algo, pop.size, ms)
        ckpt = checkpoints.get(index) if checkpoints is not None else None
        loop = TrainLoop(ms, rd, algo, ckpt, validator=validator, show=False)
        stack.callback(loop.close)
        validator = validator or loop.validator
        loops.append(loop)
    return loops
