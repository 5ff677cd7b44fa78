"""Ray's repeated notices quieted in the commands (:mod:`rl_zerosync.rundir.ray_notices` has the
filters and the notices they cover). ``rl_zerosync.run.ray_console.quiet_ray_notices`` is the name
Ray's worker processes run at start-up (``worker_process_setup_hook`` in
:func:`rl_zerosync.run.train.init_ray`), so the quieting reaches remote runners and learners too."""
from __future__ import annotations

from rl_zerosync.rundir.ray_notices import DEBUG_LOGGER, NOTICES, OnceAtDebug, notices_quieted, quiet_ray_notices

__all__ = ["DEBUG_LOGGER", "NOTICES", "OnceAtDebug", "notices_quieted", "quiet_ray_notices"]
