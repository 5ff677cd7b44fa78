"""``sample.cu``: check and launch of ``replay_sample`` (twin: ``reference.replay_sample``).

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
from rl_zerosync.kernels.launch import grid_for, i64, launch, ptr, u32
from rl_zerosync.kernels.rng import MASK32
from rl_zerosync.kernels.validate import expect_rows, expect_tensor, tensor_device

LANES = 32
"""Threads per sampled row (one warp): each copies every ``LANES``-th word (or int4) of the row."""
ROWS_PER_BLOCK = 8
"""Sampled rows per block."""
BLOCK = LANES * ROWS_PER_BLOCK
"""Threads per block."""
VEC_WORDS = 4
"""int32 words per vector copy (one ``int4``), used when a row is a whole number of them and aligned."""

SOURCE = CudaSource("sample.cu", ("zs_replay_sample",), defines={
    "ZS_SAMPLE_LANES": LANES, "ZS_SAMPLE_ROWS_PER_BLOCK": ROWS_PER_BLOCK, "ZS_SAMPLE_VEC_WORDS": VEC_WORDS,
})


def check_replay_sample(
    packed: torch.Tensor,
    size: torch.Tensor,
    row_keys: torch.Tensor,
    step_word: torch.Tensor,
    rng_step: torch.Tensor,
    indices: torch.Tensor,
    out_packed: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    seed_key: int,
) -> None:
    """Validate the buffers of ``replay_sample`` (packed i32[C, W], C, W >= 1; B >= 1 rows drawn)."""
    dev = tensor_device("packed", packed)
    expect_tensor("packed", packed, dtype=torch.int32, shape=(None, None), device=dev)
    capacity, words = packed.shape
    if capacity < 1 or words < 1:
        raise ValueError(f"packed must have at least one row and one word, got shape {list(packed.shape)}")
    expect_rows("packed", capacity)
    expect_tensor("row_keys", row_keys, dtype=torch.int64, shape=(None,), device=dev)
    rows = row_keys.shape[0]
    if rows < 1:
        raise ValueError("row_keys must have at least one row, got 0")
    expect_rows("row_keys", rows)
    for name, t in (("size", size), ("step_word", step_word), ("rng_step", rng_step)):
        expect_tensor(name, t, dtype=torch.int64, shape=(1,), device=dev)
    expect_tensor("indices", indices, dtype=torch.int64, shape=(rows,), device=dev)
    expect_tensor("out_packed", out_packed, dtype=torch.int32, shape=(rows, words), device=dev)
    expect_tensor("blocks_done", blocks_done, dtype=torch.int32, shape=(1,), device=dev)
    if isinstance(seed_key, bool) or not isinstance(seed_key, int) or not 0 <= seed_key <= MASK32:
        raise ValueError(f"seed_key must be an int in [0, 2**32) (rng.seed_key(seed)), got {seed_key!r}")


def replay_sample(
    device_index: int,
    packed: torch.Tensor,
    size: torch.Tensor,
    row_keys: torch.Tensor,
    step_word: torch.Tensor,
    rng_step: torch.Tensor,
    indices: torch.Tensor,
    out_packed: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    seed_key: int,
) -> None:
    """Enqueue ``zs_replay_sample`` (one warp per row; ``blocks_done`` must be 0, and is left 0)."""
    capacity, words = packed.shape
    rows = row_keys.shape[0]
    launch(
        SOURCE,
        "zs_replay_sample",
        device_index=device_index,
        grid=grid_for(rows, ROWS_PER_BLOCK),
        block=BLOCK,
        args=(ptr(packed), i64(capacity), i64(words), ptr(size), ptr(row_keys), ptr(step_word), ptr(rng_step),
              ptr(indices), ptr(out_packed), ptr(blocks_done), i64(rows), u32(seed_key)),
    )
