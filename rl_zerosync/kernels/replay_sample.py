"""``replay_sample.cu``: declaration of ``replay_sample`` (twin: ``reference.replay_sample``).

Uniform replay sampling in one launch: row ``i`` of a batch of ``B`` gets the 32-bit word
``hash32(row_keys[i] ^ step_word)``, the index ``(bits * size) >> 32`` (64-bit unsigned maths,
``size`` clamped to ``[0, capacity]``) and a copy of that packed row; then, once, ``rng_step += 1``
and ``step_word = hash32((rng_step & 0xffffffff) ^ seed_key)``. ``seed_key`` is
``rng.seed_key(seed)``, computed on the host; ``size``, ``step_word`` and ``rng_step`` stay on the
device. One warp per sampled row (:data:`LANES` threads), :data:`ROWS_PER_BLOCK` rows per block of
:data:`BLOCK` threads; the block that finishes last advances the step and resets the
``blocks_done`` counter to 0.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import grid_for, u32
from rl_zerosync.kernels.rng import MASK32
from rl_zerosync.kernels.validate import expect_rows

LANES = 32
"""Threads per sampled row (one warp): each copies every ``LANES``-th word (or int4) of the row."""
ROWS_PER_BLOCK = 8
"""Sampled rows per block."""
BLOCK = LANES * ROWS_PER_BLOCK
"""Threads per block."""
VEC_WORDS = 4
"""int32 words per vector copy (one ``int4``), used when a row is a whole number of them and aligned."""

SOURCE = CudaSource("replay_sample.cu", ("zs_replay_sample",), defines={
    "ZS_SAMPLE_LANES": LANES, "ZS_SAMPLE_ROWS_PER_BLOCK": ROWS_PER_BLOCK, "ZS_SAMPLE_VEC_WORDS": VEC_WORDS,
})


def _check_packed(b: Bound) -> None:
    if b.C < 1 or b.W < 1:
        raise ValueError(f"packed must have at least one row and one word, got shape {list(b.packed.shape)}")
    expect_rows("packed", b.C)


def _check_row_keys(b: Bound) -> None:
    if b.B < 1:
        raise ValueError("row_keys must have at least one row, got 0")
    expect_rows("row_keys", b.B)


def _check_seed_key(b: Bound) -> None:
    if isinstance(b.seed_key, bool) or not isinstance(b.seed_key, int) or not 0 <= b.seed_key <= MASK32:
        raise ValueError(f"seed_key must be an int in [0, 2**32) (rng.seed_key(seed)), got {b.seed_key!r}")


replay_sample = Kernel("replay_sample", SOURCE, (
    Tensor("packed", torch.int32, ("C", "W"), lead=True, rule=_check_packed),
    Tensor("size", torch.int64, (1,)),
    Tensor("row_keys", torch.int64, ("B",), lead=True, rule=_check_row_keys),
    Tensor("step_word", torch.int64, (1,)),
    Tensor("rng_step", torch.int64, (1,)),
    Tensor("indices", torch.int64, ("B",)),
    Tensor("out_packed", torch.int32, ("B", "W")),
    Tensor("blocks_done", torch.int32, (1,)),
    Value("seed_key", u32),
), rule=_check_seed_key, cuda=Launch(
    "zs_replay_sample", lambda b: grid_for(b.B, ROWS_PER_BLOCK), BLOCK,
    ("packed", "C:i64", "W:i64", "size", "row_keys", "step_word", "rng_step", "indices", "out_packed",
     "blocks_done", "B:i64", "seed_key"),
))
