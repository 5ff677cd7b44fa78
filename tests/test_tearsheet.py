"""Tear-sheet-ready outputs (CPU): ``series.json`` beside the per-bar files (periods_per_year, the
benchmark's net-return column, the calendar), the synthetic calendar of undated data,
``rl-zerosync report`` (quantstats metrics and HTML; its Sharpe against ``metrics.json``'s) and the
texts of ``report.png`` (what the headline sums, the chosen rule, the costs line).

Two tiny runs (1 iteration each, in process): the dated-CSV run of ``test_evaluate_outputs`` and a
synthetic run of 2 assets (no timestamps); every command runs through the CLI's ``main``."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.cli import main
from test_evaluate_outputs import _evaluate, run  # noqa: F401 (the module fixture)
from tiny_run import tiny_raw

pytest.importorskip("quantstats")


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory, ray_instance):
    """A run trained for one iteration on 2 synthetic assets (no timestamps)."""
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("tearsheet")
    raw = tiny_raw({"iterations": 1, "checkpoint_every": 0, "evaluate": False, "dir": str(tmp), "name": "s"})
    with ray_instance(address="local", num_cpus=2):
        train(from_dict(raw))
    return {"dir": tmp / "s", "tmp": tmp}


@pytest.fixture(scope="module")
def synth_eval(synth_run):
    """The synthetic run evaluated into ``<run>/evaluation`` (the default), with the texts
    ``plot_report`` placed on ``report.png``."""
    import rl_zerosync.evaluation.report_plot as report_plot

    placed = []
    original = report_plot.plot_report

    def recording(*args, **kwargs):
        texts = original(*args, **kwargs)
        placed.append(texts)
        return texts

    report_plot.plot_report = recording
    try:
        rc = main(["evaluate", "--checkpoint", str(synth_run["dir"])])
    finally:
        report_plot.plot_report = original
    assert rc == 0
    out = synth_run["dir"] / "evaluation"
    return {"out": out, "report": json.loads((out / "metrics.json").read_text()), "texts": placed[-1]}


def _report(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["report", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _check_sidecar(out, report, calendar: str) -> dict:
    """series.json names every per-bar file, periods_per_year and the benchmark column; the files carry
    ``benchmark_net_return`` whose compounding is ``benchmark_equity``."""
    side = json.loads((out / "series.json").read_text())
    assert side["calendar"] == calendar
    assert side["benchmark"]["column"] == "benchmark_net_return" and side["returns"]["column"] == "net_return"
    for segment in ("validation", "test"):
        entry = side["segments"][segment]
        ppy = report["segments"][segment]["periods_per_year"]
        assert entry["periods_per_year"] == ppy == side["periods_per_year"]
        assert entry["calendar"] == calendar
        names = set(entry["files"].values())
        assert {f"bars_{segment}.csv", f"portfolio_{segment}.csv"} <= names and all((out / n).is_file() for n in names)
        for kind in ("bars", "portfolio"):
            table = pd.read_csv(out / f"{kind}_{segment}.csv", parse_dates=["timestamp"])
            assert table.columns[0] == "timestamp" and pd.api.types.is_datetime64_any_dtype(table["timestamp"])
            assert len(table) == entry[f"{kind}_rows"]
            for _, rows in (table.groupby("asset", sort=False) if kind == "bars" else [(None, table)]):
                assert rows["timestamp"].is_monotonic_increasing and rows["timestamp"].is_unique
                assert rows["benchmark_net_return"].iloc[0] == 0.0
                assert np.allclose(np.cumprod(1.0 + rows["benchmark_net_return"].iloc[1:]),
                                   rows["benchmark_equity"].iloc[1:], rtol=1e-6)
        stamps = pd.read_csv(out / f"portfolio_{segment}.csv", parse_dates=["timestamp"])["timestamp"]
        assert (pd.Timestamp(entry["start"]), pd.Timestamp(entry["end"])) == (stamps.iloc[0], stamps.iloc[-1])
    return side


def _check_sharpe(doc: dict, report: dict) -> None:
    """quantstats' Sharpe of the portfolio and of buy-and-hold = metrics.json's, unrounded within the
    stated tolerance and in quantstats' own (2-decimal) table."""
    from rl_zerosync.evaluation.tearsheet import SHARPE_TOLERANCE

    port = report["segments"][report["summary"]["segment"]]["portfolio"]
    check = doc["sharpe_check"]
    assert check["tolerance"] == SHARPE_TOLERANCE and check["within_tolerance"]
    for key, title in (("agent", "agent portfolio"), ("buy_and_hold", "buy & hold")):
        ours = port[key]["sharpe"]
        assert check[key]["metrics_json"] == ours
        assert check[key]["quantstats"] == pytest.approx(ours, abs=SHARPE_TOLERANCE)
        assert doc["metrics"][title]["Sharpe"] == pytest.approx(ours, abs=0.005 + 1e-9)
    assert doc["bars"] == port["agent"]["bars"]


