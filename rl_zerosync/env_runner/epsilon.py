"""Epsilon schedules: the one rule that accepts them, and their evaluation on the device.

:func:`normalize_epsilon_schedule` is the only validator of an epsilon schedule; a settings file
(``algo.epsilon``, ``runner.epsilon``), the env runner and the Q module all call it, so a schedule
is accepted or refused the same way everywhere, at settings load for a file.

The rule: a constant in [0, 1], or ``[(step, value), ...]`` with integer env-step breakpoints
``>= 0`` that **start at 0** and **strictly increase**, and values in [0, 1]. Why these two:

* RLlib's ``Scheduler`` takes the value of the first breakpoint as the initial value and its
  ``Scheduler.validate`` requires step 0 first; before a first breakpoint ``t0 > 0`` its
  ``PiecewiseSchedule`` would return the *last* value (its ``outside_value``) while the device
  evaluation below would hold the first, so a schedule not starting at 0 would mean two things.
* Equal steps are a jump in RLlib's ``PiecewiseSchedule`` but a zero-length ramp (a division by
  zero) here; a jump is written as two nearby steps instead.

Every shipped config and RLlib's default ``[(0, 1.0), (10000, 0.05)]`` satisfy it.

Evaluation: ``eps(t) = v0 + sum_k (v[k+1] - v[k]) * clamp((t - t[k]) / (t[k+1] - t[k]), 0, 1)``: a sum
of clamped ramps, which is the piecewise-linear interpolation through the breakpoints, holding the
last value after the last breakpoint (RLlib's ``PiecewiseSchedule`` with ``outside_value = last
value``). No branches, no host reads: safe inside a rollout step and inside a CUDA graph.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple, Union

import torch

EpsilonSchedule = Tuple[Tuple[int, float], ...]
"""A normalized schedule: ``((0, v0), (t1, v1), ...)``."""


def normalize_epsilon_schedule(
    value: Union[float, int, Sequence[Sequence[Union[int, float]]]], *, field: str = "epsilon"
) -> EpsilonSchedule:
    """Validates an epsilon schedule (the rule of the module docstring) and returns it as
    ``((t0, v0), (t1, v1), ...)``; a constant ``v`` is returned as ``((0, v),)``.

    Raises ValueError naming ``field`` (e.g. ``"algo.epsilon"``) otherwise.
    """
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{field} must be a float in [0, 1] or a list of (step, value) pairs, got {value!r}")
    if isinstance(value, (int, float)):
        pairs: list = [(0, value)]
    else:
        try:
            pairs = [tuple(p) for p in value]
        except TypeError:
            raise ValueError(
                f"{field} must be a float in [0, 1] or a list of (step, value) pairs, got {value!r}"
            ) from None
    if not pairs:
        raise ValueError(f"{field} must hold at least one (step, value) pair, got an empty list")
    out = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"{field}[{i}] must be a (step, value) pair, got {pair!r}")
        t, v = pair
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t != int(t) or t < 0:
            raise ValueError(f"{field}[{i}] step must be an integer >= 0, got {t!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= float(v) <= 1.0):
            raise ValueError(f"{field}[{i}] value must be a float in [0, 1], got {v!r}")
        if out and int(t) <= out[-1][0]:
            raise ValueError(
                f"{field} steps must be strictly increasing, got {out[-1][0]} then {int(t)} at index {i}"
            )
        out.append((int(t), float(v)))
    if out[0][0] != 0:
        raise ValueError(f"{field}[0] step must be 0, got {out[0][0]}")
    return tuple(out)


def rllib_schedule(schedule: EpsilonSchedule) -> Union[float, list]:
    """A normalized schedule as RLlib's ``Scheduler`` takes it: the value itself when constant."""
    return schedule[0][1] if len(schedule) == 1 else list(schedule)


def _ramps(schedule: EpsilonSchedule) -> tuple[float, list, list, list]:
    """``(v0, t_left, inv_len, dv)`` of the module doc's sum of clamped ramps: one ramp per segment;
    a single breakpoint gives zero ramps (a constant)."""
    steps = [float(t) for t, _ in schedule]
    values = [v for _, v in schedule]
    return (values[0], steps[:-1], [1.0 / (b - a) for a, b in zip(steps[:-1], steps[1:])],
            [b - a for a, b in zip(values[:-1], values[1:])])


class DeviceEpsilonSchedule:
    """Evaluates an epsilon schedule into a caller-owned f32[1] device scalar."""

    def __init__(
        self,
        schedule: Union[float, Sequence[Sequence[Union[int, float]]]],
        device: Union[str, torch.device],
    ) -> None:
        self.schedule: EpsilonSchedule = normalize_epsilon_schedule(schedule)
        self.device = torch.device(device)
        v0, t_left, inv_len, dv = _ramps(self.schedule)
        f64 = dict(dtype=torch.float64, device=self.device)
        self._v0 = torch.tensor([v0], **f64)
        self._t_left = torch.tensor(t_left, **f64)
        self._inv_len = torch.tensor(inv_len, **f64)
        self._dv = torch.tensor(dv, **f64)

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


class MemberEpsilonSchedules:
    """The epsilon schedules of P population members evaluated at once into an f32[P] device vector:
    each member's ramps padded to the longest schedule with zero-height ramps (which add exactly 0)."""

    def __init__(self, schedules: Sequence[EpsilonSchedule], device: Union[str, torch.device]) -> None:
        self.device = torch.device(device)
        ramps = [_ramps(normalize_epsilon_schedule(s)) for s in schedules]
        width = max(1, max(len(r[3]) for r in ramps))
        f64 = dict(dtype=torch.float64, device=self.device)

        def padded(i: int) -> torch.Tensor:
            return torch.tensor([r[i] + [0.0] * (width - len(r[i])) for r in ramps], **f64)

        self._v0 = torch.tensor([r[0] for r in ramps], **f64)
        self._t_left, self._inv_len, self._dv = padded(1), padded(2), padded(3)

    def evaluate(self, env_steps: torch.Tensor, out: torch.Tensor) -> None:
        """Writes every member's ``eps(env_steps)`` into ``out`` (f32[P]); ``env_steps`` is an i64[1] count."""
        t = env_steps.to(torch.float64)
        ramps = ((t - self._t_left) * self._inv_len).clamp_(0.0, 1.0)
        out.copy_(self._v0 + (ramps * self._dv).sum(dim=1))
