"""The live progress line of a run: ``it n/N``, elapsed time and ETA, throughput and running means
of the episode metrics (:class:`Progress`)."""
from __future__ import annotations

import math
import sys
import time
from typing import Any

# (label, path in the RLlib result dict, format)
PROGRESS_FIELDS = (
    ("env/s", ("perf", "env_steps_per_s"), "{:,.0f}"),
    ("upd/s", ("perf", "updates_per_s"), "{:,.0f}"),
    # running means over the last RUNNING_EPISODES episodes (RLlib's smoothing convention)
    ("reward/ep", ("perf", "episode_return_running"), "{:+.4f}"),
    ("len", ("perf", "episode_len_running"), "{:,.0f}"),
    ("sharpe/ep", ("perf", "episode_sharpe_running"), "{:+.2f}"),
    ("val", ("eval", "validation_sharpe"), "{:+.2f}"),
    ("best rule", ("eval", "validation_best_rule_sharpe"), "{:+.2f}"),
    ("skipped", ("learners", "default_policy", "zerosync", "skipped"), "{:.0f}"),
    ("eps", ("env_runners", "epsilon"), "{:.3f}"),
)


RUNNING_EPISODES = 100
"""Episodes the progress line's running means cover."""
_RUNNING = (("episode_return_running", ("env_runners", "episode_return_mean")),
            ("episode_len_running", ("env_runners", "episode_len_mean")),
            ("episode_sharpe_running", ("env_runners", "trading", "episode_sharpe_mean")))


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _get(d: dict, path: tuple) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


class Progress:
    """The progress line printed after every iteration, and the ``perf`` numbers it shows.

    ``total_iterations``: the line shows ``it n/N``, elapsed time and an ETA. Episode metrics on it
    are running means over the last :data:`RUNNING_EPISODES` episodes (weighted by the episodes each
    iteration ended), so they are shown even when no episode ended this iteration. ``reward/ep`` is
    the summed reward per episode (the trading env: percent of equity, after costs and the risk
    penalty), not the equity return; the evaluation reports the equity return."""

    def __init__(self, total_iterations: int | None = None, stream=None):
        self._stream = stream if stream is not None else sys.stdout  # resolved now: pytest swaps sys.stdout
        self._last_time: float | None = None
        self._last_env_steps = 0.0
        self._last_updates = 0.0
        self._total = total_iterations
        self._start = time.perf_counter()
        self._start_iteration: int | None = None
        self._episodes: list[tuple[float, dict[str, float]]] = []  # (episodes, {key: mean}) per iteration

    def _running(self, result: dict, perf: dict) -> None:
        """Running means over the last RUNNING_EPISODES episodes into ``perf``."""
        n = float(_get(result, ("env_runners", "num_episodes")) or 0.0)
        if n > 0:
            values = {key: _get(result, path) for key, path in _RUNNING}
            self._episodes.append((n, {k: float(v) for k, v in values.items()
                                       if isinstance(v, (int, float)) and math.isfinite(float(v))}))
        kept, total = [], 0.0
        for count, values in reversed(self._episodes):
            if total >= RUNNING_EPISODES:
                break
            take = min(count, RUNNING_EPISODES - total)
            kept.append((take, values))
            total += take
        self._episodes = self._episodes[-len(kept):] if kept else []
        for key, _ in _RUNNING:
            pairs = [(w, v[key]) for w, v in kept if key in v]
            weight = sum(w for w, _ in pairs)
            if weight > 0:
                perf[key] = sum(w * x for w, x in pairs) / weight

    def add_perf(self, result: dict) -> None:
        """Add env steps/s and updates/s since the previous iteration to ``result['perf']``."""
        now = time.perf_counter()
        env_steps = float(_get(result, ("env_runners", "num_env_steps_sampled_lifetime")) or 0.0)
        updates = float(_get(result, ("learners", "default_policy", "zerosync", "updates_lifetime")) or 0.0)
        perf = result.setdefault("perf", {})
        if self._last_time is not None:
            dt = max(now - self._last_time, 1e-9)
            perf["env_steps_per_s"] = (env_steps - self._last_env_steps) / dt
            perf["updates_per_s"] = (updates - self._last_updates) / dt
        self._last_time, self._last_env_steps, self._last_updates = now, env_steps, updates
        self._running(result, perf)

    def _clock(self, iteration: int) -> list[str]:
        """``it n/N``, elapsed and (after the first iteration of this session) an ETA."""
        if self._start_iteration is None:
            self._start_iteration = iteration - 1
        elapsed = time.perf_counter() - self._start
        done = iteration - self._start_iteration
        parts = [f"it {iteration}/{self._total}" if self._total else f"it {iteration}", _hms(elapsed)]
        if self._total and done > 0 and iteration < self._total:
            parts[-1] += f" ETA {_hms(elapsed / done * (self._total - iteration))}"
        return parts

    def show(self, result: dict) -> str:
        """Print the progress line of ``result`` (after :meth:`add_perf`) and return it."""
        parts = self._clock(int(result.get("training_iteration", 0)))
        for label, path, fmt in PROGRESS_FIELDS:
            value = _get(result, path)
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                parts.append(f"{label} -")
                continue
            try:
                parts.append(f"{label} " + fmt.format(int(value) if fmt == "{:d}" else float(value)))
            except (TypeError, ValueError):
                parts.append(f"{label} {value}")
        line = " | ".join(parts)
        print(line, file=self._stream, flush=True)
        return line
