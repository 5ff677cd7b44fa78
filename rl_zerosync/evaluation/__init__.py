"""Scoring a policy: walks over a data segment (``walk.py``), the rules it is compared with
(``rules.py``), metrics (``metrics.py``), backtests (``backtest.py``), the validation pass during
training (``validation.py``) and the end-of-run evaluation of a checkpoint (``evaluate.py``; its
figure: ``report_plot.py``)."""
