"""Whether P members fit on their device, estimated from the first member before the others are built.

The first member is built; the bytes it holds on its device (the learner's replay rows, priorities,
parameters, gradients and Adam moments: the tensors that grow with the replay capacity and the
network; the env runner's envs and the module copies are a few percent more, covered by
:data:`HEADROOM`) times P must fit in what the device has free (CUDA: ``torch.cuda.mem_get_info``
after the first member; CPU: ``MemAvailable`` of ``/proc/meminfo``). Otherwise a named error says
the estimate, what is free and the largest P that fits, before P - 1 more members are built.
"""
from __future__ import annotations

import torch

from rl_zerosync.config.yaml_values import SettingsError
from rl_zerosync.run.fits import HEADROOM, free_bytes

def _learner(algo):
    return algo.local_learner


def member_bytes(algo) -> int:
    """Bytes of the first member's learner tensors on its device (replay + flat parameters / moments)."""
    learner = _learner(algo)
    if learner is None:
        return 0
    total = 0
    replay = learner.replay
    for t in (getattr(replay, "_packed", None), getattr(replay, "priorities", None)):
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    flat = learner.flat_adam
    for t in (flat.flat_params, flat.flat_grads, flat.exp_avg, flat.exp_avg_sq):
        total += t.numel() * t.element_size()
    return total


def check_fits(algo, members: int, settings) -> None:
    """Raise a named :class:`SettingsError` when ``members`` members will not fit (see the module docstring)."""
    learner = _learner(algo)
    if learner is None or members <= 1:
        return
    device = learner.device
    per = int(member_bytes(algo) * HEADROOM)
    free = free_bytes(device)
    if free is None or per <= 0:
        return
    need = per * (members - 1)  # the first member is built and already counted in what is free
    if need > free:
        fits = 1 + free // per
        raise SettingsError(
            f"{settings.source}: population: {members} members x {per / 2**20:,.0f} MiB each "
            f"(learner.replay_capacity {settings.learner.typed.replay_capacity:,} rows, the network and its "
            f"moments, x{HEADROOM} headroom) need {need / 2**30:,.2f} GiB more on {device}, "
            f"{free / 2**30:,.2f} GiB free: at most {fits} member(s) fit; use fewer members, a smaller "
            f"replay_capacity or population.shards")

