"""Factored action layout: exposure x order type x urgency = 45 actions.

``index = exposure * 9 + order_type * 3 + urgency``; decode ``e = i // 9``, ``o = (i // 3) % 3``,
``u = i % 3``.
"""
from __future__ import annotations

from enum import IntEnum

import torch

NUM_EXPOSURES = 5
NUM_ORDER_TYPES = 3
NUM_URGENCIES = 3
NUM_ACTIONS = NUM_EXPOSURES * NUM_ORDER_TYPES * NUM_URGENCIES
BRANCH_SIZES = (NUM_EXPOSURES, NUM_ORDER_TYPES, NUM_URGENCIES)
DEFAULT_EXPOSURE_LEVELS = (-1.0, -0.5, 0.0, 0.5, 1.0)
ACTION_MODES = ("routed", "flat", "branching")
"""How a Q network maps onto the 45 actions: routed (Q over the 5 exposures, a routing rule picks
order type and urgency), flat (Q over all 45) or branching (one head per factor, 5 + 3 + 3)."""
DEFAULT_ACTION_MODE = "routed"
"""The action mode of the trading env when none is given."""


class OrderType(IntEnum):
    MARKET = 0
    LIMIT = 1
    PASSIVE = 2


class Urgency(IntEnum):
    LOW = 0
    NORMAL = 1
    HIGH = 2


def _check_range(name: str, value: int, size: int) -> None:
    if not 0 <= int(value) < size:
        raise ValueError(f"{name} must be in 0..{size - 1}, got {value}")


def encode(exposure: int, order_type: int, urgency: int) -> int:
    """Factored index of (exposure, order type, urgency)."""
    _check_range("exposure", exposure, NUM_EXPOSURES)
    _check_range("order_type", order_type, NUM_ORDER_TYPES)
    _check_range("urgency", urgency, NUM_URGENCIES)
    return int(exposure) * 9 + int(order_type) * 3 + int(urgency)


def decode(index: int) -> tuple[int, OrderType, Urgency]:
    """(exposure, order type, urgency) of a factored index."""
    _check_range("action index", index, NUM_ACTIONS)
    i = int(index)
    return i // 9, OrderType((i // 3) % 3), Urgency(i % 3)


def encode_t(exposure: torch.Tensor, order_type: torch.Tensor, urgency: torch.Tensor) -> torch.Tensor:
    """Vectorized :func:`encode` on integer tensors (no range check: a hot-path helper)."""
    return exposure * 9 + order_type * 3 + urgency


def decode_t(index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Vectorized :func:`decode` on an integer tensor."""
    return index // 9, (index // 3) % 3, index % 3


def exposure_levels_tensor(levels=DEFAULT_EXPOSURE_LEVELS, device=None) -> torch.Tensor:
    """Exposure levels as a float32 tensor; validates count and finiteness."""
    levels = tuple(float(x) for x in levels)
    if len(levels) != NUM_EXPOSURES:
        raise ValueError(f"exposure_levels must have {NUM_EXPOSURES} values, got {len(levels)}")
    t = torch.tensor(levels, dtype=torch.float32, device=device)
    if not torch.isfinite(t).all():  # host read: config validation, not a hot path
        raise ValueError(f"exposure_levels must be finite, got {levels}")
    return t
