"""A population member's algorithm: :class:`~rl_zerosync.algorithm.ZeroSyncDQN` with its iteration in
two parts, so that the population runs the part in between for every member at once.

``ZeroSyncDQN`` knows one run. A member of a population (:mod:`rl_zerosync.population.lockstep`) is
built as :class:`PopulationMemberDQN` (the same config, the same checkpoints: RLlib's state of a
``ZeroSyncDQN``), whose iteration the population drives as:

1. :meth:`~PopulationMemberDQN.launch_rollout` (optional): this iteration's rollout launched on the
   same-process GPU env runner without waiting (the population reads every member's rollout back at
   once, :class:`~rl_zerosync.env_runner.population_readback.PopulationReadback`);
2. :meth:`~PopulationMemberDQN.sample_and_add`: the ``sample`` and ``add`` phases of a plain
   iteration; returns the member's K (the one formula, ``ZeroSyncDQN``'s);
3. the population's one update of every member (:class:`~rl_zerosync.learner.population_update.
   PopulationUpdate`) and one readback of every member's guard metrics, handed to each member with
   :meth:`~PopulationMemberDQN.set_metrics_pack`;
4. ``train()``: RLlib's iteration, whose ``training_step`` only records the metrics of that pack (the
   learner results and K) and syncs the runner's weights.
"""
from __future__ import annotations

from typing import Optional

import torch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, ENV_RUNNER_SAMPLING_TIMER, REPLAY_BUFFER_ADD_DATA_TIMER

from rl_zerosync.algorithm import ADD, SAMPLE, TRAIN, IterationSteps, ZeroSyncDQN

__all__ = ["PopulationMemberDQN"]


class PopulationMemberDQN(ZeroSyncDQN):
    """A population member's algorithm (see the module docstring)."""

    @override(ZeroSyncDQN)
    def setup(self, config) -> None:
        self._pending: Optional[int] = None  # this iteration's K, between sample_and_add and train()
        self._pack: Optional[list] = None  # this iteration's guard metrics, from the population's readback
        self._launched = None  # the runner of launch_rollout, until sample_and_add
        super().setup(config)

    def launch_rollout(self):
        """Launch this iteration's rollout on the same-process GPU env runner without waiting; returns its
        :class:`DeviceRollout`, or None when there is no such runner (:meth:`sample_and_add` then samples
        as a plain iteration does)."""
        runner = self._same_process_runner()
        if runner is None or runner.settings.overlap or self._pending is not None:
            return None
        self._wait_for_env_runners()
        runner.start_device_sample()
        self._launched = runner
        return runner.rollout

    def sample_and_add(self, host_leading: Optional[torch.Tensor] = None) -> int:
        """The ``sample`` and ``add`` phases of a plain iteration; returns this iteration's K. After
        :meth:`launch_rollout` the rollout is finished from ``host_leading`` (its leading bytes, read back
        with every member's) and the ``sample`` phase times that part only."""
        learner = self.local_learner
        if learner is None or self._pending is not None:
            raise RuntimeError("sample_and_add: needs the learner in this process (num_learners 0) "
                               "and no iteration half done")
        steps = self._plain_steps()
        runner, self._launched = self._launched, None
        if runner is None:
            self._wait_for_env_runners()
        with self._phase(SAMPLE, ENV_RUNNER_SAMPLING_TIMER):
            if runner is not None:
                rollouts, runner_metrics = [runner.finish_device_sample(host_leading)], [runner.get_metrics()]
            else:
                rollouts, runner_metrics = steps.sample(None)
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        with self._phase(ADD, REPLAY_BUFFER_ADD_DATA_TIMER):
            self._add_to_replay(rollouts)
        k = self._updates(*steps.learn_from(runner_metrics))
        self._pending, self._pack = k, None
        return k

    def set_metrics_pack(self, values: list) -> None:
        """This member's guard pack, read back by its population after the updates of this iteration."""
        self._pack = list(values)

    @override(ZeroSyncDQN)
    def training_step(self) -> None:
        """After :meth:`sample_and_add`: the second part (the metrics of the population's readback, the
        weight sync); otherwise a plain ``ZeroSyncDQN`` iteration."""
        if self._pending is None:
            super().training_step()
            return
        k, self._pending = self._pending, None
        learner = self.local_learner

        def read(_k):
            if self._pack is None:
                raise RuntimeError("a population member trained without its metrics pack (set_metrics_pack)")
            learner.collect_metrics(values=self._pack)
            self._pack = None
            return [learner.metrics.reduce()]

        self._iterate(IterationSteps(order=(TRAIN,), learn_from=lambda _m: (0, False), plan_first=True,
                                     sample=lambda _k: ([], []), train=read, planned=k))
