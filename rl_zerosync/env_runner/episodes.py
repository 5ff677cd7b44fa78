"""Builds RLlib ``SingleAgentEpisode`` chunks in bulk from one host copy of a [T, N] rollout.

Python work is O(N + number of episode ends), not O(N * T): each env's column is cut at its
done steps and every segment becomes one episode chunk built from numpy slices
(``len_lookback_buffer=0``, explicit infos). A segment that is still running at the end of the
rollout keeps its ``id_`` and ``t``, so the next rollout's first segment of that env is a
continuation chunk (same ``id_``, ``t_started`` = previous ``t``, first observation = previous
last observation), exactly what ``SingleAgentEpisode.concat_episode`` expects.
"""
from __future__ import annotations

import uuid
from typing import List, Optional, Tuple

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode


class EpisodeBuilder:
    """Cuts host rollouts into episode chunks and remembers each env's running chunk."""

    def __init__(
        self, num_envs: int, observation_space: gym.Space, action_space: gym.Space
    ) -> None:
        self.num_envs = int(num_envs)
        self.observation_space = observation_space
        self.action_space = action_space
        # (id_, t) of the episode each env is in; None: the next segment starts a new episode.
        self._running: List[Optional[Tuple[str, int]]] = [None] * self.num_envs

    def reset(self) -> None:
        """Forgets running episodes (after the envs were reset)."""
        self._running = [None] * self.num_envs

    def build(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminateds: np.ndarray,
        truncateds: np.ndarray,
    ) -> List[SingleAgentEpisode]:
        """Episode chunks of a rollout given as host arrays ``[T, N, ...]``.

        ``obs[t]`` is the observation acted on at step t (post-reset), ``next_obs[t]`` the one
        after it (pre-reset final observation where the episode ended). Returns the chunks in
        env order, then time order.
        """
        num_steps, num_envs = rewards.shape
        if num_envs != self.num_envs:
            raise ValueError(f"rollout has {num_envs} envs, builder was made for {self.num_envs}")
        dones = np.logical_or(terminateds, truncateds)
        env_idx, t_idx = np.nonzero(dones.T)  # sorted by env, then time
        ends_per_env = np.split(t_idx, np.searchsorted(env_idx, np.arange(1, num_envs)))
        episodes: List[SingleAgentEpisode] = []
        for i in range(num_envs):
            start = 0
            for end in ends_per_env[i].tolist():  # host read: numpy already on the host
                episodes.append(
                    self._chunk(i, start, int(end), True, obs, next_obs, actions, rewards,
                                terminateds, truncateds)
                )
                start = int(end) + 1
            if start < num_steps:
                episodes.append(
                    self._chunk(i, start, num_steps - 1, False, obs, next_obs, actions, rewards,
                                terminateds, truncateds)
                )
        return episodes

    def _chunk(
        self,
        env: int,
        start: int,
        end: int,
        done: bool,
        obs: np.ndarray,
        next_obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminateds: np.ndarray,
        truncateds: np.ndarray,
    ) -> SingleAgentEpisode:
        """One chunk: steps ``start..end`` (inclusive) of ``env``."""
        length = end - start + 1
        running = self._running[env]
        id_, t_started = running if running is not None else (uuid.uuid4().hex, 0)
        observations = np.concatenate([obs[start:end + 1, env], next_obs[end:end + 1, env]], 0)
        terminated = bool(done and terminateds[end, env])
        truncated = bool(done and not terminated and truncateds[end, env])
        episode = SingleAgentEpisode(
            id_=id_,
            observations=observations,
            observation_space=self.observation_space,
            infos=[{} for _ in range(length + 1)],
            actions=actions[start:end + 1, env].copy(),
            action_space=self.action_space,
            rewards=rewards[start:end + 1, env].copy(),
            terminated=terminated,
            truncated=truncated,
            t_started=t_started,
            len_lookback_buffer=0,
        )
        self._running[env] = None if done else (id_, episode.t)
        return episode
