"""One run directory ``<run.dir>/<run.name>/`` as one object, :class:`RunDir`: who holds it, what a
run writes into it, and where a resumed run starts from.

Layout (the checkpoints: :mod:`rl_zerosync.rundir.checkpoints`)::

    run.lock             held for the life of a run (:class:`~rl_zerosync.rundir.lock.RunLock`)
    settings.yaml        the run's settings
    data_record.json     file data: each file's size and SHA-256, each segment's bars and first/last
                         timestamps (:mod:`rl_zerosync.data.identity`); also in every checkpoint
    metrics.jsonl        one JSON row per iteration (flattened finite scalars of RLlib's result)
    tensorboard/         the same scalars, one event file per session
    checkpoint/ ...      the newest checkpoints, ``checkpoint_best/`` the best validation pass
    *.damaged/           checkpoints found damaged at a resume, set aside
    evaluation/          the evaluation at the end of the run (written whole to evaluation.tmp/, then
                         swapped in); evaluation_<stem>/ that of `evaluate --data <stem>.csv`
    rllib/               RLlib's own log folder (Algorithm.logdir; empty unless RLlib writes there)
    run_files.json       the inventory: every top-level entry this run wrote (what --overwrite removes)
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from tensorboardX import SummaryWriter

from rl_zerosync.data.identity import DATA_RECORD_FILE, data_record, write_record
from rl_zerosync.rundir import checkpoints
from rl_zerosync.rundir.checkpoints import (
    BEST_DIR, CHECKPOINT_DIR, KEEP_LAST, MARKER, RUN_STATE_FILE, SETTINGS_FILE, CheckpointError,
    checkpoint_candidates, read_run_state, verified_checkpoint, verify_checkpoint, warn,
)
from rl_zerosync.rundir.lock import LOCK_FILE, RunDirError, RunExistsError, RunLock
from rl_zerosync.rundir.os_errors import write_failed

TB_QUEUE = 1000
"""Events the TensorBoard writer holds before ``add_scalar`` waits for its writer thread."""

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
EVALUATION_DIR = "evaluation"
EVALUATION_NAMES = (EVALUATION_DIR, EVALUATION_DIR + ".tmp", EVALUATION_DIR + ".old", EVALUATION_DIR + ".lock")
"""The run's evaluation directory, the forms it takes while an evaluation replaces it and the file
whose lock lets one evaluation at a time write it."""
RLLIB_LOG_DIR = "rllib"
"""RLlib's log folder of the run's algorithm (``Algorithm.logdir``), inside the run directory rather
than a new ``~/ray_results/<timestamp>/`` per run."""
INVENTORY_FILE = "run_files.json"
"""The run's inventory: the names of the top-level entries it wrote, each recorded before it is
written; ``--overwrite`` removes these and nothing else."""
RUN_OUTPUTS = (METRICS_FILE, METRICS_FILE + ".tmp", TENSORBOARD_DIR, *EVALUATION_NAMES, "settings.yaml")
"""The fixed names of a run's outputs: what ``--overwrite`` removes from a run directory written
before the inventory existed, besides the checkpoint names of ``LEGACY_CHECKPOINT``."""
LEGACY_CHECKPOINT = re.compile(r"^checkpoint(_best)?(\.\d+|\.old)?(\.tmp|\.damaged)?$")
"""The exact checkpoint names a run writes (``checkpoint/``, ``checkpoint.1/``, ``checkpoint_best/``,
their ``.tmp`` / ``.old`` / ``.damaged`` forms): never a prefix match (``checkpoint_experiment/`` stays)."""

# Static or bulky parts of RLlib's result dict that are not iteration metrics.
_SKIP = ("config", "evaluation")


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


def metrics_row(result: dict) -> dict[str, float]:
    """One iteration's metrics row: ``iteration`` and RLlib's result dict (less ``config`` and
    ``evaluation``) flattened to finite scalars (:func:`flatten_scalars`). A single run's
    ``metrics.jsonl`` and a population's one table (``rl_zerosync.rundir.metrics_table``) both write
    these rows, so the key names agree."""
    scalars = flatten_scalars({k: v for k, v in result.items() if k not in _SKIP})
    return {"iteration": int(result.get("training_iteration", 0)), **scalars}


def _plain_name(name: Any) -> bool:
    """A top-level entry name of a run directory (no separators, not ``.`` or ``..``)."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors and aliases (a value written twice is written out twice): a run's
    ``settings.yaml`` loads as a settings file, which refuses aliases."""

    def ignore_aliases(self, data) -> bool:
        return True


def _settings_yaml(settings) -> str:
    return yaml.dump(settings.to_dict(), Dumper=_PlainDumper, sort_keys=False)


class RunDir:
    """A run directory: its lock, ``metrics.jsonl`` and TensorBoard events, its checkpoints.

    :meth:`claim` takes the lock for a run (a context manager; :meth:`close` releases it). A
    ``RunDir(path)`` made directly holds no lock: it reads the directory (:meth:`outputs`) and can
    rewrite it (:meth:`clear`, :meth:`truncate_metrics`) for a caller that owns it otherwise.

    A run: :meth:`claim`; on resume :meth:`resume_point` (before Ray starts) and, once the algorithm
    is built, :meth:`restore`; :meth:`write_settings`; :meth:`open_log`, then every iteration
    :meth:`log` and now and then :meth:`save`; :meth:`close_log`; :meth:`close`."""

    def __init__(self, path: str | Path, lock: RunLock | None = None):
        self.path = Path(path)
        self.lock = lock
        self._resumed_at: int | None = None
        self._jsonl = None
        self._tb = None
        self.data_record: dict | None = None
        """What :meth:`write_settings` recorded of the run's data files (None: synthetic data)."""

    # ---- ownership -------------------------------------------------------------------------------

    @classmethod
    def claim(cls, path: str | Path, *, resume: bool = False, overwrite: bool = False,
              hint: str | None = None) -> "RunDir":
        """Take the run directory's lock for a run, before anything is written (or Ray started).

        A directory that already holds a run (:meth:`outputs`) is only continued with ``resume``
        (:meth:`restore` then drops the metrics rows after the resumed checkpoint) or cleared first
        with ``overwrite``; otherwise :class:`RunDirError` (``hint``: what to pass instead). The
        lock is held until :meth:`close` (or the end of a ``with`` block)."""
        if resume and overwrite:
            raise RunDirError("--resume and --overwrite cannot be combined")
        run_dir = cls(path)
        run_dir.lock = RunLock(run_dir.path).acquire()
        try:
            if overwrite:
                removed = run_dir.clear()
                if removed:
                    print(f"overwrite: removed {', '.join(removed)} from {run_dir.path}", flush=True)
            found = run_dir.outputs()
            if found and not resume:
                hint = hint or f"pass --resume {run_dir.path} to continue it or --overwrite to replace it"
                raise RunExistsError(f"{run_dir.path} already holds a run ({', '.join(found)}); "
                                     f"not appending to it: {hint}", run_dir.path)
        except BaseException:
            run_dir.lock.release()
            raise
        return run_dir

    def outputs(self) -> list[str]:
        """What makes the directory a run already (a non-empty metrics.jsonl, checkpoints): names, or []."""
        found = []
        metrics = self.path / METRICS_FILE
        if metrics.is_file() and metrics.stat().st_size > 0:
            found.append(METRICS_FILE)
        if self.path.is_dir():
            found += [c.name + "/" for c in checkpoint_candidates(self.path, "best") if c.parent == self.path]
        return found

    def inventory(self) -> list[str] | None:
        """The names this run directory's runs recorded in ``run_files.json``; None when there is none
        (a directory written before the inventory existed). An unreadable inventory is a
        :class:`RunDirError`: nothing is removed on a guess."""
        path = self.path / INVENTORY_FILE
        if not path.is_file():
            return None
        try:
            names = json.loads(path.read_text())
        except ValueError as err:
            raise RunDirError(f"{path}: unreadable run inventory ({err}); remove the run's files by hand") from None
        if not isinstance(names, list) or not all(_plain_name(n) for n in names):
            raise RunDirError(f"{path}: expected a list of file names of the run directory, got {names!r}")
        return names

    def record(self, *names: str) -> None:
        """Add ``names`` (top-level entries of the run directory) to the inventory, before they are
        written; the inventory is rewritten atomically (tmp + rename)."""
        self.check_present()
        known = self.inventory() or []
        new = [n for n in names if n not in known]
        if not new:
            return
        path = self.path / INVENTORY_FILE
        tmp = path.with_name(INVENTORY_FILE + ".tmp")
        tmp.write_text(json.dumps(sorted(known + new), indent=1) + "\n")
        os.replace(tmp, path)

    def clear(self) -> list[str]:
        """Remove what the runs of this directory wrote: the entries of the inventory
        (:meth:`inventory`), or in a directory without one the fixed names of ``RUN_OUTPUTS`` and
        ``LEGACY_CHECKPOINT``; never anything else (the lock, logs, other files stay). Returns the
        names removed."""
        removed = []
        if not self.path.is_dir():
            return removed
        names = self.inventory()
        for p in sorted(self.path.iterdir()):
            ours = p.name in names if names is not None else (
                p.name in RUN_OUTPUTS or LEGACY_CHECKPOINT.match(p.name) is not None)
            if not ours or p.name in (LOCK_FILE, INVENTORY_FILE):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p.name)
        (self.path / INVENTORY_FILE).unlink(missing_ok=True)
        return removed

    def check_present(self) -> None:
        """:class:`RunDirError` when this run's directory or its lock has gone (deleted, moved, or the
        lock taken) while the run holds it: the run stops at its next write instead of writing into
        a directory nobody sees, or into another run's."""
        if self.lock is None:
            return
        if not self.path.is_dir():
            raise RunDirError(f"{self.path}: the run directory disappeared during the run (deleted or moved); "
                              "stopping before the next write (the files written so far are gone with it)")
        if not self.lock.held():
            lock = self.path / LOCK_FILE
            how = "was taken by another run" if lock.exists() else "was deleted"
            raise RunDirError(f"{self.path}: its lock {LOCK_FILE} {how} during the run; stopping before the next "
                              f"write so that two runs never write one directory (the files written so far stay: "
                              f"--resume {self.path} continues from its newest checkpoint once no other run "
                              "holds it)")

    def close(self) -> None:
        """Close the metrics log (if open) and release the lock (if still this run's)."""
        self.close_log()
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    # ---- resume ------------------------------------------------------------------------------------

    def resume_point(self, source: str | Path) -> Path:
        """The newest good checkpoint of ``source`` (a run or checkpoint directory; one that does not
        match its manifest is skipped with a warning for the next older one, :class:`CheckpointError`
        when none is good). The damaged ones of this run directory (the newer ones skipped, a damaged
        ``checkpoint_best/``) are moved aside to ``<name>.damaged/`` (:meth:`set_aside`)."""
        ckpt = verified_checkpoint(source, "last", fallback=True)
        found = checkpoint_candidates(source, "last")
        damaged = found[:found.index(ckpt)] if ckpt in found else []
        best = self.path / BEST_DIR
        if (best / MARKER).is_file() and best.resolve() != ckpt.resolve():
            try:
                verify_checkpoint(best, quiet=True)
            except CheckpointError as err:
                warn(str(err))
                damaged.append(best)
        for bad in damaged:
            moved = self.set_aside(bad)
            if moved is not None:
                warn(f"moved the damaged {bad} aside to {moved}")
        it = checkpoints.checkpoint_iteration(ckpt)
        if isinstance(it, int):
            self._metrics_rows(it)  # a damaged row among the kept ones: refused before Ray starts
        return ckpt

    def set_aside(self, ckpt: Path) -> Path | None:
        """Move the checkpoint ``ckpt`` of this directory out of the rotation, to ``<name>.damaged/``
        (an earlier one of that name is replaced), so a damaged checkpoint is kept to look at but never
        taken for a good one; None when ``ckpt`` is not a checkpoint of this directory."""
        run_dir, ckpt = self.path.resolve(), Path(ckpt)
        if ckpt.resolve().parent != run_dir or ckpt.name in (".", ""):
            return None
        dst = run_dir / (ckpt.name + ".damaged")
        self.record(dst.name)
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(ckpt, dst)
        return dst

    def restore(self, algo, ckpt: Path) -> dict:
        """Restore ``ckpt`` into ``algo`` and drop the metrics rows after its iteration
        (:meth:`truncate_metrics`; :meth:`open_log` then hides TensorBoard's later events); returns
        the checkpoint's run state."""
        algo.restore_from_path(str(ckpt.resolve()))
        state = read_run_state(ckpt)
        it = int(algo.iteration)
        self._resumed_at = it
        dropped = self.truncate_metrics(it)
        print(f"resumed from {ckpt} at iteration {it}"
              + (f" (dropped {dropped} metrics.jsonl rows after it)" if dropped else ""), flush=True)
        best = self.path / BEST_DIR
        best_it = read_run_state(best).get("iteration") if best.is_dir() else None
        if best_it is not None and best_it > it:
            warn(f"{best} is from iteration {best_it}, after the resumed iteration {it}; it stays until a "
                 "new best replaces it")
        return state

    def _metrics_rows(self, iteration: int) -> tuple[dict[int, str], int, list[int]]:
        """The rows of ``metrics.jsonl`` kept at a resume from ``iteration`` (iteration -> line, the last
        written of each), the number of lines dropped and the (1-based) numbers of the damaged lines
        among them. A damaged line (not a JSON row with an iteration) that leaves an iteration of
        1..``iteration`` without a row is a :class:`RunDirError` naming the file, the line and the
        iterations (nothing is changed); one among the rows after the checkpoint (a torn last line of
        a killed run) is dropped with them and named."""
        path = self.path / METRICS_FILE
        keep: dict[int, str] = {}
        dropped, damaged = 0, []
        if not path.is_file():
            return keep, dropped, damaged
        for number, line in enumerate(path.read_text().splitlines(), start=1):  # host read: run metadata
            try:
                it = int(json.loads(line)["iteration"])
            except (ValueError, KeyError, TypeError):
                if line.strip():
                    dropped += 1
                    damaged.append(number)
                continue
            if it > iteration:
                dropped += 1
                continue
            if it in keep:
                dropped += 1
            keep[it] = line
        missing = [i for i in range(1, iteration + 1) if i not in keep]
        if damaged and missing:
            shown = ", ".join(map(str, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise RunDirError(
                f"{path}, line {', '.join(map(str, damaged[:5]))}: a damaged row (not a JSON object with an "
                f"iteration) among the rows up to the resumed iteration {iteration}; resuming would leave "
                f"iteration {shown} without a row: repair or remove the line, then --resume again (nothing "
                "was changed)")
        return keep, dropped, damaged

    def truncate_metrics(self, iteration: int) -> int:
        """Keep the rows of ``metrics.jsonl`` up to ``iteration`` (the resumed checkpoint's), one per
        iteration (the last written), in iteration order, and drop the rest; the file is rewritten
        atomically (tmp + rename). A damaged line is dropped only when no iteration up to
        ``iteration`` loses its row by it (named in a warning), else :class:`RunDirError`
        (:meth:`_metrics_rows`). Returns the number of lines dropped."""
        path = self.path / METRICS_FILE
        if not path.is_file():
            return 0
        keep, dropped, damaged = self._metrics_rows(iteration)
        if damaged:
            warn(f"{path}: dropped {len(damaged)} damaged line(s) (line {', '.join(map(str, damaged[:5]))}; "
                 f"every iteration up to {iteration} keeps its row)")
        self.replace_metrics([keep[it] for it in sorted(keep)])
        return dropped

    def replace_metrics(self, lines: list[str]) -> None:
        """``metrics.jsonl`` rewritten whole as ``lines`` (one JSON row each): into ``metrics.jsonl.tmp``
        (in the run's inventory), synced, then swapped in, so a crash leaves the old file or the new one."""
        path = self.path / METRICS_FILE
        tmp = path.with_name(METRICS_FILE + ".tmp")
        self.record(tmp.name)
        with open(tmp, "w") as f:
            f.writelines(line + "\n" for line in lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    # ---- what a run writes -------------------------------------------------------------------------

    def write_settings(self, settings) -> None:
        """The run's settings as ``settings.yaml`` (what ``evaluate`` of the run directory reads) and,
        for file data, the record of its files and segments as ``data_record.json``
        (:func:`~rl_zerosync.data.identity.data_record`; written into every checkpoint too)."""
        self.record(SETTINGS_FILE, DATA_RECORD_FILE, RLLIB_LOG_DIR, *EVALUATION_NAMES)  # evaluation/: `evaluate`'s default
        (self.path / SETTINGS_FILE).write_text(_settings_yaml(settings))
        self.data_record = data_record(settings.data)
        if self.data_record is not None:
            write_record(self.path, self.data_record)

    def open_log(self) -> None:
        """Open ``metrics.jsonl`` (appended to) and this session's TensorBoard event file. After
        :meth:`restore`, TensorBoard hides the earlier sessions' events after the resumed iteration."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.record(METRICS_FILE, TENSORBOARD_DIR)
        self._jsonl = open(self.path / METRICS_FILE, "a", buffering=1)
        tb_dir = self.path / TENSORBOARD_DIR
        # One event file per session, named in session order: a resume in the same second as the
        # previous session's start must not overwrite its file, and TensorBoard reads them in order.
        session = len(list(tb_dir.glob("events.out.tfevents.*"))) if tb_dir.is_dir() else 0
        purge_step = self._resumed_at + 1 if self._resumed_at is not None else None
        # A deep queue: with tensorboardX's default of 10 pending events every add_scalar of a row waits
        # for its writer thread (a row of 106 scalars took a third longer on a CPU); close() drains it.
        self._tb = SummaryWriter(str(tb_dir), purge_step=purge_step, filename_suffix=f".{session:04d}",
                                 max_queue=TB_QUEUE)

    def log(self, result: dict) -> None:
        """One iteration's row: RLlib's result dict (less ``config`` and ``evaluation``) flattened to
        finite scalars, appended to ``metrics.jsonl`` and written to TensorBoard at its iteration."""
        self.check_present()
        row = metrics_row(result)
        step = row.pop("iteration")
        try:
            self._jsonl.write(json.dumps({"iteration": step, **row}) + "\n")
            for name, value in row.items():
                self._tb.add_scalar(name, value, step)
            self._tb.flush()
        except OSError as err:
            raise write_failed(err, self.path / METRICS_FILE, f"rows up to iteration {step - 1} are kept") from None

    def close_log(self) -> None:
        """Close ``metrics.jsonl`` and the TensorBoard writer (if open)."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._tb.close()
            self._jsonl = self._tb = None

    def save(self, algo, settings, name: str = CHECKPOINT_DIR, run_state: dict | None = None,
             keep: int | None = None, replay: bool | None = None) -> Path:
        """Write a checkpoint atomically: to ``<name>.tmp`` (RLlib's files, settings, run state, then
        the manifest last), then swap it in (:func:`~rl_zerosync.rundir.checkpoints.rotate`). ``keep``:
        checkpoints of this name kept (default ``KEEP_LAST`` for ``checkpoint/``, 1 for the others).
        ``replay``: include the learner's replay buffer and counters (default: for ``checkpoint/``,
        which resumes training; not for ``checkpoint_best/``, which evaluation and export read the
        policy from: a replay of millions of transitions is gigabytes, rewritten at every new best).
        The manifest and the rotation are looked up on the checkpoints module at each call, so a
        wrapper put there (the fault points of ``benchmarks/reliability.py``) takes effect."""
        if keep is None:
            keep = KEEP_LAST if name == CHECKPOINT_DIR else 1
        if replay is None:
            replay = name == CHECKPOINT_DIR
        tmp = self.path / (name + ".tmp")
        self.record(name, tmp.name, name + ".old", *(f"{name}.{i}" for i in range(1, max(1, int(keep)))))
        try:
            return self._save(algo, settings, name, tmp, run_state, keep, replay)
        except OSError as err:  # a full disk, a read-only file system: the previous checkpoint stays
            shutil.rmtree(tmp, ignore_errors=True)
            raise write_failed(err, tmp, self._kept(name)) from None

    def _kept(self, name: str) -> str:
        """What a failed checkpoint write leaves: the previous checkpoint, or nothing (said as it is)."""
        if not self.path.is_dir():
            return f"the run directory {self.path} is gone (deleted or moved during the run)"
        previous = self.path / name
        if (previous / MARKER).is_file():
            return f"the previous {previous} is intact"
        return f"no earlier {name}/ was written"

    def _save(self, algo, settings, name: str, tmp: Path, run_state: dict | None, keep: int, replay: bool) -> Path:
        """:meth:`save`'s writes: RLlib's files, settings, run state and manifest into ``tmp``, then rotate."""
        shutil.rmtree(tmp, ignore_errors=True)
        if replay:
            algo.save_to_path(str(tmp.resolve()))
        else:
            algo.save_to_path(str(tmp.resolve()),
                              state=algo.get_state(not_components=checkpoints.policy_only_excludes()))
        (tmp / SETTINGS_FILE).write_text(_settings_yaml(settings))
        if self.data_record is not None:
            write_record(tmp, self.data_record)
        state = {"iteration": int(algo.iteration), **(run_state or {})}
        (tmp / RUN_STATE_FILE).write_text(json.dumps(state, indent=2, default=float))
        checkpoints.write_manifest(tmp)
        if checkpoints.checkpoint_iteration(self.path / name) == state["iteration"]:
            keep = 1  # the same iteration again (the end of a run, or after a resume): replace it, shift nothing
        return checkpoints.rotate(self.path, name, tmp, max(1, int(keep)))
