"""Trader outputs of ``rl-zerosync evaluate`` (CPU): per-bar CSV/Parquet series, the portfolio, the
report figure, ``--set data.*`` with ``--checkpoint`` and the training-period overlap warning.

One tiny run trained on a dated CSV (1 iteration, in process) gives the checkpoint; every evaluation
runs through the CLI's ``main`` in this process."""
from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from rl_zerosync.cli import main
from tiny_run import tiny_raw

BAR_COLUMNS = ["timestamp", "bar", "asset", "price", "position", "trade", "fill_price", "cost", "net_return", "equity",
               "benchmark_net_return", "benchmark_equity"]
N_ROWS = 700
TRAIN_FRACTION = 0.7


def _prices(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0002, 0.01, n)))
    days = pd.bdate_range("2015-01-05", periods=n)
    return pd.DataFrame({"Day": days.strftime("%Y-%m-%d"), "Px": close, "Hi": close * 1.004, "Lo": close * 0.996})


@pytest.fixture(scope="module")
def run(tmp_path_factory, ray_instance):
    """A run trained for one iteration on a dated CSV with its own column names."""
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("evalout")
    frame = _prices(N_ROWS)
    csv = tmp / "prices.csv"
    frame.to_csv(csv, index=False)
    data = {"source": "csv", "paths": [str(csv)], "features": {"warmup": 32},
            "columns": {"timestamp": "Day", "close": "Px", "high": "Hi", "low": "Lo"},
            "split": [TRAIN_FRACTION, 0.15, 0.15]}
    raw = tiny_raw({"iterations": 1, "checkpoint_every": 0, "evaluate": False, "dir": str(tmp), "name": "r"})
    raw["data"] = data
    with ray_instance(address="local", num_cpus=2):
        train(from_dict(raw))
    return {"dir": tmp / "r", "tmp": tmp, "frame": frame, "csv": csv}


