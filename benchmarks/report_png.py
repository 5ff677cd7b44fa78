"""Time to draw ``report.png`` (:func:`rl_zerosync.evaluation.report_plot.plot_report`) on walks the size
of ``configs/local.yaml``'s evaluation: validation 8 series and test 32 series of 3,000 bars.

How to run (CPU; 2 cores are enough)::

    python -m benchmarks.report_png            # 1, 8 and 32 test assets x 3,000 bars, 3 repeats each
    python -m benchmarks.report_png --quick    # 32 test assets only, one repeat

The walks are synthetic (:func:`synthetic_walk`: random returns and positions with every field the
figure reads: equity, per-bar records, metrics, buy-and-hold and the tuned rules' net returns, the
action counts), so the figure's cost is measured alone, without a checkpoint or a walk. Per case:
wall seconds and CPU seconds of ``plot_report`` (the median of the repeats), the panels drawn
(seconds per panel) and the PNG's size.

Results to expect (2 CPU cores, load about 3): about 0.15 s per panel, 1.1-1.7 s for a figure (the
32-asset one: 11 panels); on busy shared cores the wall time is several times that.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import parser, print_table, quick_path, result_header, results_path, write_json

BARS = 3000
VALIDATION_ASSETS = 8
CASES = (1, 8, 32)


def synthetic_walk(num_assets: int, bars: int = BARS, segment: str = "test", seed: int = 0, *,
                   rule_choice: dict | None = None):
    """An :class:`~rl_zerosync.evaluation.backtest.EvalResult` of ``num_assets`` undated series of
    ``bars`` bars with random net returns and positions, buy-and-hold and the tuned rules walked
    (chosen here, or ``rule_choice``), and its portfolio table; what ``plot_report`` reads."""
    from rl_zerosync.actions import NUM_ACTIONS
    from rl_zerosync.evaluation.backtest import EvalResult, add_baselines, portfolio_table
    from rl_zerosync.evaluation.metrics import equity_curve, mean_metrics, performance_metrics
    from rl_zerosync.evaluation.rules import variants

    rng = np.random.default_rng(seed)
    names = [f"synth{a}" for a in range(num_assets)]
    records, equity, metrics = [], [], {}
    for a, name in enumerate(names):
        position = np.clip(np.round(np.cumsum(rng.normal(0, 0.15, bars)) * 2) / 2, -1, 1)
        net = rng.normal(0.0002, 0.01, bars) * np.where(position == 0, 0.1, 1.0)
        trade = np.diff(np.concatenate(([0.0], position)))
        cost = np.abs(trade) * 2e-4
        rec = {"net": net - cost, "pnl": net, "cost": cost, "trade": trade, "position": position,
               "action": rng.integers(0, NUM_ACTIONS, bars), "order_type": rng.integers(0, 3, bars)}
        records.append(rec)
        equity.append(equity_curve(rec["net"]))
        metrics[name] = performance_metrics(rec["net"], periods_per_year=252.0, positions=position, pnl=net,
                                            trades=trade, costs=cost, order_types=rec["order_type"])
    metrics["mean"] = mean_metrics([metrics[n] for n in names])
    result = EvalResult(assets=names, segment=segment, equity=equity, timestamps=[None] * num_assets,
                        records=records, metrics=metrics, bars=[np.arange(64, 64 + bars + 1)] * num_assets,
                        action_counts=rng.integers(0, 1000, NUM_ACTIONS).astype(np.float64))
    grid, nets = {}, {}
    for label in ["buy_and_hold"] + [v.label for v in variants()]:
        per_asset = [rng.normal(0.0003, 0.01, bars) for _ in names]
        per = {n: performance_metrics(x, periods_per_year=252.0) for n, x in zip(names, per_asset)}
        per["mean"] = mean_metrics([per[n] for n in names])
        grid[label], nets[label] = per, per_asset
    add_baselines(result, grid, nets, rule_choice=rule_choice)
    return result, portfolio_table(result)


def synthetic_execution(num_assets: int) -> dict:
    """An ``execution`` block (settings, spreads, sensitivity) for the figure's costs line and panel."""
    variants = ("cost_x0", "cost_x1", "cost_x2", "cost_x4", "market_only")
    return {"settings": {"fee": 1e-4, "maker_rebate_bps": 0.0, "execution_lag": 1, "market_orders": "next close"},
            "spreads": {"segment": "test", "per_asset": {f"synth{a}": {"median_bps": 5.0, "source": "synthetic"}
                                                         for a in range(num_assets)}},
            "sensitivity": {"segment": "test", "policy_sharpe": dict.fromkeys(variants, 0.5),
                            "best_rule_sharpe": dict.fromkeys(variants, 0.4), "best_rule": {"label": "momentum(64,1)"}}}


def figure_inputs(test_assets: int, bars: int = BARS) -> tuple[dict, dict, dict]:
    """(results, portfolios, execution) of a validation + test evaluation."""
    val, val_port = synthetic_walk(min(VALIDATION_ASSETS, test_assets), bars, "validation", seed=1)
    test, test_port = synthetic_walk(test_assets, bars, "test", seed=2, rule_choice=val.rule_choice)
    return ({"validation": val, "test": test}, {"validation": val_port, "test": test_port},
            synthetic_execution(test_assets))


def time_figure(test_assets: int, repeats: int, bars: int = BARS) -> dict:
    """Median wall and CPU seconds of ``plot_report`` over ``repeats`` draws."""
    import matplotlib.pyplot as plt

    from rl_zerosync.evaluation.report_plot import plot_report

    results, portfolios, execution = figure_inputs(test_assets, bars)
    walls, cpus, panels, size = [], [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "report.png"
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            plot_report(results, portfolios, png, execution=execution)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            size = png.stat().st_size
        fig = plt.figure()
        plt.close(fig)
    panels = 3 * 2 + (2 if test_assets > 1 else 0) + 2 + 1
    wall = statistics.median(walls)
    return {"test_assets": test_assets, "bars": bars, "repeats": repeats, "wall_s": wall,
            "cpu_s": statistics.median(cpus), "panels": panels, "wall_s_per_panel": wall / panels,
            "png_bytes": size}


def main() -> None:
    args = parser(__doc__, out=results_path("report_png"), quick="32 test assets, one repeat").parse_args()
    cases, repeats = ((32,), 1) if args.quick else (CASES, 3)
    rows = [time_figure(n, repeats) for n in cases]
    print_table(rows, ["test_assets", "bars", "wall_s", "cpu_s", "panels", "wall_s_per_panel", "png_bytes"],
                width=16, title="report.png drawing time (median of the repeats)")
    result = result_header("report_png", device="cpu", config={"bars": BARS, "cases": list(cases),
                                                               "repeats": repeats})
    result["rows"] = rows
    write_json(result, quick_path("report_png") if args.quick and args.out == results_path("report_png") else args.out)


if __name__ == "__main__":
    main()
