"""`DeviceReplayBuffer`: preallocated circular n-step replay on the learner's device.

* ``add(rollout)`` takes the columnar rollout of ``docs/ARCHITECTURE.md`` (``[T, N, ...]`` tensors
  on any device). Host tensors travel in **one** host->device copy through a pinned staging buffer;
  tensors already on the device are used as they are. n-step transitions are computed on the device
  (:mod:`rl_zerosync.learner.nstep`) and written at the host-known write pointer (wraparound by two
  slices); built with ``kernels``, one ``replay_add`` launch computes and writes them straight into
  the packed rows (no intermediate tensors). Every stored row is one transition: ``obs, next_obs, actions, rewards`` (n-step return),
  ``discounts`` (``gamma**k``), ``terminateds``.
* Storage layout: all stored columns of a row live in one packed int32 row of
  :attr:`DeviceReplayBuffer.row_words` words (``obs``, ``next_obs`` (16-byte aligned), ``actions``
  (int64, 8-byte aligned), ``rewards``, ``discounts``, ``terminateds`` (the first byte of a word),
  padding to a multiple of 4 words); ``storage`` maps each column name to its strided view. A
  :class:`ReplaySample` has the same packed layout, so one gather (an ``index_select``, or the
  ``replay_sample`` kernel) fills a whole batch and the batch columns are views of it.
* ``sample_into(out)`` fills caller-owned static buffers (a :class:`ReplaySample`) with no host
  read and no allocation that depends on data, so it can be captured in a CUDA graph. Randomness is
  counter-based, built from ``rl_zerosync.kernels.rng``'s ``hash32`` / ``combine``: row ``i`` of
  draw ``step`` (a device counter advanced on the device) gets the 32-bit word
  ``hash32(K_i ^ hash32(step_lo32 ^ seed_key(seed)))`` with the static row key
  ``K_i = combine(combine(seed_key(seed), STREAM_SAMPLE), i)``. The step word
  ``hash32(step_lo32 ^ seed_key(seed))`` of the current step is kept on the device and advanced
  with the step. Eager and graph-replayed sampling therefore draw identical indices, on CPU and GPU
  alike.

  - uniform: ``index = (bits32 * size) >> 32`` (with replacement); weights are 1. Built with
    ``kernels`` (a ``rl_zerosync.kernels.Kernels``), a draw into packed sample buffers is **one**
    ``replay_sample`` launch (hash, index, row gather, step and step word advanced; bound and
    validated once per :class:`ReplaySample`, see :attr:`DeviceReplayBuffer.sample_kernel`).
    Without ``kernels`` it is about 20 small torch kernels (the next step word hashed in the same
    pass as the row words, one ``index_select`` of the packed rows); both draw the same, bit for bit.
  - prioritized (proportional, Schaul et al. 2016): stored priority ``p = (|TD| + eps) ** alpha``
    (new rows get the largest priority seen so far, initially 1); stratified draw
    ``target_i = (i + u_i) / B * sum(p)`` located with ``searchsorted`` on ``cumsum(p)`` (float64);
    ``P = p / sum(p)``; weight ``w = (size * P) ** -beta`` divided by the largest ``w`` in the batch.
* ``update_priorities(indices, td_abs)`` writes new priorities on the device; non-finite TD errors
  keep the old priority.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ray.rllib.core.columns import Columns

from rl_zerosync.env_runner.rollout import ROLLOUT_COLUMNS, ROLLOUT_KEYS
from rl_zerosync.kernels.replay_add import nstep_tables
from rl_zerosync.kernels.rng import MASK32, STREAM_USER_BASE, combine, hash32, seed_key
from rl_zerosync.learner.nstep import nstep_transitions

if TYPE_CHECKING:
    from rl_zerosync.kernels.api import Kernels, Launcher

__all__ = ["DeviceReplayBuffer", "ReplaySample", "REPLAY_COLUMNS", "DISCOUNTS", "WEIGHTS"]

REPLAY_COLUMNS = tuple(k for k in ROLLOUT_KEYS if k != "factored_actions")
"""The rollout columns ``add`` reads (:data:`~rl_zerosync.env_runner.rollout.ROLLOUT_COLUMNS` but
``factored_actions``, which the learner does not use)."""
DISCOUNTS = "discounts"
WEIGHTS = "weights"
STREAM_SAMPLE = STREAM_USER_BASE + 32
_STORED = ("obs", "next_obs", "actions", "rewards", "discounts", "terminateds")
_DTYPES = {k: ROLLOUT_COLUMNS[k][0] for k in REPLAY_COLUMNS}


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclass(frozen=True)
class _RowLayout:
    """Word offsets (int32 words) of the stored columns inside one packed row."""

    obs_shape: Tuple[int, ...]
    obs_words: int
    obs: int
    next_obs: int
    actions: int
    rewards: int
    discounts: int
    terminateds: int
    words: int

    @classmethod
    def for_obs(cls, obs_shape: Tuple[int, ...]) -> "_RowLayout":
        d = int(np.prod(obs_shape, dtype=np.int64))
        next_obs = _round_up(d, 4)  # 16-byte aligned rows for both obs blocks (GEMM inputs)
        actions = _round_up(next_obs + d, 2)  # int64: 8-byte aligned
        term = actions + 4
        return cls(obs_shape=obs_shape, obs_words=d, obs=0, next_obs=next_obs, actions=actions,
                   rewards=actions + 2, discounts=actions + 3, terminateds=term, words=_round_up(term + 1, 4))

    def columns(self, packed: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Strided views of ``packed`` (int32 ``[N, words]``) per stored column (writes go through)."""
        n, d = packed.shape[0], self.obs_words

        def word(off: int) -> torch.Tensor:
            return packed[:, off:off + 1]

        return {
            "obs": packed[:, self.obs:self.obs + d].view(torch.float32).view((n,) + self.obs_shape),
            "next_obs": packed[:, self.next_obs:self.next_obs + d].view(torch.float32).view((n,) + self.obs_shape),
            "actions": packed[:, self.actions:self.actions + 2].view(torch.int64)[:, 0],
            "rewards": word(self.rewards).view(torch.float32)[:, 0],
            "discounts": word(self.discounts).view(torch.float32)[:, 0],
            "terminateds": word(self.terminateds).view(torch.uint8)[:, 0].view(torch.bool),
        }


