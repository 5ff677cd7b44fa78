"""The live progress lines of a run: ``it n/N``, elapsed time and ETA, throughput and running means
of the episode metrics (:class:`Progress`); the same for the long steps after training (the
evaluation's walks, statistics, files and figure; walk-forward folds; a population's evaluations:
:class:`Steps`); and :func:`say`, the one guarded write to the console (a closed pipe, e.g. ``| tee``
ended by the same Ctrl-C, silences the console instead of raising)."""
from __future__ import annotations

import contextlib
import errno
import math
import os
import sys
import threading
import time
import types
from typing import Any, Iterator

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


def _closed_pipe(err: BaseException) -> bool:
    """The reader went away: a closed pipe (EPIPE) or a hung-up terminal (EIO, after SIGHUP)."""
    return isinstance(err, BrokenPipeError) or (isinstance(err, OSError) and err.errno in (errno.EPIPE, errno.EIO))


def silence(stream) -> None:
    """Point ``stream``'s descriptor at the null device (a reader that went away: every later write,
    Python's flush at exit included, succeeds and goes nowhere); a stream without one is left alone."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def say(text: str, stream=None, end: str = "\n") -> bool:
    """Write ``text + end`` to ``stream`` (default ``sys.stdout``) and flush; a closed pipe (the reader
    of ``| tee`` or ``| head`` gone) silences the stream (:func:`silence`) instead of raising, so a run
    goes on to its checkpoint. Returns whether the text was written."""
    stream = stream if stream is not None else sys.stdout
    try:
        stream.write(text + end)
        stream.flush()
        return True
    except OSError as err:
        if not _closed_pipe(err):
            raise
        silence(stream)
        return False


def say_raw(text: str) -> None:
    """:func:`say` for a signal handler: straight to the stdout descriptor (a buffered write there can
    be re-entered in the middle of the main code's own write and raise); a closed pipe silences it."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stdout (tests) has no descriptor
        say(text, end="")
        return
    try:
        os.write(fd, text.encode())
    except OSError as err:
        if not _closed_pipe(err):
            raise
        silence(sys.stdout)


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (live lines) rather than a file or a pipe."""
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _took(seconds: float) -> str:
    """A step's own time: ``4.2 s`` under a minute, else ``H:MM:SS``."""
    return f"{seconds:.1f} s" if seconds < 59.95 else _hms(seconds)


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
        say(line, self._stream)
        return line


class Steps:
    """Progress of long steps, in the style of the training line: ``<label> n/N | elapsed [ETA] |
    <step> <its time>``, one line per step when it ends. On a terminal the running step's line is also
    shown live (rewritten in place every ``tick_s`` seconds); to a file or a pipe nothing else is
    written. ``eta``: the steps are alike (folds, members), so the remaining time is the mean step
    time so far times the steps left; otherwise (the different steps of one evaluation) no ETA.
    ``total`` may be None (``<label> n``). ``quiet``: write nothing (a caller that shows its own)."""

    def __init__(self, label: str, total: int | None = None, *, eta: bool = False, stream=None,
                 live: bool | None = None, tick_s: float = 1.0, quiet: bool = False) -> None:
        self.label, self.total, self.eta, self.quiet = label, total, eta, quiet
        self._stream = stream if stream is not None else sys.stdout  # resolved now: pytest swaps sys.stdout
        self._live = is_terminal(self._stream) if live is None else live
        self._tick_s = tick_s
        self._start = time.perf_counter()
        self.done = 0
        self.lines: list[str] = []

    def _head(self, index: int, now: float) -> str:
        elapsed = now - self._start
        count = f"{index}/{self.total}" if self.total else f"{index}"
        head = f"{self.label} {count} | {_hms(elapsed)}"
        if self.eta and self.total and self.done > 0 and self.done < self.total:
            head += f" ETA {_hms(elapsed / self.done * (self.total - self.done))}"
        return head

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[types.SimpleNamespace]:
        """Time one step named ``name``; its line is written when it ends. A step that raises writes
        none (its error says what happened; a live line is cleared). Yields a namespace whose ``name``
        the step may change (e.g. append what it did)."""
        index, t0 = self.done + 1, time.perf_counter()
        current = types.SimpleNamespace(name=name)
        stop = threading.Event()
        ticker = None
        if self._live and not self.quiet:
            def tick() -> None:
                while True:
                    now = time.perf_counter()
                    say(f"\r\033[K{self._head(index, now)} | {current.name} {_took(now - t0)} ...", self._stream,
                        end="")
                    if stop.wait(self._tick_s):
                        return

            ticker = threading.Thread(target=tick, name="rl-zerosync-progress", daemon=True)
            ticker.start()
        try:
            yield current
        except BaseException:
            if ticker is not None:
                stop.set()
                ticker.join()
                say("\r\033[K", self._stream, end="")
            raise
        stop.set()
        if ticker is not None:
            ticker.join()
        self.done = index
        now = time.perf_counter()
        line = f"{self._head(index, now)} | {current.name} {_took(now - t0)}"
        self.lines.append(line)
        if not self.quiet:
            say(("\r\033[K" if self._live else "") + line, self._stream)
