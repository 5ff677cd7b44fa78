"""A run's metrics rows, wherever they are written: a single run's ``metrics.jsonl`` or a population's
one table.

A single run writes ``<run>/metrics.jsonl`` (:meth:`~rl_zerosync.rundir.run_dir.RunDir.log`). A
population writes **one** table for all its members, :class:`MetricsTable`:
``<population>/metrics.jsonl`` (one row per member per iteration: the single run's row of
:func:`~rl_zerosync.rundir.run_dir.metrics_row` with a ``member`` column) and one TensorBoard writer
in ``<population>/tensorboard/`` (tags ``member<k>/<the single run's name>``). A member's directory
``<population>/member<k>/`` keeps what ``evaluate`` / ``export --member K`` read (its settings and
checkpoints), not a metrics file of its own.

:func:`read_metrics` is how everything reads a run's rows (evaluation's evidence, ``--seeds``
reports, the population's plot, benchmarks, tests): a run's own ``metrics.jsonl``, or for a member
directory its rows of the population's table, without the ``member`` column (the rows its single run
writes).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

from rl_zerosync.rundir.checkpoints import warn
from rl_zerosync.rundir.lock import RunDirError
from rl_zerosync.rundir.os_errors import write_failed
from rl_zerosync.rundir.run_dir import METRICS_FILE, TB_QUEUE, TENSORBOARD_DIR, RunDir

__all__ = ["MEMBER_COLUMN", "MetricsTable", "read_metrics", "read_member_metrics", "member_of"]

MEMBER_COLUMN = "member"
"""The population table's column that names a row's member (its index ``k``, of ``member<k>/``)."""
MEMBER_DIR = re.compile(r"member(\d+)")
"""A population member's directory name (``population/members.py``'s ``member{index}``)."""
_TB_ILLEGAL = re.compile(r"[^-/\w\.]")
"""Characters TensorBoard's tags may not hold (tensorboardX's ``add_scalar`` puts ``_`` for them too)."""


def member_of(run_dir: str | Path) -> int | None:
    """The member index of ``run_dir`` when it is a population member's directory (named ``member<k>``,
    its parent holding the population's table), else None."""
    path = Path(run_dir)
    match = MEMBER_DIR.fullmatch(path.name)
    if match is None or not (path.parent / METRICS_FILE).is_file():
        return None
    return int(match.group(1))


def _rows(path: Path) -> list[dict]:
    """The JSON rows of a ``metrics.jsonl`` (a damaged line is a ``ValueError`` naming the file and line)."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):  # host read: run metadata
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as err:
            raise ValueError(f"{path}, line {number}: not a JSON metrics row ({err})") from None
    return rows


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The metrics rows of the run in ``run_dir``, in the order written: its own ``metrics.jsonl``, or
    for a population member's directory (:func:`member_of`) the member's rows of the population's table
    without the ``member`` column. ``FileNotFoundError`` naming both places when there is neither."""
    return read_member_metrics([run_dir])[0]


def read_member_metrics(run_dirs: Sequence[str | Path]) -> list[list[dict]]:
    """:func:`read_metrics` of each of ``run_dirs``, a population's table parsed once for all of its
    members (not once per member: 64 members' curves read it 64 times)."""
    tables: dict[Path, dict[int, list[dict]]] = {}
    out = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        own = path / METRICS_FILE
        if own.is_file():
            out.append(_rows(own))
            continue
        k = member_of(path)
        if k is None:
            raise FileNotFoundError(f"{own}: no metrics.jsonl (and {path.name} is not a member of a population "
                                    f"whose table is {path.parent / METRICS_FILE})")
        if path.parent not in tables:
            by_member: dict[int, list[dict]] = {}
            for row in _rows(path.parent / METRICS_FILE):
                by_member.setdefault(row.get(MEMBER_COLUMN), []).append(
                    {key: v for key, v in row.items() if key != MEMBER_COLUMN})
            tables[path.parent] = by_member
        out.append(tables[path.parent].get(k, []))
    return out


def _kept_rows(path: Path, kept: dict[int, int]) -> tuple[dict[tuple[int, int], str], int, list[int]]:
    """:meth:`MetricsTable.truncate`'s reading of ``path``: the kept lines by ``(iteration, member)`` (the
    last written of each), the number of lines dropped and the (1-based) numbers of the damaged ones."""
    keep: dict[tuple[int, int], str] = {}
    dropped, damaged = 0, []
    for number, line in enumerate(path.read_text().splitlines(), start=1):  # host read: run metadata
        try:
            row = json.loads(line)
            key = (int(row["iteration"]), int(row[MEMBER_COLUMN]))
        except (ValueError, KeyError, TypeError):
            if line.strip():
                dropped += 1
                damaged.append(number)
            continue
        if key[0] > kept.get(key[1], 0) or key in keep:
            dropped += 1
        if key[0] <= kept.get(key[1], 0):
            keep[key] = line
    return keep, dropped, damaged


