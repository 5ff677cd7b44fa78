"""Everything that trains: one run (``train.py``), its preflight (``preflight.py``), seeds
(``seeds.py``) and walk-forward folds (``walkforward.py``)."""
