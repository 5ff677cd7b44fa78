"""File data: ``periods_per_year`` inferred from timestamps (``"auto"``, the default) and the spread
source with its median in bps, in ``MarketData.source_info`` and the preflight's data line."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.data import make_market
from rl_zerosync.data.periods import periods_per_year_report, resolve_periods_per_year
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


def _trading_days(start: str, n: int) -> pd.DatetimeIndex:
    days = pd.bdate_range(start, periods=n + n // 29 + 1)
    return days[np.arange(len(days)) % 30 != 29][:n]  # ~252 a year, as above


def test_a_hole_in_the_data_is_left_out_of_the_rate(tmp_path):
    """Daily trading-day bars with a 10-year hole: 252, not the ~80 bars per calendar year spanned."""
    stamps = _trading_days("2000-01-03", 300).append(_trading_days("2012-01-02", 300))
    p = _csv(tmp_path / "hole.csv", stamps.strftime("%Y-%m-%d"))
    m = make_market({"source": "csv", "paths": [p], "features": FEATURES}, "all")
    assert (len(stamps) - 1) / ((stamps[-1] - stamps[0]).days / 365.2425) < 100  # what (n - 1) / span says
    info = m.source_info
    assert m.periods_per_year == 252.0 and info["warnings"] == []
    assert "1 gap(s) longer than 10 bars and 7 days left out" in info["periods_per_year_source"]
    assert "bars 1 days apart" in info["periods_per_year_source"]


def test_equity_hours_with_nights_and_weekends_are_a_convention(tmp_path):
    days = pd.bdate_range("2021-01-04", periods=200)
    stamps = pd.DatetimeIndex([d + pd.Timedelta(minutes=570 + 60 * h) for d in days for h in range(7)])
    value, source, warnings = periods_per_year_report("auto", [stamps.to_numpy()], ["spy"])
    assert value == 1764.0 and warnings == [] and "bars 1 hours apart" in source  # 252 x 7, nights kept


@pytest.mark.parametrize("other", ["hourly", "calendar days"])
def test_assets_at_different_rates_are_refused_naming_each(tmp_path, other):
    a = _csv(tmp_path / "daily.csv", _trading_days("2020-01-01", 400).strftime("%Y-%m-%d"))
    stamps = (pd.date_range("2020-01-01", periods=400, freq="h") if other == "hourly"
              else pd.date_range("2020-01-01", periods=400, freq="D"))
    b = _csv(tmp_path / "other.csv", stamps.strftime("%Y-%m-%d %H:%M:%S"), seed=1)
    with pytest.raises(ValueError) as err:
        make_market({"source": "csv", "paths": [a, b], "features": FEATURES}, "all")
    msg = str(err.value)
    assert msg.startswith("data.periods_per_year: 'auto' found the assets at different bar rates per year")
    assert "'daily' 25" in msg and "'other' " in msg and "set data.periods_per_year" in msg
    both = make_market({"source": "csv", "paths": [a, b], "features": FEATURES, "periods_per_year": 252}, "all")
    assert both.periods_per_year == 252.0  # an explicit number is the user's choice


def test_a_rate_of_no_convention_is_a_warning(tmp_path, capsys):
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.preflight import check

    stamps = pd.date_range("2020-01-01", periods=600, freq="2h")  # 4,383 a year
    p = _csv(tmp_path / "two_hours.csv", stamps.strftime("%Y-%m-%d %H:%M:%S"))
    m = make_market({"source": "csv", "paths": [p], "features": FEATURES}, "all")
    assert m.periods_per_year == 4383.0
    (w,) = m.source_info["warnings"]
    assert "inferred 4,382.9 bars per year, within 5% of no convention" in w and "set data.periods_per_year" in w
    s = from_dict({"run": {"dir": str(tmp_path / "runs"), "evaluate": False},
                   "algo": {"num_gpus_per_learner": 0, "num_envs_per_runner": 8, "rollout_length": 16},
                   "data": {"source": "csv", "paths": [p], "features": FEATURES, "spread_bps": 5.0},
                   "env": {"episode_len": 32, "window": 8}, "runner": {"device": "cpu"}}, source="w.yaml")
    check(s, log=False)
    assert f"warning: data: {w}" in capsys.readouterr().err.splitlines()
