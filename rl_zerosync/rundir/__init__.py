"""What a run leaves on disk: the run directory as one object (``run_dir.py``: :class:`RunDir`, its
lock, metrics, TensorBoard events, checkpoints and resume point), who holds it (``lock.py``), the
checkpoints' manifests, rotation and verification and the Q module inside one (``checkpoints.py``),
the live progress line (``progress.py``) and an OS error said with its path, strerror and errno name
(``os_errors.py``)."""
