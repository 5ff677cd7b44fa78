"""Asynchronous device-to-host readback: pinned buffer + non-blocking copy + CUDA event.

The one sanctioned way for a boundary (end of a rollout, end of a training iteration) to read device
values: ``start()`` enqueues the copy on the current stream and returns at once, ``poll()`` asks
the event without blocking (for a lagged read), and ``wait()`` blocks on that event only.
"""
from __future__ import annotations

from typing import Optional, Union

import torch


class AsyncReadback:
    """A reusable pinned host buffer of ``numel`` elements of ``dtype`` fed from ``device``.

    On a CPU device the copy is a plain synchronous copy behind the same interface. The tensor
    returned by :meth:`wait` is the buffer itself: the next :meth:`start` overwrites it, so clone it
    if it must outlive that.
    """

    def __init__(self, numel: int, dtype: torch.dtype, device: Union[str, torch.device]) -> None:
        if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
            raise ValueError(f"numel must be an int >= 1, got {numel!r}")
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.numel = numel
        self.dtype = dtype
        self._cuda = self.device.type == "cuda"
        self.host = torch.empty(numel, dtype=dtype, pin_memory=self._cuda)
        self._event: Optional[torch.cuda.Event] = torch.cuda.Event() if self._cuda else None
        self._started = False

    def start(self, src: torch.Tensor) -> None:
        """Enqueue ``host <- src`` (flattened) on the current stream and record the event."""
        if not isinstance(src, torch.Tensor):
            raise ValueError(f"src must be a torch.Tensor, got {type(src).__name__}")
        if src.numel() != self.numel or src.dtype != self.dtype or src.device != self.device:
            raise ValueError(
                f"src must have {self.numel} elements of {self.dtype} on {self.device}, "
                f"got {src.numel()} of {src.dtype} on {src.device}"
            )
        self.host.copy_(src.reshape(-1), non_blocking=self._cuda)
        if self._event is not None:
            self._event.record(torch.cuda.current_stream(self.device))
        self._started = True

    def poll(self) -> bool:
        """True once the last started copy has landed; never blocks (False before any start)."""
        if not self._started:
            return False
        return True if self._event is None else self._event.query()

    def wait(self) -> torch.Tensor:
        """Block until the last started copy has landed and return the host buffer."""
        if not self._started:
            raise RuntimeError("AsyncReadback.wait() called before start()")
        if self._event is not None:
            self._event.synchronize()  # host read: boundary readback, waits on this copy only
        return self.host
