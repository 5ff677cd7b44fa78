"""Population based training: exploit (copy the top members) and explore (perturb the learning rate).

Every ``population.pbt_every`` validation passes the members are ranked by this pass's validation
metric (a NaN ranks last; ties by member index). Each of the bottom ``n = max(1, floor(pbt_quantile
* P))`` members copies, from a top-``n`` member drawn at random, its trained network, its target
network and its Adam state (moments and step count): device-to-device copies of the learner's flat
buffers, no host round trip. It keeps its own replay, env runner state, seed and best checkpoint.
Then its learning rate is the source's times 0.8 or 1.2 (drawn), and the env runner gets the new
weights. Every copy is a lineage entry of the member that received it (``population.json``).

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


def _learner(loop):
    return loop.algo.local_learner


def _pairs(learner):
    from ray.rllib.core import DEFAULT_MODULE_ID

    module = learner.module[DEFAULT_MODULE_ID]
    module = module.unwrapped() if hasattr(module, "unwrapped") else module
    return module.get_target_network_pairs()


def copy_member(dst, src) -> None:
    """``dst`` learner := ``src`` learner's online and target networks and Adam state (on the device)."""
    a, b = dst.flat_adam, src.flat_adam
    with torch.no_grad():
        for mine, theirs in ((a.flat_params, b.flat_params), (a.exp_avg, b.exp_avg),
                             (a.exp_avg_sq, b.exp_avg_sq), (a.step_count, b.step_count)):
            mine.copy_(theirs)
        for (_, t_dst), (_, t_src) in zip(_pairs(dst), _pairs(src)):
            for p_dst, p_src in zip(t_dst.parameters(), t_src.parameters()):
                p_dst.copy_(p_src)
    if getattr(dst, "_graphed", None) is not None:
        dst._graphed.reset()  # noqa: SLF001 - buffers changed under a captured graph: capture again


def rank(values: Sequence[float | None]) -> list[int]:
    """Member indices, best first, by ``values`` (None / NaN last; ties by index)."""
    def key(k):
        v = values[k]
        ok = v is not None and math.isfinite(v)
        return (not ok, -(v if ok else 0.0), k)

    return sorted(range(len(values)), key=key)


class Pbt:
    """The exploit/explore step of a population (see the module docstring)."""

    def __init__(self, pop, metric: str) -> None:
        self.pop, self.metric = pop, metric
        self.lineage: dict[int, list[dict]] = {}

    def exploit_explore(self, loops: list, passes: int, iteration: int) -> list[str]:
        """One step after validation pass ``passes``; returns the lines to print."""
        values = [loop.result.get("eval", {}).get(f"validation_{self.metric}") for loop in loops]
        order = rank(values)
        n = max(1, int(math.floor(self.pop.pbt_quantile * len(loops))))
        if 2 * n > len(loops):
            return []
        top, bottom = order[:n], order[-n:]
        rng = np.random.default_rng([int(self.pop.search_seed), int(passes)])
        lines = []
        for dst in bottom:
            src = int(top[int(rng.integers(len(top)))])
            factor = float(PERTURB[int(rng.integers(len(PERTURB)))])
            learner_dst, learner_src = _learner(loops[dst]), _learner(loops[src])
            lr_src = float(learner_src.optimizer.param_groups[0]["lr"])
            lr_old = float(learner_dst.optimizer.param_groups[0]["lr"])
            copy_member(learner_dst, learner_src)
            learner_dst.set_lr(lr_src * factor)
            loops[dst].algo._sync_weights()  # noqa: SLF001 - the runner acts with the copied network
            self.lineage.setdefault(dst, []).append({
                "pass": int(passes), "iteration": int(iteration), "copied_from": src,
                "validation": values[dst], "source_validation": values[src],
                "lr_before": lr_old, "lr_after": lr_src * factor})
            lines.append(f"pbt pass {passes}: member{dst} ({_fmt(values[dst])}) <- member{src} "
                         f"({_fmt(values[src])}), lr {lr_src:.3g} x {factor:g}")
        return lines


def _fmt(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:+.3f}"
