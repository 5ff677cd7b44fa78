"""One torch thread for the walks of an evaluation on the CPU.

A walk steps tiny tensors (one row per asset: an 8 x 68 observation through a 256-wide network,
a few dozen element-wise ops per bar), thousands of bars one after another. Split over two intra-op
threads every op waits for the other thread; on a busy 2-core machine (Ray's processes beside it,
other work) those waits cost 20-60x the op itself (an 8-asset walk of 400 bars: 66 s on two
threads, 4 s on one). The numbers are the same bit for bit (the test compares both). On a GPU
nothing changes.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def one_cpu_thread(device: torch.device | str) -> Iterator[None]:
    """Within the block torch runs on one intra-op thread when ``device`` is the CPU (restored after)."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
