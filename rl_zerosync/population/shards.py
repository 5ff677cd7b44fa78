"""``population.shards: G``: the members spread over G Ray actors, one device each, stepped in lockstep.

Shard g holds members ``numpy.array_split(range(P), G)[g]`` (consecutive blocks) as a
:class:`~rl_zerosync.population.lockstep.Population` of its own, in its own Ray actor
(:class:`PopulationShard`: one GPU when the cluster has G of them, else one CPU; spread over the
nodes). Every lockstep iteration the driver asks every shard for one iteration and gets back each
member's validation metric of that iteration (``None`` when it did not validate) and its metrics row:
one small gather per iteration; the driver writes the rows into the population's one table
(:class:`~rl_zerosync.rundir.metrics_table.MetricsTable`). PBT ranks the whole population at the
driver; a copy between two shards moves the source member's buffers through Ray's object store (the
driver passes the reference on, it never fetches them). Members write their run directories from their shard's node: ``run.dir`` is made
absolute and must be a file system every node sees (as Ray Tune's ``storage_path``). A member's
result does not depend on its shard: 2 shards give the members of 1 shard, bit for bit on CPUs.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from rl_zerosync.config.settings import Settings, from_dict
from rl_zerosync.population.space import PopulationSettings
from rl_zerosync.rundir.metrics_table import MEMBER_COLUMN, MetricsTable


def shard_members(pop: PopulationSettings) -> list[list[int]]:
    """Member indices per shard (consecutive blocks, sizes differing by at most one)."""
    return [list(map(int, part)) for part in np.array_split(np.arange(pop.size), pop.shards)]


class _Shard:
    """The body of :class:`PopulationShard` (a plain class, so tests can run one in the driver)."""

    def __init__(self, raw: dict, source: str, indices: list[int]) -> None:
        from rl_zerosync.population.lockstep import Population
        from rl_zerosync.population.members import member_settings
        from rl_zerosync.population.space import parse_population

        settings = from_dict(raw, source)
        pop = parse_population(settings.population, source)
        self._stack = contextlib.ExitStack()
        members = [member_settings(settings, pop.members[k]) for k in indices]
        try:
            self.population = Population(settings, pop, members, self._stack, indices=indices, table=False)
        except BaseException:
            self._stack.close()
            raise
        self.index = {k: i for i, k in enumerate(indices)}

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def step(self) -> dict[str, Any]:
        """One iteration of this shard's members: whether it validated, each member's metric, their
        metrics rows (``member`` column), done."""
        validated = self.population.step_members()
        values = dict(zip(self.population.indices, self.population.values()))
        return {"validated": validated, "values": values, "rows": self.population.last_rows,
                "done": self.population.done, "iteration": self.population.iteration}

    def timing(self) -> dict:
        return {**self.population.timing, "graph_captures": self.population.graph_captures}

    def _member(self, k: int):
        return self.population.members[self.index[k]]

    def lr(self, k: int) -> float:
        return self._member(k).lr

    def member_state(self, k: int) -> list:
        return self._member(k).state()

    def load_member_state(self, k: int, state: list, lr: float, why: dict) -> None:
        member = self._member(k)
        member.load_state(state)
        member.set_hyperparameter("algo.lr", lr, **why)

    def copy_within(self, dst: int, src: int, lr: float, why: dict) -> None:
        from rl_zerosync.population.pbt import LocalMembers

        LocalMembers(self.population.members).copy(self.index[dst], self.index[src], lr, **why)

    def save(self) -> None:
        self.population.save()

    def evaluate(self, full: frozenset[int] = frozenset()) -> list[str]:
        """This shard's members' evaluations (:meth:`~rl_zerosync.population.lockstep.Population.evaluate_members`:
        whole for the members in ``full``); their summary lines."""
        return self.population.evaluate_members(full)

    def rows(self, lineage: dict[int, list]) -> list[dict]:
        return self.population.rows(lineage)

    def close(self) -> None:
        self._stack.close()


PopulationShard = ray.remote(_Shard)


class ShardMembers:
    """PBT's view of members held by shard actors (a copy within one shard stays on its device)."""

    def __init__(self, shards: list, where: dict[int, int]) -> None:
        self.shards, self.where = shards, where

    def lr(self, k: int) -> float:
        return ray.get(self.shards[self.where[k]].lr.remote(k))

    def copy(self, dst: int, src: int, lr: float, **why) -> None:
        a, b = self.shards[self.where[dst]], self.shards[self.where[src]]
        if a is b:
            ray.get(a.copy_within.remote(dst, src, lr, why))
            return
        # via the object store
        ray.get(a.load_member_state.remote(dst, b.member_state.remote(src), lr, {"copied_from": src, **why}))


