"""How many bytes a population member takes on its device, and what the device has free.

Used before anything is built (``train --seeds`` deciding whether its seeds fit one population process,
:func:`estimated_member_bytes`) and by a population after its first member is built
(:mod:`rl_zerosync.population.memory`, which measures that member instead).
"""
from __future__ import annotations

import torch

HEADROOM = 1.25
"""Estimated bytes per member = the first member's learner tensors x this (envs, module copies, workspaces)."""


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