def _evaluate(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["evaluate", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _check_bars(bars: pd.DataFrame, segment: dict) -> None:
    """Per asset: the net-return identity, the equity curve and its final value against metrics.json."""
    assert list(bars.columns) == BAR_COLUMNS
    for name, rows in bars.groupby("asset", sort=False):
        rows = rows.reset_index(drop=True)
        assert rows["timestamp"].is_monotonic_increasing and rows["bar"].diff().iloc[1:].eq(1).all()
        first = rows.iloc[0]
        assert (first["position"], first["net_return"], first["equity"], first["benchmark_equity"]) == (0, 0, 1, 1)
        # position is held over the bar, trade is the change into it
        assert np.allclose(rows["position"].diff().iloc[1:], rows["trade"].iloc[1:], atol=1e-6)
        # the run executes one bar later (env.execution_lag 1): the held position earns the bar, the
        # trade from its fill price
        held = rows["position"].shift(1).iloc[1:].to_numpy() * rows["price"].pct_change().iloc[1:].to_numpy()
        traded = rows["trade"].iloc[1:] * (rows["price"].iloc[1:] / rows["fill_price"].iloc[1:] - 1.0)
        gross = held + np.nan_to_num(traded.to_numpy())
        assert np.allclose(gross - rows["cost"].iloc[1:], rows["net_return"].iloc[1:], atol=2e-6)
        assert np.allclose(np.cumprod(1.0 + rows["net_return"].iloc[1:]), rows["equity"].iloc[1:], rtol=1e-6)
        metrics = segment["metrics"][name]
        assert rows["equity"].iloc[-1] == pytest.approx(1.0 + metrics["total_return"], rel=1e-12, abs=1e-12)
        assert len(rows) == metrics["bars"] + 1
        bh = segment["baselines"]["buy_and_hold"][name]["total_return"]
        assert rows["benchmark_equity"].iloc[-1] == pytest.approx(1.0 + bh, rel=1e-12, abs=1e-12)


def test_run_segments_write_dated_bars_portfolio_and_report(run, capsys):
    out = run["tmp"] / "ev_run"
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out))
    assert rc == 0, err
    report = json.loads((out / "metrics.json").read_text())
    *steps, line, verdict = stdout.strip().splitlines()
    ret = report["summary"]["total_return"]
    assert f"equity return {100 * ret:+.2f}%" in line and "rule chosen on validation: " in line
    assert verdict == report["verdict_line"] == report["summary"]["verdict"] and verdict.startswith("verdict on test")
    # one progress line per step of the evaluation (stdout is not a terminal here: no live line)
    assert [s.split(" | ")[0] for s in steps] == [f"evaluate {i}/13" for i in range(1, 14)]
    assert "| write metrics.json " in steps[-1] and "| draw report.png " in steps[-2]
    assert report["summary"]["total_return_pct"] == pytest.approx(100 * ret)
    # file data: no generator, so no oracle reference; said so in the report and the line
    assert report["summary"]["oracle_sharpe"] is None and report["summary"]["efficiency"] is None
    assert report["segments"]["test"]["oracle"]["available"] is False
    assert "oracle (knows the generator): absent (no generator behind file data" in line
    # execution: settings (high/low, no opens in the file), spreads, the test sensitivity
    ex = report["execution"]
    assert ex["settings"]["execution_lag"] == 1 and ex["settings"]["market_orders"].startswith("next close")
    assert ex["spreads"]["per_asset"]["prices"]["source"] == "corwin_schultz"
    sens = ex["sensitivity"]
    assert sens["segment"] == "test" and list(sens["policy_sharpe"]) == ["cost_x0", "cost_x1", "cost_x2", "cost_x4",
                                                                          "market_only"]
    assert sens["policy_sharpe"]["cost_x1"] == pytest.approx(report["summary"]["sharpe"], rel=1e-9)
    assert sens["best_rule_sharpe"]["cost_x1"] == pytest.approx(report["summary"]["best_rule_sharpe"], rel=1e-9)
    assert "| execution lag 1: sharpe at cost x0/x1/x2/x4/all-market " in line
    dates = pd.to_datetime(run["frame"]["Day"])
    for segment in ("validation", "test"):
        bars = pd.read_csv(out / f"bars_{segment}.csv", parse_dates=["timestamp"])
        assert pd.api.types.is_datetime64_any_dtype(bars["timestamp"])
        assert bars["timestamp"].isin(dates).all()
        # the bar index is the data row: its date is the file's date of that row
        assert (dates.iloc[bars["bar"]].to_numpy() == bars["timestamp"].to_numpy()).all()
        _check_bars(bars, report["segments"][segment])
        port = pd.read_csv(out / f"portfolio_{segment}.csv")
        assert port["equity"].iloc[-1] == pytest.approx(
            1.0 + report["segments"][segment]["portfolio"]["agent"]["total_return"], rel=1e-12)
        if importlib.util.find_spec("pyarrow") is None:
            continue
        pq = pd.read_parquet(out / f"bars_{segment}.parquet")
        assert list(pq.columns) == BAR_COLUMNS and len(pq) == len(bars)
    # validation before test, both after the training period: checked, no warning
    val = pd.read_csv(out / "bars_validation.csv", parse_dates=["timestamp"])
    test = pd.read_csv(out / "bars_test.csv", parse_dates=["timestamp"])
    assert val["timestamp"].max() < test["timestamp"].min()
    assert report["overlap"]["checked"] and report["overlap"]["overlapping_bars"] == 0
    assert report["warnings"] == [] and "warning:" not in err
    assert (out / "report.png").stat().st_size > 20_000


def _renamed_tail(run, start: int):
    """Rows ``start..`` of the training file with other column names (When/Last/H/L)."""
    tail = run["frame"].iloc[start:].rename(columns={"Day": "When", "Px": "Last", "Hi": "H", "Lo": "L"})
    path = run["tmp"] / f"tail{start}.csv"
    tail.to_csv(path, index=False)
    return path


def test_data_file_with_set_columns_and_periods_per_year(run, capsys):
    start = int(N_ROWS * TRAIN_FRACTION) + 5  # after the training period
    path = _renamed_tail(run, start)
    out = run["tmp"] / "ev_tail"
    # the run's column mapping (Day/Px/Hi/Lo) does not fit this file
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(path), "--out", str(out))
    assert rc == 2 and err.strip().startswith("error:") and "data.columns" in err
    sets = ["--set", "data.columns.timestamp=When", "--set", "data.columns.close=Last",
            "--set", "data.columns.high=H", "--set", "data.columns.low=L", "--set", "data.periods_per_year=12"]
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(path), "--out", str(out), *sets)
    assert rc == 0, err
    report = json.loads((out / "metrics.json").read_text())
    assert report["data"]["columns"] == {"timestamp": "When", "close": "Last", "high": "H", "low": "L"}
    seg = report["segments"]["all"]
    assert seg["periods_per_year"] == 12.0 and report["summary"]["periods_per_year"] == 12.0
    # how the file was read is saved: the explicit periods_per_year and the spread source with its median
    info = seg["data_info"]
    assert info["periods_per_year"] == 12.0 and info["periods_per_year_source"] == "data.periods_per_year"
    assert set(info["spread_source"].values()) == {"corwin_schultz"} and all(
        v > 0 for v in info["median_spread_bps"].values())
    bars = pd.read_csv(out / "bars_all.csv", parse_dates=["timestamp"])
    _check_bars(bars, seg)
    assert bars["bar"].iloc[0] == 32  # the file's row, after the features' warm-up
    assert bars["timestamp"].iloc[0] == pd.Timestamp(run["frame"]["Day"].iloc[start + 32])
    # the explicit periods_per_year annualizes the Sharpe (daily bars would infer 252)
    r = bars["net_return"].iloc[1:]
    assert seg["metrics"][f"tail{start}"]["sharpe"] == pytest.approx(
        r.mean() / r.std(ddof=1) * math.sqrt(12), rel=1e-4)
    # disjoint from the training period: checked, no warning
    assert report["overlap"]["checked"] and report["overlap"]["overlapping_bars"] == 0
    assert report["warnings"] == [] and "warning:" not in err


