"""What a run leaves on disk: the run directory as one object (``run_dir.py``: :class:`RunDir`, its
lock, metrics, TensorBoard events, checkpoints and resume point), who holds it (``lock.py``), the
checkpoints' manifests, rotation and verification (``checkpoints.py``), and the live progress line
(``progress.py``)."""
