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

from rl_zerosync.kernels.replay_add import nstep_tables
from rl_zerosync.kernels.reference import nstep_columns

__all__ = ["nstep_transitions"]


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
    (``gamma**k``, float32) and ``terminateds`` (bool), all on the input device. The torch ops are
    ``rl_zerosync.kernels.reference.nstep_columns`` (the twin of the ``replay_add`` kernel, which
    writes the same transitions straight into the replay's rows).
    """
    scales, discounts = nstep_tables(gamma, n_step, rewards.device)
    return nstep_columns(obs, next_obs, actions, rewards, terminateds, truncateds, scales, discounts)
