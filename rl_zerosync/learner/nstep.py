"""n-step transitions of a time-major rollout, computed on the rollout's device (no host read).

For step ``t`` of env ``i`` the window length is
``k = min(n, T - t, 1 + (first j >= 0 with done[t + j]))`` (``done = terminated | truncated``): the
window stops at the first episode end and at the end of the rollout. Then

* ``return  = sum_{j < k} gamma**j * reward[t + j]``
* ``next_obs = next_obs[t + k - 1]`` (the pre-reset final observation when the window ends an
  episode; the rollout contract stores that in ``next_obs``)
* ``terminated = terminated[t + k - 1]`` (a truncated window still bootstraps)
* ``discount = gamma**k`` (the learner bootstraps with ``discount * (1 - terminated) * Q``).
"""
from __future__ import annotations

from typing import Dict

import torch

__all__ = ["nstep_transitions"]


def _shift(x: torch.Tensor, j: int, fill) -> torch.Tensor:
    """``x[t + j]`` along dim 0 with ``fill`` past the end (static shapes)."""
    if j == 0:
        return x
    pad = torch.full((j,) + tuple(x.shape[1:]), fill, dtype=x.dtype, device=x.device)
    return torch.cat([x[j:], pad], dim=0)


def nstep_transitions(
    *,
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    n_step: int,
) -> Dict[str, torch.Tensor]:
    """Flattened (time-major, ``T * N`` rows) n-step transitions of a ``[T, N, ...]`` rollout.

    Returns ``obs``, ``next_obs``, ``actions``, ``rewards`` (the n-step return), ``discounts``
    (``gamma**k``, float32) and ``terminateds`` (bool), all on the input device.
    """
    t_len, n_envs = rewards.shape
    done = terminateds | truncateds
    ret = torch.zeros((t_len, n_envs), dtype=torch.float32, device=rewards.device)
    k = torch.zeros((t_len, n_envs), dtype=torch.int64, device=rewards.device)
    open_ = torch.ones((t_len, n_envs), dtype=torch.bool, device=rewards.device)
    for j in range(min(n_step, t_len)):
        valid = _shift(torch.ones_like(done), j, False)
        active = open_ & valid
        ret = ret + torch.where(active, _shift(rewards.to(torch.float32), j, 0.0) * (gamma**j), 0.0)
        k = k + active.to(torch.int64)
        open_ = active & ~_shift(done, j, True)
    last = torch.arange(t_len, device=rewards.device).unsqueeze(1) + k - 1
    env = torch.arange(n_envs, device=rewards.device).unsqueeze(0).expand(t_len, n_envs)
    rows = t_len * n_envs
    return {
        "obs": obs.reshape((rows,) + tuple(obs.shape[2:])),
        "next_obs": next_obs[last, env].reshape((rows,) + tuple(next_obs.shape[2:])),
        "actions": actions.reshape(rows),
        "rewards": ret.reshape(rows),
        "discounts": torch.pow(torch.full_like(ret, gamma), k.to(torch.float32)).reshape(rows),
        "terminateds": terminateds[last, env].reshape(rows),
    }
