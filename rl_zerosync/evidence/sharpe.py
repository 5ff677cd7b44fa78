"""The project's Sharpe ratio: per-bar net returns ``r_1..r_n``, ``SR = mean(r) / std(r, ddof=1) *
sqrt(P)`` with ``P = periods_per_year`` (0 when the std is 0 or ``n < 2``). Every statistic of
:mod:`rl_zerosync.evidence` and the ``sharpe`` metric of :mod:`rl_zerosync.evaluation.metrics` use it."""
from __future__ import annotations

import math

import numpy as np


def sharpe_ratio(net_returns: np.ndarray, periods_per_year: float) -> float:
    r = np.asarray(net_returns, dtype=np.float64)
    if r.size < 2:
        return 0.0
    sd = r.std(ddof=1)
    return float(r.mean() / sd * math.sqrt(periods_per_year)) if sd > 0 else 0.0
