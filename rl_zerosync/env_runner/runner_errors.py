"""Root causes of remote env runners that fail to start.

When every remote env runner dies in its constructor (bad data, a setting only the runner checks,
a missing file on a worker node), RLlib 2.60 with ``restart_failed_env_runners`` (its default)
logs each actor's error at ERROR level ("Validation of EnvRunner failed! Error=...",
``EnvRunnerGroup.add_workers``), keeps going, and then fails in ``EnvRunnerGroup.get_spaces`` with
``IndexError: list index out of range``, which names nothing. :func:`runner_root_causes` listens
to those log records while the algorithm is set up; :func:`raise_root_cause` re-raises the setup
error with the first runner's own exception line (``ValueError: ...`` and where it came from), as a
``ValueError`` when the runner raised one (so the CLI prints it as one line and exits 2), else as
``RuntimeError``. ``tests/test_runner_errors.py`` fails if RLlib stops logging that message.
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Iterator

RLLIB_LOGGER = "ray.rllib.env.env_runner_group"
VALIDATION_MESSAGE = "Validation of EnvRunner failed! Error="
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<type>[A-Za-z_]\w*(?:Error|Exception)): (?P<msg>.+)$")


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith(VALIDATION_MESSAGE):
            self.errors.append(text[len(VALIDATION_MESSAGE):])


@contextlib.contextmanager
def runner_root_causes() -> Iterator[list[str]]:
    """Collect the constructor errors RLlib logs for remote env runners inside the ``with``."""
    handler = _Collector()
    logger = logging.getLogger(RLLIB_LOGGER)
    logger.addHandler(handler)
    try:
        yield handler.errors
    finally:
        logger.removeHandler(handler)


def root_cause(error_text: str) -> tuple[str, str]:
    """(exception type name, message) of the last exception line of a remote traceback text
    (``("", first line)`` when there is none)."""
    found = None
    for line in error_text.splitlines():
        m = _EXC_LINE.match(line.strip())
        if m and m.group("type") not in ("RayActorError", "ActorDiedError", "RayTaskError"):
            found = m
    if found is None:
        lines = [ln.strip() for ln in error_text.splitlines() if ln.strip()]
        return "", lines[0] if lines else error_text
    return found.group("type"), found.group("msg")


def raise_root_cause(err: BaseException, errors: list[str]) -> None:
    """Re-raise ``err`` (the setup failure) with the remote runners' root cause when there is one;
    returns without raising when no runner error was logged (the caller re-raises ``err``)."""
    if not errors:
        return
    kind, msg = root_cause(errors[0])
    more = f" ({len(errors)} env runners failed the same way)" if len(errors) > 1 and all(
        root_cause(e) == (kind, msg) for e in errors) else ""
    text = f"remote env runner failed to start: {kind + ': ' if kind else ''}{msg}{more}"
    if kind == "ValueError":
        raise ValueError(text) from err
    raise RuntimeError(text) from err
