"""Did-you-mean hints for the common shapes of a user's CSV that stop a load: the one setting that fixes it.

* Column names in another case than ``data.columns`` gives them (``date`` for ``Date``): the
  mapping that names the file's own spelling (:func:`column_hint`).
* pandas' unnamed index column ``Unnamed: 0`` (a frame written with ``to_csv()`` and its index)
  that holds the dates: ``data.columns.timestamp='Unnamed: 0'`` (:func:`column_hint`,
  :func:`unnamed_dates`).
* Day-first dates (``15/06/2009``) read month-first: ``data.dayfirst: true`` (:func:`dayfirst_hint`).

Each returns the text to append to the error (``""`` when no hint applies).
"""
from __future__ import annotations

import warnings
from typing import Mapping, Sequence

UNNAMED_INDEX = "Unnamed: 0"
"""The name pandas gives the index column of a frame written with ``to_csv()``."""


def _all_dates(values) -> bool:
    """Whether every cell of ``values`` is text that reads as a date (numbers are not dates here)."""
    import pandas as pd

    series = pd.Series(values)
    if len(series) == 0 or not (series.dtype == object or pd.api.types.is_string_dtype(series.dtype)):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    return bool(parsed.notna().all())


def unnamed_dates(frame) -> bool:
    """Whether ``frame`` has pandas' unnamed index column and it holds dates."""
    return UNNAMED_INDEX in frame.columns and _all_dates(frame[UNNAMED_INDEX])


def column_hint(frame, mapping: Mapping[str, str], key: str) -> str:
    """The fix for ``data.columns.<key>`` naming a column ``frame`` does not have: the file's
    spelling of every mapped column that differs only in case (one mapping for all of them), or
    the unnamed index column when ``key`` is the timestamp and that column holds dates."""
    lower = {str(c).lower(): str(c) for c in frame.columns}
    fixes = {k: lower[str(v).lower()] for k, v in mapping.items()
             if v not in frame.columns and str(v).lower() in lower}
    if key in fixes:
        items = ", ".join(f"{k}: {v}" for k, v in fixes.items())
        return (f"; did you mean {fixes[key]!r}? The file's column names differ in case: set data.columns "
                f"to {{{items}}} (or leave data.columns out: names are found in any case)")
    if key == "timestamp" and unnamed_dates(frame):
        return (f"; did you mean {UNNAMED_INDEX!r}? Its dates are pandas' unnamed index column (a frame "
                f"written with to_csv() and its index): set data.columns.timestamp='{UNNAMED_INDEX}'")
    return ""


def unnamed_timestamp_error(where: str, columns: Sequence[str]) -> str:
    """The error of a file whose only dates are in pandas' unnamed index column (no column named
    timestamp, date, datetime or time): read without them, its bars would have no dates."""
    return (f"{where}: the dates are in column {UNNAMED_INDEX!r} (pandas' unnamed index column of a frame "
            f"written with to_csv() and its index) and no column is named timestamp, date, datetime or time; "
            f"set data.columns.timestamp='{UNNAMED_INDEX}'; found columns {list(columns)}")


def dayfirst_hint(raw, timestamp_format: str | None, dayfirst: bool | None) -> str:
    """The fix for dates that do not parse month-first but all parse day-first (``15/06/2009``):
    ``data.dayfirst: true``."""
    import pandas as pd

    if dayfirst or timestamp_format is not None:
        return ""
    series = pd.Series(raw)
    if not (series.dtype == object or pd.api.types.is_string_dtype(series.dtype)):
        return ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = pd.to_datetime(series, errors="coerce", dayfirst=True)
    if not parsed.notna().all():
        return ""
    return "; did you mean day-first dates (day/month/year)? Set data.dayfirst: true (--set data.dayfirst=true)"
