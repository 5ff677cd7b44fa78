"""Shared pytest setup.

* GPU-marked tests skip cleanly without CUDA, ``multigpu`` ones with fewer than two GPUs.
* Files holding ``slow`` tests run first, most ``slow`` tests first (the shuffled order otherwise kept):
  with ``--dist loadfile`` the long files start while every worker is busy.
* Ray, started and stopped in one place:

  - ``ray_local`` (module scope): one Ray instance for the whole test module, started with
    ``ray.init(include_dashboard=False, **RAY_INIT)``; ``RAY_INIT`` is a dict the test module may
    define, default :data:`RAY_LOCAL` (an own local instance with 2 CPUs). Modules whose every test
    needs Ray use it with ``pytestmark = pytest.mark.usefixtures("ray_local")``.
  - ``ray_instance``: a context manager, ``with ray_instance(**kwargs):``, for Ray around one block
    (a module fixture that trains once and stops Ray again, a test that starts its own instance).
  - at the end of the session a Ray still running in this process (a test that started one and
    did not stop it) is shut down, with a note on the terminal, so pytest never exits through
    interpreter finalization with Ray's core worker and its threads alive.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

if os.environ.get("PYTEST_XDIST_WORKER"):
    # ``make test`` runs a pytest-xdist worker per core plus one: each worker (and the commands and Ray
    # workers it starts, which inherit the variable) keeps to one torch/OpenMP thread. Two threads per
    # worker on a 2-core machine oversubscribe the cores, and torch's threads then wait for each
    # other at every small op.
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

RAY_LOCAL = {"address": "local", "num_cpus": 2}
"""``ray.init`` arguments of ``ray_local`` in modules that define no ``RAY_INIT``."""


def pytest_collection_modifyitems(config, items):
    _long_files_first(items)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    skip_multi = pytest.mark.skip(reason=f"needs two CUDA GPUs, found {gpus}")
    for item in items:
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(skip_gpu)
        elif "multigpu" in item.keywords and gpus < 2:
            item.add_marker(skip_multi)


def _long_files_first(items: list) -> None:
    """Files with more ``slow`` tests first, the shuffled order kept otherwise (a stable sort, after
    pytest-randomly's shuffle). pytest-xdist's ``--dist loadfile`` hands out whole files in this order,
    so the long files start while every worker is still busy and the suite does not end on one worker
    running a long file alone."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.location[0]] = slow.get(item.location[0], 0) + ("slow" in item.keywords)
    items.sort(key=lambda item: -slow[item.location[0]])


@contextlib.contextmanager
def _ray_running(**init_kwargs) -> Iterator[None]:
    """``ray.init(include_dashboard=False, **init_kwargs)``, then ``ray.shutdown()`` however the block ends."""
    import ray  # imported here: most test modules never start Ray

    ray.init(include_dashboard=False, **init_kwargs)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_instance():
    """``with ray_instance(**ray_init_kwargs):`` runs Ray for the block (``include_dashboard=False``)."""
    return _ray_running


@pytest.fixture(scope="module")
def ray_local(request) -> Iterator[None]:
    """Ray for the whole test module: ``ray.init(include_dashboard=False, **RAY_INIT)`` (the module's
    ``RAY_INIT``, else :data:`RAY_LOCAL`), ``ray.shutdown()`` after its last test."""
    with _ray_running(**getattr(request.module, "RAY_INIT", RAY_LOCAL)):
        yield


def pytest_sessionfinish(session, exitstatus):
    """Shut down a Ray left running by a test, before the interpreter finalizes."""
    from rl_zerosync.run.ray_session import ray_is_running

    if ray_is_running():
        import ray

        ray.shutdown()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("note: a test left Ray running; shut down at the end of the session")
