"""Where an evaluation goes and how it is written: one whole directory at a time.

* :func:`default_out_dir`: without ``--out``, ``<run>/evaluation/`` for the run's own segments and
  ``<run>/evaluation_<stem>/`` for ``--data FILE`` (the file's stem made safe for a directory name),
  so evaluating another file never replaces the run's own evaluation.
* :func:`check_out_dir`: the output directory (and its ``.tmp`` / ``.old`` forms) must be new, empty
  or an evaluation directory (:func:`is_evaluation_dir`); anything else (a folder with other files,
  the run directory, a checkpoint) is refused with a :class:`~rl_zerosync.rundir.lock.RunDirError`
  before anything is loaded, so no user file is ever removed.
* :func:`written_whole`: the evaluation is written into ``<dir>.tmp`` and swapped in (the previous
  one renamed to ``<dir>.old``, the new one renamed in, the old removed): no file of an earlier
  evaluation stays beside the new one, and a failure part way leaves the previous evaluation as it
  was and no ``.tmp`` behind. One writer at a time per directory: ``<dir>.lock`` (an ``flock`` on a
  file beside the directory, removed by its holder) is held from ``.tmp`` to the swap, and a second evaluation
  into the same directory meanwhile is refused naming the holder (:class:`EvaluationBusyError`);
  replacing the evaluation of another checkpoint or other data prints a warning naming both. A
  write that fails inside (a full disk) is an ``OSError`` naming the file (or ``.tmp``) and what is kept.

An evaluation directory holds :data:`MARKER` (what was evaluated), ``metrics.json``, ``report.png``,
``bars_<segment>``/``portfolio_<segment>`` ``.csv``/``.parquet``, ``series.json`` (what they are:
:mod:`rl_zerosync.evaluation.series_sidecar`) and ``returns_<segment>.npz``; ``rl-zerosync report``
may add ``tearsheet.json`` / ``tearsheet.html`` (replaced with the rest by the next evaluation).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Iterator

from rl_zerosync.rundir.checkpoints import MANIFEST_FILE, MARKER as CHECKPOINT_MARKER
from rl_zerosync.rundir.lock import LOCK_FILE, RunDirError
from rl_zerosync.rundir.run_dir import EVALUATION_DIR, INVENTORY_FILE, RunDir

MARKER = ".rl-zerosync-evaluation"
"""Written first into every evaluation directory: ``{"checkpoint": ..., "data": ...}`` (resolved
paths; ``data`` null for the run's own segments). It makes the directory one ``evaluate`` may replace."""
OUTPUT_NAME = re.compile(r"^(metrics\.json|report\.png|series\.json|(bars|portfolio)_[A-Za-z0-9_-]+\.(csv|parquet)"
                         r"|returns_[A-Za-z0-9_-]+\.npz|tearsheet\.(json|html))$")
"""The files an evaluation writes (besides :data:`MARKER`), and the tear sheets ``rl-zerosync report``
adds to it (:mod:`rl_zerosync.evaluation.tearsheet`)."""
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
"""A failed write inside an evaluation (a full disk, a file size limit, a read-only file system):
re-raised naming the file, or the evaluation's ``.tmp``, and what is kept."""
MAX_STEM = 200
"""Characters of a file's stem kept in ``evaluation_<stem>`` (a directory name is at most 255 bytes)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class EvaluationBusyError(RunDirError):
    """Another evaluation is writing the same output directory now (it holds ``<out>.lock``)."""


def lock_path(out: Path) -> Path:
    """``<out>.lock``: the file whose ``flock`` makes one evaluation at a time write ``out``."""
    out = Path(out)
    return out.with_name(out.name + ".lock")


@contextlib.contextmanager
def _writer_lock(out: Path) -> Iterator[None]:
    """Hold ``<out>.lock`` (exclusive, non-blocking ``flock``; the holder's pid written into it) or
    raise :class:`EvaluationBusyError` naming the directory and the holder. The file is removed by its
    holder at the end (a killed holder's ``flock`` goes with its process; its file is taken over); a
    lock taken on a file already unlinked is dropped and taken again on the file now at the path."""
    path = lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise EvaluationBusyError(
                f"{out}: another evaluation (pid {holder}) is writing this directory now ({path} is locked); "
                "wait for it to finish or pass --out DIR for this one") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed it between our open and our lock: lock the file there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)  # still ours: removed while held
        except FileNotFoundError:
            pass
        os.close(fd)  # releases the flock


def _replacing_warning(out: Path, marker: dict) -> None:
    """A warning when ``out`` holds the evaluation of another checkpoint or other data than ``marker``'s."""
    earlier = _marker(out) if out.is_dir() else None
    if not earlier:
        return
    changed = [f"{key} {earlier.get(key)} -> {marker.get(key)}" for key in ("checkpoint", "data")
               if earlier.get(key) != marker.get(key)]
    if changed:
        print(f"warning: {out}: replacing the evaluation of another {'/'.join(c.split()[0] for c in changed)} "
              f"({'; '.join(changed)})", file=sys.stderr, flush=True)


def safe_stem(data: str | Path) -> str:
    """The stem of ``data`` as part of a directory name: every character other than an ASCII letter,
    digit, ``.``, ``_`` or ``-`` replaced by ``_``, at most :data:`MAX_STEM` characters."""
    stem = Path(data).stem
    if not stem:
        raise ValueError(f"--data {data!r}: expected a file name with a stem, to name its evaluation directory")
    return _UNSAFE.sub("_", stem)[:MAX_STEM]


def default_out_dir(run_dir: Path, data: str | Path | None) -> tuple[Path, str | None]:
    """Where an evaluation without ``--out`` goes and the line that says so (None for the run's own
    segments): ``<run>/evaluation`` or, with ``data``, ``<run>/evaluation_<stem>`` (:func:`safe_stem`)."""
    if data is None:
        return run_dir / EVALUATION_DIR, None
    stem, safe = Path(data).stem, safe_stem(data)
    out = run_dir / f"{EVALUATION_DIR}_{safe}"
    how = (f"named after the file's stem {stem!r}" if safe == stem else
           f"named after the file's stem {stem!r} made safe for a directory name: {safe!r}")
    return out, f"evaluation of {data}: {out}/ ({how}; --out DIR to choose another)"


def _marker(path: Path) -> dict | None:
    try:
        value = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _is_report(path: Path) -> bool:
    """``path`` is an evaluation's ``metrics.json`` (from a version before :data:`MARKER`)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and {"checkpoint", "segments", "summary"} <= set(value)


def _listed(path: Path) -> bool:
    """``path`` is an evaluation directory the run directory above it recorded in its inventory."""
    if path.name != EVALUATION_DIR and not path.name.startswith(EVALUATION_DIR + "_"):
        return False
    if not (path.parent / INVENTORY_FILE).is_file():
        return False
    return path.name in (RunDir(path.parent).inventory() or [])


def foreign_entries(path: Path) -> list[str]:
    """The entries of the directory ``path`` that no evaluation writes (folders, other names)."""
    return sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir()
                  if p.name != MARKER and (not p.is_file() or p.is_symlink() or not OUTPUT_NAME.match(p.name)))


def is_evaluation_dir(path: Path) -> bool:
    """``path`` is a directory ``evaluate`` may replace: empty, or only evaluation files
    (:data:`OUTPUT_NAME`) with :data:`MARKER`, or an evaluation's ``metrics.json`` (older versions),
    or recorded as an evaluation by the run directory above it."""
    if not path.is_dir() or path.is_symlink():
        return False
    entries = list(path.iterdir())
    if not entries:
        return True
    if foreign_entries(path):
        return False
    return _marker(path) is not None or _is_report(path / "metrics.json") or _listed(path)


def check_out_dir(out: Path, run_dir: Path, key: str = "evaluate --out") -> None:
    """``out`` (and ``<out>.tmp``, ``<out>.old``) may be written by an evaluation of the run in
    ``run_dir``: new, empty or an evaluation directory. :class:`RunDirError` naming ``key``, the
    directory and what it holds otherwise."""
    out = Path(out)
    if out.resolve() == Path(run_dir).resolve():
        raise RunDirError(f"{key} {out}: is the run directory of the checkpoint; expected an evaluation "
                          f"directory (new, empty, or written by evaluate), e.g. {out / EVALUATION_DIR}")
    for path in (out, out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")):
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_dir():
            what = "a symbolic link" if path.is_symlink() else "not a directory"
            raise RunDirError(f"{key} {out}: {path} is {what}; expected an evaluation directory "
                              "(new, empty, or written by evaluate)")
        if (path / CHECKPOINT_MARKER).is_file() or (path / MANIFEST_FILE).is_file():
            what = "a checkpoint directory"
        elif (path / LOCK_FILE).exists() or (path / INVENTORY_FILE).is_file():
            what = "a run directory"
        elif not is_evaluation_dir(path):
            found = foreign_entries(path)
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            what = (f"a directory holding files no evaluation writes ({shown})" if found else
                    "a directory of evaluation-named files not written by evaluate (no metrics.json report)")
        else:
            continue
        raise RunDirError(f"{key} {out}: {path} is {what}; expected an evaluation directory (new, empty, or "
                          "written by evaluate): nothing there is replaced, choose another --out")


def check_same_data(out: Path, data: str | Path) -> None:
    """The default ``evaluation_<stem>/`` of ``data`` does not hold the evaluation of another file
    of the same stem (:class:`RunDirError` naming both; ``--out`` chooses another directory)."""
    marker = _marker(out) if out.is_dir() else None
    earlier = (marker or {}).get("data")
    if earlier and Path(earlier) != Path(data).resolve():
        raise RunDirError(f"{out} holds the evaluation of {earlier}, not of {Path(data).resolve()} (the same "
                          "file stem); not replacing it: pass --out DIR for this file")


def record_in_run(out: Path, run_dir: Path) -> None:
    """An evaluation directory inside the run directory ``run_dir`` goes into the run's inventory
    (with its ``.tmp``, ``.old`` and ``.lock`` forms), so ``--overwrite`` removes it with the run; nothing is
    recorded elsewhere, or in a directory without an inventory (an older version's)."""
    run_dir = Path(run_dir)
    if out.parent.resolve() != run_dir.resolve() or not (run_dir / INVENTORY_FILE).is_file():
        return
    RunDir(run_dir).record(out.name, out.name + ".tmp", out.name + ".old", lock_path(out).name)


@contextlib.contextmanager
def written_whole(out: Path, marker: dict) -> Iterator[Path]:
    """``with written_whole(out, {...}) as tmp:`` write the evaluation into ``tmp`` (``<out>.tmp``,
    :data:`MARKER` already in it); on a clean exit it replaces ``out`` whole (previous one renamed to
    ``<out>.old``, ``tmp`` renamed to ``out``, the old removed). Any exception removes ``tmp`` and
    leaves ``out`` as it was. Call :func:`check_out_dir` first: what is removed here
    (a ``.tmp`` / ``.old`` left by a killed evaluation, the previous ``out``) was checked to be an
    evaluation. The whole time ``<out>.lock`` is held (:func:`_writer_lock`): a second evaluation of
    ``out`` meanwhile is refused by name instead of removing this one's ``.tmp``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _writer_lock(out):
        with _written_whole(out, marker) as tmp:
            yield tmp


@contextlib.contextmanager
def _written_whole(out: Path, marker: dict) -> Iterator[Path]:
    """:func:`written_whole` under its lock."""
    tmp, old = out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed evaluation (checked)
    tmp.mkdir(parents=True)
    try:
        (tmp / MARKER).write_text(json.dumps(marker) + "\n")
        yield tmp
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if err.errno not in WRITE_ERRNOS:
            raise
        kept = f"the previous {out} is as it was" if out.exists() else f"nothing of it was left ({out} not made)"
        from rl_zerosync.rundir.os_errors import reason

        raise OSError(err.errno, f"cannot write the evaluation into {err.filename or tmp}: "
                                 f"{reason(err)}; {kept}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replacing_warning(out, marker)
    try:
        shutil.rmtree(old, ignore_errors=True)  # left by an evaluation killed between two renames (checked)
        if out.exists():
            os.replace(out, old)
        try:
            os.replace(tmp, out)
        except BaseException:
            if old.exists() and not out.exists():
                os.replace(old, out)  # the previous evaluation back in place
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