def test_dated_run_sidecar_and_report(run, capsys, tmp_path):  # noqa: F811 (the module fixture)
    out = run["tmp"] / "ev_tearsheet"
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out))
    assert rc == 0, err
    report = json.loads((out / "metrics.json").read_text())
    side = _check_sidecar(out, report, "data")
    assert "synthetic_calendar" not in side
    # the data's own dates stay
    dates = set(pd.to_datetime(run["frame"]["Day"]))
    assert set(pd.read_csv(out / "bars_test.csv", parse_dates=["timestamp"])["timestamp"]) <= dates
    # report of an evaluation directory given directly, tear sheet elsewhere, with the HTML page
    sheet = tmp_path / "sheet"
    rc, stdout, err = _report(capsys, str(out), "--html", "--out", str(sheet))
    assert rc == 0, err
    assert "warning:" not in err
    doc = json.loads((sheet / "tearsheet.json").read_text())
    _check_sharpe(doc, report)
    assert doc["periods_per_year"] == report["segments"]["test"]["periods_per_year"] and doc["calendar"] == "data"
    assert doc["source_file"].endswith("portfolio_test.parquet") or doc["source_file"].endswith("portfolio_test.csv")
    html = (sheet / "tearsheet.html").read_text()
    assert doc["html"] == str(sheet / "tearsheet.html") and "Sharpe" in html and len(html) > 50_000
    lines = stdout.strip().splitlines()
    assert "Sharpe" in stdout and lines[-1].startswith("report test:") and str(sheet / "tearsheet.json") in lines[-1]
    # the same from the CSV (float32 per-bar values) within the same tolerance
    csv_only = tmp_path / "csv_only"
    shutil.copytree(out, csv_only)
    for p in csv_only.glob("*.parquet"):
        p.unlink()
    rc, _, err = _report(capsys, str(csv_only))
    assert rc == 0, err
    doc = json.loads((csv_only / "tearsheet.json").read_text())
    assert doc["source_file"].endswith("portfolio_test.csv")
    _check_sharpe(doc, report)


def test_synthetic_run_gets_a_synthetic_calendar_and_a_tear_sheet(synth_eval, synth_run, capsys):
    from rl_zerosync.evaluation.series_sidecar import SYNTHETIC_ORIGIN

    out, report = synth_eval["out"], synth_eval["report"]
    side = _check_sidecar(out, report, "synthetic")
    assert side["periods_per_year"] == 252.0
    cal = side["synthetic_calendar"]
    assert cal["origin"] == SYNTHETIC_ORIGIN == "2000-01-03" and cal["pandas_freq"] == "B"
    assert "no timestamps" in cal["note"]
    bars = pd.read_csv(out / "bars_test.csv", parse_dates=["timestamp"])
    # business days counted from 2000-01-03 by the bar's index in the whole series
    grid = pd.bdate_range(SYNTHETIC_ORIGIN, periods=int(bars["bar"].max()) + 1)
    assert (bars["timestamp"].to_numpy() == grid[bars["bar"].to_numpy()].to_numpy()).all()
    val = pd.read_csv(out / "portfolio_validation.csv", parse_dates=["timestamp"])
    port = pd.read_csv(out / "portfolio_test.csv", parse_dates=["timestamp"])
    assert val["timestamp"].max() < port["timestamp"].min()
    assert {"step", "timestamp"} <= set(port.columns)
    # report of the run directory (its evaluation/), written into it
    rc, stdout, err = _report(capsys, str(synth_run["dir"]))
    assert rc == 0, err
    doc = json.loads((out / "tearsheet.json").read_text())
    _check_sharpe(doc, report)
    assert doc["calendar"] == "synthetic" and pd.Timestamp(doc["start"]) == port["timestamp"].iloc[1]
    assert "equal-weight portfolio of 2 assets" in doc["returns"]
    # the line's Sharpe is the portfolio's; the summary's mean of the assets' own Sharpes said beside it
    mean = report["summary"]["sharpe"]
    assert (f"these are the equal-weight portfolio's; the mean of the 2 assets' own Sharpes (metrics.json "
            f"summary.sharpe) is {mean:+.2f}") in stdout.strip().splitlines()[-1]
    # an evaluation directory holding a tear sheet is still one evaluate replaces
    rc = main(["evaluate", "--checkpoint", str(synth_run["dir"])])
    assert rc == 0 and not (out / "tearsheet.json").exists()


