"""Populations: P members (seeds x hyperparameter points) trained together; the ``population:``
section of a settings file and its search space in Ray Tune's syntax (``space.py``)."""