@dataclass
class ReplaySample:
    """Static buffers one sampled batch is written into (reused every update).

    Made by :meth:`DeviceReplayBuffer.make_sample_buffers`: the stored columns are views of
    ``packed`` (the buffer's row layout), which one gather fills.
    """

    indices: torch.Tensor
    obs: torch.Tensor
    next_obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor
    terminateds: torch.Tensor
    weights: torch.Tensor
    row_keys: torch.Tensor
    """Static per-row RNG keys ``K_i`` (int64 [B])."""
    strata: torch.Tensor
    """``0, 1, ..., B-1`` as float64 (prioritized strata)."""
    packed: Optional[torch.Tensor] = None
    """int32 ``[B, row_words]`` rows the stored columns are views of (None: columns filled one by one)."""
    rng_words: Optional[torch.Tensor] = None
    """int64 ``[B + 1]`` scratch: the row words, then the next step word."""

    def as_batch(self) -> Dict[str, torch.Tensor]:
        """The buffers under RLlib's column names (plus ``discounts`` and ``weights``)."""
        return {
            Columns.OBS: self.obs,
            Columns.NEXT_OBS: self.next_obs,
            Columns.ACTIONS: self.actions,
            Columns.REWARDS: self.rewards,
            Columns.TERMINATEDS: self.terminateds,
            DISCOUNTS: self.discounts,
            WEIGHTS: self.weights,
        }


