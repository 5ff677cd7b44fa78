"""Run directory outputs: JSON-lines iteration metrics, TensorBoard scalars, a live progress line."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

# (label, path in the RLlib result dict, format)
PROGRESS_FIELDS = (
    ("it", ("training_iteration",), "{:d}"),
    ("env/s", ("perf", "env_steps_per_s"), "{:,.0f}"),
    ("upd/s", ("perf", "updates_per_s"), "{:,.0f}"),
    ("return", ("env_runners", "episode_return_mean"), "{:+.4f}"),
    ("sharpe", ("env_runners", "trading", "episode_sharpe_mean"), "{:+.2f}"),
    ("val", ("eval", "validation_sharpe"), "{:+.2f}"),
    ("best rule", ("eval", "validation_best_rule_sharpe"), "{:+.2f}"),
    ("skipped", ("learners", "default_policy", "zerosync", "skipped"), "{:.0f}"),
    ("eps", ("env_runners", "epsilon"), "{:.3f}"),
)


# Static or bulky parts of RLlib's result dict that are not iteration metrics.
_SKIP = ("config", "evaluation")


def _get(d: dict, path: tuple) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def flatten_scalars(d: dict, prefix: str = "") -> dict[str, float]:
    """Flatten nested dicts to ``a/b/c -> float``, keeping finite numbers only."""
    out: dict[str, float] = {}
    for key, value in d.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten_scalars(value, name))
        elif isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, (int, float)) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


class RunLog:
    """Writes ``metrics.jsonl`` and TensorBoard events into the run directory."""

    def __init__(self, run_dir: Path, stream=sys.stdout):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        self._stream = stream
        self._last_time: float | None = None
        self._last_env_steps = 0.0
        self._last_updates = 0.0

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

    def write(self, result: dict) -> None:
        step = int(result.get("training_iteration", 0))
        scalars = flatten_scalars({k: v for k, v in result.items() if k not in _SKIP})
        self._jsonl.write(json.dumps({"iteration": step, **scalars}) + "\n")
        for name, value in scalars.items():
            self._tb.add_scalar(name, value, step)
        self._tb.flush()

    def progress(self, result: dict) -> str:
        parts = []
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

    def close(self) -> None:
        self._jsonl.close()
        self._tb.close()
