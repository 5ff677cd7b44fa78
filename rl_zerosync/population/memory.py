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

HEADROOM = 1.25
"""Estimated bytes per member = the first member's learner tensors x this (envs, module copies, workspaces)."""


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


def free_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` (None when unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(algo, members: int, settings) -> None:
    """Raise a named :class:`SettingsError` when ``members`` members will not fit (see the module docstring)."""
    learner = _learner(algo)
    if learner is None or members <= 1:
        return
    device = learner._device  # noqa: SLF001 - the learner's device
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


def estimated_member_bytes(settings) -> int:
    """Bytes one member of ``settings`` will hold on its device, estimated from the settings alone (no
    algorithm built): its replay rows (two observations, action, reward, discount, flag) and five
    copies of its network (parameters, gradients, two Adam moments, target), x :data:`HEADROOM`."""
    from rl_zerosync.config.settings import to_rllib_config
    from rl_zerosync.envs.registry import spaces_of

    config = to_rllib_config(settings)
    obs_space, act_space = spaces_of(config.env, config.env_config)
    obs = int(obs_space.shape[0])
    heads = {"routed": 5, "flat": int(act_space.n), "branching": 1 + 5 + 3 + 3}[settings.model.action_mode]
    widths = [obs, *[int(h) for h in settings.model.hidden], heads]
    norm = 2 if settings.model.layernorm else 0
    params = sum(a * b + b + (norm * b if i < len(widths) - 2 else 0)
                 for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])))
    row = 2 * 4 * obs + 32
    return int((settings.learner.typed.replay_capacity * row + 5 * 4 * params) * HEADROOM)


def member_device(settings) -> torch.device:
    """The device a member of ``settings`` learns on (``algo.num_gpus_per_learner``: -1 = a GPU when
    there is one, 0 = the CPU)."""
    gpus = settings.algo.num_gpus_per_learner
    return torch.device("cuda" if gpus != 0 and torch.cuda.is_available() else "cpu")
