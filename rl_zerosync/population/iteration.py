"""One iteration of a population's members, owned by one object (:class:`PopulationIteration`).

Every member is one RLlib algorithm (:class:`~rl_zerosync.population.member_algorithm.PopulationMemberDQN`,
its own learner, env runner and run directory), but the member dimension of an iteration lives here:

1. one rollout launch of every member's envs (one batch of P x N envs,
   :class:`~rl_zerosync.env_runner.population_rollout.PopulationRollout`, or each runner's own) and one
   readback of all of them (:class:`~rl_zerosync.env_runner.population_readback.PopulationReadback`);
2. each member's replay add from its row, and its K from the one formula (``ZeroSyncDQN``'s);
3. one :class:`~rl_zerosync.learner.population_update.PopulationUpdate` of every member and one readback
   of every member's guard metrics;
4. each member's own completion (RLlib's ``train()``: its learner results, counters and weight sync;
   then validation of every member due in one pass, its checkpoints and its log row).

The wall seconds of every part are summed in :attr:`PopulationIteration.timing` (``population.json``'s
``timing``, :func:`summarize_timing`).
"""
from __future__ import annotations

import time

from rl_zerosync.run.train import TrainLoop

__all__ = ["PopulationIteration", "TIMING_KEYS", "summarize_timing"]


class PopulationIteration:
    """The member dimension of a population's iteration (see the module docstring).

    Args:
        loops: Every member's :class:`~rl_zerosync.run.train.TrainLoop`, in member order.
        update: ``population.update`` (``auto``, ``batched`` or ``per_member``).
        rollout: ``population.rollout`` (``together`` or ``apart``).
    """

    def __init__(self, loops: list[TrainLoop], update: str, rollout: str) -> None:
        self.loops = loops
        self.update, why = _population_update(loops, update)
        self.rollout, why_rollout = _population_rollout(loops, rollout, self.update)
        self._readback = None  # (the rollouts it reads, PopulationReadback)
        self.timing: dict = {**{key: 0.0 for key in TIMING_KEYS}, "iteration_train_s": []}
        """Wall seconds of this process's population iterations by part, summed (``population.json``'s
        ``timing``), with the env steps sampled and member updates run."""
        self.update_line = (f"learner update: {self.update.mode}, one population update for {len(loops)} "
                            f"member(s)" if self.update is not None else f"learner update: each member alone ({why})")
        """One line: how the members' learner updates run."""
        self.rollout_line = (f"rollouts: together, {len(loops)} member(s) x "
                             f"{self.rollout.num_envs} envs as one batch"
                             f"{' (batched Q forward)' if self.rollout.batched else ''}"
                             if self.rollout is not None else f"rollouts: each member's runner alone ({why_rollout})")
        """One line: how the members' rollouts run."""

    @property
    def rollouts_read_together(self) -> bool:
        """Whether the last iteration read every member's rollout back in one readback."""
        return self._readback is not None

    @property
    def graph_captures(self) -> int:
        """CUDA graphs the population update captured so far (a PBT step with ``batched`` adds none)."""
        return self.update.graph_captures if self.update is not None else 0

    def step(self) -> bool:
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
