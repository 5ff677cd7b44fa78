"""One rollout of every population member's envs: ``P x N`` envs stepped as one batch.

:class:`PopulationRollout` takes the members' :class:`~rl_zerosync.env_runner.rollout.DeviceRollout`
(one per member's :class:`~rl_zerosync.env_runner.gpu_env_runner.GPUEnvRunner`, same shapes) and
steps all their envs together (:class:`~rl_zerosync.envs.population_env.PopulationTradingEnv`):

* one buffer of P rows, row k in member k's own rollout layout; member k's rollout is pointed at
  its row (:meth:`DeviceRollout.attach`), so its runner reads back, logs and adds to its replay
  exactly as before, and the population's one readback
  (:class:`~rl_zerosync.env_runner.population_readback.PopulationReadback`) still reads every row;
* one env step, one epsilon evaluation (each member its own schedule), one action selection and
  one routing launch per time step for all ``P x N`` envs; each member keeps its own epsilon
  schedule, action seed and RNG streams, its Q network and its episode statistics;
* the Q forward of every member: each member's own module on its rows (no ``stacked``: with
  the per-member selection kernel it is bit for bit the member's own rollout), or one batched
  forward of the members' weights stacked with a member dimension (``stacked``, with
  ``epsilon_greedy_members``: the same actions up to float32 rounding of the Q values);
* on CUDA the whole T-step rollout of the population is one CUDA graph replay, no host read.

The members' runners launch as before (``start_device_sample``): their rollout's ``run`` only asks
(:meth:`request`); :meth:`launch` then enqueues the one population rollout. Members are in lockstep:
every request of one launch has the same env-step count, RNG step and mode (else a named error).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from rl_zerosync.env_runner.epsilon import MemberEpsilonSchedules
from rl_zerosync.env_runner.rollout import EPSILON_MODES, ROUTING_KEYS, DeviceRollout, run_graphed
from rl_zerosync.env_runner.packed import ALIGN_BYTES
from rl_zerosync.envs.population_env import PopulationTradingEnv
from rl_zerosync.kernels.rng import seed_keys


def together_blocker(rollouts: Sequence[DeviceRollout]) -> Optional[str]:
    """Why these members' envs cannot be stepped as one batch (None: they can)."""
    from rl_zerosync.envs.batched import BatchedTradingEnv

    first = rollouts[0]
    for k, ro in enumerate(rollouts):
        if not isinstance(ro.env, BatchedTradingEnv):
            return f"member {k}'s env is {type(ro.env).__name__}, not the trading env"
        if ro.action_mode not in ("routed", "flat"):
            return f"member {k}'s action_mode is {ro.action_mode!r} (routed or flat are batched)"
        mine = (ro.device, ro.num_envs, ro.num_steps, ro.obs_dim, ro.action_mode, ro.route_kwargs,
                ro.env_step_increment, ro.packed.nbytes)
        theirs = (first.device, first.num_envs, first.num_steps, first.obs_dim, first.action_mode,
                  first.route_kwargs, first.env_step_increment, first.packed.nbytes)
        if mine != theirs:
            return f"member {k}'s rollout shape {mine} differs from member 0's {theirs}"
    return None


