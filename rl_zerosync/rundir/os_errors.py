"""An OS error as the one line a user acts on: the path, the system's words and the errno name
(``/runs/a/checkpoint.tmp: No space left on device (ENOSPC)``), whoever raised it.

:func:`os_error_text` is how every message of ``rl_zerosync`` that surfaces an ``OSError`` says it (the
command line's ``error:`` lines included); :func:`write_failed` wraps a failed write into an
``OSError`` of the same errno whose message names the path and what the failure left intact.
"""
from __future__ import annotations

import errno
from pathlib import Path

__all__ = ["errno_name", "os_error_text", "reason", "write_failed"]


def errno_name(err: OSError) -> str | None:
    """The symbolic name of ``err``'s errno (``ENOSPC``), None when it has none."""
    return errno.errorcode.get(err.errno) if isinstance(err.errno, int) else None


def reason(err: OSError) -> str:
    """The system's words with the errno name: ``No space left on device (ENOSPC)``; for an ``OSError``
    made from a message alone, the message."""
    words = err.strerror or str(err)
    name = errno_name(err)
    return f"{words} ({name})" if name and f"({name})" not in words else words


def os_error_text(err: OSError, path: str | Path | None = None) -> str:
    """``<path>: <reason>`` (:func:`reason`); ``path`` defaults to the error's own file name (and the
    second one of a rename), and is left out when neither names one (a message that names its path
    itself, as :func:`write_failed`'s do)."""
    where = path if path is not None else err.filename
    if where is not None and err.filename2 is not None and path is None:
        where = f"{where} -> {err.filename2}"
    return f"{where}: {reason(err)}" if where is not None else reason(err)


def write_failed(err: OSError, path: str | Path, kept: str) -> OSError:
    """The ``OSError`` (same errno) of a failed write of ``path`` as one line: ``cannot write <path>:
    <reason>; <kept>`` (``kept``: what the failure leaves intact)."""
    return OSError(err.errno, f"cannot write {path}: {reason(err)}; {kept}")
