"""Who owns a run directory: ``run.lock`` (:class:`RunLock`), held for the life of a run, and
:class:`RunDirError` for a directory this run may not use."""
from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
import time
from pathlib import Path

from rl_zerosync.rundir.os_errors import reason

LOCK_FILE = "run.lock"
"""Held in the run directory for the life of a run: ``{"pid", "host", "started", "pid_start"}``."""


class RunDirError(RuntimeError):
    """A run directory this run may not use: another live run holds it, or it holds a finished run."""


class RunExistsError(RunDirError):
    """A directory that already holds a run (a population, a walk-forward's report), refused without
    ``--resume`` or ``--overwrite``; ``path`` is the directory (the command line prints the exact
    command to continue it or start it again)."""

    def __init__(self, message: str, path: str | Path) -> None:
        super().__init__(message)
        self.path = Path(path)


def check_writable_dir(path: str | Path, key: str) -> None:
    """``path`` is, or can be made, a writable directory: its nearest existing ancestor is a directory
    in which a file can be created. :class:`RunDirError` naming ``key`` and the path otherwise (a
    file where a directory is expected, or no permission), before anything is written."""
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise RunDirError(f"{key} {path}: {probe} is a broken symbolic link; expected a directory")
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise RunDirError(f"{key} {path}: {probe} is a file, expected a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=probe)
    except OSError as err:
        raise RunDirError(f"{key} {path}: {probe} is not writable ({reason(err)})") from None
    os.close(fd)
    os.unlink(name)


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

    def held(self) -> bool:
        """Whether the lock file still holds this run's lock (False once the directory or the lock
        is gone, or another run took it)."""
        if self._text is None:
            return False
        try:
            return self.path.read_text() == self._text
        except OSError:
            return False

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

