"""Completed-episode return/length statistics of a [T, N] rollout, computed on the device.

Vectorized over the whole rollout after the T steps (a handful of kernels per ``sample()``,
none per step): with ``cs = cumsum(rewards)`` along time and ``prev[t]`` the last done index
strictly before ``t`` (a running max of done indices), the return of an episode ending at
``t`` is ``cs[t] - cs[prev[t]]`` (plus the return carried over from earlier rollouts when no
done precedes it), and its length is ``t - prev[t]`` (plus the carried length).
"""
from __future__ import annotations

from typing import Dict, Union

import torch

STAT_NAMES = ("count", "return_sum", "return_min", "return_max", "len_sum", "len_min", "len_max")
"""Layout of the f64 stats vector; min/max are +inf/-inf when ``count == 0``."""
NUM_STATS = len(STAT_NAMES)


class EpisodeStatsTracker:
    """Keeps each env's running return/length across rollouts and reduces completed episodes."""

    def __init__(self, num_steps: int, num_envs: int, device: Union[str, torch.device]) -> None:
        self.device = torch.device(device)
        self.num_steps = int(num_steps)
        self.num_envs = int(num_envs)
        self.carry_return = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        self.carry_len = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._t = torch.arange(num_steps, dtype=torch.int64, device=self.device).unsqueeze(1)
        self._minus_one = torch.full((1, num_envs), -1, dtype=torch.int64, device=self.device)

    def reset(self) -> None:
        """Forgets running episodes (after the envs were reset)."""
        self.carry_return.zero_()
        self.carry_len.zero_()

    def update(
        self,
        rewards: torch.Tensor,
        terminateds: torch.Tensor,
        truncateds: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        """Writes the stats of episodes completed in this [T, N] rollout into ``out`` (f64[7]).

        Advances the carried running return/length. Device ops only, no host read.
        """
        dones = terminateds | truncateds
        cs = rewards.to(torch.float64).cumsum(0)
        done_idx = torch.where(dones, self._t, -1).cummax(0).values  # last done at or before t
        prev = torch.cat([self._minus_one, done_idx[:-1]], 0)  # last done strictly before t
        has_prev = prev >= 0
        base = torch.where(has_prev, cs.gather(0, prev.clamp(min=0)), -self.carry_return)
        ep_return = cs - base
        ep_len = self._t - prev + torch.where(has_prev, 0, self.carry_len)
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        inf = torch.full((), float("inf"), dtype=torch.float64, device=self.device)
        ep_len_f = ep_len.to(torch.float64)
        stats = torch.stack(
            [
                dones.sum().to(torch.float64),
                torch.where(dones, ep_return, zero).sum(),
                torch.where(dones, ep_return, inf).amin(),
                torch.where(dones, ep_return, -inf).amax(),
                torch.where(dones, ep_len_f, zero).sum(),
                torch.where(dones, ep_len_f, inf).amin(),
                torch.where(dones, ep_len_f, -inf).amax(),
            ]
        )
        out.copy_(stats)
        # Running episode at the end of the rollout: since the last done (inclusive) or carried.
        last = done_idx[-1]
        has_last = last >= 0
        cs_last = cs[-1]
        self.carry_return.copy_(
            torch.where(has_last, cs_last - cs.gather(0, last.clamp(min=0).unsqueeze(0))[0],
                        self.carry_return + cs_last)
        )
        self.carry_len.copy_(
            torch.where(has_last, self.num_steps - 1 - last, self.carry_len + self.num_steps)
        )

    @staticmethod
    def to_dict(stats: torch.Tensor) -> Dict[str, float]:
        """Host stats vector -> ``{name: value}``."""
        values = stats.tolist()  # host read: stats already on the host (one readback)
        return dict(zip(STAT_NAMES, values))
