"""Training data that does not run out: fresh synthetic series from new generator seeds.

With ``data.regenerate_every = N > 0`` (synthetic source), an env runner trains on whole series of
``num_bars`` bars drawn with generator seed :func:`training_seed` ``(data.seed, run seed, runner,
generation)``, a new generation every N rollouts, while validation and test stay the held-out
segments of series ``data.seed`` (never used for training in this mode). The regime model and the
features are the same. The next :data:`PREFETCH` generations are built in a separate process while
the current one trains (a generation's draws and features are host work that would otherwise hold
the training process's GIL), and each is swapped into the env's device tensors in place (shapes
never change), so a captured rollout graph stays valid.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import multiprocessing as mp
from typing import Any, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.data.data_settings import make_market
from rl_zerosync.data.market import MarketData

PREFETCH = 2
"""Generations built ahead by the prefetch process: while one waits to be swapped in, the next is
built, so a generation that builds slower than ``regenerate_every`` iterations once does not stall
training."""


def training_seed(data_seed: int, run_seed: int, runner: int, generation: int) -> int:
    """Generator seed of a training generation; never ``data_seed`` (the held-out series)."""
    words = np.random.SeedSequence([int(data_seed), int(run_seed), int(runner), int(generation), 0x7EA1]).generate_state(2)
    seed = int(words[0]) << 32 | int(words[1])
    return seed + 1 if seed == int(data_seed) else seed


def build_training_market(data_cfg: Mapping[str, Any], seed: int) -> MarketData:
    """The whole (unsplit) synthetic series of ``data_cfg`` with generator seed ``seed``."""
    cfg = {k: v for k, v in dict(data_cfg).items() if k not in ("regenerate_every", "split")}
    cfg["seed"] = int(seed)
    cfg["device"] = "cpu"
    return make_market(cfg, "all")


def _host_fields(data_cfg: Mapping[str, Any], seed: int) -> dict[str, np.ndarray]:
    m = build_training_market(data_cfg, seed)
    return {f: getattr(m, f).numpy() for f in m.present_fields}  # host read: CPU tensors, sent to the runner


class FreshSeries:
    """Generations of training series for one env runner, the next :data:`PREFETCH` built ahead in a process."""

    def __init__(self, data_cfg: Mapping[str, Any], run_seed: int, runner: int, *, prefetch: bool = True) -> None:
        from rl_zerosync.data.data_settings import DataSettings  # the defaults (config imports this module)

        self.cfg = dict(data_cfg)
        self.data_seed = int(self.cfg.get("seed", DataSettings.seed))
        self.run_seed, self.runner = int(run_seed), int(runner)
        self.generation = 0
        self._pool: Optional[cf.ProcessPoolExecutor] = None
        self._ahead: collections.deque[cf.Future] = collections.deque()  # generations after self.generation, in order
        if prefetch:
            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))

    def seed_of(self, generation: int) -> int:
        return training_seed(self.data_seed, self.run_seed, self.runner, generation)

    def first(self) -> MarketData:
        """Generation 0 (built here), and generations 1 to :data:`PREFETCH` submitted."""
        market = build_training_market(self.cfg, self.seed_of(0))
        for generation in range(1, PREFETCH + 1):
            self._submit(generation)
        return market

    def _submit(self, generation: int) -> None:
        if self._pool is not None:
            self._ahead.append(self._pool.submit(_host_fields, self.cfg, self.seed_of(generation)))

    def advance(self, data: MarketData) -> int:
        """Copy the next generation into ``data``'s tensors in place; returns its number."""
        self.generation += 1
        if self._ahead:
            fields = self._ahead.popleft().result()
        else:
            fields = _host_fields(self.cfg, self.seed_of(self.generation))
        for f in data.present_fields:  # the series fields and open/high/low when the data has them
            dst = getattr(data, f)
            src = fields[f]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"data.regenerate_every: generation {self.generation} has {f} of shape "
                                 f"{tuple(src.shape)}, expected {tuple(dst.shape)}")
            dst.copy_(torch.from_numpy(src))
        self._submit(self.generation + PREFETCH)
        return self.generation

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            self._ahead.clear()
