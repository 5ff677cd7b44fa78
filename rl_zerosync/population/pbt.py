"""Population based training: exploit (copy the top members) and explore (perturb the learning rate).

Every ``population.pbt_every`` validation passes the members are ranked by this pass's validation
metric (a NaN ranks last; ties by member index). Each of the bottom ``n = max(1, floor(pbt_quantile
* P))`` members copies, from a top-``n`` member drawn at random, its trained network, its target
network and its Adam state (moments and step count): device-to-device copies of the learner's flat
buffers, no host round trip. It keeps its own replay, env runner state, seed and best checkpoint.
Then its learning rate is the source's times 0.8 or 1.2 (drawn; written into the population's
hyperparameter table and read in place by its batched update: no CUDA graph is captured again), and
the env runner gets the new weights. Every copy is a lineage entry of the member that received it (``population.json``).

The draws come from one generator seeded with ``population.search_seed`` and the pass number, so a
population with PBT is as repeatable as one without.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

PERTURB = (0.8, 1.2)
"""Factors a copied learning rate is multiplied by (one drawn per copy)."""


def _pairs(learner):
    from ray.rllib.core import DEFAULT_MODULE_ID

    module = learner.module[DEFAULT_MODULE_ID]
    module = module.unwrapped() if hasattr(module, "unwrapped") else module
    return module.get_target_network_pairs()


def _buffers(learner) -> list[torch.Tensor]:
    """What a copy moves: the flat parameters, Adam moments and step count, the target network."""
    flat = learner.flat_adam
    targets = [p for _, target in _pairs(learner) for p in target.parameters()]
    return [flat.flat_params, flat.exp_avg, flat.exp_avg_sq, flat.step_count, *targets]


def copy_member(dst, src) -> None:
    """``dst`` learner := ``src`` learner's online and target networks and Adam state (on the device)."""
    with torch.no_grad():
        for mine, theirs in zip(_buffers(dst), _buffers(src)):
            mine.copy_(theirs)


def member_state(learner) -> list[np.ndarray]:
    """:func:`copy_member`'s buffers on the host (to move between processes through Ray's object store)."""
    return [t.detach().cpu().numpy().copy() for t in _buffers(learner)]  # host read: a PBT copy between shards


def load_member_state(learner, state: list[np.ndarray]) -> None:
    """The buffers :func:`member_state` took, into ``learner`` (shapes checked)."""
    buffers = _buffers(learner)
    if len(buffers) != len(state) or any(tuple(b.shape) != tuple(s.shape) for b, s in zip(buffers, state)):
        raise ValueError("load_member_state: the state's buffers do not match this member's network")
    with torch.no_grad():
        for mine, value in zip(buffers, state):
            mine.copy_(torch.from_numpy(np.array(value, copy=True)).to(mine.device))  # Ray's arrays are read-only


def rank(values: Sequence[float | None]) -> list[int]:
    """Member indices, best first, by ``values`` (None / NaN last; ties by index)."""
    def key(k):
        v = values[k]
        ok = v is not None and math.isfinite(v)
        return (not ok, -(v if ok else 0.0), k)

    return sorted(range(len(values)), key=key)


class LocalMembers:
    """PBT's view of members held in this process (:class:`~rl_zerosync.population.member.Member`)."""

    def __init__(self, members: list) -> None:
        self.members = members

    def lr(self, k: int) -> float:
        return self.members[k].lr

    def copy(self, dst: int, src: int, lr: float, **why) -> None:
        """Member ``dst`` takes member ``src``'s networks and Adam state and the learning rate ``lr``."""
        self.members[dst].copy_from(self.members[src])
        self.members[dst].set_hyperparameter("algo.lr", lr, copied_from=src, **why)


class Pbt:
    """The exploit/explore step of a population (see the module docstring)."""

    def __init__(self, pop, metric: str) -> None:
        self.pop, self.metric = pop, metric
        self.lineage: dict[int, list[dict]] = {}

    def exploit_explore(self, members, values: Sequence[float | None], passes: int, iteration: int) -> list[str]:
        """One step after validation pass ``passes`` on ``members`` (:class:`LocalMembers` or the shards'
        view), ranked by ``values`` (this pass's validation metric per member); returns lines to print."""
        order = rank(values)
        n = max(1, int(math.floor(self.pop.pbt_quantile * len(values))))
        if 2 * n > len(values):
            return []
        top, bottom = order[:n], order[-n:]
        rng = np.random.default_rng([int(self.pop.search_seed), int(passes)])
        lines = []
        for dst in bottom:
            src = int(top[int(rng.integers(len(top)))])
            factor = float(PERTURB[int(rng.integers(len(PERTURB)))])
            lr_src, lr_old = members.lr(src), members.lr(dst)
            members.copy(dst, src, lr_src * factor, reason="pbt", pbt_pass=int(passes), iteration=int(iteration))
            self.lineage.setdefault(dst, []).append({
                "pass": int(passes), "iteration": int(iteration), "copied_from": src,
                "validation": values[dst], "source_validation": values[src],
                "lr_before": lr_old, "lr_after": lr_src * factor})
            lines.append(f"pbt pass {passes}: member{dst} ({_fmt(values[dst])}) <- member{src} "
                         f"({_fmt(values[src])}), lr {lr_src:.3g} x {factor:g}")
        return lines


def _fmt(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:+.3f}"
