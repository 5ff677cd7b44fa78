"""File data: ``periods_per_year`` inferred from timestamps (``"auto"``, the default) and the spread
source with its median in bps, in ``MarketData.source_info`` and the preflight's data line."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.data import make_market
from rl_zerosync.data.loaders import resolve_periods_per_year
from rl_zerosync.run.preflight import data_line

FEATURES = {"warmup": 10, "median_window": 20}


def _csv(path, stamps, *, bid_ask=False, hl=True, seed=0):
    rng = np.random.default_rng(seed)
    n = len(stamps)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.002, n)))
    df = pd.DataFrame({"timestamp": stamps, "close": close})
    if hl:
        df["high"], df["low"] = close * 1.002, close * 0.998
    if bid_ask:
        df["bid"], df["ask"] = close * (1 - 5e-4), close * (1 + 5e-4)
    df.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize("stamps,want", [
    (pd.bdate_range("2020-01-01", periods=600), 252.0),   # business days less holidays (below) -> 252
    (pd.date_range("2020-01-01", periods=600, freq="D"), 365.0),              # calendar days (crypto)
    (pd.date_range("2020-01-01", periods=2000, freq="h"), 8760.0),            # hours, 24/7
    (pd.date_range("2020-01-01", periods=300, freq="W"), 52.0),               # weeks
])
def test_periods_per_year_inferred_from_timestamps(tmp_path, stamps, want):
    if want == 252.0:
        # business days are 260.9 a year: outside 5% of 252, so take trading days with holidays
        stamps = stamps[np.arange(len(stamps)) % 30 != 29]  # ~251.9 a year
    p = _csv(tmp_path / "a.csv", stamps.strftime("%Y-%m-%d %H:%M:%S"))
    m = make_market({"source": "csv", "paths": [p], "features": FEATURES}, "all")
    assert m.periods_per_year == want
    info = m.source_info
    assert info["periods_per_year"] == want and info["periods_per_year_source"].startswith("inferred from timestamps")
    # the segments carry it too, and an explicit number wins
    assert make_market({"source": "csv", "paths": [p], "features": FEATURES}, "test").periods_per_year == want
    explicit = make_market({"source": "csv", "paths": [p], "features": FEATURES, "periods_per_year": 1000}, "all")
    assert explicit.periods_per_year == 1000.0
    assert explicit.source_info["periods_per_year_source"] == "data.periods_per_year"


def test_off_convention_rate_is_rounded_and_no_timestamps_is_said(tmp_path):
    stamps = pd.date_range("2020-01-01", periods=500, freq="2h")  # 4,383 a year: no convention near
    assert resolve_periods_per_year("auto", [stamps.to_numpy()])[0] == pytest.approx(4383.0, abs=1)
    value, source = resolve_periods_per_year("auto", None)
    assert value == 252.0 and "no timestamps" in source
    with pytest.raises(ValueError, match="data.periods_per_year"):
        resolve_periods_per_year("hourly", None)
    with pytest.raises(ValueError, match="data.periods_per_year"):
        make_market({"source": "csv", "paths": ["x.csv"], "periods_per_year": -1}, "all")


def test_spread_source_and_median_bps_reported(tmp_path):
    stamps = pd.date_range("2020-01-01", periods=300, freq="D").strftime("%Y-%m-%d")
    a = _csv(tmp_path / "a.csv", stamps, bid_ask=True)
    b = _csv(tmp_path / "b.csv", stamps, seed=1)
    m = make_market({"source": "csv", "paths": [a, b], "features": FEATURES}, "all")
    info = m.source_info
    assert info["spread_source"] == {"a": "bid_ask", "b": "corwin_schultz"}
    assert info["median_spread_bps"]["a"] == pytest.approx(10.0, rel=1e-6)  # (ask - bid) / mid = 10 bps
    want_b = float(np.median(m.spread[1, 1:int(m.length[1])].numpy()) * 1e4)
    assert info["median_spread_bps"]["b"] == pytest.approx(want_b, rel=1e-5)
    line = data_line(info)
    assert line.startswith("data: periods_per_year 365 (inferred from timestamps")
    assert "spread: bid_ask/corwin_schultz, median" in line and "bps (assets" in line


def test_synthetic_auto_is_daily():
    m = make_market({"source": "synthetic", "num_assets": 1, "num_bars": 400}, "all")
    assert m.periods_per_year == 252.0 and m.source_info is None
