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
import threading
from typing import Callable, Iterator


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
        if _early.get("done") is not None:  # a start still under way on its thread: let it finish first
            try:
                join_early()
            except Exception:  # noqa: BLE001 - the command's own error is the one reported
                pass
        if not running_before and ray_is_running():
            import ray

            ray.shutdown()


# --- Ray's processes started while the driver checks and builds --------------------------------

_early: dict = {}
_KEEP_ALIVE = threading.Event()  # never set: the starting thread outlives the command (see start_early)


def start_early(start: Callable[[], None]) -> None:
    """Run ``start`` (the command's Ray start, :func:`rl_zerosync.run.train.init_ray`) on a thread now,
    so Ray's GCS and raylet come up (seconds, mostly waiting on child processes) while the driver
    walks its validation baselines; :func:`join_early` waits for it where Ray is first needed.

    The thread then stays parked for the life of the process (a daemon): Ray's child processes are
    started with a parent-death signal, which Linux sends when the *thread* that started them ends,
    so a thread that returned would take Ray's GCS and raylet down with it. Ray is imported here, on
    the calling thread, so the two threads never import the same modules at once. Ray sets no
    SIGTERM handler from a thread (quieted: the run installs its own stop handlers)."""
    if _early or ray_is_running():
        return
    import ray  # noqa: F401 - imported on this thread (see above)

    done = threading.Event()

    def target() -> None:
        try:
            start()
        except BaseException as err:  # noqa: BLE001 - handed to the thread that joins
            _early["error"] = err
        done.set()
        _KEEP_ALIVE.wait()

    _early["done"] = done
    threading.Thread(target=target, name="ray-start", daemon=True).start()


def join_early() -> None:
    """Wait for a Ray start begun by :func:`start_early` (nothing when none); its error, if any, is
    raised here, in the thread that needs Ray."""
    done = _early.pop("done", None)
    if done is None:
        return
    done.wait()
    err = _early.pop("error", None)
    if err is not None:
        raise err
