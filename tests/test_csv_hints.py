"""The common shapes of a user's CSV stop with the one setting that fixes them (did you mean ...),
and that setting, applied, loads the file."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.data import make_market

FEATURES = {"warmup": 10, "median_window": 20}
MAPPED = {"timestamp": "Date", "open": "Open", "high": "High", "low": "Low", "close": "Close"}


def prices(n: int = 60, start: str = "2020-06-01") -> pd.DataFrame:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    return pd.DataFrame({"Date": pd.date_range(start, periods=n, freq="D"), "Open": close, "High": close * 1.01,
                         "Low": close * 0.99, "Close": close})


def load(path, **kw):
    return make_market({"source": "csv", "paths": [str(path)], "features": FEATURES, **kw}, "train")


def test_lower_case_columns_name_the_mapping(tmp_path):
    path = tmp_path / "lower.csv"
    df = prices()
    df.assign(Date=df["Date"].dt.strftime("%Y-%m-%d")).rename(columns=str.lower).to_csv(path, index=False)
    with pytest.raises(ValueError) as err:
        load(path, columns=MAPPED)
    msg = str(err.value)
    assert "missing column 'Date' (data.columns.timestamp)" in msg and "did you mean 'date'?" in msg
    assert "set data.columns to {timestamp: date, open: open, high: high, low: low, close: close}" in msg
    fixed = load(path, columns={k: v.lower() for k, v in MAPPED.items()})
    assert fixed.timestamps is not None and np.isclose(float(fixed.close[0, 0]), df["Close"].iloc[0], rtol=1e-6)


def test_unnamed_index_column_of_dates_names_the_timestamp_setting(tmp_path):
    path = tmp_path / "indexed.csv"
    df = prices().set_index("Date")
    df.index.name = None  # written as pandas' unnamed index column
    df.to_csv(path)
    assert pd.read_csv(path).columns[0] == "Unnamed: 0"
    with pytest.raises(ValueError) as mapped:
        load(path, columns=MAPPED)
    assert "did you mean 'Unnamed: 0'?" in str(mapped.value)
    assert "set data.columns.timestamp='Unnamed: 0'" in str(mapped.value)
    with pytest.raises(ValueError) as auto:  # no mapping: never read silently without its dates
        load(path)
    assert "the dates are in column 'Unnamed: 0'" in str(auto.value)
    assert "set data.columns.timestamp='Unnamed: 0'" in str(auto.value)
    fixed = load(path, columns={"timestamp": "Unnamed: 0"})
    assert fixed.timestamps is not None
    assert fixed.timestamps[0][0] == np.datetime64("2020-06-01T00:00:00", "ns")


def test_unnamed_integer_index_column_is_no_date(tmp_path):
    path = tmp_path / "rows.csv"
    prices().to_csv(path)  # the default: a 0, 1, 2, ... index column beside Date
    market = load(path)
    assert market.timestamps is not None and market.timestamps[0][0] == np.datetime64("2020-06-01", "ns")


def test_day_first_dates_name_dayfirst(tmp_path):
    path = tmp_path / "dayfirst.csv"
    df = prices()  # 01/06/2020 .. : the first dates read month-first, 13/06/2020 does not
    df.assign(Date=df["Date"].dt.strftime("%d/%m/%Y")).to_csv(path, index=False)
    with pytest.raises(ValueError) as err:
        load(path)
    msg = str(err.value)
    assert "cannot parse timestamp '13/06/2020'" in msg and "Set data.dayfirst: true" in msg
    fixed = load(path, dayfirst=True)
    assert fixed.timestamps[0][12] == np.datetime64("2020-06-13", "ns")


def test_a_bad_date_gets_no_dayfirst_hint(tmp_path):
    path = tmp_path / "bad.csv"
    df = prices()
    dates = df["Date"].dt.strftime("%Y-%m-%d").to_numpy(dtype=object)
    dates[20] = "not a date"
    df.assign(Date=dates).to_csv(path, index=False)
    with pytest.raises(ValueError) as err:
        load(path)
    assert "cannot parse timestamp 'not a date'" in str(err.value) and "dayfirst" not in str(err.value)
