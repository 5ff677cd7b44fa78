"""``GPUEnvRunner``: an RLlib EnvRunner stepping N batched envs on its device.

Plug it in with::

    config.env_runners(env_runner_cls=GPUEnvRunner, num_envs_per_env_runner=N,
                       rollout_fragment_length=T, num_gpus_per_env_runner=...)

``sample()`` runs one :class:`~rl_zerosync.env_runner.rollout.DeviceRollout` (T steps, no host
read), then one packed device->host copy and one event wait, and returns a columnar rollout
(``runner.output="columnar"``) or ``SingleAgentEpisode`` chunks built in bulk from that one host
copy (``runner.output="episodes"``, for stock RLlib DQN). ``sample_device()`` keeps the rollout
on the device for a learner in the same process; it still reads back the leading part of the
buffer (actions, rewards, flags, metrics) once.
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import Any, Collection, Dict, List, Optional, Union

import gymnasium as gym
import numpy as np
import ray
import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils import force_list
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    SAMPLE_TIMER,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.typing import ResultDict, StateDict

from rl_zerosync.actions import NUM_ACTIONS, NUM_EXPOSURES
from rl_zerosync.env_runner.episode_tracker import EpisodeStatsTracker
from rl_zerosync.env_runner.episodes import EpisodeBuilder
from rl_zerosync.env_runner.eval_window import EvalWindow
from rl_zerosync.env_runner.rollout import EXPLORE, GREEDY, RANDOM, ROLLOUT_KEYS, ROUTING_KEYS, DeviceRollout
from rl_zerosync.env_runner.runner_settings import RunnerSettings, action_mode_from_model_config
from rl_zerosync.env_runner.weights import copy_weights_in_place
from rl_zerosync.envs.batched import observation_space  # noqa: F401  (re-exported by env_runner)
from rl_zerosync.envs.check import check_batched_env
from rl_zerosync.envs.protocol import BatchedEnv
from rl_zerosync.envs.registry import env_class_of, resolve_batched_env, spaces_of
from rl_zerosync.kernels import get_kernels
from rl_zerosync.presets import API

ROLLOUT_ENQUEUE_TIMER = "rollout_enqueue_timer"
"""Host seconds to enqueue the T steps (graph replay or eager launches); last rollout."""
ROLLOUT_READBACK_TIMER = "rollout_readback_timer"
"""Host seconds from the enqueue to the host copy landing (device rollout + copy); last rollout."""


MAX_EVAL_ROLLOUTS = 10_000
"""Rollouts an episode-counted evaluation may take before it gives up with an error."""
PER_EPISODE_HOOKS = ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end")


class RolloutCount:
    """What an evaluation ``sample()`` returns per rollout: its step counts (RLlib's evaluation loop
    calls ``env_steps()`` / ``agent_steps()`` on each returned item; the data stays on the device)."""

    def __init__(self, steps: int) -> None:
        self.steps = int(steps)

    def env_steps(self) -> int:
        return self.steps

    def agent_steps(self) -> int:
        return self.steps


def _warn_per_episode_callbacks(callbacks: List[RLlibCallback], config) -> None:
    """One warning when per-episode hooks are configured: GPUEnvRunner fires only on_sample_end."""
    hooks = [h for h in PER_EPISODE_HOOKS
             if getattr(config, f"callbacks_{h}", None)
             or any(getattr(type(c), h, None) is not getattr(RLlibCallback, h, None) for c in callbacks)]
    if hooks:
        warnings.warn(f"GPUEnvRunner does not fire {hooks}: envs step in batches on the device; use "
                      "on_sample_end (samples = the batched rollout, episode stats in metrics_logger)",
                      stacklevel=3)


def resolve_device(setting: str) -> torch.device:
    """``RunnerSettings.device`` -> a torch device; ValueError for "cuda" without CUDA."""
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("runner.device is 'cuda' but torch.cuda.is_available() is False")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 for GPUEnvRunner, got {value!r}")
    return value


class GPUEnvRunner(EnvRunner, Checkpointable):
    """EnvRunner owning N batched envs and the inference Q module on one device.

    The env is ``config.env``: None or ``"rl_zerosync/Trading-v0"`` (the trading env), another
    registered batched env (e.g. ``"rl_zerosync/CartPole-v1"``) or a
    :class:`~rl_zerosync.envs.protocol.BatchedEnv` subclass; anything else is a ValueError naming it.
    Every env is built by its registry factory, ``factory(EnvContext(env_config, worker_index),
    num_envs, device, seed)``; what an env needs besides (e.g. the trading env's market data, fresh
    series and routing thresholds) is its factory's and its class's business, reached through the
    protocol's optional hooks (``metrics_key``, ``factored_actions``, ``route_thresholds``,
    ``before_rollout``, ``close``).

    Configuration: ``config.env_config = {"data": ..., "env": ..., "runner": ...}`` (see
    ``docs/ARCHITECTURE.md``; every env's factory gets the whole ``env_config``),
    ``config.model_config["action_mode"]`` ("routed" default for an env with ``factored_actions``,
    the trading env; "flat" for others; "branching"), ``num_envs_per_env_runner`` = N,
    ``rollout_fragment_length`` = T.

    The local runner (``worker_index == 0``) of a group that also has remote runners keeps its
    module on the CPU and builds no envs until ``sample()`` is called on it.

    Metrics (``get_metrics()``): RLlib's step/episode counters; ``episode_return_mean`` (sum of
    rewards), ``episode_len_mean`` and their min/max, logged once per rollout over the episodes
    it completed; ``epsilon`` (last step); under the env's ``metrics_key`` its ``summarize_metrics``
    (the trading env, under ``"trading"``: per-episode means ``episode_pnl_mean``,
    ``episode_cost_<type>_mean``, ``episode_turnover_mean``, ...; see
    ``rl_zerosync.envs.summarize_metrics``, and the rollout's action mix ``mix_*``); whatever the
    env's ``before_rollout`` returns (the trading env with fresh series: ``data_generation``).

    Callbacks: ``on_sample_end`` fires after every ``sample()`` with the batched rollout as
    ``samples`` (the columnar dict, or the episode chunks with ``runner.output="episodes"``). The
    per-episode hooks (``on_episode_created/start/step/end``) do not fire: N envs step together on
    the device and no per-episode Python object exists; ``on_sample_end`` is their batched
    replacement (episode statistics are in ``metrics_logger``). A callbacks class that overrides
    one of them gets a warning at construction.

    Evaluation (``config.evaluation(...)``): an evaluation runner (``config.in_evaluation``) samples
    greedily (``explore=False``, RLlib's evaluation default) on the device and returns one
    :class:`RolloutCount` per rollout, which is what RLlib's evaluation loop counts steps with;
    which episodes count is decided when each starts (:mod:`rl_zerosync.env_runner.eval_window`), so
    the mean does not favour short episodes: ``evaluation_duration_unit="episodes"`` counts a quota of
    the episodes each env starts and runs rollouts until all of them ended; ``"timesteps"`` counts
    every episode started within the duration (rounded up to whole rollouts) and runs until they
    ended. Episodes already running when an evaluation starts do not count. The episode metrics
    (``episode_return_mean``, ``episode_len_mean``, min/max, ``num_episodes``) are over the counted
    episodes; the env's own metrics (``metrics_key``) cover every episode the rollouts ended. Metrics
    land in ``result["evaluation"]["env_runners"]``. The local training runner does not evaluate:
    ``algo.evaluate()`` without evaluation runners is a ValueError saying what to configure. The trading env evaluates on ``env_config["split"]``
    (default ``"train"``; set ``evaluation_config={"env_config": {..., "split": "validation"}}``).

    After every sample, ``last_extras`` holds the routing inputs each step saw (``spread``,
    ``median_spread``, ``vol``, ``median_vol``: [T, N]) and the epsilon of each step ([T]), on
    the same side (host or device) as the returned rollout.
    """

    @override(EnvRunner)
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        self.worker_index = int(kwargs.get("worker_index") or 0)
        env_config = self.config.env_config or {}
        self.settings = RunnerSettings.from_env_config(env_config)
        self.num_envs = _positive_int("num_envs_per_env_runner", self.config.num_envs_per_env_runner)
        self.num_steps = _positive_int(
            "rollout_fragment_length", self.config.get_rollout_fragment_length(self.worker_index)
        )
        self._env_factory = resolve_batched_env(self.config.env)
        env_class = env_class_of(self._env_factory)
        self.factored_actions = bool(env_class is not None and env_class.factored_actions)
        model_config = self.config.get_rl_module_spec(inference_only=True).model_config
        self.action_mode = action_mode_from_model_config(model_config, trading=self.factored_actions)
        self._lazy = self.worker_index == 0 and (self.config.num_env_runners or 0) > 0
        self.device = torch.device("cpu") if self._lazy else resolve_device(self.settings.device)
        base_seed = self.settings.seed if self.settings.seed is not None else (self.config.seed or 0)
        self.seed = int(base_seed) + self.worker_index
        self._observation_space, env_actions = spaces_of(self.config.env, env_config)
        self._action_space = self._module_action_space(env_actions)
        self._weights_seq_no = 0
        self._rng_step = 0
        self._rollouts = 0
        self._pending: Optional[str] = None  # exploration mode of a launched, uncollected rollout
        self._launched_at = 0.0
        self._stream: Optional[torch.cuda.Stream] = None  # the overlap stream (runner.overlap on CUDA)
        self.env: Optional[BatchedEnv] = None
        self._rollout: Optional[DeviceRollout] = None
        self._episodes: Optional[EpisodeBuilder] = None
        self.last_extras: Dict[str, torch.Tensor] = {}
        self._last_host: Dict[str, torch.Tensor] = {}
        self._callbacks: List[RLlibCallback] = [cls() for cls in force_list(self.config.callbacks_class)]
        _warn_per_episode_callbacks(self._callbacks, self.config)
        self.module = None
        self.make_module()
        if not self._lazy:
            self.make_env()

    # --- construction -------------------------------------------------------------------------
    def _module_action_space(self, env_actions: gym.spaces.Discrete) -> gym.spaces.Discrete:
        """The Q module's action space: with ``factored_actions`` the exposures (routed) or all
        factored actions (flat, branching); else the env's own, with action_mode flat only."""
        if self.factored_actions:
            return gym.spaces.Discrete(NUM_EXPOSURES if self.action_mode == "routed" else NUM_ACTIONS)
        if self.action_mode != "flat":
            raise ValueError(f"model_config action_mode {self.action_mode!r} needs the trading env's action layout; "
                             f"config.env {self.config.env!r} takes action_mode 'flat'")
        return env_actions

    @override(EnvRunner)
    def make_module(self) -> None:
        spec = self.config.get_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        self.module = spec.build().to(self.device)
        self.module.eval()

    @override(EnvRunner)
    def make_env(self) -> None:
        """The N envs from ``config.env``'s registry factory (the trading env too), checked against
        the protocol (``runner.check_env``), then the rollout (which resets them)."""
        context = EnvContext(dict(self.config.env_config or {}), worker_index=self.worker_index,
                             num_workers=int(self.config.num_env_runners or 0))
        self.env = self._env_factory(context, self.num_envs, self.device, self.seed)
        if self.settings.check_env:
            self._check_env()
        self._make_rollout()

    def _check_env(self) -> None:
        """:func:`check_batched_env` on the runner's own envs (no extra instance), metrics zeroed after."""
        env = self.config.env
        label = f"config.env {env.__name__ if isinstance(env, type) else repr(env)}"
        check_batched_env(self.env, name=label)
        self.env.reset_metrics()

    def _make_rollout(self) -> None:
        s = self.settings
        if s.overlap and self.device.type == "cuda":
            self._stream = torch.cuda.Stream(device=self.device)
        self._rollout = DeviceRollout(
            env=self.env,
            module=self.module,
            kernels=get_kernels(self.device),
            action_mode=self.action_mode,
            num_steps=self.num_steps,
            epsilon=s.epsilon if s.epsilon is not None else getattr(self.config, "epsilon", API.epsilon),
            seed=self.seed,
            env_step_increment=self.num_envs * max(int(self.config.num_env_runners or 0), 1),
            **self.env.route_thresholds(),
        )
        self._episodes = EpisodeBuilder(self.num_envs, self._observation_space, self._action_space)

    # --- sampling -----------------------------------------------------------------------------
    @override(EnvRunner)
    def sample(
        self,
        *,
        num_timesteps: Optional[int] = None,
        num_episodes: Optional[int] = None,
        explore: Optional[bool] = None,
        random_actions: bool = False,
        force_reset: bool = False,
        **kwargs,
    ) -> Union[Dict[str, torch.Tensor], List[SingleAgentEpisode]]:
        """Samples ``ceil(num_timesteps / (N * T))`` rollouts (default one) of T steps x N envs.

        Returns the columnar rollout on the host (views of the pinned readback buffer, valid
        until the next ``sample()``) or, with ``runner.output="episodes"``, episode chunks.
        ``explore=False``: greedy (epsilon 0); ``random_actions=True``: epsilon 1.
        """
        mode = self._mode(explore, random_actions)
        if force_reset:
            self._reset()
        if self.config.in_evaluation:
            return self._sample_for_evaluation(mode, num_timesteps, num_episodes)
        if num_episodes is not None:
            raise ValueError("GPUEnvRunner.sample: num_episodes is only supported by evaluation runners "
                             "(config.evaluation(evaluation_duration_unit='episodes')); training samples "
                             "fixed fragments of num_envs_per_env_runner x rollout_fragment_length steps")
        samples = self._sample_training(mode, num_timesteps)
        self._on_sample_end(samples)
        return samples

    def _sample_training(self, mode: str, num_timesteps: Optional[int]):
        count = 1 if num_timesteps is None else max(1, math.ceil(num_timesteps / (self.num_envs * self.num_steps)))
        if self.settings.output == "episodes":
            return [e for _ in range(count) for e in self._sample_once(mode, device_output=False)]
        if count == 1:
            return self._sample_once(mode, device_output=False)
        # Host views are overwritten by the next readback: copy each fragment out first.
        outs = [{k: v.clone() for k, v in self._sample_once(mode, device_output=False).items()}
                for _ in range(count)]
        return {k: torch.cat([o[k] for o in outs], 0) for k in outs[0]}

    def sample_device(self, *, explore: Optional[bool] = None, random_actions: bool = False) -> Dict[str, torch.Tensor]:
        """One rollout kept on the device: the columnar dict as views of the device buffer.

        Valid until the next sample; obs never cross to the host. The leading part of the
        buffer (actions, rewards, flags, metrics) is still read back once for the metrics.
        """
        self.start_device_sample(explore=explore, random_actions=random_actions)
        return self.finish_device_sample()

    def start_device_sample(self, *, explore: Optional[bool] = None, random_actions: bool = False) -> None:
        """Launch one rollout and return without waiting (``runner.overlap``: on the runner's own
        stream, after the work already queued on the current stream, e.g. a weight sync)."""
        if self._pending is not None:
            raise RuntimeError("start_device_sample: a rollout is already in flight; finish_device_sample() first")
        mode = self._mode(explore, random_actions)
        self._launch(mode)
        self._pending = mode

    def finish_device_sample(self, host_leading: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        """Wait for the rollout of :meth:`start_device_sample` (its one readback), log its metrics and
        return it as in :meth:`sample_device`.

        ``host_leading``: the rollout's leading bytes (:attr:`DeviceRollout.leading_bytes`) already read
        back by the caller, e.g. a population's one readback of every member's rollout
        (:class:`~rl_zerosync.env_runner.population_readback.PopulationReadback`); no readback here then."""
        if self._pending is None:
            raise RuntimeError("finish_device_sample: no rollout in flight; start_device_sample() first")
        mode, self._pending = self._pending, None
        samples = self._collect(mode, device_output=True, host_leading=host_leading)
        self._on_sample_end(samples)
        return samples

    def _sample_for_evaluation(self, mode: str, num_timesteps: Optional[int],
                               num_episodes: Optional[int]) -> List["RolloutCount"]:
        """Evaluation rollouts on the device until the :class:`EvalWindow`'s counted episodes have all
        ended: ``num_episodes`` of them (a per-env quota), else every episode started within
        ``num_timesteps`` (rounded up to whole rollouts; default one rollout). Only counted episodes
        enter the episode metrics, so their mean does not favour short episodes."""
        per = self.num_envs * self.num_steps
        if num_episodes is not None:
            if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
                raise ValueError(f"evaluation_duration (episodes): expected an int >= 1, got {num_episodes!r}")
            window = EvalWindow(self.num_envs, num_episodes=num_episodes)
        else:
            count = 1 if num_timesteps is None else max(1, math.ceil(num_timesteps / per))
            window = EvalWindow(self.num_envs, window_steps=count * self.num_steps)
        out: List[RolloutCount] = []
        while not window.finished:
            if len(out) >= MAX_EVAL_ROLLOUTS:
                raise RuntimeError(
                    f"evaluation: {len(window.episodes)} counted episodes ended, others still running after "
                    f"{len(out)} rollouts of {self.num_envs} envs x {self.num_steps} steps; episodes this long "
                    "need a longer rollout_fragment_length or fewer evaluation_duration units")
            self._sample_once(mode, device_output=self.device.type == "cuda")
            host = self._last_host  # this rollout's one readback (pinned host views)
            ended = (host["terminateds"] | host["truncateds"]).numpy()  # host read: views of the readback's host copy
            window.add(host["rewards"].numpy(), ended)  # host read: views of the readback's host copy
            out.append(RolloutCount(per))
        self._log_eval_episodes(window)
        self._on_sample_end(out)
        return out

    def _on_sample_end(self, samples) -> None:
        make_callback("on_sample_end", callbacks_objects=self._callbacks,
                      callbacks_functions=self.config.callbacks_on_sample_end,
                      kwargs=dict(env_runner=self, metrics_logger=self.metrics, samples=samples))

    def _mode(self, explore: Optional[bool], random_actions: bool) -> str:
        """Exploration mode of a sample: random (epsilon 1), explore (schedule) or greedy."""
        if random_actions:
            return RANDOM
        explore = self.config.explore if explore is None else explore
        return EXPLORE if explore else GREEDY

    def _sample_once(
        self, mode: str, *, device_output: bool
    ) -> Union[Dict[str, torch.Tensor], List[SingleAgentEpisode]]:
        """One rollout, one readback, metrics logged; the output per ``device_output`` / settings."""
        self._launch(mode)
        return self._collect(mode, device_output=device_output)

    def _launch(self, mode: str) -> None:
        """Enqueue one rollout (on the overlap stream if there is one); no wait."""
        if self._rollout is None:
            self.make_env()
        ro = self._rollout
        self._launched_at = time.perf_counter()
        with self._on_runner_stream():
            for key, value in self.env.before_rollout(self._rollouts).items():
                self.metrics.log_value(key, value, window=1)
            self._rollouts += 1
            with self.metrics.log_time(ROLLOUT_ENQUEUE_TIMER, reduce="mean", window=1):
                ro.run(env_steps=self.num_env_steps_sampled_lifetime, rng_step=self._rng_step, mode=mode,
                       graph=self.settings.graph)
        self._rng_step += self.num_steps

    def _collect(
        self, mode: str, *, device_output: bool, host_leading: Optional[torch.Tensor] = None
    ) -> Union[Dict[str, torch.Tensor], List[SingleAgentEpisode]]:
        """The launched rollout's one readback (or ``host_leading``, read back by the caller), its
        metrics and its output."""
        ro = self._rollout
        if host_leading is not None:
            if not device_output:
                raise ValueError("_collect: a caller's readback holds the leading part only (device output)")
            host = ro.leading_views(host_leading)
        else:
            # The readback waits for the rollout on the device, then for the copy.
            with self.metrics.log_time(ROLLOUT_READBACK_TIMER, reduce="mean", window=1):
                with self._on_runner_stream():
                    host = ro.read_back(leading_only=device_output)
        if self._stream is not None:
            # Whatever the caller queues next on its stream (e.g. the replay add) follows the rollout.
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
        side = ro.views if device_output else host
        self.last_extras = {k: side[k] for k in ROUTING_KEYS + ("epsilon",)}
        if device_output or self.settings.output == "columnar":
            out = {k: side[k] for k in ROLLOUT_KEYS}
        else:
            # Views of the pinned host copy (the one readback already happened).
            out = self._episodes.build(*(host[k].numpy() for k in (  # host read: host views
                "obs", "next_obs", "actions", "rewards", "terminateds", "truncateds")))
        self._last_host = host
        self._log_rollout_metrics(host)
        self.metrics.log_value(SAMPLE_TIMER, time.perf_counter() - self._launched_at)
        return out

    def _on_runner_stream(self):
        """Context: the overlap stream (after the current stream's queued work), else a no-op."""
        if self._stream is None:
            return contextlib.nullcontext()
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self._stream)

    def _reset(self) -> None:
        """Resets every env (RNG step 0) and forgets running episodes."""
        if self._rollout is None:
            self.make_env()
        self._rollout.reset()
        self._episodes.reset()

    # --- metrics ------------------------------------------------------------------------------
    def _log_rollout_metrics(self, host: Dict[str, torch.Tensor]) -> None:
        """Logs counts, episode stats, the env's metrics and epsilon from the host copy."""
        steps = self.num_envs * self.num_steps
        stats = EpisodeStatsTracker.to_dict(host["stats"])
        done = int(stats["count"])
        self.num_env_steps_sampled_lifetime += steps
        m = self.metrics
        m.log_value(NUM_ENV_STEPS_SAMPLED, steps, reduce="sum")
        m.log_value((NUM_AGENT_STEPS_SAMPLED, DEFAULT_AGENT_ID), steps, reduce="sum")
        m.log_value((NUM_MODULE_STEPS_SAMPLED, DEFAULT_MODULE_ID), steps, reduce="sum")
        m.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum", with_throughput=True)
        m.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, DEFAULT_AGENT_ID), steps, reduce="lifetime_sum")
        m.log_value((NUM_MODULE_STEPS_SAMPLED_LIFETIME, DEFAULT_MODULE_ID), steps, reduce="lifetime_sum")
        m.log_value("epsilon", float(host["epsilon"][-1]), window=1)  # host tensor, no device read
        win = self._episode_window()
        if not self.config.in_evaluation:  # evaluation logs its counted episodes (_log_eval_episodes)
            m.log_value(NUM_EPISODES, done, reduce="sum")
            m.log_value(NUM_EPISODES_LIFETIME, done, reduce="lifetime_sum")
        if done > 0 and not self.config.in_evaluation:
            m.log_value(EPISODE_RETURN_MEAN, stats["return_sum"] / done, window=win)
            m.log_value(EPISODE_LEN_MEAN, stats["len_sum"] / done, window=win)
            m.log_value(EPISODE_RETURN_MIN, stats["return_min"], reduce="min", window=win)
            m.log_value(EPISODE_RETURN_MAX, stats["return_max"], reduce="max", window=win)
            m.log_value(EPISODE_LEN_MIN, stats["len_min"], reduce="min", window=win)
            m.log_value(EPISODE_LEN_MAX, stats["len_max"], reduce="max", window=win)
        if not self._rollout.has_env_metrics:
            return
        named = self.env.summarize_metrics(host["env_metrics"].tolist())  # host read: pinned host copy
        group = self.env.metrics_key
        for key, value in named.items():
            if key.startswith("episode_") and done == 0:
                continue
            if key in ("episodes", "env_steps"):
                continue
            m.log_value((group, key), value, window=win)

    def _episode_window(self) -> int:
        """Episodes per windowed episode metric: RLlib's smoothing window over the runners."""
        return max(1, math.ceil(self.config.metrics_num_episodes_for_smoothing / (self.config.num_env_runners or 1)))

    def _log_eval_episodes(self, window: EvalWindow) -> None:
        """The evaluation's counted episodes, one value each as RLlib's runners log them (in an order
        independent of length; the window holds at least this evaluation's episodes)."""
        episodes = window.counted()
        m, win = self.metrics, max(self._episode_window(), len(episodes))
        m.log_value(NUM_EPISODES, len(episodes), reduce="sum")
        m.log_value(NUM_EPISODES_LIFETIME, len(episodes), reduce="lifetime_sum")
        for ret, length in episodes:
            m.log_value(EPISODE_RETURN_MEAN, ret, window=win)
            m.log_value(EPISODE_LEN_MEAN, length, window=win)
            m.log_value(EPISODE_RETURN_MIN, ret, reduce="min", window=win)
            m.log_value(EPISODE_RETURN_MAX, ret, reduce="max", window=win)
            m.log_value(EPISODE_LEN_MIN, length, reduce="min", window=win)
            m.log_value(EPISODE_LEN_MAX, length, reduce="max", window=win)

    @override(EnvRunner)
    def get_metrics(self) -> ResultDict:
        return self.metrics.reduce()

    # --- spaces, state, weights ---------------------------------------------------------------
    @override(EnvRunner)
    def get_spaces(self) -> Dict[str, Any]:
        spaces = (self._observation_space, self._action_space)
        return {INPUT_ENV_SPACES: spaces, DEFAULT_MODULE_ID: spaces}

    @override(Checkpointable)
    def get_state(
        self,
        components: Optional[Union[str, Collection[str]]] = None,
        *,
        not_components: Optional[Union[str, Collection[str]]] = None,
        **kwargs,
    ) -> StateDict:
        state: StateDict = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime}
        if self._check_component(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(
                components=self._get_subcomponents(COMPONENT_RL_MODULE, components),
                not_components=self._get_subcomponents(COMPONENT_RL_MODULE, not_components),
                **kwargs,
            )
            state[WEIGHTS_SEQ_NO] = self._weights_seq_no
        return state

    @override(Checkpointable)
    def set_state(self, state: StateDict) -> None:
        """Loads weights in place (only when newer, as RLlib's runners do) and the step count."""
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or self._weights_seq_no < seq_no:
                weights = state[COMPONENT_RL_MODULE]
                if isinstance(weights, ray.ObjectRef):
                    weights = ray.get(weights)
                if isinstance(weights, dict) and DEFAULT_MODULE_ID in weights:
                    weights = weights[DEFAULT_MODULE_ID]
                copy_weights_in_place(self.module, weights)
            if seq_no > 0:
                self._weights_seq_no = seq_no
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = int(state[NUM_ENV_STEPS_SAMPLED_LIFETIME])

    @property
    def rollout(self) -> Optional[DeviceRollout]:
        """The device rollout (buffers, readback sizes); None until the envs are built."""
        return self._rollout

    @property
    def weights_seq_no(self) -> int:
        """Sequence number of the weights last loaded (0: never synced)."""
        return self._weights_seq_no

    def load_weights_from_module(self, source: torch.nn.Module, *, weights_seq_no: int = 0) -> None:
        """Copies a module's weights (e.g. the learner's, same process) in place, device to device."""
        if isinstance(source, MultiRLModule):
            source = source[DEFAULT_MODULE_ID]
        if hasattr(source, "unwrapped"):
            source = source.unwrapped()
        copy_weights_in_place(self.module, source.state_dict())
        if weights_seq_no > 0:
            self._weights_seq_no = weights_seq_no

    @override(Checkpointable)
    def get_ctor_args_and_kwargs(self):
        return ((), {"config": self.config})

    @override(Checkpointable)
    def get_checkpointable_components(self):
        return [(COMPONENT_RL_MODULE, self.module)]

    # --- lifecycle ----------------------------------------------------------------------------
    @override(EnvRunner)
    def assert_healthy(self):
        assert self.module is not None, "GPUEnvRunner has no module"
        assert self._lazy or self._rollout is not None, "GPUEnvRunner has no envs"

    @override(EnvRunner)
    def stop(self) -> None:
        if self.env is not None:
            self.env.close()
        self._rollout = None
        self.env = None
