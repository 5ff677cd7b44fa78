"""What a run's data files were when it trained on them, so that a file changed under its path is noticed.

A run on file data (csv, parquet) records, in ``data_record.json`` beside its ``settings.yaml`` and
inside every checkpoint (:func:`data_record`):

* ``files``: each file of ``data.paths`` as given, its size in bytes and its SHA-256;
* ``segments``: per segment (train, validation, test) and asset, the bars ``[first, end)`` in
  full-series coordinates (first tradable bar, one past the last), their ``count`` and, for dated
  data, the timestamps of the first and last of them (``first``, ``last``);
* ``training_period``: the first and last traded timestamp of the train segment over all assets
  (None for undated files), the period the evaluation's overlap check compares against.

:func:`check_unchanged` compares the recorded files with the files at those paths now (the size
first, then the SHA-256) and raises :class:`DataChangedError` naming the first changed or missing
file; ``train --resume``, ``evaluate --walk-forward --resume`` and ``evaluate`` of a run's own
segments refuse such a file. Synthetic data records nothing (its series are drawn from
``data.seed``, which the settings already hold).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

DATA_RECORD_FILE = "data_record.json"
"""The run's data record, in the run directory and in every checkpoint."""
RECORD_VERSION = 1
FILE_SOURCES = ("csv", "parquet")
_CHUNK = 1 << 20


class DataChangedError(ValueError):
    """A data file that is not the one a run recorded (another size or SHA-256, or missing): named
    with what the run recorded and what is there now."""


def file_identity(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "size", "sha256"}`` of the file at ``path`` (``path`` as given; the size is the
    one of the bytes hashed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return {"path": str(path), "size": int(size), "sha256": h.hexdigest()}


def _stamp(ts: Any) -> str:
    import pandas as pd

    return pd.Timestamp(ts).isoformat()


def segment_rows(market) -> list[dict[str, Any]]:
    """Per asset of ``market`` (one segment): ``asset``, ``bars`` ``[first, end)`` in full-series
    coordinates (first tradable bar .. one past the last bar), ``count`` (``end - first``) and, when
    the data has timestamps, ``first`` / ``last`` (those bars' times, ISO 8601)."""
    starts = market.valid_start.cpu().tolist()  # host read: setup
    lengths = market.length.cpu().tolist()  # host read: setup
    rows = []
    for a, name in enumerate(market.asset_names):
        off = market.offsets[a] if market.offsets is not None else 0
        row: dict[str, Any] = {"asset": name, "bars": [off + starts[a], off + lengths[a]],
                               "count": lengths[a] - starts[a]}
        if market.timestamps is not None and lengths[a] > starts[a]:
            row["first"] = _stamp(market.timestamps[a][starts[a]])
            row["last"] = _stamp(market.timestamps[a][lengths[a] - 1])
        rows.append(row)
    return rows


def data_paths(data_cfg: Mapping[str, Any] | None) -> list[str]:
    """``data.paths`` as a list of strings (empty for synthetic data)."""
    cfg = dict(data_cfg or {})
    if cfg.get("source", "synthetic") not in FILE_SOURCES:
        return []
    paths = cfg.get("paths")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or [])
    return [str(p) for p in paths]


def data_record(data_cfg: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The record of the module doc for a ``data`` section; None for synthetic data. The files are
    hashed before they are read, so a file replaced meanwhile shows as changed at the next check."""
    from rl_zerosync.data.data_settings import DataSettings, make_market
    from rl_zerosync.data.market import SPLITS

    d = DataSettings.from_dict(data_cfg)
    if d.source not in FILE_SOURCES:
        return None
    files = [file_identity(p) for p in data_paths(data_cfg)]
    full_cfg = {k: v for k, v in dict(data_cfg or {}).items() if k != "window"}
    full_cfg["device"] = "cpu"
    full = make_market(full_cfg, "all")  # cut below exactly as make_market(data_cfg, segment) cuts it
    segments: dict[str, list[dict[str, Any]]] = {}
    for seg in SPLITS:
        try:
            segments[seg] = segment_rows(full.split(seg, d.split, window=d.window))
        except ValueError:  # a segment this data cannot cut (the run then never uses it)
            continue
    return {"version": RECORD_VERSION, "source": d.source, "files": files, "segments": segments,
            "training_period": _period(segments.get("train") or [])}


def _period(rows: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """``[first, last]`` over the rows' timestamps (None when they have none)."""
    import pandas as pd

    firsts = [pd.Timestamp(r["first"]) for r in rows if "first" in r]
    lasts = [pd.Timestamp(r["last"]) for r in rows if "last" in r]
    if not firsts or len(firsts) != len(rows):
        return None
    return [min(firsts).isoformat(), max(lasts).isoformat()]


def write_record(directory: str | Path, record: Mapping[str, Any]) -> Path:
    """``record`` as ``<directory>/data_record.json``."""
    path = Path(directory) / DATA_RECORD_FILE
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def read_record(*directories: str | Path) -> dict[str, Any] | None:
    """The data record of the first of ``directories`` that holds one (None when none does, a run of
    synthetic data or of an older version); ValueError naming the file when it is unreadable."""
    for directory in directories:
        path = Path(directory) / DATA_RECORD_FILE
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())  # host read: run metadata
            files = record["files"]
            if not isinstance(files, list) or not all({"path", "size", "sha256"} <= set(f) for f in files):
                raise ValueError("expected files with path, size and sha256")
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: unreadable data record ({err})") from None
        return record
    return None


def training_period(record: Mapping[str, Any] | None):
    """``(first, last)`` of the recorded training period as pandas Timestamps, or None."""
    import pandas as pd

    period = (record or {}).get("training_period")
    if not period:
        return None
    return pd.Timestamp(period[0]), pd.Timestamp(period[1])


def _short(sha: str) -> str:
    return sha[:12]


def changed_files(record: Mapping[str, Any], paths: Sequence[str] | None = None) -> list[str]:
    """One line per recorded file (of ``paths`` only, when given) that is missing or not the
    recorded one now: the path, what the run recorded and what is there."""
    out = []
    for f in record.get("files") or []:
        path = str(f["path"])
        if paths is not None and path not in paths:
            continue
        was = f"{int(f['size'])} bytes, SHA-256 {_short(str(f['sha256']))}..."
        if not os.path.isfile(path):
            out.append(f"data file {path} is missing (the run recorded {was})")
            continue
        size = os.path.getsize(path)
        now = file_identity(path) if size == int(f["size"]) else {"size": size, "sha256": None}
        if now["size"] != int(f["size"]) or now["sha256"] != f["sha256"]:
            shown = f"{now['size']} bytes" + (f", SHA-256 {_short(now['sha256'])}..." if now["sha256"] else "")
            out.append(f"data file {path} changed since the run recorded it ({was}; now {shown})")
    return out


def check_unchanged(record: Mapping[str, Any] | None, hint: str, paths: Sequence[str] | None = None) -> None:
    """:class:`DataChangedError` naming the first recorded file (of ``paths``, when given) that
    changed or is missing, then ``hint`` (what to do); nothing without a record."""
    if not record:
        return
    changed = changed_files(record, paths)
    if changed:
        more = f" (and {len(changed) - 1} more file(s))" if len(changed) > 1 else ""
        raise DataChangedError(f"{changed[0]}{more}: {hint}")
