"""The device rollout: T env steps of N batched envs with no host read, one packed readback.

One env step (all on the envs' device, no host read):
Q forward (inference mode) -> epsilon from the on-device schedule -> ``epsilon_greedy`` kernel
(routed: Q[N, 5] -> exposure, then the ``route`` kernel with the env's current spread / median
spread / vol / median vol; flat: Q[N, 45] -> factored action) or ``branching_select``
(branching) -> env step -> rollout columns written in place into views of one flat buffer.

After T steps: completed-episode statistics and the env's metrics vector are reduced into the same
flat buffer, and one non-blocking copy of it (or of its leading part) goes to pinned host memory
(:class:`~rl_zerosync.kernels.AsyncReadback`), followed by one event wait.

Buffer layout (byte offsets aligned to 256), leading part first:
``stats`` f64 | ``env_metrics`` f64 | ``epsilon`` [T] | ``actions`` | ``factored_actions`` | ``rewards`` |
``terminateds`` | ``truncateds`` || ``spread`` | ``median_spread`` | ``vol`` | ``median_vol`` |
``obs`` | ``next_obs``. The leading part (up to ``truncateds``) is what the same-GPU path reads.
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from types import MappingProxyType
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

from rl_zerosync.actions import BRANCH_SIZES, NUM_ACTIONS, NUM_EXPOSURES
from rl_zerosync.env_runner.episode_tracker import NUM_STATS, EpisodeStatsTracker
from rl_zerosync.env_runner.epsilon import DeviceEpsilonSchedule
from rl_zerosync.env_runner.packed import Column, PackedColumns
from rl_zerosync.envs.protocol import BatchedEnv
from rl_zerosync.kernels import AsyncReadback, Kernels
from rl_zerosync.kernels.route import ROUTING_DEFAULTS

ROLLOUT_COLUMNS: Mapping[str, Tuple[torch.dtype, str]] = MappingProxyType({
    "obs": (torch.float32, "TND"),
    "next_obs": (torch.float32, "TND"),
    "actions": (torch.int64, "TN"),
    "factored_actions": (torch.int64, "TN"),
    "rewards": (torch.float32, "TN"),
    "terminateds": (torch.bool, "TN"),
    "truncateds": (torch.bool, "TN"),
})
"""The columnar rollout, declared once: column -> (dtype, shape: ``TN`` [T, N] or ``TND`` [T, N, D])
(docs/ARCHITECTURE.md, "Columnar rollout"); the runner's packed buffer, its small readback and the
replay's ``add`` derive from it."""
ROLLOUT_KEYS = tuple(ROLLOUT_COLUMNS)
"""Keys of the columnar rollout."""
STEP_KEYS = tuple(k for k, (_, shape) in ROLLOUT_COLUMNS.items() if shape == "TN")
"""The rollout's ``[T, N]`` columns (one value per env step)."""
ROUTING_KEYS = ("spread", "median_spread", "vol", "median_vol")
"""Routing inputs recorded per step (the values the routing rule saw)."""
LEADING_KEYS = ("stats", "env_metrics", "epsilon", *STEP_KEYS)
"""The packed buffer's leading columns: the small readback when the host does not need observations."""

EXPLORE, GREEDY, RANDOM = "explore", "greedy", "random"
EPSILON_MODES = {EXPLORE: (1.0, 0.0), GREEDY: (0.0, 0.0), RANDOM: (0.0, 1.0)}
"""Exploration mode -> (scale, offset) applied to the schedule's epsilon."""


