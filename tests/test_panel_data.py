"""The 10-stock daily panel (``benchmarks/data/sp500/``, skfolio's sp500 dataset, BSD-3) and
``configs/panel.yaml``: ten assets on one calendar, the sealed test is 2015-01-02 .. 2022-12-28 and
everything chosen (train, validation) ends by 2014-12-31; features scaled per instrument."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.config.settings import load
from rl_zerosync.data import make_market
from rl_zerosync.data.data_settings import split_fractions

ROOT = Path(__file__).resolve().parent.parent
TICKERS = ("AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO")
SEGMENT_DATES = {"train": ("1990-04-03", "2009-12-31"),  # the first tradable bar after the 64-bar warmup
                 "validation": ("2010-01-04", "2014-12-31"), "test": ("2015-01-02", "2022-12-28")}


def _day(ts) -> str:
    return str(np.datetime64(ts, "D"))


@pytest.fixture(scope="module")
def panel():
    settings = load(str(ROOT / "configs" / "panel.yaml"))
    whole = make_market(settings.data, "all")
    fractions = split_fractions(settings.data["split"])
    return settings, {s: whole.split(s, fractions) for s in SEGMENT_DATES}


def test_the_files_are_the_readme_s(panel):
    readme = (ROOT / "benchmarks" / "data" / "README.md").read_text()
    for t in TICKERS:
        path = ROOT / "benchmarks" / "data" / "sp500" / f"{t}.csv"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert re.search(rf"`sp500/{t}\.csv`: `{digest}`", readme), t
        frame = pd.read_csv(path)
        assert list(frame.columns) == ["Date", "Close"] and len(frame) == 8313
        assert frame["Date"].iloc[0] == "1990-01-02" and frame["Date"].iloc[-1] == "2022-12-28"


def test_the_sealed_test_is_2015_on_and_everything_chosen_ends_in_2014(panel):
    settings, seg = panel
    assert settings.data["paths"] == [f"benchmarks/data/sp500/{t}.csv" for t in TICKERS]
    for name, (first, last) in SEGMENT_DATES.items():
        m = seg[name]
        assert m.asset_names == TICKERS and m.periods_per_year == 252.0
        starts, lengths = m.valid_start.tolist(), m.length.tolist()
        for a in range(m.num_assets):  # one calendar: every asset the same bars
            assert _day(m.timestamps[a][starts[a]]) == first and _day(m.timestamps[a][lengths[a] - 1]) == last, name
    # The test segment keeps 64 bars of 2014 history for its features only: no trade before 2015.
    test = seg["test"]
    assert _day(test.timestamps[0][0]) < "2015" and _day(test.timestamps[0][int(test.valid_start[0])]) == "2015-01-02"


def test_features_are_scaled_per_instrument(panel):
    _, seg = panel
    m = seg["train"]
    starts, lengths = m.valid_start.tolist(), m.length.tolist()
    sd = [float(m.ret_norm[a, starts[a]:lengths[a]].std()) for a in range(m.num_assets)]
    level = [float(m.close[a, starts[a]]) for a in range(m.num_assets)]
    assert max(level) / min(level) > 40  # GE at 14 against BBY at 0.23 in 1990
    assert all(0.9 < s < 1.2 for s in sd), sd  # each asset's returns over its own volatility
