"""Which episodes an evaluation counts, so that their mean does not depend on their length.

Counting the episodes that happen to end inside a fixed number of rollouts favours the short ones
(a long episode is less likely to end in the window: an env with true mean return 20 reported 7.1).
:class:`EvalWindow` instead decides for each episode *when it starts* whether it counts, and the
evaluation runs until every counted episode has ended:

* an episode already running when the window opens never counts (it started before; with staggered
  starts it is also shortened);
* ``episodes`` unit, ``k`` episodes over N envs: env ``i`` counts the next ``k // N`` (+1 for
  ``i < k % N``) episodes it starts, a quota fixed before any length is seen;
* ``timesteps`` unit, a window of ``W`` steps per env: every episode that starts inside the window
  counts (each one finishes, however long it runs past ``W``).

Whether an episode counts depends only on the episodes before it, never on its own length or
return, so the mean over counted episodes is the true mean within sampling error. Bookkeeping is on
the host, from the rewards and done flags the rollout's one readback already copied.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


class EvalWindow:
    """Per-env bookkeeping of one evaluation (see the module doc). Feed each rollout's host
    ``rewards`` / ``done`` ``[T, N]`` to :meth:`add`; :attr:`finished` says when to stop."""

    def __init__(self, num_envs: int, *, num_episodes: Optional[int] = None,
                 window_steps: Optional[int] = None) -> None:
        if (num_episodes is None) == (window_steps is None):
            raise ValueError("EvalWindow: give exactly one of num_episodes and window_steps")
        n = int(num_envs)
        self.window_steps = window_steps
        if num_episodes is not None:
            self.quota = np.full(n, num_episodes // n, dtype=np.int64) + (np.arange(n) < num_episodes % n)
        else:
            self.quota = None
        self.started = np.zeros(n, dtype=np.int64)  # counted episodes started per env
        self.counting = np.zeros(n, dtype=bool)  # the running episode counts
        self.ret = np.zeros(n, dtype=np.float64)
        self.length = np.zeros(n, dtype=np.int64)
        self.step = 0
        self.episodes: list[tuple[int, int, float, int]] = []  # (ordinal, env, return, length)

    def add(self, rewards: np.ndarray, done: np.ndarray) -> None:
        """One rollout's host rewards and done flags, ``[T, N]``."""
        for t in range(rewards.shape[0]):
            self.ret += rewards[t]
            self.length += 1
            ended = done[t] & self.counting
            for env in np.nonzero(ended)[0]:
                self.episodes.append((int(self.started[env]), int(env), float(self.ret[env]), int(self.length[env])))
            self.step += 1
            self._start(done[t])

    def _start(self, done: np.ndarray) -> None:
        """The envs whose episode ended start one: counted or not, per the unit's rule."""
        if self.quota is not None:
            starts = done & (self.started < self.quota)
        else:
            starts = done & (self.step < self.window_steps)
        self.counting = np.where(done, starts, self.counting)
        self.started += starts
        self.ret[done] = 0.0
        self.length[done] = 0

    @property
    def finished(self) -> bool:
        """Every counted episode has ended and no more will start."""
        if self.counting.any():
            return False
        if self.quota is not None:
            return bool((self.started >= self.quota).all())
        return self.step >= self.window_steps

    def counted(self) -> list[tuple[float, int]]:
        """(return, length) of the counted episodes in an order independent of their lengths (the
        ordinal of each within its env, then the env), for windowed means that keep the last ones."""
        return [(r, n) for _, _, r, n in sorted(self.episodes)]
