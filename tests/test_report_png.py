"""``report.png`` stays quick and readable with many assets and long segments (CPU, synthetic walks the
size of ``configs/local.yaml``'s test segment: 32 series x 3,000 bars): the portfolio first, a
position heat map and a per-asset Sharpe scatter instead of 32 overlapping lines, every curve
decimated, legends at fixed corners, well under a second of CPU per panel."""
from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks.report_png import figure_inputs


def test_decimate_keeps_short_curves_and_every_bucket_extreme():
    from rl_zerosync.evaluation.report_plot import decimate

    x = np.arange(10)
    assert decimate(x, x * 2.0, 100)[1].tolist() == (x * 2.0).tolist()
    rng = np.random.default_rng(0)
    y = np.cumsum(rng.normal(size=100_000))
    y[31_337] = 1e3  # a spike and a trough must survive
    y[77_777] = -1e3
    xs, ys = decimate(np.arange(len(y)), y, 2000)
    assert len(ys) <= 2002 and ys.max() == 1e3 and ys.min() == -1e3
    assert xs[0] == 0 and xs[-1] == len(y) - 1 and np.all(np.diff(xs) > 0)
    assert np.array_equal(ys, y[xs])  # points of the curve, in order
    # dates as x (the dated data's axis)
    import pandas as pd

    dates = pd.date_range("2020-01-01", periods=5000, freq="h")
    dx, dy = decimate(dates, np.sin(np.arange(5000) / 50.0), 500)
    assert len(dx) == len(dy) <= 502 and isinstance(dx, pd.DatetimeIndex)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The 32-asset figure drawn once, its axes kept open for inspection, with its CPU time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rl_zerosync.evaluation import report_plot

    results, portfolios, execution = figure_inputs(32)
    path = tmp_path_factory.mktemp("png") / "report.png"
    closed = []
    original = plt.close
    try:
        plt.close = lambda fig=None: closed.append(fig)  # keep the figure for the checks below
        c0 = time.process_time()
        texts = report_plot.plot_report(results, portfolios, path, execution=execution)
        cpu = time.process_time() - c0
    finally:
        plt.close = original
    fig = closed[0]
    yield {"fig": fig, "texts": texts, "path": path, "cpu": cpu, "results": results}
    plt.close(fig)


def test_many_assets_show_the_portfolio_first_and_no_per_asset_lines(drawn):
    fig, texts = drawn["fig"], drawn["texts"]
    eq = [ax for ax in fig.axes if ax.get_title().startswith("test: agent equity return")]
    assert len(eq) == 1
    labels = [line.get_label() for line in eq[0].get_lines()]
    assert labels[0] == "agent equal-weight portfolio"  # drawn first, on top (zorder)
    assert not any(label.startswith("agent synth") for label in labels)  # 32 assets: no per-asset lines
    assert texts["legends"]["test"][0] == "agent equal-weight portfolio"
    assert texts["titles"]["test"].startswith("test: agent equity return ") and "mean of 32 assets" in \
        texts["titles"]["test"]


def test_many_assets_get_a_position_heat_map_and_a_sharpe_scatter(drawn):
    fig, results = drawn["fig"], drawn["results"]
    heat = [ax for ax in fig.axes if ax.get_title().startswith("position") and ax.images]
    assert len(heat) == 2  # validation and test
    rows = sorted(ax.images[0].get_array().shape[0] for ax in heat)
    assert rows == [8, 32]
    scatter = [ax for ax in fig.axes if "agent vs buy & hold Sharpe" in ax.get_title()]
    assert len(scatter) == 2
    test = next(ax for ax in scatter if ax.get_title().startswith("test"))
    points = test.collections[0].get_offsets()
    assert len(points) == 32
    assert np.allclose(sorted(points[:, 1]), sorted(results["test"].metrics[n]["sharpe"]
                                                    for n in results["test"].assets))


def test_every_curve_is_decimated_and_no_legend_scans_the_points(drawn):
    from rl_zerosync.evaluation.report_plot import MAX_POINTS

    fig = drawn["fig"]
    for ax in fig.axes:
        for line in ax.get_lines():
            assert len(line.get_xdata()) <= MAX_POINTS + 2, (ax.get_title(), line.get_label())
        legend = ax.get_legend()
        if legend is not None:
            assert legend._loc != 0, ax.get_title()  # 0 = "best": a search over every drawn point


def test_drawing_takes_well_under_a_second_of_cpu_per_panel(drawn):
    panels = len([ax for ax in drawn["fig"].axes if ax.get_label() != "<colorbar>"])
    assert panels == 11  # 2 segments x (equity, positions, drawdown, per asset) + 2 mixes + sensitivity
    assert drawn["cpu"] / panels < 0.75, f"{drawn['cpu']:.2f} s of CPU for {panels} panels"
    assert drawn["path"].stat().st_size > 50_000


def test_one_asset_draws_its_position_as_a_line():
    import matplotlib

    matplotlib.use("Agg")
    from rl_zerosync.evaluation.report_plot import plot_report
    import tempfile
    from pathlib import Path

    results, portfolios, execution = figure_inputs(1, bars=500)
    with tempfile.TemporaryDirectory() as tmp:
        texts = plot_report(results, portfolios, Path(tmp) / "r.png", execution=execution)
    assert texts["titles"]["test"].startswith("test: agent synth0 equity return")
    assert texts["legends"]["test"][0] == "agent synth0"
