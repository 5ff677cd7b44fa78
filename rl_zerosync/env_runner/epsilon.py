"""Piecewise-linear epsilon schedule evaluated on the device from a device step counter.

``eps(t) = v0 + sum_k (v[k+1] - v[k]) * clamp((t - t[k]) / (t[k+1] - t[k]), 0, 1)``: a sum of
clamped ramps, which is the piecewise-linear interpolation through the breakpoints, holding the
last value after the last breakpoint (RLlib's ``PiecewiseSchedule`` with
``outside_value = last value``). No branches, no host reads: safe inside a rollout step and
inside a CUDA graph.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch

from rl_zerosync.env_runner.runner_settings import EpsilonSchedule, normalize_epsilon_schedule


class DeviceEpsilonSchedule:
    """Evaluates an epsilon schedule into a caller-owned f32[1] device scalar."""

    def __init__(
        self,
        schedule: Union[float, Sequence[Sequence[Union[int, float]]]],
        device: Union[str, torch.device],
    ) -> None:
        self.schedule: EpsilonSchedule = normalize_epsilon_schedule(schedule)
        self.device = torch.device(device)
        steps = [float(t) for t, _ in self.schedule]
        values = [v for _, v in self.schedule]
        f64 = dict(dtype=torch.float64, device=self.device)
        self._v0 = torch.tensor([values[0]], **f64)
        # One ramp per segment; a single breakpoint gives zero ramps (a constant).
        self._t_left = torch.tensor(steps[:-1], **f64)
        self._inv_len = torch.tensor([1.0 / (b - a) for a, b in zip(steps[:-1], steps[1:])], **f64)
        self._dv = torch.tensor([b - a for a, b in zip(values[:-1], values[1:])], **f64)

    def evaluate(self, env_steps: torch.Tensor, out: torch.Tensor) -> None:
        """Writes ``eps(env_steps)`` into ``out`` (f32[1]); ``env_steps`` is an i64[1] device count."""
        t = env_steps.to(torch.float64)
        ramps = ((t - self._t_left) * self._inv_len).clamp_(0.0, 1.0)
        out.copy_(self._v0 + (ramps * self._dv).sum(dim=0, keepdim=True))

    def value_at(self, env_steps: int) -> float:
        """Host-side value at an integer step (reporting and tests; not for the hot path)."""
        t = torch.tensor([int(env_steps)], dtype=torch.int64, device=self.device)
        out = torch.empty(1, dtype=torch.float32, device=self.device)
        self.evaluate(t, out)
        return float(out.cpu()[0])  # host read: reporting helper, outside the rollout
