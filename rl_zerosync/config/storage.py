"""Where a run writes inside a Ray job: outputs that outlive the job.

``ray job submit --working-dir .`` runs the command in a temporary copy of the working directory,
which Ray deletes later: a relative ``run.dir`` there (the default ``runs``) would leave the
checkpoints, metrics and evaluation in that copy. Inside a job (Ray sets
:data:`JOB_ENV` in the job's driver) a relative ``run.dir`` is therefore resolved against a
persistent storage path, Ray Tune's ``storage_path`` convention: ``$RL_ZEROSYNC_STORAGE`` when set
(e.g. a shared file system every node sees), else ``~/ray_results/rl_zerosync``. An absolute
``run.dir`` is used as given. Outside a job nothing changes. ``train`` prints the resolved
directory in its ``run:`` header line.
"""
from __future__ import annotations

import os
from pathlib import Path

JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Set by Ray in the driver of a submitted job (``ray job submit``)."""
STORAGE_ENV = "RL_ZEROSYNC_STORAGE"
"""Persistent storage for runs inside a Ray job (default :data:`DEFAULT_STORAGE`)."""
DEFAULT_STORAGE = "~/ray_results/rl_zerosync"


def in_ray_job() -> bool:
    """Whether this process is the driver of a submitted Ray job."""
    return JOB_ENV in os.environ


def storage_root() -> Path:
    """``$RL_ZEROSYNC_STORAGE`` or ``~/ray_results/rl_zerosync``, absolute."""
    return Path(os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE).expanduser().resolve()


def job_run_dir(run_dir: str) -> str:
    """``run.dir`` as a run inside a Ray job uses it (see the module docstring); as given elsewhere."""
    if not in_ray_job() or Path(run_dir).expanduser().is_absolute():
        return run_dir
    return str(storage_root() / run_dir)
