"""Counter-based random numbers shared by the CUDA kernels and the torch twins.

Every random draw is a pure function ``bits(seed, step, stream, i)`` of four counters, so the same
seed and step give the same numbers on the CPU and on the GPU, and different env indices ``i`` or
streams give independent draws. All arithmetic is unsigned 32-bit; in torch it runs on int64 with
every intermediate below ``2**40`` and is masked back to 32 bits, so it is exact. The CUDA mirror is
``rng.cuh`` (prepended to every ``.cu`` source); change both together. Its constants (``ZS_HASH_MUL``,
``ZS_GOLDEN``, the stream numbers) are generated from the ones here (``compile.shared_defines``).

* ``hash32(x)``: the ``0x45d9f3b`` integer finaliser (two multiply-xorshift rounds).
* ``combine(h, v)``: ``hash32(h ^ (v + 0x9e3779b9 + (h << 6) + (h >> 2)))`` (mod ``2**32``).
* ``seed_key(seed)``: ``combine(combine(SEED_SALT, seed_lo32), seed_hi32)``, computed on the host.
* ``bits(seed, step, stream, i)``: ``combine(combine(combine(combine(key, step_lo32), step_hi32),
  stream), i)``; ``bits24 = bits >> 8``; ``uniform24 = bits24 * 2**-24`` in ``[0, 1)`` (exact in
  float32).

Stream numbers used by the selection kernels: epsilon-greedy draws its explore coin from stream
:data:`STREAM_EXPLORE` (0) and its random action from :data:`STREAM_RANDOM_ACTION` (1); branching
select adds ``STREAMS_PER_BRANCH * b`` for branch ``b`` (0 exposure, 1 order type, 2 urgency), i.e.
streams ``2b`` (coin) and ``2b + 1`` (action). Other users of the same seed (e.g.
a stochastic fill model) take streams from :data:`STREAM_USER_BASE` upwards.
"""
from __future__ import annotations

import functools
from typing import Union

import torch

MASK32 = 0xFFFFFFFF
HASH_MUL = 0x45D9F3B
GOLDEN = 0x9E3779B9
SEED_SALT = 0x2545F491
SEED_MAX = 2**64 - 1

STREAM_EXPLORE = 0
STREAM_RANDOM_ACTION = 1
STREAMS_PER_BRANCH = 2
STREAM_USER_BASE = 16

IntOrTensor = Union[int, torch.Tensor]


def hash32(x: IntOrTensor) -> IntOrTensor:
    """Integer hash of a value in ``[0, 2**32)`` (Python int or int64 tensor)."""
    x = (((x >> 16) ^ x) * HASH_MUL) & MASK32
    x = (((x >> 16) ^ x) * HASH_MUL) & MASK32
    return (x >> 16) ^ x


def combine(h: IntOrTensor, v: IntOrTensor) -> IntOrTensor:
    """Mix the 32-bit value ``v`` into the running hash ``h`` (both in ``[0, 2**32)``)."""
    return hash32(h ^ ((v + GOLDEN + (h << 6) + (h >> 2)) & MASK32))


def seed_key(seed: int) -> int:
    """32-bit key of a host seed in ``[0, 2**64)``; raises ValueError otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return _seed_key(int(seed))


@functools.lru_cache(maxsize=1024)
def _seed_key(seed: int) -> int:
    return int(combine(combine(SEED_SALT, seed & MASK32), (seed >> 32) & MASK32))


def _check_stream(stream: int) -> int:
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream <= MASK32:
        raise ValueError(f"stream must be an int in [0, 2**32), got {stream!r}")
    return stream


def seed_keys(seeds, device: Union[str, torch.device] = "cpu") -> torch.Tensor:
    """The :func:`seed_key` of every host seed, as an int64 tensor (per-element keys for
    :func:`random_bits`: e.g. the envs of several population members, each keyed by its member's seed)."""
    return torch.tensor([seed_key(s) for s in seeds], dtype=torch.int64, device=device)


def random_bits(seed: IntOrTensor, step: IntOrTensor, stream: int, idx: torch.Tensor) -> torch.Tensor:
    """32-bit random words (int64 tensor shaped like ``idx``) for ``(seed, step, stream, idx)``.

    ``seed`` is a host seed (a Python int, keyed with :func:`seed_key`) or an int64 tensor of keys
    already made by :func:`seed_keys`, broadcastable to ``idx`` (one key per element: element ``i``
    draws exactly what a host seed with that key draws at index ``idx[i]``).
    ``step`` is a Python int or an int64 tensor broadcastable to ``idx`` (a device counter ``[1]``
    is the usual case; no host read). ``idx`` holds non-negative int64 indices below ``2**32``.
    """
    h = seed if isinstance(seed, torch.Tensor) else seed_key(seed)
    h = combine(h, step & MASK32)
    h = combine(h, (step >> 32) & MASK32)
    h = combine(h, _check_stream(stream))
    return combine(h, idx.to(torch.int64) & MASK32)


def bits24(seed: IntOrTensor, step: IntOrTensor, stream: int, idx: torch.Tensor) -> torch.Tensor:
    """Top 24 bits of :func:`random_bits` (int64 tensor in ``[0, 2**24)``)."""
    return random_bits(seed, step, stream, idx) >> 8


def uniform24(seed: IntOrTensor, step: IntOrTensor, stream: int, idx: torch.Tensor) -> torch.Tensor:
    """Uniform float32 in ``[0, 1)`` with 24 random bits, identical to ``zs_uniform24`` in CUDA."""
    return bits24(seed, step, stream, idx).to(torch.float32) * (2.0**-24)


def random_index(b24: torch.Tensor, n: int) -> torch.Tensor:
    """Map 24 random bits to an index in ``[0, n)``: ``(bits24 * n) >> 24``."""
    return (b24 * n) >> 24