def _shard_options(settings: Settings, shards: int) -> dict:
    """One GPU per shard when the members use GPUs and the cluster has one per shard, else one CPU."""
    gpu = settings.algo.num_gpus_per_learner != 0 and float(ray.cluster_resources().get("GPU", 0)) >= shards
    return {"num_gpus": int(gpu), "num_cpus": 1, "scheduling_strategy": "SPREAD"}


def start_shards(settings: Settings, pop: PopulationSettings) -> tuple[list, dict[int, int]]:
    """The shard actors (built, their members ready) and member -> shard."""
    raw = settings.to_dict()
    raw["run"]["dir"] = str(Path(settings.run.dir).resolve())  # the actors' working directory differs
    parts = shard_members(pop)
    options = _shard_options(settings, pop.shards)
    shards = [PopulationShard.options(**options).remote(raw, settings.source, part) for part in parts]
    ray.get([s.node.remote() for s in shards])  # built (a member that fails to build fails here)
    where = {k: g for g, part in enumerate(parts) for k in part}
    return shards, where


class ShardedPopulation:
    """The driver's side of a sharded population: the same steps as a one-process
    :class:`~rl_zerosync.population.lockstep.Population` (``step``, ``save``, ``rows``)."""

    def __init__(self, settings: Settings, pop: PopulationSettings) -> None:
        from rl_zerosync.population.pbt import Pbt

        self.settings, self.pop, self.parent = settings, pop, settings.run_dir
        self.metric = settings.run.eval_metric
        self.shards, self.where = start_shards(settings, pop)
        self.table = MetricsTable(self.parent).open()
        """The population's one metrics table: the shards' rows, written here."""
        self.pbt = Pbt(pop, self.metric) if pop.pbt_every else None
        self.passes = 0
        self.done = False
        self.iteration = 0
        self._t0 = time.perf_counter()

    @property
    def lineage(self) -> dict[int, list]:
        return self.pbt.lineage if self.pbt is not None else {}

    def step(self) -> list[str]:
        from rl_zerosync.population.lockstep import pass_line

        infos = ray.get([s.step.remote() for s in self.shards])
        values: list = [None] * self.pop.size
        for info in infos:
            for k, v in info["values"].items():
                values[int(k)] = v
        self.table.write(sorted((row for info in infos for row in info["rows"]), key=lambda r: r[MEMBER_COLUMN]))
        self.done = all(info["done"] for info in infos)
        self.iteration = max(info["iteration"] for info in infos)
        lines = []
        if any(info["validated"] for info in infos):
            self.passes += 1
            lines.append(pass_line(self.iteration, self.settings.run.iterations, values, self.metric, self._t0))
            if self.pbt is not None and self.passes % self.pop.pbt_every == 0:
                lines += self.pbt.exploit_explore(ShardMembers(self.shards, self.where), values, self.passes,
                                                  self.iteration)
        for line in lines:
            print(line, flush=True)
        return lines

    def timing_summary(self) -> dict:
        """Every shard's timing (:func:`~rl_zerosync.population.iteration.summarize_timing`) and the
        slowest shard's line."""
        from rl_zerosync.population.iteration import summarize_timing

        shards = [summarize_timing(t) for t in ray.get([s.timing.remote() for s in self.shards])]
        slowest = max(shards, key=lambda t: t["training_s"])
        return {"per_shard": shards, "line": f"{slowest['line']} (slowest of {len(shards)} shards)"}

    def save(self) -> None:
        ray.get([s.save.remote() for s in self.shards])

    def evaluate_members(self, full: frozenset[int] = frozenset()) -> list[str]:
        return [line for lines in ray.get([s.evaluate.remote(full) for s in self.shards]) for line in lines]

    def rows(self, lineage: dict[int, list]) -> list[dict]:
        rows = [r for part in ray.get([s.rows.remote(lineage) for s in self.shards]) for r in part]
        return sorted(rows, key=lambda r: r["member"])

    def close(self) -> None:
        self.table.close()
        with contextlib.suppress(Exception):
            ray.get([s.close.remote() for s in self.shards])
        for s in self.shards:
            with contextlib.suppress(Exception):
                ray.kill(s)
