"""Run directory outputs: JSON-lines iteration metrics, TensorBoard scalars, a live progress line;
and who owns a run directory (:class:`RunLock`, :func:`claim_run_dir`)."""
from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

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
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
LOCK_FILE = "run.lock"
"""Held in the run directory for the life of a run: ``{"pid", "host", "started", "pid_start"}``."""
RUN_OUTPUTS = (METRICS_FILE, METRICS_FILE + ".tmp", TENSORBOARD_DIR, "evaluation", "settings.yaml")
"""What ``--overwrite`` removes besides every ``checkpoint*`` entry (the lock, logs and anything
else in the directory stay)."""


# Static or bulky parts of RLlib's result dict that are not iteration metrics.
_SKIP = ("config", "evaluation")


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


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
    """Writes ``metrics.jsonl`` and TensorBoard events into the run directory, and the progress line.

    ``purge_step`` (resume): TensorBoard hides the events of earlier sessions at steps >= it.
    ``total_iterations``: the progress line shows ``it n/N``, elapsed time and an ETA. Episode
    metrics on it are running means over the last :data:`RUNNING_EPISODES` episodes (weighted by
    the episodes each iteration ended), so they are shown even when no episode ended this iteration.
    ``reward/ep`` is the summed reward per episode (the trading env: percent of equity, after costs
    and the risk penalty), not the equity return; the evaluation reports the equity return."""

    def __init__(self, run_dir: Path, stream=None, purge_step: int | None = None,
                 total_iterations: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a", buffering=1)
        tb_dir = self.run_dir / TENSORBOARD_DIR
        # One event file per session, named in session order: a resume in the same second as the
        # previous session's start must not overwrite its file, and TensorBoard reads them in order.
        session = len(list(tb_dir.glob("events.out.tfevents.*"))) if tb_dir.is_dir() else 0
        self._tb = SummaryWriter(str(tb_dir), purge_step=purge_step, filename_suffix=f".{session:04d}")
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

    def write(self, result: dict) -> None:
        step = int(result.get("training_iteration", 0))
        scalars = flatten_scalars({k: v for k, v in result.items() if k not in _SKIP})
        self._jsonl.write(json.dumps({"iteration": step, **scalars}) + "\n")
        for name, value in scalars.items():
            self._tb.add_scalar(name, value, step)
        self._tb.flush()

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

    def progress(self, result: dict) -> str:
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

    def close(self) -> None:
        self._jsonl.close()
        self._tb.close()


# ---- run directory ownership -------------------------------------------------------------------

class RunDirError(RuntimeError):
    """A run directory this run may not use: another live run holds it, or it holds a finished run."""


def _proc_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, from /proc; None elsewhere): tells a
    reused pid from the lock holder."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` of this host exists and (when known) is the one that started at ``start``."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    if start is not None:
        now = _proc_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused
    return True


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, "
            f"started {holder.get('started', '?')}")


