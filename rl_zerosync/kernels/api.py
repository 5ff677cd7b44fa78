"""The kernel interface shared by the CUDA backend and the torch twins.

Every method writes into caller-owned output tensors, returns nothing, allocates nothing on the
CUDA backend and never reads device memory back to the host. Methods do not validate their
arguments: validate once with the matching ``bind_*`` method, which returns a zero-argument
launcher for the bound buffers.
"""
from __future__ import annotations

import functools
from typing import Callable, Union

import torch

from rl_zerosync.kernels import validate

Launcher = Callable[[], None]


class Kernels:
    """Base class of both backends; see ``docs/ARCHITECTURE.md`` for the exact semantics."""

    backend: str = "abstract"

    def __init__(self, device: Union[str, torch.device]) -> None:
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend!r}, device={str(self.device)!r})"

    def warmup(self) -> None:
        """Prepare every kernel (compile, load) so that later launches can be graph-captured."""

    # --- kernels (overridden by each backend) -------------------------------------------------
    def guard_check(
        self,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
        warmup_done: Union[torch.Tensor, float],
        flags: torch.Tensor,
        clipped_loss: torch.Tensor,
        loss_scale: torch.Tensor,
        found_inf: torch.Tensor,
        *,
        loss_clip: float,
        collapse_threshold: float,
    ) -> None:
        """Flags (nonfinite, loss_clipped, grad_collapse), clipped loss, loss scale, found_inf."""
        raise NotImplementedError

    def guard_accumulate(
        self, clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
    ) -> None:
        """``accum += (loss, grad_norm, 1, nonfinite, clipped, collapse)``; sums skip non-finite steps."""
        raise NotImplementedError

    def guard_record(
        self,
        clipped_loss: torch.Tensor,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
        flags: torch.Tensor,
        qstats_out: torch.Tensor,
        div_flag: torch.Tensor,
        accum: torch.Tensor,
        qagg: torch.Tensor,
        records: torch.Tensor,
        update_index: torch.Tensor,
    ) -> None:
        """``guard_accumulate``, then fold the Q stats into ``qagg``, store first-trigger records, bump the index."""
        raise NotImplementedError

    def qstats(self, q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
        """``out = (min, max, mean) of row-max Q, mean Q, nan_flag``; NaN stats if any Q non-finite."""
        raise NotImplementedError

    def divergence(
        self, qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: float, patience: int
    ) -> None:
        """Patience counter of diverged Q stats and a sticky divergence flag."""
        raise NotImplementedError

    def epsilon_greedy(
        self, q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *, seed: int
    ) -> None:
        """Epsilon-greedy actions with counter-based randomness (``kernels/rng.py``)."""
        raise NotImplementedError

    def branching_select(
        self,
        q_exposure: torch.Tensor,
        q_order: torch.Tensor,
        q_urgency: torch.Tensor,
        epsilon: torch.Tensor,
        step: torch.Tensor,
        actions: torch.Tensor,
        *,
        seed: int,
    ) -> None:
        """Per-branch epsilon-greedy, combined into the factored index ``e * 9 + o * 3 + u``."""
        raise NotImplementedError

    def route(
        self,
        exposure: torch.Tensor,
        spread: torch.Tensor,
        median_spread: torch.Tensor,
        vol: torch.Tensor,
        median_vol: torch.Tensor,
        actions: torch.Tensor,
        *,
        wide: float = 1.5,
        high_vol: float = 1.5,
        low_vol: float = 0.75,
    ) -> None:
        """Exposure plus order type and urgency from the spread and volatility ratios."""
        raise NotImplementedError

    # --- validated binding --------------------------------------------------------------------
    def _bind(self, name: str, args: tuple, kwargs: dict) -> Launcher:
        getattr(validate, f"bind_{name}")(*args, **kwargs)
        first = next(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        if first.device != self.device:
            raise ValueError(f"{name}: buffers are on {first.device}, these kernels are for {self.device}")
        return functools.partial(getattr(self, name), *args, **kwargs)

    def bind_guard_check(self, *args, **kwargs) -> Launcher:
        """Validate ``guard_check`` buffers once; return a launcher for them."""
        return self._bind("guard_check", args, kwargs)

    def bind_guard_accumulate(self, *args, **kwargs) -> Launcher:
        """Validate ``guard_accumulate`` buffers once; return a launcher for them."""
        return self._bind("guard_accumulate", args, kwargs)

    def bind_guard_record(self, *args, **kwargs) -> Launcher:
        """Validate ``guard_record`` buffers once; return a launcher for them."""
        return self._bind("guard_record", args, kwargs)

    def bind_qstats(self, *args, **kwargs) -> Launcher:
        """Validate ``qstats`` buffers once; return a launcher for them."""
        return self._bind("qstats", args, kwargs)

    def bind_divergence(self, *args, **kwargs) -> Launcher:
        """Validate ``divergence`` buffers once; return a launcher for them."""
        return self._bind("divergence", args, kwargs)

    def bind_epsilon_greedy(self, *args, **kwargs) -> Launcher:
        """Validate ``epsilon_greedy`` buffers once; return a launcher for them."""
        return self._bind("epsilon_greedy", args, kwargs)

    def bind_branching_select(self, *args, **kwargs) -> Launcher:
        """Validate ``branching_select`` buffers once; return a launcher for them."""
        return self._bind("branching_select", args, kwargs)

    def bind_route(self, *args, **kwargs) -> Launcher:
        """Validate ``route`` buffers once; return a launcher for them."""
        return self._bind("route", args, kwargs)
