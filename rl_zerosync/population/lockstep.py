"""P members in one program, stepped in lockstep (``rl-zerosync train`` of a config with a
``population:`` section runs it through :mod:`rl_zerosync.population.drive`).

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

A member here is one RLlib algorithm (its own learner and env runner; a
:class:`~rl_zerosync.population.member_algorithm.PopulationMemberDQN`, whose iteration is split around
the population's update); the members share the
process, the device, the validation data and Ray, and one learner update
(:class:`~rl_zerosync.learner.population_update.PopulationUpdate`: their learners' state stacked
with a member dimension, ``population.update`` batched or per member, one readback of all members'
metrics per iteration). The members' envs are stepped as one batch of P x N envs in one rollout
(:class:`~rl_zerosync.env_runner.population_rollout.PopulationRollout`, ``population.rollout``
together); each member's env runner keeps its own counts, metrics and weights.
"""
from __future__ import annotations

import contextlib
import os
import time

from rl_zerosync.config.settings import Settings, to_rllib_config
from rl_zerosync.population.memory import check_fits
from rl_zerosync.population.report import member_row
from rl_zerosync.population.space import PopulationSettings
from rl_zerosync.rundir.progress import Steps
from rl_zerosync.rundir.run_dir import RunDir
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
    (``indices``). Built inside ``stack`` (every member's run directory, algorithm and log closed by it)."""

    def __init__(self, settings: Settings, pop: PopulationSettings, members: list[Settings],
                 stack: contextlib.ExitStack, indices: list[int] | None = None) -> None:
        from rl_zerosync.population.hyperparameters import HyperparameterTable
        from rl_zerosync.population.member import Member
        from rl_zerosync.population.pbt import Pbt

        t_build = time.perf_counter()
        self.settings, self.pop, self.parent = settings, pop, settings.run_dir
        self.indices = list(range(pop.size)) if indices is None else list(indices)
        self.metric = settings.run.eval_metric
        self.loops = _build(members, pop, stack)
        self.hyperparameters = HyperparameterTable(members)
        """The members' searchable hyperparameters, one typed ``[P]`` table (PBT writes it)."""
        self.members = [Member(loop, slot, self.hyperparameters) for slot, loop in enumerate(self.loops)]
        """Each member as PBT and the shards touch it (:class:`~rl_zerosync.population.member.Member`)."""
        self.update, why = _population_update(self.loops, pop.update)
        self.rollout, why_rollout = _population_rollout(self.loops, pop.rollout, self.update)
        self._readback = None  # (the rollouts it reads, PopulationReadback)
        self.timing: dict = {**{key: 0.0 for key in TIMING_KEYS}, "iteration_train_s": []}
        """Wall seconds of this process's population iterations by part, summed (``population.json``'s
        ``timing``), with the env steps sampled and member updates run."""
        self.update_line = (f"learner update: {self.update.mode}, one population update for {len(self.loops)} "
                            f"member(s)" if self.update is not None else f"learner update: each member alone ({why})")
        """One line: how the members' learner updates run."""
        self.rollout_line = (f"rollouts: together, {len(self.loops)} member(s) x "
                             f"{self.rollout.num_envs} envs as one batch"
                             f"{' (batched Q forward)' if self.rollout.batched else ''}"
                             if self.rollout is not None else f"rollouts: each member's runner alone ({why_rollout})")
        """One line: how the members' rollouts run."""
        self.pbt = Pbt(pop, self.metric) if pop.pbt_every else None
        self.passes = 0
        self._t0 = time.perf_counter()
        self.timing["build_s"] = self._t0 - t_build

    @property
    def rollouts_read_together(self) -> bool:
        """Whether the last iteration read every member's rollout back in one readback."""
        return self._readback is not None

    @property
    def done(self) -> bool:
        return all(loop.done for loop in self.loops)

    @property
    def lineage(self) -> dict[int, list]:
        return self.pbt.lineage if self.pbt is not None else {}

    def step_members(self) -> bool:
        """One iteration of every member still training; True when it ended with a validation pass.

        With the population's learner update (:attr:`update`): every member samples and adds its
        rollout, then every member's updates run at once, then one readback of every member's
        metrics, then each member completes its iteration (validation, checkpoints, logs)."""
        stepped = [loop for loop in self.loops if not loop.done]
        for loop in self.loops:
            if loop.done:  # stopped early: its last pass is not this iteration's
                loop.result.pop("eval", None)
        clock = _Clock(self.timing)
        if self.update is not None:
            hosts = self._rollouts([loop for loop in self.loops if not loop.done])
            ks = [loop.algo.sample_and_add(hosts.get(id(loop))) if not loop.done else 0 for loop in self.loops]
            clock.lap("sample_add_s")
            self.update.train(ks)
            for loop, pack in zip(self.loops, self.update.collect()):
                if not loop.done:
                    loop.algo.set_metrics_pack(pack)
            clock.lap("update_s")
            self.timing["env_steps"] += sum(loop.algo.env_runner.num_envs * loop.algo.env_runner.num_steps
                                            for loop in stepped if hasattr(loop.algo.env_runner, "num_steps"))
            self.timing["member_updates"] += sum(ks)
        results = [loop.advance() for loop in stepped]
        clock.lap("train_rest_s")
        evals = self._validate([loop for loop in stepped if loop.validation_due(loop.algo.iteration)])
        clock.lap("validation_s")
        for loop, result in zip(stepped, results):
            loop.conclude(result, evals.get(id(loop)))
        clock.lap("logs_checkpoints_s")
        self.timing["iterations"] += 1
        self.timing["iteration_train_s"].append(clock.since_start(("sample_add_s", "update_s", "train_rest_s")))
        return any("eval" in loop.result for loop in stepped)

    def _rollouts(self, active: list[TrainLoop]) -> dict[int, object]:
        """Launch every active member's rollout, then read them all back at once
        (:class:`~rl_zerosync.env_runner.population_readback.PopulationReadback`); ``{id(loop): host bytes}``
        (empty when the members' runners are not same-process device runners: each then samples alone)."""
        from rl_zerosync.env_runner.population_readback import PopulationReadback

        rollouts = [loop.algo.launch_rollout() for loop in active]
        if not rollouts or any(ro is None for ro in rollouts):
            return {}
        if self.rollout is not None:
            self.rollout.launch()  # the members' requests, as one rollout of all their envs
        key = tuple(id(ro) for ro in rollouts)
        if self._readback is None or self._readback[0] != key:
            self._readback = (key, PopulationReadback(rollouts))
        return {id(loop): host for loop, host in zip(active, self._readback[1].read())}

    def _validate(self, due: list[TrainLoop]) -> dict[int, dict]:
        """This iteration's validation of the members ``due``, in one pass of all of them (their shared
        validator's :meth:`~rl_zerosync.evaluation.validation.Validator.validate_population`, batched when
        the learner update is); ``{id(loop): metrics}``."""
        if not due or due[0].validator is None:
            return {}
        batched = self.update is not None and self.update.mode == "batched"
        evs = due[0].validator.validate_population([loop.algo for loop in due], batched=batched)
        return {id(loop): ev for loop, ev in zip(due, evs)}

    def timing_summary(self) -> dict:
        """``population.json``'s ``timing``: :attr:`timing` with the training rates, the CUDA graphs the
        population update captured (``graph_captures``) and a one-line summary."""
        return summarize_timing({**self.timing, "graph_captures": self.graph_captures})

    @property
    def graph_captures(self) -> int:
        """CUDA graphs the population update captured so far (a PBT step with ``batched`` adds none)."""
        return self.update.graph_captures if self.update is not None else 0

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
        """Every member's final checkpoint."""
        for loop in self.loops:
            loop.save()

    def evaluate_members(self) -> list[str]:
        """Every member's end-of-run evaluation (the test segment, read once); their summary lines. With
        ``population.eval_processes`` above 1 the evaluations run in that many spawned processes at once
        (each member's ``evaluate_checkpoint`` of its own run directory: the same files)."""
        from rl_zerosync.population.space import eval_processes

        procs = eval_processes(self.pop.eval_processes, len(self.loops))
        steps = Steps("evaluate member", total=len(self.loops), eta=True)
        if procs <= 1:
            reports = []
            for k, loop in zip(self.indices, self.loops):
                with steps.step(f"member{k}"):
                    reports.append(loop.evaluate(quiet=True))
        else:
            reports = _evaluate_apart(self.loops, procs, steps, self.indices)
        return [f"member{k}: {r['summary_line']}" for k, r in zip(self.indices, reports)]

    def rows(self, lineage: dict[int, list]) -> list[dict]:
        """``population.json``'s row of every member here."""
        return [member_row(self.pop.members[k], loop.selection, loop.run_dir.path, lineage.get(k, []))
                for k, loop in zip(self.indices, self.loops)]


TIMING_KEYS = ("build_s", "iterations", "sample_add_s", "update_s", "train_rest_s", "validation_s",
               "logs_checkpoints_s", "env_steps", "member_updates")


def summarize_timing(timing: dict) -> dict:
    """``timing`` (``build_s``: seconds to build the members, their population update and rollout; wall
    seconds by part, summed over iterations; ``iteration_train_s``: each iteration's sampling, adding and
    training seconds; env steps; member updates; ``graph_captures``) plus ``training_s`` (every part
    but validation and logs/checkpoints), ``env_steps_per_s`` (env steps / training_s) and ``line``."""
    out = dict(timing)
    train = sum(timing.get(k, 0.0) for k in ("sample_add_s", "update_s", "train_rest_s"))
    out["training_s"] = train
    out["env_steps_per_s"] = timing.get("env_steps", 0) / train if train > 0 else None
    rate = f"{out['env_steps_per_s']:,.0f} env steps/s with training" if out["env_steps_per_s"] else "no training"
    out["line"] = (f"population timing: build {timing.get('build_s', 0.0):.1f} s, "
                   f"{int(timing.get('iterations', 0))} iterations, training {train:.1f} s "
                   f"({rate}; sample+add {timing.get('sample_add_s', 0.0):.1f} s, updates "
                   f"{timing.get('update_s', 0.0):.1f} s), validation {timing.get('validation_s', 0.0):.1f} s, "
                   f"{int(timing.get('graph_captures', 0))} graph capture(s)")
    return out


class _Clock:
    """Adds the wall seconds since the last lap to ``timing[key]`` (the device synchronized first, so a
    part's queued GPU work is counted in it)."""

    def __init__(self, timing: dict) -> None:
        self.timing, self.t = timing, time.perf_counter()
        self.laps: dict = {}

    def since_start(self, keys) -> float:
        """The seconds of this clock's laps ``keys``."""
        return sum(self.laps.get(k, 0.0) for k in keys)

    def lap(self, key: str) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()  # host read: timing boundary, once per population phase
        now = time.perf_counter()
        self.timing[key] += now - self.t
        self.laps[key] = self.laps.get(key, 0.0) + now - self.t
        self.t = now


def _population_update(loops: list[TrainLoop], mode: str):
    """``(PopulationUpdate, None)`` over the members' learners, or ``(None, why not)``: it needs each
    member's learner and env runner in this process (``num_learners`` 0, ``num_env_runners`` 0) and no
    ``runner.overlap``."""
    from rl_zerosync.learner.population_update import PopulationUpdate

    for k, loop in enumerate(loops):
        a = loop.settings.algo
        if a.num_learners or a.num_env_runners:
            return None, f"member {k} has num_learners {a.num_learners}, num_env_runners {a.num_env_runners}; needs 0"
        if loop.settings.runner.typed.overlap:
            return None, f"member {k} has runner.overlap on"
    return PopulationUpdate([loop.algo.local_learner for loop in loops], mode=mode), None


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


def _population_rollout(loops: list[TrainLoop], mode: str, update):
    """``(PopulationRollout, None)`` stepping every member's envs as one batch, or ``(None, why not)``:
    ``population.rollout`` together, the population's learner update (same-process runners), and
    members' rollouts that can be one batch (the trading env, routed or flat actions, one shape). Its Q
    forward is batched when the update is."""
    from rl_zerosync.env_runner.population_rollout import PopulationRollout, together_blocker
    from rl_zerosync.learner.stacked_q import StackedQ

    if mode != "together":
        return None, f"population.rollout {mode}"
    if update is None:
        return None, "the members' learner updates run alone"
    rollouts = [getattr(loop.algo.env_runner, "rollout", None) for loop in loops]
    if any(ro is None for ro in rollouts):
        return None, "a member has no device rollout in this process"
    why = together_blocker(rollouts)
    if why is not None:
        return None, why
    stacked = StackedQ([ro.module for ro in rollouts]) if update.mode == "batched" else None
    return PopulationRollout(rollouts, stacked=stacked), None


def _build(members: list[Settings], pop: PopulationSettings, stack: contextlib.ExitStack) -> list[TrainLoop]:
    """Every member's run directory, algorithm (:class:`~rl_zerosync.population.member_algorithm.
    PopulationMemberDQN`) and loop (closed by ``stack``, last first)."""
    from rl_zerosync.population.member_algorithm import PopulationMemberDQN

    loops: list[TrainLoop] = []
    validator = None
    for k, ms in enumerate(members):
        rd = stack.enter_context(RunDir.claim(ms.run_dir, hint="pass --overwrite to train the population again"))
        rd.write_settings(ms)
        config = to_rllib_config(ms)
        config.algo_class = PopulationMemberDQN  # a ZeroSyncDQN whose iteration the population splits
        algo = config.build_algo()
        stack.callback(algo.stop)
        if k == 0:
            check_fits(algo, pop.size, ms)
        loop = TrainLoop(ms, rd, algo, validator=validator, show=False)
        stack.callback(loop.close)
        validator = validator or loop.validator
        loops.append(loop)
    return loops
