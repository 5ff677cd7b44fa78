"""Who stops Ray: the command that started it.

``rl-zerosync train`` and ``evaluate --walk-forward`` start a private local Ray instance
(:func:`rl_zerosync.run.train.init_ray`) unless the process is already connected. :func:`owned_ray`
around a command shuts that instance down when the command ends, however it ends (its algorithms are
stopped first, where they are built), so the process never reaches interpreter shutdown with Ray's
core worker, its gRPC and IO threads and its raylet/GCS children still alive; leaving that to Ray's
own ``atexit`` hook puts the teardown among the interpreter's finalization. A Ray that was already
running when the block began (a test fixture, a notebook, the caller's own ``ray.init``) is left to
whoever started it.

Light on purpose: importing this module imports neither Ray nor torch.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator


def ray_is_running() -> bool:
    """Whether this process is connected to Ray (Ray is not imported when nothing imported it)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@contextlib.contextmanager
def owned_ray() -> Iterator[None]:
    """Shut down, when the block ends, a Ray instance the block started (one not running on entry)."""
    running_before = ray_is_running()
    try:
        yield
    finally:
        if not running_before and ray_is_running():
            import ray

            ray.shutdown()