class DeviceRollout:
    """Preallocated buffers and the T-step device loop for one :class:`BatchedEnv`.

    Args:
        env: The batched envs (their device is the rollout's device). ``routed`` needs its
            ``route_inputs()``; without ``metrics_vector()`` the ``env_metrics`` column stays zero.
        module: Inference copy of the Q module on the same device (``q_values`` / ``branch_q``).
        kernels: ``get_kernels(device)``.
        action_mode: "routed", "flat" or "branching".
        num_steps: T, steps per rollout.
        epsilon: Epsilon schedule (float or [(step, value), ...]) over global env steps.
        seed: Seed of the action RNG.
        wide, high_vol, low_vol: Routing thresholds (default: the route kernel's).
        env_step_increment: Advance of the global env-step count (epsilon's t) per env step;
            default N (``num_envs x num_env_runners`` mirrors ``SingleAgentEnvRunner``).
    """

    def __init__(
        self,
        *,
        env: BatchedEnv,
        module: torch.nn.Module,
        kernels: Kernels,
        action_mode: str,
        num_steps: int,
        epsilon: Union[float, Sequence[Sequence[Union[int, float]]]],
        seed: int,
        wide: float = ROUTING_DEFAULTS["wide"],
        high_vol: float = ROUTING_DEFAULTS["high_vol"],
        low_vol: float = ROUTING_DEFAULTS["low_vol"],
        env_step_increment: Optional[int] = None,
    ) -> None:
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"rollout_fragment_length must be an int >= 1, got {num_steps!r}")
        self.env, self.module, self.kernels = env, module, kernels
        self.action_mode = action_mode
        self.device = env.device
        self.num_envs = n = env.num_envs
        self.num_steps = t = num_steps
        self.obs_dim = d = int(env.observation_space.shape[0])
        self.has_routing = env.route_inputs() is not None  # the env's optional parts, read once
        self.has_env_metrics = env.metrics_vector() is not None
        self.seed = int(seed)
        self.env_step_increment = int(env_step_increment or n)
        self.route_kwargs = dict(wide=wide, high_vol=high_vol, low_vol=low_vol)
        f32, i64 = torch.float32, torch.int64
        self.packed = PackedColumns(
            [
                Column("stats", torch.float64, (NUM_STATS,)),
                Column("env_metrics", torch.float64, (env.metrics_vector().numel() if self.has_env_metrics else 1,)),
                Column("epsilon", f32, (t,)),
                *[Column(k, ROLLOUT_COLUMNS[k][0], (t, n)) for k in STEP_KEYS],
                *[Column(k, f32, (t, n)) for k in ROUTING_KEYS],
                *[Column(k, dtype, (t, n, d)) for k, (dtype, shape) in ROLLOUT_COLUMNS.items() if shape == "TND"],
            ],
            self.device,
        )
        self.views = self.packed.views
        self.leading_nbytes = self.packed.end_of(LEADING_KEYS[-1])
        dev = dict(device=self.device)
        self.schedule = DeviceEpsilonSchedule(epsilon, self.device)
        self._eps_scale = torch.ones(1, dtype=f32, **dev)
        self._eps_offset = torch.zeros(1, dtype=f32, **dev)
        self.env_steps = torch.zeros(1, dtype=i64, **dev)  # global env steps (epsilon's t)
        self.rng_step = torch.zeros(1, dtype=i64, **dev)  # action RNG counter, +1 per step
        self.cur_obs = torch.zeros(n, d, dtype=f32, **dev)
        self.stats = EpisodeStatsTracker(t, n, self.device)
        self._bind_kernels()
        self._full_readback: Optional[AsyncReadback] = None
        self._leading_readback: Optional[AsyncReadback] = None
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self.population = None  # the PopulationRollout stepping these envs with other members', once attached
        self.reset()

    @property
    def graph_captured(self) -> bool:
        """True once a CUDA graph of the rollout has been captured (replayed from then on)."""
        return self._graph is not None

    # --- setup --------------------------------------------------------------------------------
    def _bind_kernels(self) -> None:
        """Allocates the Q buffers and validates every kernel's buffers once."""
        n, k = self.num_envs, self.kernels
        v = self.views
        q_width = {"routed": NUM_EXPOSURES, "flat": NUM_ACTIONS}.get(self.action_mode)
        if self.action_mode == "branching":
            self._q = tuple(torch.zeros(n, b, device=self.device) for b in BRANCH_SIZES)
            k.bind_branching_select(*self._q, v["epsilon"][0:1], self.rng_step, v["factored_actions"][0],
                                    seed=self.seed)
        elif q_width is not None or self.action_mode == "flat":
            if self.action_mode == "routed" and not self.has_routing:
                raise ValueError(f"action_mode 'routed' needs an env with routing inputs (the trading env); "
                                 f"{type(self.env).__name__} has none: use action_mode 'flat'")
            if self.action_mode == "flat":
                q_width = int(self.env.action_space.n)
            self._q = (torch.zeros(n, q_width, device=self.device),)
            k.bind_epsilon_greedy(self._q[0], v["epsilon"][0:1], self.rng_step, v["actions"][0], seed=self.seed)
            if self.action_mode == "routed":
                k.bind_route(v["actions"][0], *(v[r][0] for r in ROUTING_KEYS), v["factored_actions"][0],
                             **self.route_kwargs)
        else:
            raise ValueError(f"action_mode must be one of ('routed', 'flat', 'branching'), got {self.action_mode!r}")

    def attach(self, population, flat: torch.Tensor) -> None:
        """Hands these envs to a population's rollout (:class:`~rl_zerosync.env_runner.population_rollout.
        PopulationRollout`): the columns move to ``flat`` (this member's row of the population's buffer,
        the same layout), and :meth:`run` only tells the population what to run."""
        self.packed.flat = flat
        self.views = self.packed.views = self.packed.views_of(flat)
        self._full_readback = self._leading_readback = None
        self._graph, self.population = None, population

    def reset(self) -> None:
        """Resets every env and forgets running episodes and the captured graph."""
        if self.population is not None:
            raise RuntimeError("DeviceRollout.reset: these envs are stepped by a population's rollout "
                               "(one batch of every member's envs); a member's envs are not reset alone")
        self.cur_obs.copy_(self.env.reset())
        self.stats.reset()
        self._graph = None

    # --- the hot path -------------------------------------------------------------------------
    def _select(self, t: int) -> None:
        """Q forward and action selection for step ``t`` (writes actions[t], factored_actions[t])."""
        v, k = self.views, self.kernels
        obs_t = v["obs"][t]
        with torch.inference_mode():
            if self.action_mode == "branching":
                for buf, part in zip(self._q, self.module.branch_q(obs_t)):
                    buf.copy_(part)
            else:
                self._q[0].copy_(self.module.q_values(obs_t))
        eps = v["epsilon"][t:t + 1]
        self.schedule.evaluate(self.env_steps, eps)
        eps.mul_(self._eps_scale).add_(self._eps_offset)
        if self.action_mode == "branching":
            k.branching_select(*self._q, eps, self.rng_step, v["factored_actions"][t], seed=self.seed)
            v["actions"][t].copy_(v["factored_actions"][t])
        else:
            k.epsilon_greedy(self._q[0], eps, self.rng_step, v["actions"][t], seed=self.seed)
            if self.action_mode == "routed":
                k.route(v["actions"][t], *(v[r][t] for r in ROUTING_KEYS), v["factored_actions"][t],
                        **self.route_kwargs)
            else:
                v["factored_actions"][t].copy_(v["actions"][t])

    def _step(self, t: int) -> None:
        """One env step ``t`` of the rollout, entirely on the device."""
        v, env = self.views, self.env
        if self.has_routing:
            for r, value in zip(ROUTING_KEYS, env.route_inputs()):
                v[r][t].copy_(value)
        self._select(t)
        obs, reward, terminated, truncated, final_obs = env.step(v["factored_actions"][t])
        v["rewards"][t].copy_(reward)
        v["terminateds"][t].copy_(terminated)
        v["truncateds"][t].copy_(truncated)
        # final_obs is every transition's next observation (pre-reset where one ended).
        v["next_obs"][t].copy_(final_obs)
        (v["obs"][t + 1] if t + 1 < self.num_steps else self.cur_obs).copy_(obs)
        self.rng_step.add_(1)
        self.env_steps.add_(self.env_step_increment)

    def _rollout_body(self) -> None:
        """T steps plus the end-of-rollout reductions into the flat buffer (no host read)."""
        v = self.views
        v["obs"][0].copy_(self.cur_obs)
        with torch.no_grad():
            for t in range(self.num_steps):
                self._step(t)
            self.stats.update(v["rewards"], v["terminateds"], v["truncateds"], v["stats"])
            if self.has_env_metrics:
                v["env_metrics"].copy_(self.env.metrics_vector())
                self.env.reset_metrics()

    # --- CUDA graph ---------------------------------------------------------------------------
    def run(self, *, env_steps: int, rng_step: int, mode: str, graph: bool) -> None:
        """Enqueues one rollout. ``env_steps``: global env steps so far (epsilon's t);
        ``rng_step``: action RNG counter; ``mode``: explore / greedy (eps 0) / random (eps 1)."""
        if self.population is not None:
            self.population.request(self, env_steps=env_steps, rng_step=rng_step, mode=mode, graph=graph)
            return
        scale, offset = EPSILON_MODES[mode]
        self._eps_scale.fill_(scale)
        self._eps_offset.fill_(offset)
        self.env_steps.fill_(env_steps)
        self.rng_step.fill_(rng_step)
        run_graphed(self, self._rollout_body, graph=graph)

    # --- readback -----------------------------------------------------------------------------
    @property
    def leading_bytes(self) -> torch.Tensor:
        """The leading part of the device buffer (what the same-GPU path reads back), uint8."""
        return self.packed.flat[: self.leading_nbytes]

    def leading_views(self, host: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Typed views of a host copy of :attr:`leading_bytes` (e.g. read back with other rollouts')."""
        return self.packed.views_of(host, names=LEADING_KEYS)

    def read_back(self, *, leading_only: bool) -> Dict[str, torch.Tensor]:
        """One device->host copy of the whole flat buffer (or its leading part), one event wait.

        Returns host views (valid until the next readback of the same kind).
        """
        if leading_only:
            if self._leading_readback is None:
                self._leading_readback = AsyncReadback(self.leading_nbytes, torch.uint8, self.device)
            rb, src, names = self._leading_readback, self.packed.flat[: self.leading_nbytes], LEADING_KEYS
        else:
            if self._full_readback is None:
                self._full_readback = AsyncReadback(self.packed.flat.numel(), torch.uint8, self.device)
            rb, src, names = self._full_readback, self.packed.flat, None
        rb.start(src)
        host = rb.wait()  # host read: the one boundary per rollout (event wait on this copy only)
        return self.packed.views_of(host, names=names)


def capture_rollout(env, body) -> "torch.cuda.CUDAGraph":
    """Captures ``body`` (one whole rollout of ``env``) in a CUDA graph; returns it.

    The trading env rebinds its state (a dataclass of tensors), ``final_obs`` and routing inputs
    at every step. The captured region ends by copying their final values into the tensors the
    first step reads, and the env is pointed back at those, so each replay continues where
    the previous one stopped. Envs that update their tensors in place need none of this.
    """
    carried = {name: getattr(env, name) for name in ("final_obs", *ROUTING_KEYS)
               if isinstance(getattr(env, name, None), torch.Tensor)}
    state0 = env.state if is_dataclass(getattr(env, "state", None)) else None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        body()
        if state0 is not None:
            final = env.state
            for f in fields(state0):
                first, last = getattr(state0, f.name), getattr(final, f.name)
                if isinstance(first, torch.Tensor) and first is not last:
                    first.copy_(last)
        for name, first in carried.items():
            if getattr(env, name) is not first:
                first.copy_(getattr(env, name))
    if state0 is not None:
        env.state = state0
    for name, first in carried.items():
        setattr(env, name, first)
    return graph


def run_graphed(owner, body, *, graph: bool) -> None:
    """Enqueues one rollout of ``owner`` (``.device``, ``.env``, ``._graph``): the captured graph's
    replay, or ``body`` eagerly (CPU, or ``graph`` off); the first graphed call runs ``body`` eagerly
    on a side stream (warm-up, and this call's data), then captures it (records only)."""
    use_graph = graph and owner.device.type == "cuda"
    if owner._graph is not None and use_graph:
        owner._graph.replay()
        return
    if not use_graph:
        body()
        return
    side = torch.cuda.Stream(owner.device)
    side.wait_stream(torch.cuda.current_stream(owner.device))
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream(owner.device).wait_stream(side)
    owner._graph = capture_rollout(owner.env, body)  # records only: the buffers keep the warm-up's data
