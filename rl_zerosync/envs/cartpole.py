"""``BatchedCartPole``: gymnasium's CartPole-v1 as a :class:`~rl_zerosync.envs.protocol.BatchedEnv`.

The dynamics, thresholds, reward (+1 per step, also on the last) and 500-step truncation of
``gymnasium.envs.classic_control.CartPoleEnv`` (Euler integration), for N envs at once on one
device, in place (fixed tensor addresses, no host read: a rollout of it can be captured in a CUDA
graph). Reset states are uniform in [-0.05, 0.05) from counter-based random numbers
(:func:`rl_zerosync.kernels.rng.uniform24` of the seed, each env's episode count and its index), so
a seed gives the same episodes on the CPU and the GPU.

``env_config`` keys (all optional): ``max_episode_steps`` (500), ``stagger`` (True: the first
episode of env i starts with a random step counter in [0, max_episode_steps), so truncations do not
come in lockstep; the physics start the same way).

Registered as ``"rl_zerosync/CartPole-v1"``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch

from rl_zerosync.envs.protocol import BatchedEnv
from rl_zerosync.kernels.rng import bits24, uniform24

GRAVITY, MASS_CART, MASS_POLE, LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASS_CART + MASS_POLE
POLE_MASS_LENGTH = MASS_POLE * LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
_KEYS = ("max_episode_steps", "stagger")
_STREAM_STAGGER = 4  # streams 0..3: the four state variables


class BatchedCartPole(BatchedEnv):
    """N CartPole-v1 envs (obs ``[x, x_dot, theta, theta_dot]``, actions 0 = push left, 1 = right)."""

    def __init__(self, env_config: Optional[Mapping[str, Any]] = None, num_envs: int = 1,
                 device: torch.device | str = "cpu", seed: Optional[int] = 0) -> None:
        cfg = dict(env_config or {})
        unknown = sorted(set(cfg) - set(_KEYS) - {"data", "env", "runner", "action_mode"})
        if unknown:
            raise ValueError(f"BatchedCartPole env_config: unknown key(s) {unknown}; allowed {list(_KEYS)}")
        self.max_steps = cfg.get("max_episode_steps", 500)
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"BatchedCartPole max_episode_steps: expected an int >= 1, got {self.max_steps!r}")
        self.stagger = cfg.get("stagger", True)
        if not isinstance(self.stagger, bool):
            raise ValueError(f"BatchedCartPole stagger: expected true or false, got {self.stagger!r}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"BatchedCartPole num_envs: expected an int >= 1, got {num_envs!r}")
        self.num_envs, self.device, self.seed = num_envs, torch.device(device), int(seed or 0)
        self.observation_space, self.action_space = self.spaces_for(cfg)
        dev = dict(device=self.device)
        self._idx = torch.arange(num_envs, dtype=torch.int64, **dev)
        self.state = torch.zeros(num_envs, 4, dtype=torch.float32, **dev)
        self.steps = torch.zeros(num_envs, dtype=torch.int64, **dev)
        self.episodes = torch.zeros(num_envs, dtype=torch.int64, **dev)
        self.obs = torch.zeros(num_envs, 4, dtype=torch.float32, **dev)
        self.final_obs = torch.zeros(num_envs, 4, dtype=torch.float32, **dev)
        self.reset()

    @classmethod
    def spaces_for(cls, env_config: Mapping[str, Any]) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([X_LIMIT * 2, np.finfo(np.float32).max, THETA_LIMIT * 2, np.finfo(np.float32).max],
                        dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def _draw_state(self, mask: torch.Tensor) -> None:
        """New start states (uniform in [-0.05, 0.05)) where ``mask`` is set, in place."""
        fresh = torch.stack([uniform24(self.seed, self.episodes, k, self._idx) for k in range(4)], dim=1)
        self.state.copy_(torch.where(mask[:, None], fresh * 0.1 - 0.05, self.state))

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        if seed is not None:
            self.seed = int(seed)
        self.episodes.zero_()
        self._draw_state(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        if self.stagger:
            self.steps.copy_((bits24(self.seed, 0, _STREAM_STAGGER, self._idx) * self.max_steps) >> 24)
        else:
            self.steps.zero_()
        self.obs.copy_(self.state)
        self.final_obs.copy_(self.state)
        return self.obs

    def step(self, actions: torch.Tensor):
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(actions.to(self.device) == 1, FORCE, -FORCE).to(torch.float32)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASS_POLE * cos * cos / TOTAL_MASS))
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
        nxt = torch.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot,
                           theta_dot + TAU * theta_acc], dim=1)
        self.steps.add_(1)
        terminated = (nxt[:, 0].abs() > X_LIMIT) | (nxt[:, 2].abs() > THETA_LIMIT)
        truncated = (self.steps >= self.max_steps) & ~terminated
        done = terminated | truncated
        self.final_obs.copy_(nxt)
        self.state.copy_(nxt)
        self.episodes.add_(done.to(torch.int64))
        self._draw_state(done)
        self.steps.mul_((~done).to(torch.int64))
        self.obs.copy_(self.state)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return self.obs, reward, terminated, truncated, self.final_obs
