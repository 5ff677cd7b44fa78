"""Timestamps and prices that used to load as silently wrong numbers: integer epochs (s / ms / us /
ns by magnitude or ``data.timestamp_unit``), ISO strings with ``Z`` / ``+00:00`` (UTC), an inferred
``periods_per_year`` outside 1..1e6 (an error), bool / object price columns, open or close outside
the bar's high-low range, bid above ask: each an error naming file, column and row."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.data import load_market
from rl_zerosync.data.loaders import epoch_unit, numeric_column, timestamp_note
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.run.preflight import data_line

FEATURES = FeatureConfig(warmup=10, median_window=20)
DAYS = pd.date_range("2020-01-01", periods=60, freq="D").as_unit("ns")


def _frame(stamps=None, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    return pd.DataFrame({"Date": DAYS.strftime("%Y-%m-%d") if stamps is None else stamps,
                         "Open": close, "High": close * 1.01, "Low": close * 0.99, "Close": close})


def _load(df: pd.DataFrame, path, **kw):
    path = str(path)
    df.to_parquet(path) if path.endswith(".parquet") else df.to_csv(path, index=False)
    return load_market(path, features=FEATURES, **kw)


@pytest.mark.parametrize("unit, scale", [("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_integer_epochs_by_magnitude(tmp_path, unit, scale, suffix):
    epochs = DAYS.asi8 // scale
    m = _load(_frame(epochs), tmp_path / f"e{suffix}")
    assert m.source_info["periods_per_year"] == 365.0
    assert m.source_info["timestamps"] == f"timestamps: epoch {unit} (by magnitude)"
    assert np.array_equal(np.asarray(m.timestamps[0]).astype("datetime64[ns]"), DAYS.to_numpy())
    assert f"timestamps: epoch {unit}" in data_line(m.source_info)


def test_explicit_timestamp_unit_and_a_bad_one(tmp_path):
    m = _load(_frame(DAYS.asi8 // 10**6), tmp_path / "e.csv", timestamp_unit="ms")
    assert m.source_info["timestamps"] == "timestamps: epoch ms (data.timestamp_unit)"
    with pytest.raises(ValueError, match=r"data\.timestamp_unit: expected one of \['s', 'ms', 'us', 'ns'\]"):
        _load(_frame(DAYS.asi8), tmp_path / "e.csv", timestamp_unit="days")


def test_epoch_unit_thresholds():
    assert [epoch_unit(np.array([v])) for v in (1.7e9, 1.7e12, 1.7e15, 1.7e18)] == ["s", "ms", "us", "ns"]


@pytest.mark.parametrize("fmt", ["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S+00:00"])
def test_tz_aware_iso_strings_load_in_utc(tmp_path, fmt):
    m = _load(_frame(DAYS.strftime(fmt)), tmp_path / "z.csv")
    assert m.source_info["periods_per_year"] == 365.0
    assert np.array_equal(np.asarray(m.timestamps[0]).astype("datetime64[ns]"), DAYS.to_numpy())


def test_offsets_are_normalized_to_utc(tmp_path):
    stamps = (DAYS + pd.Timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S+02:00")
    m = _load(_frame(stamps), tmp_path / "o.csv")
    assert np.array_equal(np.asarray(m.timestamps[0]).astype("datetime64[ns]"), DAYS.to_numpy())
    assert timestamp_note(pd.Series(stamps)) == "timestamps: dates (UTC)"


def test_implausible_inferred_periods_per_year_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"data\.periods_per_year: 'auto' inferred 3\.1\d+e\+07 bars per year"):
        _load(_frame(np.arange(60) + 1_600_000_000), tmp_path / "sec.csv")  # one bar a second
    with pytest.raises(ValueError, match=r"outside the plausible 1\.\.1e\+06.*data\.timestamp_unit"):
        _load(_frame(pd.date_range("1900-01-01", periods=60, freq="3YS").strftime("%Y-%m-%d")), tmp_path / "y.csv")
    assert _load(_frame(np.arange(60) + 1_600_000_000), tmp_path / "sec.csv",
                 periods_per_year=252).source_info["periods_per_year"] == 252.0


def test_bool_and_object_price_columns_are_refused(tmp_path):
    df = _frame()
    df["Close"] = True
    with pytest.raises(ValueError, match=r"b\.parquet, column 'Close', row 0: column of dtype bool"):
        _load(df, tmp_path / "b.parquet")
    cells = pd.Series([100.0] * 9 + [True] + [100.0] * 5, dtype=object)  # what an object column can hold
    with pytest.raises(ValueError, match=r"f\.csv, column 'Close', row 9: bool True in a column of dtype object"):
        numeric_column("f.csv, column 'Close'", cells, np.arange(15))


@pytest.mark.parametrize("key, col, factor, side", [("close", "Close", 1.05, "above high"),
                                                    ("close", "Close", 0.95, "below low"),
                                                    ("open", "Open", 1.05, "above high")])
def test_open_close_outside_the_bar_range(tmp_path, key, col, factor, side):
    df = _frame()
    df.loc[23, col] = df.loc[23, "Close"] * factor
    with pytest.raises(ValueError, match=rf"r\.csv, column '{col}', row 23: {key} .* is {side} .*"
                                         rf"expected low <= {key} <= high"):
        _load(df, tmp_path / "r.csv")


def test_bid_above_ask_names_the_row(tmp_path):
    df = _frame()
    df["Bid"], df["Ask"] = df["Close"] * 0.999, df["Close"] * 1.001
    df.loc[31, "Bid"] = df.loc[31, "Ask"] * 1.01
    with pytest.raises(ValueError, match=r"ba\.csv, column 'Bid', row 31: bid .* is above ask"):
        _load(df, tmp_path / "ba.csv")


# ---- dates a nanosecond timestamp cannot hold: named, never wrapped ---------------------------

def test_dates_after_2262_are_named_not_wrapped_around(tmp_path):
    from rl_zerosync.data.loaders import TimestampRangeError

    days = np.arange(np.datetime64("2262-03-01"), np.datetime64("2262-03-01") + 60)  # past 2262-04-11
    stamps = [str(d) for d in days]
    wrapped = pd.to_datetime(pd.Series(stamps)).to_numpy(dtype="datetime64[ns]")[-1]
    assert int(str(wrapped)[:4]) < 1800  # what a plain cast to nanoseconds makes of 2262-04-29: wrapped around
    row = stamps.index("2262-04-12")
    with pytest.raises(TimestampRangeError) as err:
        _load(_frame(stamps), tmp_path / "late.csv")
    msg = str(err.value)
    assert msg.startswith(f"file {tmp_path / 'late.csv'}, column 'Date', row {row}: timestamp '2262-04-12'")
    assert "outside the dates a timestamp holds here, 1677-09-21 .. 2262-04-11 (datetime64[ns])" in msg
    with pytest.raises(TimestampRangeError, match=r"row 0: timestamp '1600-01-01'"):
        _load(_frame(["1600-01-01"] + stamps[1:]), tmp_path / "early.csv")


@pytest.mark.parametrize("start, unit, shown", [
    (10_000_000_000, None, "epoch s"),  # 2286 in seconds, read as seconds by magnitude
    (10_000_000_000_000, "s", "epoch s"),  # microseconds of 1970 read as seconds (data.timestamp_unit)
    (9_300_000_000_000_000_000, None, "epoch ns"),  # past int64 nanoseconds
])
def test_epochs_outside_the_range_are_named(tmp_path, start, unit, shown):
    from rl_zerosync.data.loaders import TimestampRangeError

    epochs = np.arange(60, dtype=np.float64) * 86400 + start
    with pytest.raises(TimestampRangeError, match=r"column 'Date', row 0: timestamp \S+ \(" + shown + r"\) is outside"):
        _load(_frame(epochs), tmp_path / "e.csv", timestamp_unit=unit)


def test_integer_nanosecond_epochs_keep_every_nanosecond(tmp_path):
    epochs = DAYS.asi8 + np.arange(60)  # one nanosecond more each day: lost in a float64 round trip
    m = _load(_frame(epochs), tmp_path / "ns.parquet")
    assert np.array_equal(np.asarray(m.timestamps[0]).astype("datetime64[ns]").astype(np.int64), epochs)