class DeviceReplayBuffer:
    """Circular n-step replay buffer living on ``device`` (see the module docstring).

    Args:
        capacity: Rows (transitions) stored, < 2**31.
        obs_shape: Shape of one observation.
        device: Storage device.
        gamma: Discount of the n-step return.
        n_step: n of the n-step return (int >= 1).
        prioritized: Proportional prioritized replay instead of uniform.
        alpha, beta, priority_eps: Prioritized-replay exponents and epsilon.
        seed: Seed of the counter-based sampling RNG.
        kernels: The kernels of ``device`` (``get_kernels(device)``): ``add`` is then one
            ``replay_add`` launch, and uniform sampling into packed sample buffers one
            ``replay_sample`` launch (prioritized sampling stays torch ops). None: torch ops.
    """

    def __init__(
        self,
        *,
        capacity: int,
        obs_shape: Sequence[int],
        device: torch.device,
        gamma: float,
        n_step: int,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        seed: int = 0,
        kernels: Optional[Kernels] = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity < 2**31:
            raise ValueError(f"capacity must be an int in [1, 2**31), got {capacity!r}")
        if isinstance(n_step, bool) or not isinstance(n_step, int) or n_step < 1:
            raise ValueError(f"n_step must be an int >= 1, got {n_step!r}")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        self.capacity = capacity
        self.obs_shape: Tuple[int, ...] = tuple(int(d) for d in obs_shape)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.gamma = float(gamma)
        self.n_step = n_step
        self.prioritized = bool(prioritized)
        self.alpha, self.beta, self.priority_eps = float(alpha), float(beta), float(priority_eps)
        self.seed = int(seed)
        self._seed_key = seed_key(self.seed)
        dev = self.device
        self._layout = _RowLayout.for_obs(self.obs_shape)
        self.row_words = self._layout.words
        self._packed = torch.zeros((capacity, self.row_words), dtype=torch.int32, device=dev)
        self.storage: Dict[str, torch.Tensor] = self._layout.columns(self._packed)
        """Strided views of the packed rows, one per stored column (``[capacity, ...]``)."""
        self.priorities: Optional[torch.Tensor] = (
            torch.zeros(capacity, dtype=torch.float64, device=dev) if self.prioritized else None
        )
        self.max_priority = torch.ones(1, dtype=torch.float64, device=dev)
        self.rng_step = torch.zeros(1, dtype=torch.int64, device=dev)
        self._step_word = torch.zeros(1, dtype=torch.int64, device=dev)  # hash32(rng_step_lo32 ^ seed key)
        self._set_rng_step(0)
        self._size_t = torch.zeros(1, dtype=torch.int64, device=dev)
        if kernels is not None and kernels.device != dev:
            raise ValueError(f"kernels must be for the replay's device {dev}, got {kernels.device}")
        self._kernels: Optional[Kernels] = kernels
        self._nstep_tables = nstep_tables(self.gamma, self.n_step, dev)  # replay_add's float32 factors
        self._blocks_done = torch.zeros(1, dtype=torch.int32, device=dev)  # replay_sample's counter, 0 between draws
        self._sample_launchers: Dict[int, Tuple[weakref.ref, Launcher]] = {}
        self.size = 0
        self.ptr = 0
        self.num_added = 0
        self._staging_host: Optional[torch.Tensor] = None
        self._staging_dev: Optional[torch.Tensor] = None
        self._staging_event: Optional[torch.cuda.Event] = None

    @property
    def packed(self) -> torch.Tensor:
        """The packed rows ``int32[capacity, row_words]`` every column is a view of (read-only use)."""
        return self._packed

    @property
    def sample_kernel(self) -> bool:
        """True when :meth:`sample_into` draws a uniform batch into packed sample buffers with one
        ``replay_sample`` launch of the ``kernels`` given (a CuPy launch on the CUDA backend: not for
        ``torch.compile``); False for the torch ops (no ``kernels``, or prioritized replay)."""
        return self._kernels is not None and not self.prioritized

    def __len__(self) -> int:
        return self.size

    def _set_rng_step(self, step: int) -> None:
        """Set the sampling step counter and its step word from a host int (fills, no read)."""
        self.rng_step.fill_(int(step))
        self._step_word.fill_(int(hash32((int(step) & MASK32) ^ self._seed_key)))

    # ---- add ---------------------------------------------------------------------------------
    def add(self, rollout: Mapping[str, torch.Tensor]) -> int:
        """Add a ``[T, N, ...]`` columnar rollout as ``T * N`` n-step transitions; returns that count."""
        cols = self._validate(rollout)
        t_len, n_envs = cols["rewards"].shape
        if any(t.device != self.device for t in cols.values()):
            cols = self._to_device(cols)
        rows = t_len * n_envs
        lo = max(0, rows - self.capacity)  # more rows than capacity: keep the newest
        start = (self.ptr + lo) % self.capacity
        if self._kernels is not None:
            self._add_kernel(cols, start, lo)
        else:
            trans = nstep_transitions(gamma=self.gamma, n_step=self.n_step, **cols)
            first = min(rows - lo, self.capacity - start)
            self._write(start, trans, lo, lo + first)
            if lo + first < rows:
                self._write(0, trans, lo + first, rows)
        self.ptr = (self.ptr + rows) % self.capacity
        self.size = min(self.capacity, self.size + rows)
        self.num_added += rows
        self._size_t.fill_(self.size)
        return rows

    def _add_kernel(self, cols: Dict[str, torch.Tensor], start: int, first_row: int) -> None:
        """One ``replay_add`` launch: the n-step transitions straight into the packed rows (validated per add)."""
        t_len, n_envs = cols["rewards"].shape
        flat = {k: cols[k].reshape(t_len, n_envs, -1).contiguous() for k in ("obs", "next_obs")}
        lay = self._layout
        self._kernels.bind_replay_add(
            flat["obs"], flat["next_obs"], *(cols[k].contiguous() for k in ("actions", "rewards", "terminateds",
                                                                             "truncateds")),
            self._packed, *self._nstep_tables, self.priorities, self.max_priority, start=start, first_row=first_row,
            obs_at=lay.obs, next_obs_at=lay.next_obs, actions_at=lay.actions, rewards_at=lay.rewards,
            discounts_at=lay.discounts, terminateds_at=lay.terminateds)()

    def _validate(self, rollout: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        if not isinstance(rollout, Mapping):
            raise ValueError(f"rollout must be a dict of tensors, got {type(rollout).__name__}")
        missing = [k for k in REPLAY_COLUMNS if k not in rollout]
        if missing:
            raise ValueError(f"rollout is missing column(s) {missing}; expected {list(REPLAY_COLUMNS)}")
        cols = {}
        for k in REPLAY_COLUMNS:
            t = rollout[k]
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"rollout[{k!r}] must be a torch.Tensor, got {type(t).__name__}")
            cols[k] = t
        r = cols["rewards"]
        if r.dim() != 2 or r.shape[0] < 1 or r.shape[1] < 1:
            raise ValueError(f"rollout['rewards'] must have shape [T, N] with T, N >= 1, got {list(r.shape)}")
        tn = tuple(r.shape)
        for k in REPLAY_COLUMNS:
            want = tn + (self.obs_shape if ROLLOUT_COLUMNS[k][1] == "TND" else ())
            if tuple(cols[k].shape) != want:
                raise ValueError(f"rollout[{k!r}] must have shape {list(want)}, got {list(cols[k].shape)}")
        for k in ("obs", "next_obs"):
            if not cols[k].is_floating_point():
                raise ValueError(f"rollout[{k!r}] must be a float tensor, got {cols[k].dtype}")
        if cols["actions"].is_floating_point() or cols["actions"].dtype == torch.bool:
            raise ValueError(f"rollout['actions'] must be an integer tensor, got {cols['actions'].dtype}")
        for k in ("terminateds", "truncateds"):
            if cols[k].dtype != torch.bool:
                raise ValueError(f"rollout[{k!r}] must be a bool tensor, got {cols[k].dtype}")
        return {k: t.to(_DTYPES[k]) if t.dtype != _DTYPES[k] else t for k, t in cols.items()}

    def _to_device(self, cols: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Host columns -> device through one pinned staging buffer and one H2D copy."""
        if self.device.type != "cuda" or any(t.device.type != "cpu" for t in cols.values()):
            return {k: t.to(self.device, non_blocking=True) for k, t in cols.items()}
        layout, total = [], 0
        for k, t in cols.items():
            nbytes = t.numel() * t.element_size()
            layout.append((k, total, nbytes, t.dtype, tuple(t.shape)))
            total += (nbytes + 15) // 16 * 16
        if self._staging_host is None or self._staging_host.numel() < total:
            if self._staging_event is not None:
                self._staging_event.synchronize()  # host read (wait): the old staging copy must finish first
            self._staging_host = torch.empty(total, dtype=torch.uint8, pin_memory=True)
            self._staging_dev = torch.empty(total, dtype=torch.uint8, device=self.device)
            self._staging_event = torch.cuda.Event()
        else:
            self._staging_event.synchronize()  # host read (wait): previous H2D copy out of the pinned buffer
        for k, off, nbytes, dtype, shape in layout:
            self._staging_host[off : off + nbytes].view(dtype).view(shape).copy_(cols[k].contiguous())
        self._staging_dev[:total].copy_(self._staging_host[:total], non_blocking=True)
        self._staging_event.record()
        return {
            k: self._staging_dev[off : off + nbytes].view(dtype).view(shape)
            for k, off, nbytes, dtype, shape in layout
        }

    def _write(self, start: int, trans: Dict[str, torch.Tensor], lo: int, hi: int) -> None:
        n = hi - lo
        for k in _STORED:
            self.storage[k][start : start + n].copy_(trans[k][lo:hi])
        if self.priorities is not None:
            self.priorities[start : start + n].copy_(self.max_priority.expand(n))

    # ---- sample ------------------------------------------------------------------------------
    def columns_of(self, packed: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Views of int32 ``[N, row_words]`` rows laid out as this buffer's (e.g. a population's stacked
        batch), per stored column: ``obs``, ``next_obs``, ``actions``, ``rewards``, ``discounts``, ``terminateds``."""
        if packed.dim() != 2 or packed.shape[1] != self.row_words or packed.dtype != torch.int32:
            raise ValueError(f"columns_of: expected int32 [N, {self.row_words}], got {packed.dtype} {list(packed.shape)}")
        return self._layout.columns(packed)

    def make_sample_buffers(self, batch_size: int, packed: Optional[torch.Tensor] = None) -> ReplaySample:
        """Allocate the static buffers :meth:`sample_into` writes a batch of ``batch_size`` into.

        ``packed``: the int32 ``[batch_size, row_words]`` rows to use (e.g. member k's row of a
        population's stacked batch), contiguous on this device; None allocates them."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        dev, b = self.device, batch_size
        if packed is None:
            packed = torch.zeros((b, self.row_words), dtype=torch.int32, device=dev)
        elif (packed.shape != (b, self.row_words) or packed.dtype != torch.int32 or packed.device != dev
              or not packed.is_contiguous()):
            raise ValueError(f"make_sample_buffers: packed must be contiguous int32 [{b}, {self.row_words}] on "
                             f"{dev}, got {packed.dtype} {list(packed.shape)} on {packed.device}")
        return ReplaySample(
            indices=torch.zeros(b, dtype=torch.int64, device=dev),
            **self._layout.columns(packed),
            weights=torch.ones(b, dtype=torch.float32, device=dev),
            row_keys=combine(combine(seed_key(self.seed), STREAM_SAMPLE), torch.arange(b, device=dev)),
            strata=torch.arange(b, dtype=torch.float64, device=dev),
            packed=packed,
            rng_words=torch.zeros(b + 1, dtype=torch.int64, device=dev),
        )

    def _draw_bits(self, out: ReplaySample) -> torch.Tensor:
        """The row words ``hash32(K_i ^ step_word)`` of this draw; advances ``rng_step`` and the step word.

        With ``out.rng_words`` the next step word is hashed in the same pass (``B + 1`` values).
        """
        b = out.indices.shape[0]
        if out.rng_words is None:
            bits = hash32(out.row_keys ^ self._step_word)
            self.rng_step.add_(1)
            self._step_word.copy_(hash32((self.rng_step & MASK32) ^ self._seed_key))
            return bits
        words = out.rng_words
        torch.bitwise_xor(out.row_keys, self._step_word, out=words[:b])
        self.rng_step.add_(1)
        torch.bitwise_and(self.rng_step, MASK32, out=words[b:])
        words[b:].bitwise_xor_(self._seed_key)
        hashed = hash32(words)
        self._step_word.copy_(hashed[b:])
        return hashed[:b]

    def _sample_launcher(self, out: ReplaySample) -> Launcher:
        """The ``replay_sample`` launch into ``out``: bound (validated) on first use, then cached for
        as long as ``out`` lives."""
        key, launchers = id(out), self._sample_launchers
        entry = launchers.get(key)
        if entry is not None and entry[0]() is out:
            return entry[1]
        launch = self._kernels.bind_replay_sample(
            self._packed, self._size_t, out.row_keys, self._step_word, self.rng_step, out.indices, out.packed,
            self._blocks_done, seed_key=self._seed_key)

        def forget(ref: weakref.ref) -> None:
            if launchers.get(key, (None,))[0] is ref:
                del launchers[key]

        launchers[key] = (weakref.ref(out, forget), launch)
        return launch

    def sample_into(self, out: ReplaySample) -> None:
        """Draw ``len(out.indices)`` transitions into ``out`` on the device; advances the RNG step."""
        b = out.indices.shape[0]
        packed = out.packed is not None and out.packed.shape == (b, self.row_words)
        if packed and self.sample_kernel:
            self._sample_launcher(out)()
            return
        bits = self._draw_bits(out)
        if self.priorities is None:
            torch.bitwise_right_shift(bits.mul_(self._size_t), 32, out=out.indices)
        else:
            cum = torch.cumsum(self.priorities, dim=0)
            total = cum[-1:]
            u = bits.to(torch.float64) * (2.0**-32)
            target = (out.strata + u) * (1.0 / b) * total
            idx = torch.searchsorted(cum, target, right=True)
            torch.minimum(idx, self._size_t - 1, out=out.indices)
            prob = self.priorities[out.indices] / total
            w = torch.pow(self._size_t.to(torch.float64) * prob, -self.beta)
            torch.div(w, w.max(), out=out.weights)
        if packed:
            torch.index_select(self._packed, 0, out.indices, out=out.packed)
        else:
            for k in _STORED:
                torch.index_select(self.storage[k], 0, out.indices, out=getattr(out, k))

    def sample(self, batch_size: int) -> Dict[str, torch.Tensor]:
        """Convenience (allocates): one batch as a dict with ``indices`` and RLlib column names."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer; add() a rollout first")
        out = self.make_sample_buffers(batch_size)
        self.sample_into(out)
        return {"indices": out.indices, **out.as_batch()}

    def update_priorities(self, indices: torch.Tensor, td_abs: torch.Tensor) -> None:
        """Set ``p = (|TD| + eps) ** alpha`` for ``indices`` on the device (no-op when uniform)."""
        if self.priorities is None:
            return
        new = torch.pow(td_abs.detach().to(torch.float64).abs() + self.priority_eps, self.alpha)
        ok = torch.isfinite(new)
        self.priorities.index_put_((indices,), torch.where(ok, new, self.priorities[indices]))
        top = torch.where(ok, new, torch.zeros_like(new)).max().reshape(1)
        torch.maximum(self.max_priority, top, out=self.max_priority)

    # ---- state -------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Stored rows ``[0, size)`` and counters as numpy arrays / Python ints (a checkpoint read)."""
        n = self.size
        state: Dict[str, Any] = {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "size": n,
            "ptr": self.ptr,
            "num_added": self.num_added,
            "prioritized": self.prioritized,
            # host read: checkpoint boundary, not the update loop
            "rng_step": int(self.rng_step.cpu()[0]),  # host read: checkpoint state
            "max_priority": float(self.max_priority.cpu()[0]),  # host read: checkpoint boundary
        }
        for k in _STORED:
            # host read: checkpoint boundary (a contiguous copy of the strided column)
            state[k] = self.storage[k][:n].cpu().contiguous().numpy()  # host read: checkpoint state
        if self.priorities is not None:
            state["priorities"] = self.priorities[:n].cpu().numpy()  # host read: checkpoint boundary
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output in place (capacity and obs shape must match)."""
        if int(state.get("capacity", -1)) != self.capacity:
            raise ValueError(f"replay state capacity must be {self.capacity}, got {state.get('capacity')!r}")
        if tuple(state.get("obs_shape", ())) != self.obs_shape:
            raise ValueError(f"replay state obs_shape must be {self.obs_shape}, got {state.get('obs_shape')!r}")
        n = int(state["size"])
        if not 0 <= n <= self.capacity:
            raise ValueError(f"replay state size must be in [0, {self.capacity}], got {n}")
        for k in _STORED:
            arr = torch.as_tensor(np.asarray(state[k]))
            if tuple(arr.shape[:1]) != (n,):
                raise ValueError(f"replay state[{k!r}] must have {n} rows, got shape {list(arr.shape)}")
            self.storage[k][:n].copy_(arr.to(self.storage[k].dtype))
        if self.priorities is not None:
            self.priorities.zero_()
            if state.get("priorities") is not None:
                self.priorities[:n].copy_(torch.as_tensor(np.asarray(state["priorities"])))
            else:
                self.priorities[:n].fill_(1.0)
        self.max_priority.fill_(float(state.get("max_priority", 1.0)))
        self._set_rng_step(int(state.get("rng_step", 0)))
        self.size, self.ptr = n, int(state["ptr"]) % self.capacity
        self.num_added = int(state.get("num_added", n))
        self._size_t.fill_(n)
