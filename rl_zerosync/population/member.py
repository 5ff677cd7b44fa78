"""One member of a running population, as the population's code may touch it.

:class:`Member` is the one way PBT, the shards and the population reach a member's trained state:
its learning rate (read from the population's :class:`~rl_zerosync.population.hyperparameters.
HyperparameterTable`), a change of a live hyperparameter, a copy of another member's networks and
Adam state (device to device, or through the host between shards) and the weight sync of its env
runner afterwards. It holds the member's training loop; nothing outside this class reaches into the
member's algorithm, learner or optimizer for these.

(:class:`rl_zerosync.population.space.Member` is the other side: a member's place in the search
space, its seed and point, before anything is built.)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rl_zerosync.population.hyperparameters import HyperparameterTable

__all__ = ["Member"]


class Member:
    """Member ``slot`` of a population's loops (see the module docstring).

    Args:
        loop: The member's :class:`~rl_zerosync.run.train.TrainLoop` (its algorithm holds its learner
            and env runner in this process).
        slot: Its row in ``table`` (its index among the members this process holds).
        table: The hyperparameters of the members this process holds.
    """

    def __init__(self, loop, slot: int, table: HyperparameterTable) -> None:
        self.loop, self.slot, self.table = loop, int(slot), table

    @property
    def _learner(self):
        learner = self.loop.algo.local_learner
        if learner is None:
            raise RuntimeError(f"member slot {self.slot}: its learner is not in this process (num_learners 0 needed)")
        return learner

    @property
    def lr(self) -> float:
        """Its learning rate now."""
        return float(self.table.get(self.slot, "algo.lr"))

    def set_hyperparameter(self, key: str, value: Any, **why: Any) -> None:
        """``key`` := ``value`` in the table (recorded with ``why``) and in the member's learner (its
        optimizer, so its checkpoints carry it); the population's batched update reads it in place."""
        self.table.set(self.slot, key, value, **why)
        if key == "algo.lr":
            self._learner.set_lr(float(value))

    def copy_from(self, source: "Member") -> None:
        """Its online and target networks and Adam state := ``source``'s (on the device), then its env
        runner acts with them."""
        from rl_zerosync.population.pbt import copy_member

        copy_member(self._learner, source._learner)
        self.loop.algo.sync_runner_weights()

    def state(self) -> list[np.ndarray]:
        """What :meth:`copy_from` moves, on the host (a copy from another process)."""
        from rl_zerosync.population.pbt import member_state

        return member_state(self._learner)

    def load_state(self, state: list[np.ndarray]) -> None:
        """:meth:`state` of another member into this one, then its env runner acts with it."""
        from rl_zerosync.population.pbt import load_member_state

        load_member_state(self._learner, state)
        self.loop.algo.sync_runner_weights()
