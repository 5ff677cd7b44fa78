"""ZeroSyncDQN: RLlib's DQN with GPU env runners, learner-owned device replay and graphed updates.

One training iteration (``training_step``):

1. sample one rollout from every env runner (``GPUEnvRunner``; local or remote Ray actors); a
   remote runner puts its rollout in the Ray object store itself and returns only the reference
   and its metrics, so the rollout travels runner -> learner without passing through the driver;
2. add the rollouts to the learners' device replay (same process and device: the rollout stays on
   the device; otherwise one host->device copy per rollout); with several learners each learner
   takes a shard (rollout i goes to learner ``i % num_learners``) and fetches only its shard; with
   fewer rollouts than learners every rollout's envs are split instead (learner r takes env
   columns ``r::num_learners`` of each rollout), so no transition is stored twice;
3. once ``num_steps_sampled_before_learning_starts`` env steps were sampled, run K updates per
   learner with no host read between them (``K = replay_ratio * env steps / (batch * learners)``,
   at least 1: ``replay_ratio`` counts the transitions trained by all learners together);
4. one metrics readback per learner;
5. weights to the runners once (device-to-device when runner and learner share the process).
"""
from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Optional

import ray
import torch
from ray.rllib.algorithms.dqn.dqn import DQN, DQNConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import NotProvided
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from rl_zerosync.learner.replay import ROLLOUT_KEYS as REPLAY_KEYS

NUM_UPDATES_PER_ITERATION = "num_updates_per_iteration"
REPLAY_SHARDS = "zerosync_replay_shards"
"""Algorithm state key: every DDP learner's replay state, in rank order."""
PHASE_TIMES = "phase_s"
"""Result key: this iteration's seconds per phase (sample, add, train, sync_weights, and the
learners' slowest rollout fetch / replay add); RLlib's ``timers`` are smoothed over iterations."""


