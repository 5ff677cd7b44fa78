"""CSV / Parquet loading, spread estimation, splits and one test per bad-data case."""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

gym_anytrading = pytest.importorskip("gym_anytrading")  # a dev dependency (real market data)
from rl_zerosync.envs import BatchedTradingEnv, EnvParams
from rl_zerosync.data import load_market, make_market
from rl_zerosync.data.loaders import corwin_schultz
from rl_zerosync.data.market import FeatureConfig

FEATURES = {"warmup": 10, "median_window": 20}
GOOGL = os.path.join(os.path.dirname(gym_anytrading.__file__), "datasets", "data", "STOCKS_GOOGL.csv")


def frame(n: int = 60, seed: int = 0, bid_ask: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    df = pd.DataFrame({
        "Date": pd.date_range("2020-01-01", periods=n, freq="D").strftime("%Y-%m-%d"),
        "Open": close * (1 + rng.normal(0, 0.002, n)),
        "High": close * 1.01,
        "Low": close * 0.99,
        "Close": close,
        "Volume": rng.integers(1000, 2000, n),
    })
    if bid_ask:
        df["Bid"] = close * (1 - 0.0005)
        df["Ask"] = close * (1 + 0.0005)
    return df


def write(df: pd.DataFrame, path) -> str:
    path = str(path)
    if path.endswith(".parquet"):
        df.to_parquet(path)
    else:
        df.to_csv(path, index=False)
    return path


def cfg(paths, **kw):
    return {"source": "csv", "paths": paths, "features": FEATURES, **kw}


# ---- good data -------------------------------------------------------------------------------

def test_googl_loads_runs_a_random_episode_and_metrics_are_finite():
    data = make_market({"source": "csv", "paths": [GOOGL]}, "train")
    assert data.asset_names == ("STOCKS_GOOGL",) and data.timestamps is not None
    raw = pd.read_csv(GOOGL)
    n_train = int(len(raw) * 0.7)
    assert int(data.length[0]) == n_train
    assert np.allclose(data.close[0].numpy(), raw["Close"].to_numpy()[:n_train], rtol=1e-6)
    assert (data.spread > 0).all() and torch.isfinite(data.ret_norm).all()
    params = EnvParams(episode_len=200, window=16)
    env = BatchedTradingEnv(data, params, num_envs=4, seed=0)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        obs, reward, term, trunc, _ = env.step(torch.randint(0, 45, (4,), generator=gen))
        assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
    assert trunc.all()
    vec = env.metrics_vector()
    assert torch.isfinite(vec).all() and float(vec[0]) == 4.0


def test_googl_evaluate_random_policy_metrics_finite():
    from rl_zerosync.evaluation.backtest import evaluate_policy

    data = make_market({"source": "csv", "paths": [GOOGL]}, "test")
    gen = torch.Generator().manual_seed(1)
    res = evaluate_policy(lambda o: torch.randint(0, 45, (o.shape[0],), generator=gen), data,
                          EnvParams(episode_len=64, window=16))
    for m in (res.metrics["STOCKS_GOOGL"], res.baselines["buy_and_hold"]["mean"]):
        assert all(math.isfinite(v) for v in m.values()), m
    assert res.timestamps[0] is not None and len(res.timestamps[0]) == len(res.equity[0])


def test_bid_ask_spread_and_parquet(tmp_path):
    df = frame(bid_ask=True)
    p = write(df, tmp_path / "a.parquet")
    data = load_market(p, features=FeatureConfig(**FEATURES))
    want = (df["Ask"] - df["Bid"]) / ((df["Ask"] + df["Bid"]) / 2)
    assert np.allclose(data.spread[0].numpy(), want.to_numpy(), rtol=1e-5)
    same = make_market({"source": "parquet", "paths": [p], "features": FEATURES}, "all")
    assert torch.equal(same.close, data.close)


def test_corwin_schultz_by_hand_and_fixed_fallback(tmp_path):
    h = np.array([10.2, 10.4, 10.3])
    lo = np.array([10.0, 10.1, 10.0])
    s = corwin_schultz(h, lo)
    k = 3 - 2 * math.sqrt(2)
    beta = math.log(10.2 / 10.0) ** 2 + math.log(10.4 / 10.1) ** 2
    gamma = math.log(10.4 / 10.0) ** 2
    alpha = (math.sqrt(2 * beta) - math.sqrt(beta)) / k - math.sqrt(gamma / k)
    assert math.isnan(s[0])
    assert s[1] == pytest.approx(max(2 * (math.exp(alpha) - 1) / (1 + math.exp(alpha)), 0.0))
    df = frame()
    data = load_market(write(df, tmp_path / "x.csv"), features=FeatureConfig(**FEATURES), cs_window=3)
    raw = pd.Series(corwin_schultz(df["High"], df["Low"])).rolling(3, min_periods=1).mean().to_numpy()
    assert np.allclose(data.spread[0, 1:].numpy(), np.maximum(raw[1:], 0.1e-4), rtol=1e-5)
    closes_only = df[["Date", "Close"]]
    fixed = load_market(write(closes_only, tmp_path / "c.csv"), features=FeatureConfig(**FEATURES), spread_bps=3.0)
    assert torch.allclose(fixed.spread, torch.full_like(fixed.spread, 3e-4))


def test_asset_column_and_column_mapping(tmp_path):
    a, b = frame(seed=1), frame(n=70, seed=2)
    a["Ticker"], b["Ticker"] = "AAA", "BBB"
    both = pd.concat([a, b]).rename(columns={"Close": "Px"})
    p = write(both, tmp_path / "both.csv")
    data = make_market(cfg([p], asset_column="Ticker", columns={"close": "Px"}), "all")
    assert data.asset_names == ("AAA", "BBB")
    assert data.length.tolist() == [60, 70]
    assert np.allclose(data.close[1].numpy(), b["Close"].to_numpy(), rtol=1e-6)
    assert float(data.close[0, 65]) == pytest.approx(float(a["Close"].iloc[-1]), rel=1e-6)  # padded


def test_split_is_by_time_with_history_and_no_shared_tradable_bars(tmp_path):
    p = write(frame(n=200), tmp_path / "s.csv")
    full = make_market(cfg([p]), "all")
    parts = {s: make_market(cfg([p], split={"train": 0.5, "validation": 0.25, "test": 0.25}), s)
             for s in ("train", "validation", "test")}
    spans = {}
    for s, d in parts.items():
        off, vs, n = d.offsets[0], int(d.valid_start[0]), int(d.length[0])
        spans[s] = (off + vs, off + n)  # tradable bars in full-series coordinates
        assert torch.equal(d.ret_norm[0, :n], full.ret_norm[0, off: off + n])  # features from the full series
    assert spans == {"train": (10, 100), "validation": (100, 150), "test": (150, 200)}
    assert int(parts["validation"].valid_start[0]) == 10  # warmup bars of history kept


# ---- bad data: one test per case -------------------------------------------------------------

def test_missing_close_column(tmp_path):
    p = write(frame().drop(columns=["Close"]), tmp_path / "m.csv")
    with pytest.raises(ValueError, match=r"m\.csv.*missing column 'close'"):
        make_market(cfg([p]), "all")


def test_missing_mapped_column(tmp_path):
    p = write(frame(), tmp_path / "m.csv")
    with pytest.raises(ValueError, match=r"m\.csv.*missing column 'Mid'.*data\.columns\.close"):
        make_market(cfg([p], columns={"close": "Mid"}), "all")


@pytest.mark.parametrize("value,shown", [(-1.0, "-1.0"), (0.0, "0.0"), (np.nan, "nan"), (np.inf, "inf"), ("abc", "'abc'")])
def test_bad_prices_name_file_column_row(tmp_path, value, shown):
    df = frame().astype({"Close": object})
    df.loc[17, "Close"] = value
    p = write(df, tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=rf"bad\.csv, column 'Close', row 17: expected a finite price > 0, got {shown}$"):
        make_market(cfg([p]), "all")


def test_high_below_low(tmp_path):
    df = frame()
    df.loc[5, "High"] = df.loc[5, "Low"] * 0.9
    with pytest.raises(ValueError, match=r"column 'Low', row 5: low .* above high"):
        make_market(cfg([write(df, tmp_path / "hl.csv")]), "all")


def test_bid_above_ask(tmp_path):
    df = frame(bid_ask=True)
    df.loc[8, "Bid"] = df.loc[8, "Ask"] * 1.01
    with pytest.raises(ValueError, match=r"column 'Bid', row 8: bid .* above ask"):
        make_market(cfg([write(df, tmp_path / "ba.csv")]), "all")


def test_duplicate_timestamps(tmp_path):
    df = frame()
    df.loc[12, "Date"] = df.loc[11, "Date"]
    with pytest.raises(ValueError, match=r"dup\.csv, column 'Date', row 12: duplicate timestamp"):
        make_market(cfg([write(df, tmp_path / "dup.csv")]), "all")


def test_unsorted_timestamps(tmp_path):
    df = frame()
    df.loc[[20, 21], "Date"] = df.loc[[21, 20], "Date"].to_numpy()
    with pytest.raises(ValueError, match=r"uns\.csv, column 'Date', row 21: timestamps not sorted"):
        make_market(cfg([write(df, tmp_path / "uns.csv")]), "all")


def test_unparseable_timestamp(tmp_path):
    df = frame()
    df.loc[3, "Date"] = "not a date"
    with pytest.raises(ValueError, match=r"column 'Date', row 3: cannot parse timestamp 'not a date'"):
        make_market(cfg([write(df, tmp_path / "ts.csv")]), "all")


def test_fewer_rows_than_the_window(tmp_path):
    p = write(frame(n=11), tmp_path / "short.csv")
    with pytest.raises(ValueError, match=r"short\.csv: 11 rows, expected at least features\.warmup \+ 2 = 12"):
        make_market(cfg([p]), "all")


def test_too_short_for_an_episode_names_the_asset(tmp_path):
    data = make_market(cfg([write(frame(n=60), tmp_path / "e.csv")]), "train")
    with pytest.raises(ValueError, match=r"asset 'e' \(segment 'train'\).*episode_len=64"):
        BatchedTradingEnv(data, EnvParams(episode_len=64, window=8))


def test_missing_file_and_asset_column(tmp_path):
    with pytest.raises(ValueError, match=r"nope\.csv: not found"):
        make_market(cfg([str(tmp_path / "nope.csv")]), "all")
    with pytest.raises(ValueError, match=r"missing asset column 'Sym'"):
        make_market(cfg([write(frame(), tmp_path / "a.csv")], asset_column="Sym"), "all")


def test_a_file_the_system_will_not_read_names_the_errno(tmp_path, monkeypatch):
    import errno

    import pandas as pd

    path = write(frame(), tmp_path / "locked.csv")

    def denied(p, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(p))

    monkeypatch.setattr(pd, "read_csv", denied)
    with pytest.raises(ValueError, match=r"file .*locked\.csv: cannot be read: Permission denied \(EACCES\)$"):
        make_market(cfg([path]), "all")


def test_no_spread_source(tmp_path):
    p = write(frame()[["Date", "Close"]], tmp_path / "c.csv")
    with pytest.raises(ValueError, match=r"c\.csv: no bid/ask or high/low columns.*spread_bps"):
        make_market(cfg([p]), "all")


@pytest.mark.parametrize("bad,match", [
    ({"source": "hdf5"}, "data.source"),
    ({"sourc": "csv"}, r"unknown key\(s\) \['sourc'\]"),
    ({"split": {"train": 0.8, "validation": 0.3, "test": 0.1}}, "sum to 1"),
    ({"split": {"train": 1.0}}, "expected keys"),
    ({"features": {"warmup": 1}}, "features.warmup"),
    ({"source": "csv"}, "data.paths: required"),
])
def test_bad_config(bad, match):
    with pytest.raises(ValueError, match=match):
        make_market(bad, "train")
    with pytest.raises(ValueError, match="split"):
        make_market({}, "holdout")


# ---- asset names: one per asset, distinct ----------------------------------------------------

def test_two_files_of_one_stem_in_different_folders_are_refused_naming_data_names(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pa = write(frame(seed=1), tmp_path / "a" / "SPY.csv")
    pb = write(frame(seed=2), tmp_path / "b" / "SPY.csv")
    with pytest.raises(ValueError) as err:
        make_market(cfg([pa, pb]), "all")
    msg = str(err.value)
    assert "asset name 'SPY' (from the file stem) is given twice" in msg and pa in msg and pb in msg
    assert "set data.names" in msg
    data = make_market(cfg([pa, pb], names=["SPY_a", "SPY_b"]), "all")  # what the message asks for
    assert data.asset_names == ("SPY_a", "SPY_b")
    with pytest.raises(ValueError, match=r"data\.names: 'x' is given twice \(assets 0 and 1"):
        make_market(cfg([pa, pb], names=["x", "x"]), "all")


def test_one_file_listed_twice_is_refused_under_any_spelling(tmp_path, monkeypatch):
    p = write(frame(), tmp_path / "x.csv")
    monkeypatch.chdir(tmp_path)
    for twice in ([p, p], [p, "./x.csv"], ["x.csv", str(tmp_path / "." / "x.csv")]):
        with pytest.raises(ValueError, match=r"data\.paths: entries 0 and 1 .* are the same file .*x\.csv; list each "
                                             r"file once"):
            make_market(cfg(twice, names=["a", "b"]), "all")


def test_one_asset_in_two_files_of_an_asset_column_is_refused(tmp_path):
    a, b = frame(seed=1), frame(seed=2)
    a["Ticker"], b["Ticker"] = "AAA", "AAA"
    pa, pb = write(a, tmp_path / "one.csv"), write(b, tmp_path / "two.csv")
    with pytest.raises(ValueError, match=r"asset name 'AAA' \(from the asset column 'Ticker'\) is given twice, by "
                                         r"file .*one\.csv, asset 'AAA' and file .*two\.csv, asset 'AAA'.*data\.names"):
        make_market(cfg([pa, pb], asset_column="Ticker"), "all")