class PopulationRollout:
    """The members' envs as one batch and its T-step rollout (see the module docstring).

    Args:
        rollouts: Every member's device rollout (reset, not yet stepped: their envs are continued
            from their current state).
        stacked: The members' runner modules stacked with a member dimension
            (:class:`~rl_zerosync.learner.stacked_q.StackedQ`: ``refresh()``, ``q_values(x [P, E, D])``):
            one batched Q forward and the member-batched selection kernel. None: each member's own
            module and selection launch.
    """

    def __init__(self, rollouts: Sequence[DeviceRollout], *, stacked=None) -> None:
        why = together_blocker(rollouts)
        if why is not None:
            raise ValueError(f"PopulationRollout: {why}")
        self.rollouts: List[DeviceRollout] = list(rollouts)
        first = self.rollouts[0]
        self.size = p = len(self.rollouts)
        self.device, self.num_envs, self.num_steps = first.device, first.num_envs, first.num_steps
        self.action_mode = first.action_mode
        self.kernels, self.route_kwargs = first.kernels, dict(first.route_kwargs)
        self.env_step_increment = first.env_step_increment
        self.env = PopulationTradingEnv([ro.env for ro in self.rollouts])
        self.has_env_metrics = first.has_env_metrics
        row = -(-max(first.packed.nbytes, 1) // ALIGN_BYTES) * ALIGN_BYTES
        self.flat = torch.zeros((p, row), dtype=torch.uint8, device=self.device)
        self.cur_obs = torch.cat([ro.cur_obs for ro in self.rollouts])
        for k, ro in enumerate(self.rollouts):
            ro.attach(self, self.flat[k, : max(first.packed.nbytes, 1)])
        self.views = self._population_views(first)
        dev = dict(device=self.device)
        n_all = p * self.num_envs
        width = int(first._q[0].shape[1])
        self._q = torch.zeros(n_all, width, **dev)
        self._actions = torch.zeros(n_all, dtype=torch.int64, **dev)
        self._factored = torch.zeros(n_all, dtype=torch.int64, **dev)
        self._eps = torch.zeros(p, dtype=torch.float32, **dev)
        self._eps_scale = torch.ones(1, dtype=torch.float32, **dev)
        self._eps_offset = torch.zeros(1, dtype=torch.float32, **dev)
        self.env_steps = torch.zeros(1, dtype=torch.int64, **dev)
        self.rng_step = torch.zeros(1, dtype=torch.int64, **dev)
        self._keys = seed_keys([ro.seed for ro in self.rollouts], self.device)
        self._schedules = MemberEpsilonSchedules([ro.schedule.schedule for ro in self.rollouts], self.device)
        self._stacked = stacked
        self._requests: Dict[int, tuple] = {}
        self._index = {id(ro): k for k, ro in enumerate(self.rollouts)}
        self._graph: Optional[torch.cuda.CUDAGraph] = None

    def _population_views(self, first: DeviceRollout) -> Dict[str, torch.Tensor]:
        """Every column as a ``[P, ...]`` view across the members' rows."""
        out = {}
        for c in first.packed.columns:
            start, end = first.packed.offsets[c.name], first.packed.ends[c.name]
            out[c.name] = self.flat[:, start:end].view(c.dtype).view(self.size, *c.shape)
        return out

    @property
    def batched(self) -> bool:
        """One batched Q forward and ``epsilon_greedy_members`` (else each member's own)."""
        return self._stacked is not None

    @property
    def graph_captured(self) -> bool:
        return self._graph is not None

    # --- launching ----------------------------------------------------------------------------
    def request(self, rollout: DeviceRollout, *, env_steps: int, rng_step: int, mode: str, graph: bool) -> None:
        """A member's rollout asks for this iteration's rollout (its ``run``); :meth:`launch` runs it."""
        self._requests[self._index[id(rollout)]] = (int(env_steps), int(rng_step), mode, bool(graph))

    def launch(self) -> None:
        """Enqueues the one rollout of every member's envs (after the members' requests); no host read."""
        if not self._requests:
            raise RuntimeError("PopulationRollout.launch: no member asked for a rollout")
        asked = sorted(self._requests.items())
        self._requests = {}
        if len({args for _, args in asked}) != 1:
            raise RuntimeError("PopulationRollout.launch: the members are not in lockstep; (env steps, RNG step, "
                               f"mode, graph) per member: {dict(asked)}")
        env_steps, rng_step, mode, graph = asked[0][1]
        scale, offset = EPSILON_MODES[mode]
        self._eps_scale.fill_(scale)
        self._eps_offset.fill_(offset)
        self.env_steps.fill_(env_steps)
        self.rng_step.fill_(rng_step)
        if self._stacked is not None:
            self._stacked.refresh()  # the members' runner weights, synced after their updates
        run_graphed(self, self._rollout_body, graph=graph)

    # --- the hot path -------------------------------------------------------------------------
    def _select(self, t: int) -> None:
        """Q forward and action selection of every member's envs for step ``t``."""
        v, k, n = self.views, self.kernels, self.num_envs
        obs_t = v["obs"][:, t]
        if self._stacked is not None:
            self._schedules.evaluate(self.env_steps, self._eps)
            self._eps.mul_(self._eps_scale).add_(self._eps_offset)
            with torch.inference_mode():
                self._q.view(self.size, n, -1).copy_(self._stacked.q_values(obs_t))
            k.epsilon_greedy_members(self._q, self._eps, self.rng_step, self._keys, self._actions)
        else:
            for m, ro in enumerate(self.rollouts):
                rows, eps = slice(m * n, (m + 1) * n), self._eps[m:m + 1]
                ro.schedule.evaluate(self.env_steps, eps)
                eps.mul_(self._eps_scale).add_(self._eps_offset)
                with torch.inference_mode():
                    self._q[rows].copy_(ro.module.q_values(obs_t[m]))
                k.epsilon_greedy(self._q[rows], eps, self.rng_step, self._actions[rows], seed=ro.seed)
        v["epsilon"][:, t].copy_(self._eps)
        if self.action_mode == "routed":
            k.route(self._actions, *self.env.route_inputs(), self._factored, **self.route_kwargs)
        else:
            self._factored.copy_(self._actions)
        v["actions"][:, t].copy_(self._actions.view(self.size, n))
        v["factored_actions"][:, t].copy_(self._factored.view(self.size, n))

    def _step(self, t: int) -> None:
        v, env, p, n = self.views, self.env, self.size, self.num_envs
        for r, value in zip(ROUTING_KEYS, env.route_inputs()):
            v[r][:, t].copy_(value.view(p, n))
        self._select(t)
        obs, reward, terminated, truncated, final_obs = env.step(self._factored)
        v["rewards"][:, t].copy_(reward.view(p, n))
        v["terminateds"][:, t].copy_(terminated.view(p, n))
        v["truncateds"][:, t].copy_(truncated.view(p, n))
        v["next_obs"][:, t].copy_(final_obs.view(p, n, -1))
        (v["obs"][:, t + 1] if t + 1 < self.num_steps else self.cur_obs.view(p, n, -1)).copy_(obs.view(p, n, -1))
        self.rng_step.add_(1)
        self.env_steps.add_(self.env_step_increment)

    def _rollout_body(self) -> None:
        """T steps of every member's envs, then each member's episode statistics and env metrics."""
        v = self.views
        v["obs"][:, 0].copy_(self.cur_obs.view(self.size, self.num_envs, -1))
        with torch.no_grad():
            for t in range(self.num_steps):
                self._step(t)
            for ro in self.rollouts:
                ro.stats.update(ro.views["rewards"], ro.views["terminateds"], ro.views["truncateds"], ro.views["stats"])
            if self.has_env_metrics:
                v["env_metrics"].copy_(self.env.metrics_vector())
                self.env.reset_metrics()