def test_report_png_headline_chosen_rule_and_costs(synth_eval):
    report, texts = synth_eval["report"], synth_eval["texts"]
    s = report["summary"]
    test = report["segments"]["test"]
    title = texts["titles"]["test"]
    mean = test["metrics"]["mean"]["total_return"]
    port = test["portfolio"]
    assert title.startswith(f"test: agent equity return {100 * mean:+.2f}% mean of 2 assets")
    assert (f"equal-weight portfolio {100 * port['agent']['total_return']:+.2f}% "
            f"(buy & hold {100 * port['buy_and_hold']['total_return']:+.2f}%)") in title
    assert texts["chosen_rule"] == s["best_rule"]
    assert f"rule chosen on validation: {s['best_rule']}" in title
    if s["best_rule"] != "flat":  # flat draws no line
        marked = [t for t in texts["legends"]["test"] if t.endswith("(chosen on validation)")]
        assert len(marked) == 1 and (marked[0].startswith(s["best_rule"]) or marked[0].startswith("buy & hold"))
    ex = report["execution"]
    costs = texts["costs"]
    assert costs.startswith("costs (test): fee ") and f"fee {1e4 * ex['settings']['fee']:.2f} bps" in costs
    med = [a["median_bps"] for a in ex["spreads"]["per_asset"].values()]
    assert f"spread median {np.median(med):.1f} bps" in costs
    assert f"execution lag {ex['settings']['execution_lag']}: market orders fill at" in costs
    assert f"paid {100 * port['agent']['cost_total']:.2f}% of equity" in costs


@pytest.mark.parametrize("periods, first_three", [
    (252.0, ["2000-01-03", "2000-01-04", "2000-01-05"]),
    (365.0, ["2000-01-03", "2000-01-04", "2000-01-05"]),
    (52.0, ["2000-01-03", "2000-01-10", "2000-01-17"]),
    (12.0, ["2000-02-01", "2000-03-01", "2000-04-01"]),
    (252.0 * 7, ["2000-01-03 09:30", "2000-01-03 10:30", "2000-01-03 11:30"]),
    (8760.0, ["2000-01-03 00:00", "2000-01-03 01:00", "2000-01-03 02:00"]),
])
def test_synthetic_calendar_conventions(periods, first_three):
    from rl_zerosync.evaluation.series_sidecar import synthetic_timestamps

    assert list(synthetic_timestamps([0, 1, 2], periods)) == [pd.Timestamp(t) for t in first_three]


def test_synthetic_calendar_sessions_and_even_spacing():
    from rl_zerosync.evaluation.series_sidecar import synthetic_calendar, synthetic_timestamps

    hours = synthetic_timestamps(np.arange(14), 252.0 * 7)  # 7 a day: Monday 09:30..15:30, Tuesday again
    assert hours[6] == pd.Timestamp("2000-01-03 15:30") and hours[7] == pd.Timestamp("2000-01-04 09:30")
    friday = synthetic_timestamps([4 * 7 + 6, 5 * 7], 252.0 * 7)
    assert list(friday) == [pd.Timestamp("2000-01-07 15:30"), pd.Timestamp("2000-01-10 09:30")]
    # 1,638 (252 x 6.5) and any other value: evenly spaced, periods_per_year bars a year
    even = synthetic_timestamps(np.arange(1639), 1638.0)
    span = (even[-1] - even[0]) / pd.Timedelta(days=365.2425)
    assert span == pytest.approx(1.0, abs=1e-4) and synthetic_calendar(1638.0)["step_seconds"] == 19266
    for bad, match in ((0.0, "periods_per_year"), (float("nan"), "periods_per_year")):
        with pytest.raises(ValueError, match=match):
            synthetic_timestamps([0], bad)
    with pytest.raises(ValueError, match="bars: expected indices >= 0"):
        synthetic_timestamps([-1], 252.0)


def test_report_errors_are_one_line(synth_eval, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    rc, stdout, err = _report(capsys, str(missing))
    assert rc == 2 and stdout == "" and err.count("\n") == 1
    assert err.startswith(f"error: report {missing}: does not exist; expected a run directory")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    rc, _, err = _report(capsys, str(empty))
    assert rc == 2 and err.count("\n") == 1 and "no evaluation directory: expected" in err
    # an evaluation directory without the per-bar files
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("metrics.json", "series.json"):
        shutil.copy(synth_eval["out"] / name, partial / name)
    rc, _, err = _report(capsys, str(partial))
    assert rc == 2 and err.count("\n") == 1
    assert "no portfolio_test.parquet or portfolio_test.csv; expected the per-bar files" in err
    # without series.json (an evaluation of an earlier version)
    (partial / "series.json").unlink()
    rc, _, err = _report(capsys, str(partial))
    assert rc == 2 and err.count("\n") == 1 and "no series.json" in err and "evaluate again" in err
