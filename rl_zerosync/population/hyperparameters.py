"""The members' hyperparameters as one typed ``[P]`` table: one column per searchable key.

The columns are the keys ``population.search`` may vary (:data:`~rl_zerosync.presets.SEARCH_KEYS`),
each typed by its field of the settings (:class:`~rl_zerosync.config.settings.AlgoSettings`: ``float``
columns are float64 arrays, ``int`` columns int64, the epsilon schedule an object column), filled
from every member's own settings. PBT writes it (:meth:`HyperparameterTable.set`, through the member's
:class:`~rl_zerosync.population.member.Member`); what a write changes in training reaches the member's
learner and, with the population's batched update, the ``[P, 1]`` device rows the update reads, in
place (no CUDA graph is captured again: ``PopulationUpdate.graph_captures``). Only :data:`LIVE` keys
may change during training (the others are baked into the replay's n-step returns, the runner's
schedule or the target update's cadence); the table's :attr:`~HyperparameterTable.history` is the
lineage of every change.
"""
from __future__ import annotations

import typing
from typing import Any, Sequence

import numpy as np

from rl_zerosync.config.settings import AlgoSettings, Settings
from rl_zerosync.presets import ALGO_KEYS, LIVE_KEYS, SEARCH_KEYS

__all__ = ["LIVE", "HyperparameterTable"]

LIVE = LIVE_KEYS
"""Keys a member may change while it trains (declared ``search="live"``; PBT's explore step perturbs
the learning rate)."""


def _dtype(name: str) -> Any:
    """A column's numpy dtype from the type of ``AlgoSettings.<name>``."""
    hint = typing.get_type_hints(AlgoSettings)[name]
    return {float: np.float64, int: np.int64}.get(hint, object)


class HyperparameterTable:
    """Every member's searchable hyperparameters (see the module docstring).

    Args:
        members: Every member's settings, in member order.
    """

    def __init__(self, members: Sequence[Settings]) -> None:
        if not members:
            raise ValueError("HyperparameterTable: no members")
        self.keys = tuple(SEARCH_KEYS)
        """The columns: the searchable keys, in :data:`SEARCH_KEYS` order."""
        self.columns: dict[str, np.ndarray] = {}
        for key in self.keys:
            name = key.split(".", 1)[1]
            col = np.empty(len(members), dtype=_dtype(name))
            for k, settings in enumerate(members):
                col[k] = getattr(settings.algo, name)
            self.columns[key] = col
        self.history: list[dict] = []
        """Every change, in order: ``{"member", "key", "before", "after", **why}``."""

    @property
    def size(self) -> int:
        """P."""
        return len(next(iter(self.columns.values())))

    def get(self, k: int, key: str) -> Any:
        """Member ``k``'s value of ``key`` (a Python number, or the schedule)."""
        value = self._column(key)[self._member(k)]
        return value.item() if isinstance(value, np.generic) else value

    def row(self, k: int) -> dict[str, Any]:
        """Member ``k``'s values by key."""
        return {key: self.get(k, key) for key in self.keys}

    def set(self, k: int, key: str, value: Any, **why: Any) -> Any:
        """Member ``k``'s ``key`` := ``value`` (a :data:`LIVE` key, by its declared rule), recorded in
        :attr:`history` with ``why``; returns the value before. The caller applies it to the member
        (:meth:`Member.set_hyperparameter <rl_zerosync.population.member.Member.set_hyperparameter>`)."""
        col, k = self._column(key), self._member(k)
        if key not in LIVE:
            raise ValueError(f"HyperparameterTable.set: {key} cannot change while a member trains; "
                             f"expected one of {list(LIVE)}")
        rule = ALGO_KEYS[key.split(".", 1)[1]].rule
        if not rule.allows(value):
            raise ValueError(f"HyperparameterTable.set: {key} of member {k} must be {rule.expected}, got {value!r}")
        before = self.get(k, key)
        col[k] = value
        self.history.append({"member": k, "key": key, "before": before, "after": self.get(k, key), **why})
        return before

    def _column(self, key: str) -> np.ndarray:
        if key not in self.columns:
            raise KeyError(f"HyperparameterTable: no column {key!r}; expected one of {list(self.keys)}")
        return self.columns[key]

    def _member(self, k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) < self.size:
            raise IndexError(f"HyperparameterTable: member {k!r} out of range 0..{self.size - 1}")
        return int(k)
