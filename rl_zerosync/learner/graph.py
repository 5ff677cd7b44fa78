"""Capture-once, replay-many CUDA graph of one learner update.

``GraphedUpdate(fn, ...)()`` runs ``fn`` eagerly on a side stream for the first ``warmup`` calls
(lazy optimizer state, cuBLAS workspaces, allocator warm-up; these are real updates), then
captures ``fn`` once with ``torch.cuda.graph`` and replays it on every later call (the capturing
call replays right after capture, so every call is exactly one update). Once that graph exists,
:meth:`GraphedUpdate.block` captures ``fn`` called ``n`` times in a row as a second graph (its own
memory pool) and replays it: ``n`` updates in one launch. ``fn`` must read and write
only static tensors (preallocated buffers, parameters, optimizer state) and do no host work that
has to happen per update; host-side counters belong outside it.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

__all__ = ["GraphedUpdate"]


class GraphedUpdate:
    """Warm up, capture once, replay (see the module docstring).

    Args:
        fn: The update; called with no arguments.
        warmup: Eager calls before the capture (>= 1).
        before_capture: Called right before capture (e.g. set the gradients to None so backward
            allocates them from the graph's pool).
        stream: The side stream for warm-up and capture (default: a new one). With DDP, pass the
            stream the DDP wrapper was built on (its autograd hooks are tied to it).
        capture_error_mode: ``torch.cuda.graph``'s mode; ``"thread_local"`` lets other threads
            (e.g. the NCCL watchdog of a process group) keep querying events during capture.
    """

    def __init__(
        self,
        fn: Callable[[], None],
        *,
        warmup: int,
        before_capture: Callable[[], None],
        stream: Optional[torch.cuda.Stream] = None,
        capture_error_mode: str = "global",
    ) -> None:
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup must be an int >= 1, got {warmup!r}")
        self.fn, self.warmup = fn, warmup
        self.before_capture = before_capture
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self._warmup_left = warmup
        self._side: Optional[torch.cuda.Stream] = stream
        self.capture_error_mode = capture_error_mode
        self._blocks: dict = {}  # n -> graph of n updates
        self.captures = 0
        """Graphs captured so far (the one-update graph and every block graph, again after a :meth:`reset`)."""

    @property
    def captured(self) -> bool:
        """Whether the graph has been captured."""
        return self.graph is not None

    def reset(self) -> None:
        """Drop the graph (buffers were replaced, e.g. after a state restore); warm up again."""
        self.graph = None
        self._blocks = {}
        self._warmup_left = self.warmup

    def __call__(self) -> None:
        """One update: warm-up call, capture + replay, or replay."""
        if self.graph is not None:
            self.graph.replay()
            return
        current = torch.cuda.current_stream()
        if self._side is None:
            self._side = torch.cuda.Stream()
        if self._warmup_left > 0:
            self._side.wait_stream(current)
            with torch.cuda.stream(self._side):
                self.fn()
            current.wait_stream(self._side)
            self._warmup_left -= 1
            return
        self.before_capture()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self._side, capture_error_mode=self.capture_error_mode):
            self.fn()
        self.graph = graph
        self.captures += 1
        graph.replay()

    def block(self, n: int) -> None:
        """``n`` updates in one launch: captured on first use (after the one-update graph), then replayed."""
        if self.graph is None:
            raise RuntimeError("GraphedUpdate.block: capture the one-update graph first (call it until captured)")
        graph = self._blocks.get(n)
        if graph is None:
            self.before_capture()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self._side, capture_error_mode=self.capture_error_mode):
                for _ in range(n):
                    self.fn()
            self._blocks[n] = graph
            self.captures += 1
        graph.replay()