class RunLock:
    """``<run_dir>/run.lock``, created with O_EXCL and held for the life of a run (a context manager).

    A lock whose pid no longer exists on this host (or was reused by another process) is stale and
    taken over with a warning; a live one, or one held from another host, raises
    :class:`RunDirError` naming the holder."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.info: dict | None = None
        self._text: str | None = None

    def _read(self) -> tuple[str | None, dict | None]:
        """(raw text, parsed holder) of the lock file; (None, None) when it is gone."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                return None, None
            try:
                holder = json.loads(text)
                if isinstance(holder, dict):
                    return text, holder
            except ValueError:
                pass
            if time.monotonic() > deadline:  # still empty or torn: its writer died while writing it
                return text, {}
            time.sleep(0.05)  # just created, being written

    def _take_over(self, text: str) -> None:
        """Remove the stale lock whose contents are ``text`` (under an flock of the directory, so two
        runs taking over the same stale lock cannot both succeed)."""
        import fcntl

        fd = os.open(self.run_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if self.path.read_text() == text:
                    self.path.unlink()
            except FileNotFoundError:
                pass
        finally:
            os.close(fd)  # releases the flock

    def acquire(self) -> "RunLock":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        info = {"pid": os.getpid(), "host": host,
                "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "pid_start": _proc_start(os.getpid())}
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                text, holder = self._read()
                if text is None:
                    continue  # released meanwhile
                try:
                    pid = int(holder.get("pid", -1))
                except (TypeError, ValueError):
                    pid = -1
                if holder and (holder.get("host") != host or _alive(pid, holder.get("pid_start"))):
                    raise RunDirError(
                        f"{self.run_dir} is in use by another run: {_describe(holder)} (lock {self.path}; "
                        "delete it only if that run is dead)") from None
                from rl_zerosync.rundir.checkpoints import warn

                warn(f"taking over the stale lock {self.path} of a run that is gone "
                     f"({_describe(holder) if holder else 'unreadable lock'})")
                self._take_over(text)
                continue
            text = json.dumps(info) + "\n"
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            self.info, self._text = info, text
            return self
        raise RunDirError(f"{self.run_dir}: could not take the lock {self.path} (other runs keep taking it)")

    def release(self) -> None:
        """Remove the lock if it is still this run's."""
        if self._text is None:
            return
        try:
            if self.path.read_text() == self._text:
                self.path.unlink()
        except FileNotFoundError:
            pass
        self.info = self._text = None

    def __enter__(self) -> "RunLock":
        return self.acquire() if self._text is None else self

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


def run_outputs(run_dir: str | Path) -> list[str]:
    """What makes ``run_dir`` a run already (a non-empty metrics.jsonl, checkpoints): names, or []."""
    from rl_zerosync.rundir.checkpoints import checkpoint_candidates

    run_dir = Path(run_dir)
    found = []
    metrics = run_dir / METRICS_FILE
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append(METRICS_FILE)
    if run_dir.is_dir():
        found += [c.name + "/" for c in checkpoint_candidates(run_dir, "best") if c.parent == run_dir]
    return found


def clear_run_dir(run_dir: str | Path) -> list[str]:
    """Remove a run's outputs from ``run_dir`` (``RUN_OUTPUTS`` and every ``checkpoint*`` entry);
    returns the names removed."""
    run_dir = Path(run_dir)
    removed = []
    if not run_dir.is_dir():
        return removed
    for p in sorted(run_dir.iterdir()):
        if p.name in RUN_OUTPUTS or p.name.startswith("checkpoint"):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p.name)
    return removed


def claim_run_dir(run_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
                  hint: str | None = None) -> RunLock:
    """Take the run directory's lock for a run, before anything is written (or Ray started).

    A directory that already holds a run (:func:`run_outputs`) is only continued with ``resume``
    (the caller then drops the metrics rows after the resumed checkpoint) or cleared first with
    ``overwrite``; otherwise :class:`RunDirError` (``hint``: what to pass instead). The returned
    lock is held; release it (or use it as a context manager) when the run ends."""
    if resume and overwrite:
        raise RunDirError("--resume and --overwrite cannot be combined")
    run_dir = Path(run_dir)
    lock = RunLock(run_dir).acquire()
    try:
        if overwrite:
            removed = clear_run_dir(run_dir)
            if removed:
                print(f"overwrite: removed {', '.join(removed)} from {run_dir}", flush=True)
        found = run_outputs(run_dir)
        if found and not resume:
            hint = hint or f"pass --resume {run_dir} to continue it or --overwrite to replace it"
            raise RunDirError(f"{run_dir} already holds a run ({', '.join(found)}); not appending to it: {hint}")
    except BaseException:
        lock.release()
        raise
    return lock


def truncate_metrics(run_dir: str | Path, iteration: int) -> int:
    """Keep the rows of ``metrics.jsonl`` up to ``iteration`` (the resumed checkpoint's), one per
    iteration (the last written), in iteration order, and drop the rest and any torn line; the file
    is rewritten atomically (tmp + rename). Returns the number of lines dropped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return 0
    keep: dict[int, str] = {}
    dropped = 0
    for line in path.read_text().splitlines():  # host read: run metadata
        try:
            it = int(json.loads(line)["iteration"])
        except (ValueError, KeyError, TypeError):
            dropped += bool(line.strip())
            continue
        if it > iteration:
            dropped += 1
            continue
        if it in keep:
            dropped += 1
        keep[it] = line
    tmp = path.with_name(METRICS_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.writelines(keep[it] + "\n" for it in sorted(keep))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return dropped
