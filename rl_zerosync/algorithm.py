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

With ``runner.overlap`` the rollouts sample while the learners train on the replay as it was before
them: on the runner's own CUDA stream when runner and learner share the driver process
(:meth:`ZeroSyncDQN._overlapped_steps`), as asynchronous Ray calls with remote env runners
(:meth:`ZeroSyncDQN._overlapped_remote_steps`).

Every mode runs through one skeleton, :meth:`ZeroSyncDQN._iterate`: the learning-start check and K
(:meth:`ZeroSyncDQN._updates`), the phases in the mode's order, then the learner metrics, K and the
weight sync; a mode is an :class:`IterationSteps` (its phase order and its sample / train parts).

Remote env runners are restarted by Ray when their process dies (RLlib's fault tolerance: the
failed runner's rollout is dropped from that iteration). An iteration that finds no healthy remote
runner first waits up to ``env_runner_restart_timeout_s`` for one to come back, then raises
:class:`EnvRunnersLostError` (e.g. their node is gone and no other node offers their resources).
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

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

from rl_zerosync.learner.replay import REPLAY_COLUMNS
from rl_zerosync.presets import ALGO_KEYS, API, MODEL_KEYS, check_model_value, check_positive_number

NUM_UPDATES_PER_ITERATION = "num_updates_per_iteration"
REPLAY_SHARDS = "zerosync_replay_shards"
"""Algorithm state key: every DDP learner's replay state, in rank order."""
PHASE_TIMES = "phase_s"
"""Result key: this iteration's seconds per phase (sample, add, train, sync_weights, and the
learners' slowest rollout fetch / replay add); RLlib's ``timers`` are smoothed over iterations."""


class EnvRunnersLostError(RuntimeError):
    """No remote env runner came back within ``env_runner_restart_timeout_s``."""


DEFAULT_NUM_ENVS = API.num_envs_per_runner
"""``num_envs_per_env_runner`` of a fresh ``ZeroSyncDQNConfig()`` (DQNConfig's is 1)."""
DEFAULT_ROLLOUT_LENGTH = API.rollout_length
"""``rollout_fragment_length`` of a fresh ``ZeroSyncDQNConfig()`` (32,768 env steps per rollout)."""


class ZeroSyncDQNConfig(DQNConfig):
    """DQNConfig whose defaults are the zero-sync learner, the GPU env runner and the Q module,
    sized for a GPU: 1,024 envs x 32 steps per runner and iteration (no minimum sample count or
    time per iteration: one rollout per runner, then K updates). Its hyper-parameter defaults are
    :data:`rl_zerosync.presets.API` (RLlib's DQN values); a settings file's are ``FILE_DEFAULTS``.

    Extra settings: ``training(replay_ratio=...)``, trained transitions per sampled env step;
    ``fault_tolerance(env_runner_restart_timeout_s=...)``, seconds an iteration waits for a remote
    env runner when none is healthy before it raises :class:`EnvRunnersLostError`.
    """

    def __init__(self, algo_class: Optional[type] = None):
        super().__init__(algo_class=algo_class or ZeroSyncDQN)
        from rl_zerosync.env_runner import GPUEnvRunner

        self.env_runner_cls = GPUEnvRunner
        # The API preset under RLlib's names (ALGO_KEYS), sized for a GPU runner: one iteration = one
        # rollout of N envs x T steps per runner. The batch goes to train_batch_size, which RLlib
        # splits over the learners unless train_batch_size_per_learner is set.
        for key, k in ALGO_KEYS.items():
            if k.rllib is not None and hasattr(API, key):
                name = "train_batch_size" if key == "batch_size" else k.rllib
                setattr(self, name, list(API.epsilon) if key == "epsilon" else getattr(API, key))
        self.dueling = API.dueling
        self.min_sample_timesteps_per_iteration = 0
        self.min_time_s_per_iteration = 0
        # The learners own the replay (on their device); RLlib's episode buffer stays tiny.
        self.replay_buffer_config = {
            "type": "EpisodeReplayBuffer",
            "capacity": 1,
        }
        self.log_dir: Optional[str] = None
        """The algorithm's log folder (``Algorithm.logdir``; :meth:`log_to`); None: RLlib's default."""

    def log_to(self, log_dir: Optional[str]) -> "ZeroSyncDQNConfig":
        """Put the algorithm's log folder (``Algorithm.logdir``, made when it is built) at ``log_dir``
        (a run's ``<run>/rllib/``) instead of a new ``~/ray_results/<timestamp>/`` per algorithm;
        None keeps RLlib's default. Under Tune the trial's own directory is used either way."""
        self.log_dir = None if log_dir is None else str(log_dir)
        return self

    @override(DQNConfig)
    def training(
        self,
        *,
        replay_ratio: Union[float, NotProvided] = NotProvided,
        lr: Union[float, NotProvided] = NotProvided,
        gamma: Union[float, NotProvided] = NotProvided,
        train_batch_size_per_learner: Union[int, NotProvided] = NotProvided,
        n_step: Union[int, NotProvided] = NotProvided,
        num_steps_sampled_before_learning_starts: Union[int, NotProvided] = NotProvided,
        target_network_update_freq: Union[int, NotProvided] = NotProvided,
        tau: Union[float, NotProvided] = NotProvided,
        double_q: Union[bool, NotProvided] = NotProvided,
        dueling: Union[bool, NotProvided] = NotProvided,
        epsilon: Union[float, list, NotProvided] = NotProvided,
        grad_clip: Union[float, None, NotProvided] = NotProvided,
        grad_clip_by: Union[str, NotProvided] = NotProvided,
        **kwargs,
    ) -> "ZeroSyncDQNConfig":
        """DQN's training settings, typed for the ones ZeroSyncDQN uses (the rest pass through to
        ``DQNConfig.training``).

        Args:
            replay_ratio: Trained transitions per sampled env step, all learners together
                (``K = replay_ratio x env steps / (batch x learners)`` updates per iteration);
                replaces DQN's ``training_intensity``.
            lr, gamma, n_step, tau, double_q, dueling, grad_clip, grad_clip_by: as in DQN.
            train_batch_size_per_learner: Transitions per update and learner.
            num_steps_sampled_before_learning_starts: Env steps before the first update.
            target_network_update_freq: Target network update period in **learner updates** (DQN
                counts sampled env steps; with replay ratio r and batch b, ``u`` updates are
                ``u x b / r`` env steps).
            epsilon: A float or ``[(env_step, value), ...]``, evaluated on the device per step.
        """
        typed = dict(lr=lr, gamma=gamma, train_batch_size_per_learner=train_batch_size_per_learner,
                     n_step=n_step, num_steps_sampled_before_learning_starts=num_steps_sampled_before_learning_starts,
                     target_network_update_freq=target_network_update_freq, tau=tau, double_q=double_q,
                     dueling=dueling, epsilon=epsilon, grad_clip=grad_clip, grad_clip_by=grad_clip_by)
        super().training(**{k: v for k, v in typed.items() if v is not NotProvided}, **kwargs)
        if replay_ratio is not NotProvided:
            self.replay_ratio = replay_ratio
        return self

    @override(DQNConfig)
    def fault_tolerance(self, *, env_runner_restart_timeout_s: Any = NotProvided,
                        **kwargs) -> "ZeroSyncDQNConfig":
        super().fault_tolerance(**kwargs)
        if env_runner_restart_timeout_s is not NotProvided:
            self.env_runner_restart_timeout_s = env_runner_restart_timeout_s
        return self

    @override(DQNConfig)
    def validate(self) -> None:
        super().validate()
        check_positive_number("replay_ratio", self.replay_ratio)
        check_positive_number("env_runner_restart_timeout_s", self.env_runner_restart_timeout_s)
        model_config = self.model_config
        for key in MODEL_KEYS:  # the Q module's rules, here in the driver
            if model_config.get(key) is not None:
                check_model_value(key, model_config[key])
        from rl_zerosync.envs.registry import resolve_batched_env

        if _is_gpu_runner(self.env_runner_cls):
            resolve_batched_env(self.env)  # ValueError naming an env the GPU runner cannot step
            # (An evaluation config does not train: its runners never overlap with a learner.)
            if overlap_setting(self) and not self.in_evaluation and not self.num_env_runners and self.num_learners:
                raise ValueError(
                    "runner.overlap: true needs the env runner and the learner in the driver process "
                    "(num_env_runners 0 and num_learners 0) or remote env runners (num_env_runners >= 1); "
                    f"got num_env_runners={self.num_env_runners}, num_learners={self.num_learners}")

    @override(DQNConfig)
    def get_evaluation_config_object(self):
        """RLlib's evaluation config, but evaluation runners keep the training rollout length: RLlib
        sets 1 (episodes unit) or the whole duration (timesteps unit), which fits one-env runners;
        a GPU runner samples whole N x T rollouts and counts episodes from each rollout's readback."""
        eval_config = super().get_evaluation_config_object()
        if eval_config is not None and _is_gpu_runner(self.env_runner_cls):
            eval_config.rollout_fragment_length = self.rollout_fragment_length  # an unfrozen copy
        return eval_config

    @override(DQNConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rl_zerosync.module import ZeroSyncQModule

        return RLModuleSpec(module_class=ZeroSyncQModule, model_config=self.model_config)

    @override(DQNConfig)
    def get_default_learner_class(self):
        from rl_zerosync.learner import ZeroSyncDQNTorchLearner

        return ZeroSyncDQNTorchLearner


def overlap_setting(config) -> bool:
    """``runner.overlap`` of the config's runner settings (``env_config["runner"]``)."""
    from rl_zerosync.env_runner.runner_settings import RunnerSettings

    return RunnerSettings.from_env_config(config.env_config).overlap


SAMPLE_TAG = "zerosync_sample"
"""Tag of the asynchronous remote sampling requests of ``runner.overlap``."""


def _is_gpu_runner(cls) -> bool:
    from rl_zerosync.env_runner import GPUEnvRunner

    return isinstance(cls, type) and issubclass(cls, GPUEnvRunner)


def _values(results) -> list:
    """Values of remote learner calls; re-raises the first remote error (e.g. TrainingHalted)."""
    values = []
    for result in results:
        value = result.get()
        if not result.ok:
            raise value
        values.append(value)
    return values


def local_learner_of(learner_group):
    """The learner of a ``LearnerGroup`` that lives in this process (``num_learners`` 0), else None
    (no group, or remote learners). Read through RLlib's public ``foreach_learner``, which calls a
    local group's function on its learner itself."""
    if learner_group is None or not learner_group.is_local:
        return None
    (result,) = learner_group.foreach_learner(lambda learner: learner)
    return result.get()


def updates_for(env_steps: int, replay_ratio: float, batch_size: int) -> int:
    """K updates for ``env_steps`` new env steps: ``max(1, round(ratio * steps / batch))``.

    ``batch_size`` is the global batch of one update (per-learner batch x number of learners).
    """
    return max(1, int(round(replay_ratio * env_steps / batch_size)))


SAMPLE, ADD, TRAIN = "sample", "add", "train"
"""The phases of an iteration that the modes reorder (``sync_weights`` always comes last)."""


def _no_op(*_args) -> None:
    """A step part a mode does not need."""


@dataclass(frozen=True)
class IterationSteps:
    """What one mode of :meth:`ZeroSyncDQN.training_step` does in each part of the iteration that
    :meth:`ZeroSyncDQN._iterate` runs.

    Attributes:
        order: The phases :data:`SAMPLE`, :data:`ADD` and :data:`TRAIN` in the order they run.
        learn_from: ``runner metrics -> (env steps K follows, whether there is data to train on)``;
            called with None before the phases when ``plan_first``, else at the ``train`` phase with
            this iteration's runner metrics.
        plan_first: K is planned before the phases (the updates overlap the sampling).
        sample: ``K (None: not planned yet) -> (rollouts, runner metrics)``, the ``sample`` phase.
        train: ``K -> learner results``, the ``train`` phase (only when K > 0).
        start: Runs after K is planned, before the phases (e.g. launch asynchronous sampling).
        added: ``runner metrics -> None``, right after the ``add`` phase.
    """

    order: tuple[str, ...]
    learn_from: Callable[[Optional[list]], tuple[int, bool]]
    plan_first: bool
    sample: Callable[[Optional[int]], tuple[list, list]]
    train: Callable[[int], list]
    start: Callable[[], None] = _no_op
    added: Callable[[list], None] = _no_op
    planned: Optional[int] = None
    """K decided before this iteration's ``train()`` (a subclass that runs the phases before ``train()``,
    e.g. :class:`~rl_zerosync.population.member_algorithm.PopulationMemberDQN`)."""


def _env_steps_sampled(runner_metrics: list) -> int:
    """Env steps the runners sampled (their metrics of this iteration)."""
    return sum(int(m.get(NUM_ENV_STEPS_SAMPLED, 0)) for m in runner_metrics)


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
        ref = ray.put({k: rollout[k].numpy() for k in REPLAY_COLUMNS})
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


def runner_resources(config) -> dict:
    """The Ray resources one remote env runner asks for (CPU, GPU and the custom ones), nonzero only."""
    wanted = {"CPU": config.num_cpus_per_env_runner, "GPU": config.num_gpus_per_env_runner,
              **config.custom_resources_per_env_runner}
    return {name: amount for name, amount in wanted.items() if amount}


def lost_runners_message(config, num_runners: int, alive_nodes: list[dict]) -> str:
    """Why no env runner came back: what a runner asks for and how many alive nodes offer it.

    ``alive_nodes``: ``ray.nodes()`` entries of the alive nodes (their ``Resources`` are totals)."""
    wanted = runner_resources(config)
    fits = sum(all(node.get("Resources", {}).get(k, 0) >= v for k, v in wanted.items()) for node in alive_nodes)
    head = (f"ZeroSyncDQN: none of the {num_runners} remote env runner(s) is healthy and none came back within "
            f"{config.env_runner_restart_timeout_s:g} s (algo.env_runner_restart_timeout_s). Each runner asks "
            f"Ray for {wanted}; ")
    if fits == 0:
        return head + (f"none of the {len(alive_nodes)} alive node(s) offers that, so Ray cannot restart them "
                       f"(was their node lost?). Add a node with these resources and continue with "
                       f"`rl-zerosync train --resume`.")
    return head + (f"{fits} of the {len(alive_nodes)} alive node(s) offer that: the runners may still be "
                   f"starting, waiting for resources other actors hold, or failing in their constructor "
                   f"(see the Ray logs).")


class ZeroSyncDQN(DQN):
    """DQN whose ``training_step`` feeds learner-owned device replay and graph-replayed updates."""

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> ZeroSyncDQNConfig:
        return ZeroSyncDQNConfig()

    @override(DQN)
    def _setup_logdir(self) -> None:
        """Trainable's log folder at ``config.log_dir`` (:meth:`ZeroSyncDQNConfig.log_to`) when it is
        set and no Tune trial owns the storage; otherwise RLlib's own choice."""
        log_dir = getattr(self.config, "log_dir", None)
        if self._storage or not log_dir:
            super()._setup_logdir()
            return
        os.makedirs(log_dir, exist_ok=True)
        self._logdir = str(log_dir)

    @override(DQN)
    def setup(self, config) -> None:
        """RLlib's setup; when remote env runners die in their constructors, the error names their
        root cause instead of RLlib's ``IndexError`` (:mod:`rl_zerosync.env_runner.runner_errors`)."""
        from rl_zerosync.env_runner.runner_errors import raise_root_cause, runner_root_causes

        self._overlap_last_sampled = 0  # runner.overlap, remote runners: env steps of the last iteration
        with runner_root_causes() as errors:
            try:
                super().setup(config)
            except Exception as err:
                raise_root_cause(err, errors)
                raise

    @override(DQN)
    def evaluate(self, *args, **kwargs):
        """RLlib's ``evaluate``; without evaluation runners a ValueError saying what to configure
        (RLlib would step the training runner's envs, counting them as training samples)."""
        if self.eval_env_runner_group is None and self.evaluation_dataset is None:
            raise ValueError(
                "algo.evaluate(): no evaluation runners are configured; set config.evaluation("
                "evaluation_interval=1 (evaluate every iteration, on a local evaluation runner with "
                "evaluation_num_env_runners=0) or evaluation_num_env_runners=n (n remote evaluation runners), "
                "evaluation_duration=k, evaluation_duration_unit='episodes' or 'timesteps')")
        return super().evaluate(*args, **kwargs)

    @property
    def local_learner(self):
        """The learner living in this process (``num_learners`` 0), else None (:func:`local_learner_of`)."""
        return local_learner_of(self.learner_group)

    # ---------------------------------------------------------------- helpers
    def _same_process_runner(self):
        """The local GPU env runner when it and the (only) learner live in this process, else None."""
        if self.env_runner_group is None or self.env_runner_group.num_remote_env_runners() > 0:
            return None
        if not self.learner_group.is_local:
            return None
        runner = self.env_runner
        return runner if hasattr(runner, "sample_device") else None

    def _wait_for_env_runners(self) -> None:
        """With remote env runners and none healthy: probe them until one is back, at most
        ``env_runner_restart_timeout_s``; then raise :class:`EnvRunnersLostError`."""
        group = self.env_runner_group
        if group is None or group.num_remote_env_runners() == 0 or group.num_healthy_remote_env_runners() > 0:
            return
        deadline = time.monotonic() + float(self.config.env_runner_restart_timeout_s)
        while True:
            restored = self.restore_env_runners(group)  # pings the failed runners, syncs restored ones
            if restored:
                self._make_on_env_runners_recreated_callbacks(
                    config=self.config, env_runner_group=group, restored_env_runner_indices=restored)
            if group.num_healthy_remote_env_runners() > 0:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                alive = [node for node in ray.nodes() if node.get("Alive")]
                raise EnvRunnersLostError(lost_runners_message(self.config, group.num_remote_env_runners(), alive))
            time.sleep(min(1.0, left))

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

    def sync_runner_weights(self) -> None:
        """The env runners act with the learner's weights from now on (the end of every trained
        iteration; also after the learner's weights were changed from outside, e.g. a PBT copy)."""
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
        """One iteration (module doc): this iteration's mode run through :meth:`_iterate`."""
        self._iterate(self._iteration_steps())

    def _iteration_steps(self) -> IterationSteps:
        """This iteration's mode: overlapped in the driver process, overlapped with remote env runners,
        or plain (sample, add, then train on the replay including the new rollouts)."""
        runner = self._same_process_runner()
        if runner is not None and runner.settings.overlap:
            return self._overlapped_steps(runner, self.local_learner)
        if overlap_setting(self.config) and self.env_runner_group.num_remote_env_runners() > 0:
            return self._overlapped_remote_steps()
        return self._plain_steps()

    def _iterate(self, steps: IterationSteps) -> None:
        """One training iteration, the skeleton of every mode: wait for a remote env runner when
        none is healthy; plan K (before the phases when ``steps.plan_first``, else at the ``train``
        phase); run the phases in ``steps.order``; then, only when this iteration trained, record
        the learner results and K and sync the weights."""
        self._wait_for_env_runners()
        k = steps.planned if steps.planned is not None else (
            self._updates(*steps.learn_from(None)) if steps.plan_first else None)
        steps.start()
        rollouts: list = []
        runner_metrics: list = []
        learner_results = None
        for phase in steps.order:
            if phase == SAMPLE:
                with self._phase(SAMPLE, ENV_RUNNER_SAMPLING_TIMER):
                    rollouts, runner_metrics = steps.sample(k)
                self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
            elif phase == ADD:
                with self._phase(ADD, REPLAY_BUFFER_ADD_DATA_TIMER):
                    self._add_to_replay(rollouts)
                steps.added(runner_metrics)
            else:
                if k is None:
                    k = self._updates(*steps.learn_from(runner_metrics))
                if k:
                    with self._phase(TRAIN, LEARNER_UPDATE_TIMER):
                        learner_results = steps.train(k)
        if learner_results is None:
            return  # nothing trained (before learning starts, or no rollout to learn from)
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        self.metrics.log_value(NUM_UPDATES_PER_ITERATION, k, window=1)
        with self._phase("sync_weights", SYNCH_WORKER_WEIGHTS_TIMER):
            self.sync_runner_weights()

    def _updates(self, env_steps: int, has_data: bool) -> int:
        """K for ``env_steps`` new env steps (``replay_ratio`` over the batch of all learners), or 0
        before ``num_steps_sampled_before_learning_starts`` env steps were sampled or without data."""
        lifetime = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
        if lifetime < self.config.num_steps_sampled_before_learning_starts or not has_data:
            return 0
        learners = max(1, int(self.config.num_learners))
        return updates_for(env_steps, self.config.replay_ratio, self.config.train_batch_size_per_learner * learners)

    def _plain_steps(self) -> IterationSteps:
        """Without overlap: sample one rollout per runner -> add them -> K updates (K follows this
        iteration's env steps; none when every runner failed this iteration, Ray restarts them) and
        their readback -> sync weights."""
        def learn_from(runner_metrics):
            sampled = _env_steps_sampled(runner_metrics)
            return sampled, sampled > 0

        return IterationSteps(order=(SAMPLE, ADD, TRAIN), learn_from=learn_from, plan_first=False,
                              sample=lambda _k: self._sample(), train=self._train)

    def _overlapped_steps(self, runner, learner) -> IterationSteps:
        """``runner.overlap``: this iteration's rollout samples while its updates train.

        Launch the rollout (runner stream) -> enqueue K updates on the replay as it is (learner
        stream) -> wait for the rollout -> add it -> read the learner's metrics -> sync weights.
        Phases: ``sample`` (launch to rollout ready; the updates were enqueued inside it), ``add``,
        ``train`` (what the updates still needed after the rollout, plus the readback),
        ``sync_weights``. Updates start once the replay holds ``learning_starts`` env steps.
        """
        def learn_from(_runner_metrics):
            return runner.num_envs * runner.num_steps, learner.replay.size > 0

        def sample(k):
            runner.start_device_sample()
            learner.train(k)  # enqueued only: it runs on the device beside the rollout
            rollout = runner.finish_device_sample()
            return [rollout], [runner.get_metrics()]

        def read_back(_k):
            learner.collect_metrics()  # the one readback of this iteration
            return [learner.metrics.reduce()]

        return IterationSteps(order=(SAMPLE, ADD, TRAIN), learn_from=learn_from, plan_first=True,
                              sample=sample, train=read_back)

    def _overlapped_remote_steps(self) -> IterationSteps:
        """``runner.overlap`` with remote env runners: they sample while the learners train.

        Launch one rollout per healthy remote runner (asynchronous Ray calls, tag
        :data:`SAMPLE_TAG`) -> K updates on the learners and their readback, on the replay as it was
        before these rollouts -> wait for the rollouts (at most ``sample_timeout_s``) -> add them ->
        sync weights. K follows the env steps the previous iteration sampled (none on the first).
        The runners act with the weights synced at the end of the previous iteration, as without
        overlap. Phases: ``train`` (the updates, overlapped with the sampling), ``sample`` (the wait
        for rollouts still running after them), ``add``, ``sync_weights``. Rollouts arrive in
        runner-index order, so the replay (and DDP shard assignment) is the same from run to run.
        A rollout still running at the timeout is collected by a later iteration; a failed runner's
        rollout is dropped (RLlib's fault tolerance), so after an iteration that sampled nothing the
        next one trains nothing.
        """
        group = self.env_runner_group

        def learn_from(_runner_metrics):
            last = self._overlap_last_sampled
            return last, last > 0

        def launch():
            group.foreach_env_runner_async(_sample_to_object_store, tag=SAMPLE_TAG)

        def collect(_k):
            ready = group.fetch_ready_async_reqs(tags=SAMPLE_TAG, timeout_seconds=self.config.sample_timeout_s)
            ready.sort(key=lambda item: item[0])
            return [ref for _, (ref, _) in ready], [metrics for _, (_, metrics) in ready]

        def added(runner_metrics):
            self._overlap_last_sampled = _env_steps_sampled(runner_metrics)

        return IterationSteps(order=(TRAIN, SAMPLE, ADD), learn_from=learn_from, plan_first=True,
                              sample=collect, train=self._train, start=launch, added=added)
