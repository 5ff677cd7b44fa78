"""Quiet Ray's repeated notices in the project's own commands (``rl-zerosync ...``) and API calls: each
is logged once at debug level (logger ``rl_zerosync.ray_notices``) instead of as a warning every time.

Only :func:`quiet_ray_notices` installs anything for good, and only the CLI and the training loop's
Ray start call it: importing the library changes no logging for users. The Python API's own calls
that make RLlib log them (loading a checkpoint's module,
:func:`rl_zerosync.rundir.checkpoints.load_module`, behind ``evaluate_checkpoint``, ``export_policy``
and ``Policy.from_checkpoint``) run inside :func:`notices_quieted`, which installs the same filters
for the call only. What is quieted (logger -> message): ``ray._common.deprecation`` (RLlib's deprecation warnings, e.g. ``RLModule(config=...)``),
``ray.rllib.algorithms.algorithm_config`` ("You are running ... on the new API stack"),
``ray.tune.utils.util`` ("Install gputil/psutil for ... monitoring"), ``ray._private.worker`` ("SIGTERM
handler is not set": Ray started on a thread while the driver checks its data; the run installs its
own stop handlers). Every other record, Ray's
token-authentication notice included, passes unchanged.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

NOTICES = {
    "ray._common.deprecation": ("DeprecationWarning", "has been deprecated"),
    "ray.rllib.algorithms.algorithm_config": ("on the new API stack",),
    "ray.tune.utils.util": ("Install gputil", "Install psutil"),
    "ray._private.worker": ("SIGTERM handler is not set",),  # Ray started on a thread (run/ray_session.py)
}
"""Logger name -> message fragments of the notices quieted."""
DEBUG_LOGGER = "rl_zerosync.ray_notices"


class OnceAtDebug(logging.Filter):
    """Drops warnings whose message holds one of ``fragments``; the first of each message is
    re-logged at debug level on :data:`DEBUG_LOGGER`."""

    def __init__(self, fragments: tuple[str, ...]) -> None:
        super().__init__()
        self.fragments = fragments
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno < logging.WARNING or not any(f in message for f in self.fragments):
            return True
        if message not in self.seen:
            self.seen.add(message)
            logging.getLogger(DEBUG_LOGGER).debug("%s: %s", record.name, message)
        return False


def quiet_ray_notices() -> None:
    """Install :class:`OnceAtDebug` on the loggers of :data:`NOTICES` (idempotent; this process only)."""
    for name, fragments in NOTICES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, OnceAtDebug) for f in logger.filters):
            logger.addFilter(OnceAtDebug(fragments))


@contextlib.contextmanager
def notices_quieted() -> Iterator[None]:
    """:func:`quiet_ray_notices` for the block only: the filters it installs are removed when it ends
    (filters already installed, e.g. by the command line, stay)."""
    added = []
    for name, fragments in NOTICES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, OnceAtDebug) for f in logger.filters):
            f = OnceAtDebug(fragments)
            logger.addFilter(f)
            added.append((logger, f))
    try:
        yield
    finally:
        for logger, f in added:
            logger.removeFilter(f)
