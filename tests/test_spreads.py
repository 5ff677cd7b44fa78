"""Spreads a user can check (``data/spreads.py``) and the ``data.max_spread_bps`` cap (CPU)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.data.loaders import load_market
from rl_zerosync.data.spreads import spread_line, spread_report
from rl_zerosync.envs import EnvParams
from rl_zerosync.evaluation.sensitivity import execution_settings


def _csv(tmp_path, n=300, width=0.02, name="wide.csv", ohlc=True):
    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    frame = {"date": pd.bdate_range("2020-01-01", periods=n).strftime("%Y-%m-%d"), "close": close}
    if ohlc:
        frame.update(open=close * (1 + 0.001), high=close * (1 + width), low=close * (1 - width))
    path = tmp_path / name
    pd.DataFrame(frame).to_csv(path, index=False)
    return str(path)


def test_corwin_schultz_report_range_and_warning(tmp_path):
    path = _csv(tmp_path)
    cfg = {"source": "csv", "paths": [path]}
    market = load_market([path], features=None)
    assert market.open is not None and market.high is not None and market.source_info["execution_prices"] == ["open", "high", "low"]
    rep = spread_report(market, cfg)
    row = rep["per_asset"]["wide"]
    assert row["source"] == "corwin_schultz" and row["min_bps"] <= row["median_bps"] <= row["max_bps"]
    assert rep["settings"] == {"min_spread_bps": 0.1, "spread_bps": None, "max_spread_bps": None}
    assert any("Corwin-Schultz median spread" in w for w in rep["warnings"]), rep
    assert spread_line(rep).startswith("spread: wide corwin_schultz median ")


def test_max_spread_bps_caps_and_counts_and_is_checked(tmp_path):
    path = _csv(tmp_path)
    market = load_market([path], max_spread_bps=10.0)
    assert float(market.spread.max()) <= 10.0e-4 * (1 + 1e-6)
    assert market.source_info["bars_at_cap"]["wide"] > 0
    rep = spread_report(market, {"source": "csv", "paths": [path], "max_spread_bps": 10.0})
    assert rep["per_asset"]["wide"]["max_bps"] == pytest.approx(10.0, rel=1e-5)
    assert any("at the cap data.max_spread_bps" in w for w in rep["warnings"])
    with pytest.raises(ValueError, match="data.max_spread_bps: expected a cap >= data.min_spread_bps"):
        load_market([path], max_spread_bps=0.05)
    with pytest.raises(ValueError, match="data.max_spread_bps: 2.0 is below data.spread_bps"):
        load_market([path], spread_source="fixed", spread_bps=5.0, max_spread_bps=2.0)
    with pytest.raises(ValueError, match="data.max_spread_bps: expected a finite number"):
        load_market([path], max_spread_bps="wide")


def test_far_from_spread_bps_warns(tmp_path):
    path = _csv(tmp_path)
    market = load_market([path], spread_source="corwin_schultz", spread_bps=1.0)
    rep = spread_report(market, {"source": "csv", "paths": [path], "spread_bps": 1.0})
    assert any("far from data.spread_bps" in w for w in rep["warnings"])


def test_execution_settings_say_what_the_data_allows(tmp_path):
    closes_only = load_market([_csv(tmp_path, ohlc=False, name="c.csv")], spread_bps=2.0)
    ex = execution_settings(EnvParams(), closes_only)
    assert ex["market_orders"].startswith("next close") and ex["limit_and_passive_orders"].startswith("executed as MARKET")
    bars = load_market([_csv(tmp_path)])
    ex = execution_settings(EnvParams(), bars)
    assert ex["market_orders"] == "next open" and "trades through" in ex["limit_and_passive_orders"]
    assert execution_settings(EnvParams(execution_lag=0), bars)["market_orders"] == "same-bar close"
