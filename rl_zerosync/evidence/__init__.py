"""How much of a result is sample noise and selection: the statistics of a report, apart from the
walks that produce its returns (``rl_zerosync/evaluation/``). Functions of per-bar returns (numpy,
torch, scipy, arch) and of a run's validation passes (its trials); nothing here imports
:mod:`rl_zerosync.evaluation`.

The Sharpe ratio every statistic is about (``sharpe.py``), bootstrap intervals and the power of a
segment (``significance.py``), the tensor bootstrap (``resample.py``), intervals calibrated on the
market they are used on and the deflated Sharpe (``calibrated.py``), PSR / DSR / SPA / PBO
(``overfitting.py``) and the ``evidence`` block of a report with its trials and power (``block.py``)."""