def test_overlap_warning_for_a_file_inside_the_training_period(run, capsys):
    out = run["tmp"] / "ev_same"
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(run["csv"]), "--out", str(out))
    assert rc == 0, err
    warnings = [x for x in err.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "overlaps the run's training period" in warnings[0]
    report = json.loads((out / "metrics.json").read_text())
    assert report["warnings"] == [warnings[0][len("warning: "):]]
    overlap = report["overlap"]
    assert overlap["checked"] and 0 < overlap["overlapping_bars"] < overlap["evaluated_bars"]
    assert "1 warning(s)" in stdout


def test_overlap_compares_assets_as_well_as_dates(run, capsys):
    """Another asset over the training dates is out of sample (no warning); a renamed copy of the
    training file is the trained asset (matched by its SHA-256) and warns."""
    other = run["tmp"] / "other.csv"
    _prices(N_ROWS, seed=1).to_csv(other, index=False)  # same dates and columns, another instrument
    out = run["tmp"] / "ev_other"
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(other), "--out", str(out))
    assert rc == 0, err
    overlap = json.loads((out / "metrics.json").read_text())["overlap"]
    assert overlap["checked"] and overlap["compared"].startswith("assets")
    assert overlap["overlapping_bars"] == 0 and overlap["assets"] == {"other": {"trained_on": False,
                                                                                "overlapping_bars": 0}}
    assert "out of sample by asset" in overlap["note"] and "warning:" not in err and "warning(s)" not in stdout
    copy = run["tmp"] / "renamed.csv"
    copy.write_bytes(run["csv"].read_bytes())
    out = run["tmp"] / "ev_copy"
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(copy), "--out", str(out))
    assert rc == 0, err
    overlap = json.loads((out / "metrics.json").read_text())["overlap"]
    entry = overlap["assets"]["renamed"]
    assert entry["trained_on"] and entry["matched_by"] == "file SHA-256" and entry["overlapping_bars"] > 0
    assert "for asset(s) the run trained on (renamed: " in err and "1 warning(s)" in stdout


def test_only_data_settings_with_a_checkpoint(run, capsys):
    out = run["tmp"] / "ev_bad"
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out), "--set", "run.x=1")
    assert rc == 2 and stdout == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --set run.x:") and "data." in lines[0]
    assert not out.exists()


def test_bar_and_portfolio_tables_without_timestamps():
    """Undated (synthetic) data: ``bar`` locates the rows; the portfolio is the mean of the assets'
    net returns, its benchmark the mean of the buy-and-hold rule's."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.backtest import bar_table, evaluate_policy, portfolio_table

    data = make_market({"source": "synthetic", "num_assets": 3, "num_bars": 400, "seed": 1,
                        "features": {"warmup": 16}}, "test")
    res = evaluate_policy(lambda o: torch.where(o[:, -1] > 0, 4, 0).to(torch.int64), data,
                          EnvParams(episode_len=32, window=8), route_exposure=True)
    bars = bar_table(res)
    assert list(bars.columns) == BAR_COLUMNS[1:]
    assert set(bars["asset"]) == set(data.asset_names)
    port = portfolio_table(res)
    assert "timestamp" not in port and port["step"].tolist() == list(range(len(port)))
    assert (port["assets"].iloc[1:] == 3).all()
    nets = np.stack([r["net"] for r in res.records])
    assert np.allclose(port["net_return"].iloc[1:], nets.mean(axis=0))
    assert np.allclose(port["equity"].iloc[1:], np.cumprod(1.0 + nets.mean(axis=0)))
    bh = np.stack(res.baseline_net["buy_and_hold"]).mean(axis=0)
    assert np.allclose(port["benchmark_equity"].iloc[1:], np.cumprod(1.0 + bh))