class ZeroSyncDQNConfig(DQNConfig):
    """DQNConfig whose defaults are the zero-sync learner, the GPU env runner and the Q module.

    Extra setting (``training(replay_ratio=...)``): trained transitions per sampled env step.
    """

    def __init__(self, algo_class: Optional[type] = None):
        super().__init__(algo_class=algo_class or ZeroSyncDQN)
        from rl_zerosync.env_runner import GPUEnvRunner

        self.replay_ratio = 1.0
        self.env_runner_cls = GPUEnvRunner
        # The learners own the replay (on their device); RLlib's episode buffer stays tiny.
        self.replay_buffer_config = {
            "type": "EpisodeReplayBuffer",
            "capacity": 1,
        }

    @override(DQNConfig)
    def training(self, *, replay_ratio: Any = NotProvided, **kwargs) -> "ZeroSyncDQNConfig":
        super().training(**kwargs)
        if replay_ratio is not NotProvided:
            self.replay_ratio = replay_ratio
        return self

    @override(DQNConfig)
    def validate(self) -> None:
        super().validate()
        if not (isinstance(self.replay_ratio, (int, float)) and self.replay_ratio > 0):
            raise ValueError(f"replay_ratio must be a number > 0, got {self.replay_ratio!r}")

    @override(DQNConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rl_zerosync.module import ZeroSyncQModule

        return RLModuleSpec(module_class=ZeroSyncQModule, model_config=self.model_config)

    @override(DQNConfig)
    def get_default_learner_class(self):
        from rl_zerosync.learner import ZeroSyncDQNTorchLearner

        return ZeroSyncDQNTorchLearner


def _values(results) -> list:
    """Values of remote learner calls; re-raises the first remote error (e.g. TrainingHalted)."""
    values = []
    for result in results:
        value = result.get()
        if not result.ok:
            raise value
        values.append(value)
    return values


def updates_for(env_steps: int, replay_ratio: float, batch_size: int) -> int:
    """K updates for ``env_steps`` new env steps: ``max(1, round(ratio * steps / batch))``.

    ``batch_size`` is the global batch of one update (per-learner batch x number of learners).
    """
    return max(1, int(round(replay_ratio * env_steps / batch_size)))


ROLLOUT_PUT_TIMER = "rollout_put_timer"
"""Remote runner: time to put one rollout into the object store."""
ROLLOUT_FETCH_TIMER = "rollout_fetch_timer"
"""Learners (slowest): seconds to get their shard's rollouts from the object store."""
REPLAY_ADD_TIMER = "replay_add_timer"
"""Learners (slowest): seconds to add their shard to the device replay (host staging + enqueued copy)."""


def _sample_to_object_store(runner) -> tuple:
    """On a remote runner: one rollout into the object store; returns (reference, metrics)."""
    rollout = runner.sample()
    with runner.metrics.log_time(ROLLOUT_PUT_TIMER, reduce="mean", window=1):
        # numpy columns: zero-copy out of the object store on the learner's node. Only what the
        # replay stores travels (not the factored actions).
        ref = ray.put({k: rollout[k].numpy() for k in REPLAY_KEYS})
    return ref, runner.get_metrics()


def _as_rollout(item) -> dict:
    """A rollout dict of tensors, fetching it from the object store if it is a reference."""
    if not isinstance(item, ray.ObjectRef):
        return item
    arrays = ray.get(item)
    with warnings.catch_warnings():
        # Object-store arrays are read-only; the replay only reads them (one copy to the device).
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return {k: torch.from_numpy(v) for k, v in arrays.items()}


def _env_shard(cols: dict, rank: int, world: int, num_rollouts: int) -> dict:
    """Env columns ``rank::world`` of a ``[T, N, ...]`` rollout (views); ValueError when ``N < world``."""
    n = int(cols["rewards"].shape[1])
    if n < world:
        raise ValueError(
            f"ZeroSyncDQN: {num_rollouts} rollout(s) for {world} learners: with fewer rollouts than learners "
            f"(num_env_runners < num_learners) each rollout's envs are split across the learners, which needs "
            f"num_envs_per_env_runner >= num_learners, got a rollout of {n} env(s); raise "
            f"num_envs_per_env_runner or num_env_runners, or lower num_learners"
        )
    return {k: (v[:, rank::world] if isinstance(v, torch.Tensor) and v.dim() >= 2 else v) for k, v in cols.items()}


class ZeroSyncDQN(DQN):
    """DQN whose ``training_step`` feeds learner-owned device replay and graph-replayed updates."""

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> ZeroSyncDQNConfig:
        return ZeroSyncDQNConfig()

    @override(DQN)
    def setup(self, config) -> None:
        """RLlib's setup; when remote env runners die in their constructors, the error names their
        root cause instead of RLlib's ``IndexError`` (:mod:`rl_zerosync.runner_errors`)."""
        from rl_zerosync.runner_errors import raise_root_cause, runner_root_causes

        with runner_root_causes() as errors:
            try:
                super().setup(config)
            except Exception as err:
                raise_root_cause(err, errors)
                raise

    # ---------------------------------------------------------------- helpers
    def _same_process_runner(self):
        """The local GPU env runner when it and the (only) learner live in this process, else None."""
        if self.env_runner_group is None or self.env_runner_group.num_remote_env_runners() > 0:
            return None
        if not self.learner_group.is_local:
            return None
        runner = self.env_runner
        return runner if hasattr(runner, "sample_device") else None

    def _sample(self) -> tuple[list, list]:
        """One rollout per runner: (list of rollouts, list of runner metrics dicts)."""
        runner = self._same_process_runner()
        if runner is not None:
            # Same process and device as the learner: the rollout stays on the device.
            return [runner.sample_device()], [runner.get_metrics()]
        if self.env_runner_group.num_remote_env_runners() == 0:
            runner = self.env_runner
            return [runner.sample()], [runner.get_metrics()]
        results = self.env_runner_group.foreach_env_runner(
            _sample_to_object_store,
            local_env_runner=False,
            timeout_seconds=self.config.sample_timeout_s,
        )
        return [ref for ref, _ in results], [metrics for _, metrics in results]

    def _add_to_replay(self, rollouts: list) -> None:
        def add_shard(learner, _rollouts=rollouts):
            dist = torch.distributed
            ddp = dist.is_available() and dist.is_initialized()
            rank, world = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
            # Round-robin shards of whole rollouts; with fewer rollouts than learners every learner
            # takes its env columns r::world of every rollout (each transition lands on one rank).
            split = len(_rollouts) < world
            fetch = add = 0.0
            for i, rollout in enumerate(_rollouts):
                if split or i % world == rank:
                    t0 = time.perf_counter()
                    cols = _as_rollout(rollout)
                    if split:
                        cols = _env_shard(cols, rank, world, len(_rollouts))
                    t1 = time.perf_counter()
                    learner.replay.add(cols)
                    fetch, add = fetch + t1 - t0, add + time.perf_counter() - t1
            return fetch, add

        times = _values(self.learner_group.foreach_learner(add_shard))
        self.metrics.log_value((PHASE_TIMES, ROLLOUT_FETCH_TIMER), max(t[0] for t in times), window=1)
        self.metrics.log_value((PHASE_TIMES, REPLAY_ADD_TIMER), max(t[1] for t in times), window=1)

    def _train(self, num_updates: int) -> list[dict]:
        def train_and_read(learner, _k=num_updates):
            learner.train(_k)
            learner.collect_metrics()  # the one readback of this iteration
            return learner.metrics.reduce()

        return _values(self.learner_group.foreach_learner(train_and_read))

    def _sync_weights(self) -> None:
        runner = self._same_process_runner()
        if runner is not None:
            # Same process: device-to-device copy into the runner's module, in place.
            def load(learner, _runner=runner):
                _runner.load_weights_from_module(learner.module)

            _values(self.learner_group.foreach_learner(load))
            return
        self.env_runner_group.sync_weights(
            from_worker_or_learner_group=self.learner_group,
            inference_only=True,
        )

    # ---------------------------------------------------------------- checkpoints
    def _ddp_learners(self) -> int:
        """Number of remote DDP learners (0 when the learner is local or alone)."""
        n = len(self.learner_group) if self.learner_group is not None else 0
        return n if n > 1 else 0

    @override(DQN)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        # RLlib checkpoints the first learner only; with DDP every learner's replay shard is saved
        # here, in rank order (the learners leave theirs out of their own state).
        if self._ddp_learners() and self._check_component(REPLAY_SHARDS, components, not_components):
            def shard(learner):
                return torch.distributed.get_rank(), learner.replay.state_dict()

            state[REPLAY_SHARDS] = [s for _, s in sorted(_values(self.learner_group.foreach_learner(shard)),
                                                         key=lambda rank_state: rank_state[0])]
        return state

    @override(DQN)
    def set_state(self, state) -> None:
        super().set_state(state)
        shards = state.get(REPLAY_SHARDS)
        if shards and self._ddp_learners():
            # Rank r loads shard r (r modulo the number saved, if the learner count changed).
            refs = [ray.put(s) for s in shards]

            def load(learner, _refs=refs):
                rank = torch.distributed.get_rank()
                learner.replay.load_state_dict(ray.get(_refs[rank % len(_refs)]))

            _values(self.learner_group.foreach_learner(load))

    # ---------------------------------------------------------------- step
    @contextlib.contextmanager
    def _phase(self, name: str, timer: str):
        """RLlib's (smoothed) timer plus this iteration's own seconds under ``phase_s/<name>``."""
        t0 = time.perf_counter()
        with self.metrics.log_time((TIMERS, timer)):
            yield
        self.metrics.log_value((PHASE_TIMES, name), time.perf_counter() - t0, window=1)

    @override(DQN)
    def training_step(self) -> None:
        with self._phase("sample", ENV_RUNNER_SAMPLING_TIMER):
            rollouts, runner_metrics = self._sample()
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)

        with self._phase("add", REPLAY_BUFFER_ADD_DATA_TIMER):
            self._add_to_replay(rollouts)

        sampled = sum(int(m.get(NUM_ENV_STEPS_SAMPLED, 0)) for m in runner_metrics)
        lifetime = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
        if lifetime < self.config.num_steps_sampled_before_learning_starts or sampled == 0:
            return  # (sampled == 0: every runner failed this iteration; RLlib restarts them)

        learners = max(1, int(self.config.num_learners))
        k = updates_for(sampled, self.config.replay_ratio, self.config.train_batch_size_per_learner * learners)
        with self._phase("train", LEARNER_UPDATE_TIMER):
            learner_results = self._train(k)
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        self.metrics.log_value(NUM_UPDATES_PER_ITERATION, k, window=1)

        with self._phase("sync_weights", SYNCH_WORKER_WEIGHTS_TIMER):
            self._sync_weights()
