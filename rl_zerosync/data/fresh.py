"""Training data that does not run out: fresh synthetic series from new generator seeds.

With ``data.regenerate_every = N > 0`` (synthetic source), an env runner trains on whole series of
``num_bars`` bars drawn with generator seed :func:`training_seed` ``(data.seed, run seed, runner,
generation)``, a new generation every N rollouts, while validation and test stay the held-out
segments of series ``data.seed`` (never used for training in this mode). The regime model and the
features are the same. The next generation is built in a separate process while the current one
trains (the generator is a Python loop over bars; in the training process it would hold the GIL),
and is swapped into the env's device tensors in place (shapes never change), so a captured
rollout graph stays valid.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from typing import Any, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.data.data_settings import make_market
from rl_zerosync.data.market import MarketData


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
    """Generations of training series for one env runner, the next one prefetched in a process."""

    def __init__(self, data_cfg: Mapping[str, Any], run_seed: int, runner: int, *, prefetch: bool = True) -> None:
        from rl_zerosync.data.data_settings import DataSettings  # the defaults (config imports this module)

        self.cfg = dict(data_cfg)
        self.data_seed = int(self.cfg.get("seed", DataSettings.seed))
        self.run_seed, self.runner = int(run_seed), int(runner)
        self.generation = 0
        self._pool: Optional[cf.ProcessPoolExecutor] = None
        self._next: Optional[cf.Future] = None
        if prefetch:
            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))

    def seed_of(self, generation: int) -> int:
        return training_seed(self.data_seed, self.run_seed, self.runner, generation)

    def first(self) -> MarketData:
        """Generation 0 (built here), and generation 1 submitted."""
        market = build_training_market(self.cfg, self.seed_of(0))
        self._submit(1)
        return market

    def _submit(self, generation: int) -> None:
        if self._pool is not None:
            self._next = self._pool.submit(_host_fields, self.cfg, self.seed_of(generation))

    def advance(self, data: MarketData) -> int:
        """Copy the next generation into ``data``'s tensors in place; returns its number."""
        self.generation += 1
        if self._next is not None:
            fields = self._next.result()
        else:
            fields = _host_fields(self.cfg, self.seed_of(self.generation))
        for f in data.present_fields:  # the series fields and open/high/low when the data has them
            dst = getattr(data, f)
            src = fields[f]
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"data.regenerate_every: generation {self.generation} has {f} of shape "
                                 f"{tuple(src.shape)}, expected {tuple(dst.shape)}")
            dst.copy_(torch.from_numpy(src))
        self._submit(self.generation + 1)
        return self.generation

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
