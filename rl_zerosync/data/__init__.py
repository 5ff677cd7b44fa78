"""Market data: synthetic series and files (CSV / Parquet), their features and segments.

``make_market(data_cfg, split)`` turns a settings file's ``data`` section into the
:class:`MarketData` of one segment (``data_settings.py``: :class:`DataSettings`, one field per key);
``loaders.py`` reads files, ``synthetic.py`` draws regime-switching series (its recurrences over
bars run without a Python loop: ``scans.py``), ``market.py`` holds the features and the segment
arithmetic, ``fresh.py`` the fresh training series of ``data.regenerate_every``, ``identity.py`` the
record of a run's data files (size, SHA-256, segments).
"""
from rl_zerosync.data.data_settings import DataSettings, make_market
from rl_zerosync.data.loaders import load_market
from rl_zerosync.data.market import FeatureConfig, MarketData, build_market
from rl_zerosync.data.synthetic import synthetic_market

__all__ = ["DataSettings", "FeatureConfig", "MarketData", "build_market", "load_market", "make_market",
           "synthetic_market"]
