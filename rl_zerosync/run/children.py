"""Child processes of a driver (``--seeds``): they die with their driver, stop with it on SIGTERM /
SIGINT / SIGHUP, and its report is written atomically.

* :func:`spawn` starts a child in the driver's process group with ``PR_SET_PDEATHSIG`` = SIGTERM
  (Linux): when the driver dies, even by SIGKILL, the child gets SIGTERM, writes its checkpoint and
  exits 143, instead of training on alone.
* :class:`Stop` turns SIGTERM / SIGINT / SIGHUP (a closed terminal) in the driver into :class:`Stopped` (its ``signum``), so the
  driver can pass the signal on to its children (:func:`stop_all`) and mark its report partial.
* :func:`write_json_atomic`: ``<name>.tmp``, fsync, rename: a reader sees the old file or the new one.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Iterable

PR_SET_PDEATHSIG = 1
STOP_WAIT_S = 300.0
"""Seconds a child gets to write its checkpoint after SIGTERM before it is killed."""


class Stopped(Exception):
    """The process got one of :data:`STOP_SIGNALS` (``signum``)."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the driver's Stop handler still passes its signals on


def spawn(cmd: list[str], log) -> subprocess.Popen:
    """Start ``cmd`` (stdout and stderr to ``log``) as a child that gets SIGTERM when the driver dies."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)


def stop_all(procs: Iterable[subprocess.Popen], signum: int = signal.SIGTERM, wait_s: float = STOP_WAIT_S) -> None:
    """Send ``signum`` to every live child, wait up to ``wait_s`` for each (its checkpoint), then kill it."""
    procs = [p for p in procs if p.poll() is None]
    for p in procs:
        p.send_signal(signum)
    for p in procs:
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The graceful stops: Ctrl-C, ``kill`` / a scheduler, a closed terminal (exit 128 + the signal:
130, 143, 129)."""


def install_stop_handlers(handler) -> dict:
    """Set ``handler`` for :data:`STOP_SIGNALS` (main thread only: elsewhere Python refuses, and the
    previous handlers stay); returns the previous handlers for :func:`restore_handlers`."""
    previous = {}
    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous


def restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


class Stop:
    """A context in which :data:`STOP_SIGNALS` raise :class:`Stopped` (the previous handlers restored after)."""

    def __enter__(self) -> "Stop":
        self._previous = install_stop_handlers(self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise Stopped(signum)

    def __exit__(self, *exc) -> bool:
        restore_handlers(self._previous)
        return False


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` through ``<name>.tmp`` + fsync + rename."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=2, default=float))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