class MetricsTable:
    """A population's one metrics table and TensorBoard writer in its directory ``path`` (see the module
    docstring). :meth:`open`, then :meth:`write` every iteration's rows, then :meth:`close`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._jsonl = None
        self._tb = None

    def open(self, purge_step: int | None = None) -> "MetricsTable":
        """Open ``metrics.jsonl`` (appended to) and this session's TensorBoard event file (recorded in the
        directory's inventory first, so ``--overwrite`` removes them). ``purge_step`` (a resume: the first
        iteration trained again): the new event file starts a session there, so TensorBoard hides the
        earlier sessions' events from that step on (as a single run's ``SummaryWriter(purge_step=...)``)."""
        from tensorboardX import FileWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.path.mkdir(parents=True, exist_ok=True)
        RunDir(self.path).record(METRICS_FILE, TENSORBOARD_DIR)
        self._jsonl = open(self.path / METRICS_FILE, "a")
        tb_dir = self.path / TENSORBOARD_DIR
        session = len(list(tb_dir.glob("events.out.tfevents.*"))) if tb_dir.is_dir() else 0
        self._tb = FileWriter(str(tb_dir), max_queue=TB_QUEUE, filename_suffix=f".{session:04d}")
        if purge_step is not None:
            self._tb.add_event(Event(step=int(purge_step), file_version="brain.Event:2"))
            self._tb.add_event(Event(step=int(purge_step), session_log=SessionLog(status=SessionLog.START)))
        return self

    def truncate(self, kept: dict[int, int]) -> int:
        """At a resume: keep member ``k``'s rows up to iteration ``kept[k]`` (its resumed checkpoint's; a
        member not in ``kept`` keeps none), one row per member and iteration (the last written), in
        iteration then member order (the order an uninterrupted population writes), and drop the rest;
        the file is rewritten atomically (tmp + rename). A damaged line (a torn last line of a killed
        run) is dropped with a warning; one that leaves a kept iteration of a member without its row is a
        :class:`~rl_zerosync.rundir.lock.RunDirError` naming the line (nothing changed). Returns the
        number of lines dropped."""
        path = self.path / METRICS_FILE
        if not path.is_file():
            return 0
        keep, dropped, damaged = _kept_rows(path, kept)
        missing = [f"member{k} iteration {i}" for k, last in sorted(kept.items()) for i in range(1, last + 1)
                   if (i, k) not in keep]
        if damaged and missing:
            raise RunDirError(
                f"{path}, line {', '.join(map(str, damaged[:5]))}: a damaged row (not a JSON object with a member "
                f"and an iteration) among the rows the resume keeps; {', '.join(missing[:5])} would have no row: "
                "repair or remove the line, then --resume again (nothing was changed)")
        if damaged:
            warn(f"{path}: dropped {len(damaged)} damaged line(s) (line {', '.join(map(str, damaged[:5]))}; "
                 "every kept iteration keeps its row)")
        RunDir(self.path).replace_metrics([keep[key] for key in sorted(keep)])
        return dropped

    def write(self, rows: list[dict]) -> None:
        """One iteration's rows (each a :func:`~rl_zerosync.rundir.run_dir.metrics_row` with its
        ``member``): one append to ``metrics.jsonl`` and one TensorBoard event per row (all its scalars,
        tagged ``member<k>/<name>``), flushed once."""
        from tensorboardX.proto.summary_pb2 import Summary

        if not rows:
            return
        if self._jsonl is None:
            raise RuntimeError(f"{self.path / METRICS_FILE}: the population's metrics table is not open")
        try:
            self._jsonl.write("".join(json.dumps(row) + "\n" for row in rows))
            self._jsonl.flush()
            for row in rows:
                tag = f"member{row[MEMBER_COLUMN]}/"
                values = [Summary.Value(tag=_TB_ILLEGAL.sub("_", tag + name), simple_value=float(value))
                          for name, value in row.items() if name not in (MEMBER_COLUMN, "iteration")]
                self._tb.add_summary(Summary(value=values), int(row["iteration"]))
            self._tb.flush()
        except OSError as err:
            its = sorted({int(row["iteration"]) for row in rows})
            raise write_failed(err, self.path / METRICS_FILE, f"rows before iteration {its[0]} are kept") from None

    def close(self) -> None:
        """Close ``metrics.jsonl`` and the TensorBoard writer (if open)."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._tb.close()
            self._jsonl = self._tb = None
