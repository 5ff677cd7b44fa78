"""What a run leaves on disk: its directory, lock and metrics (``runlog.py``), checkpoints with
their manifests, rotation and module loading (``checkpoints.py``)."""
