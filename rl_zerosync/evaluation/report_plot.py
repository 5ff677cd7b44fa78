"""``report.png`` of ``rl-zerosync evaluate``: one column per evaluated segment (equity, positions,
drawdowns), and below them the exposure and routing mix of every segment.

:func:`plot_report` draws the figure from the walks of :func:`rl_zerosync.evaluation.evaluate.evaluate_checkpoint`
and their portfolio tables (:func:`rl_zerosync.evaluation.backtest.portfolio_table`); dates on the
x axis when the data has timestamps, bar indices otherwise. Each equity panel's title says what it
sums (the agent's equity return as the mean over the assets, the equal-weight portfolio's, its
buy-and-hold's) and names the rule chosen on validation, whose line the legend marks; with the
evaluation's ``execution`` block a costs line on top gives the fee and spread (bps), the maker
rebate, the execution lag and what the agent's portfolio paid.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rl_zerosync.actions import NUM_EXPOSURES

RULE_STYLES = {"momentum": ":", "mean_reversion": "-."}
"""Line style of each tuned rule's portfolio on the equity panel (others dotted)."""
CHOSEN_COLOR = "tab:cyan"
"""The rule chosen on validation (no asset line uses it: they take tab10 colours 1..8)."""
MAX_ASSET_LINES = 8
"""With more assets than this only the portfolio is drawn (no per-asset lines or legend entries)."""
ORDER_TYPES = ("MKT", "LMT", "PAS")
URGENCIES = ("low", "norm", "high")


def plot_report(results: dict, portfolios: dict, path: Path, execution: dict | None = None) -> dict:
    """Draw the report figure of ``results`` (segment -> walk) and ``portfolios`` (segment ->
    portfolio table) into ``path``: one column per segment, the mix panels below, and with
    ``execution`` (``metrics.json``'s key) the cost-sensitivity panel at the bottom and the costs line
    on top. Returns the texts placed: ``{"titles": segment -> equity title, "legends": segment ->
    equity legend labels, "chosen_rule": label or None, "costs": line or None}``.

    Each equity title says what it sums: the agent's equity return as the mean over the assets, the
    equal-weight portfolio's and its buy-and-hold's, then the rule chosen on the first segment
    (validation; the file itself with ``--data``), which the legend marks too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    segments = list(results)
    ncol = len(segments)
    rows = 5 if execution else 4
    fig = plt.figure(figsize=(7.5 * max(ncol, 2), 13 + 2.5 * (rows - 4)))
    grid = fig.add_gridspec(rows, 2, height_ratios=[3.0, 1.3, 1.3, 1.7, 1.7][:rows])
    chosen = _chosen_rule(results[segments[0]])
    texts: dict = {"titles": {}, "legends": {}, "chosen_rule": chosen[1] if chosen else None, "costs": None}
    for c, segment in enumerate(segments):
        col = slice(None) if ncol == 1 else c
        ax_eq = _segment_column(fig, grid, col, segment, results[segment], portfolios[segment],
                                chosen and (*chosen, segments[0]))
        texts["titles"][segment] = ax_eq.get_title()
        texts["legends"][segment] = [t.get_text() for t in ax_eq.get_legend().get_texts()]
    _mix_panels(fig, grid, results)
    if execution:
        _sensitivity_panel(fig.add_subplot(grid[4, :]), execution)
        texts["costs"] = costs_line(execution, portfolios.get(execution["sensitivity"]["segment"]))
        fig.suptitle(texts["costs"], fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.975) if execution else None)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return texts


def _chosen_rule(chooser) -> tuple[str, str] | None:
    """(rule, variant label) with the highest mean Sharpe on the segment that chose the variants
    (the summary's best rule), None without baselines."""
    from rl_zerosync.evaluation.backtest import best_rule

    if not chooser.baselines:
        return None
    rule = best_rule(chooser.baselines)
    return rule, chooser.baselines[rule].get("variant", rule)


def costs_line(execution: dict, port=None) -> str:
    """The figure's costs line from ``metrics.json``'s ``execution`` block: fee and spread (bps),
    execution lag and where market orders fill, and (``port``: that segment's portfolio table) the
    costs the portfolio paid."""
    st, sp = execution["settings"], execution["spreads"]
    med = [a["median_bps"] for a in sp["per_asset"].values()]
    sources = "/".join(sorted({a["source"] for a in sp["per_asset"].values()}))
    spread = (f"spread median {float(np.median(med)):.1f} bps" if med else "spread: none") + (
        f" (assets {min(med):.1f}..{max(med):.1f})" if len(med) > 1 else "") + (f", {sources}" if sources else "")
    line = (f"costs ({sp['segment']}): fee {1e4 * st['fee']:.2f} bps of the notional traded | {spread} | maker "
            f"rebate {st['maker_rebate_bps']:g} bps\nexecution lag {st['execution_lag']}: market orders fill at "
            f"{st['market_orders']}")
    if port is not None and len(port) > 1:
        who = "the agent's equal-weight portfolio" if port["assets"].max() > 1 else "the agent"
        line += f" | {who} paid {100 * float(port['cost'].iloc[1:].sum()):.2f}% of equity"
    return line


def _segment_column(fig, grid, col, segment: str, res, port, chosen=None):
    """One segment's column: equity over positions over drawdowns, sharing the x axis; returns the
    equity axes. ``chosen``: (rule, label, segment that chose it) or None."""
    ax_eq = fig.add_subplot(grid[0, col])
    ax_pos = fig.add_subplot(grid[1, col], sharex=ax_eq)
    ax_dd = fig.add_subplot(grid[2, col], sharex=ax_eq)
    _asset_lines(ax_eq, ax_pos, ax_dd, res)
    px = _portfolio_x(res, port)
    _equity_panel(ax_eq, ax_dd, segment, res, port, px, chosen)
    _position_panel(ax_pos, res, port, px)
    _drawdown_panel(ax_dd, res, port, px)
    _x_axis(ax_eq, ax_pos, ax_dd, dated=all(t is not None for t in res.timestamps))
    return ax_eq


def _asset_lines(ax_eq, ax_pos, ax_dd, res) -> None:
    """Per-asset equity (several assets), positions and drawdowns (at most :data:`MAX_ASSET_LINES`);
    one asset draws none: its portfolio is the asset."""
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    many, few = _many_few(res)
    for a, name in enumerate(res.assets if many else []):
        x = _x(res.timestamps[a], res.bars[a])
        color = palette((a + 1) % 10)
        ax_eq.plot(x, res.equity[a], lw=0.8, alpha=0.7, color=color, label=f"agent {name}" if few else None)
        pos = np.concatenate(([0.0], res.records[a]["position"]))
        if few:
            ax_pos.step(x, pos, where="pre", lw=0.7, alpha=0.6, color=color, label=name)
            ax_dd.plot(x, _drawdown(res.equity[a]), lw=0.6, alpha=0.5, color=color)


def _equity_panel(ax_eq, ax_dd, segment: str, res, port, px, chosen=None) -> None:
    """The portfolio's equity, its buy-and-hold benchmark (also on the drawdown panel), the tuned
    rules' portfolios (the chosen rule marked), and the title (:func:`plot_report`)."""
    many, _ = _many_few(res)
    mark = f" (chosen on {chosen[2]})" if chosen else ""
    label = "agent equal-weight portfolio" if many else f"agent {res.assets[0]}"
    ax_eq.plot(px, port["equity"], lw=2.0, color="tab:blue", label=label)
    bh = float(port["benchmark_equity"].iloc[-1] - 1.0)
    rule_return = {"flat": 0.0, "buy_and_hold": bh}
    if np.isfinite(port["benchmark_equity"]).all():
        ax_eq.plot(px, port["benchmark_equity"], lw=1.8, ls="--", color="k",
                   label="buy & hold" + (" equal-weight portfolio" if many else "")
                   + (mark if chosen and chosen[0] == "buy_and_hold" else ""))
        ax_dd.plot(px, _drawdown(port["benchmark_equity"].to_numpy()), lw=1.2, ls="--", color="k",
                   label="buy & hold")
    for rule, nets in res.baseline_net.items():
        if rule == "buy_and_hold":
            continue
        curve = _rule_portfolio(res, nets)
        if curve is not None:
            name = res.baselines.get(rule, {}).get("variant", rule)
            rule_return[rule] = float(curve[-1] - 1.0)
            picked = bool(chosen) and chosen[0] == rule
            ax_eq.plot(px, curve, lw=1.6 if picked else 1.0, ls=RULE_STYLES.get(rule, ":"),
                       color=CHOSEN_COLOR if picked else "0.45", label=name + (mark if picked else ""))
    ax_eq.axhline(1.0, color="0.7", lw=0.6)
    m = res.metrics["mean"]
    agent = float(port["equity"].iloc[-1] - 1.0)
    if many:
        title = (f"{segment}: agent equity return {100 * m['total_return']:+.2f}% mean of {len(res.assets)} assets "
                 f"(Sharpe {m['sharpe']:+.2f})\nequal-weight portfolio {100 * agent:+.2f}% "
                 f"(buy & hold {100 * bh:+.2f}%)")
    else:
        title = (f"{segment}: agent {res.assets[0]} equity return {100 * m['total_return']:+.2f}% "
                 f"(Sharpe {m['sharpe']:+.2f}) | buy & hold {100 * bh:+.2f}%")
    if chosen:
        what = "portfolio " if many else ""
        title += (f"\nrule chosen on {chosen[2]}: {chosen[1]} ({what}{100 * rule_return[chosen[0]]:+.2f}%)"
                  if chosen[0] in rule_return else f"\nrule chosen on {chosen[2]}: {chosen[1]}")
    ax_eq.set_title(title, fontsize=10)
    ax_eq.legend(fontsize=7, ncol=2, loc="best")


def _position_panel(ax_pos, res, port, px) -> None:
    """The portfolio's (mean) position over each bar."""
    many, few = _many_few(res)
    ax_pos.step(px, port["position"], where="pre", lw=1.6, color="tab:blue",
                label="portfolio (mean)" if many else None)
    ax_pos.set_ylim(-1.1, 1.1)
    ax_pos.axhline(0.0, color="0.7", lw=0.6)
    ax_pos.set_title("position (at each bar's close)", fontsize=9)
    if few:
        ax_pos.legend(fontsize=7, ncol=4, loc="upper left")


def _drawdown_panel(ax_dd, res, port, px) -> None:
    """The portfolio's drawdown, filled, downwards."""
    many, _ = _many_few(res)
    ax_dd.fill_between(px, 0.0, _drawdown(port["equity"].to_numpy()), color="tab:blue", alpha=0.3,
                       label="agent" + (" portfolio" if many else ""))
    ax_dd.invert_yaxis()
    ax_dd.set_title("drawdown", fontsize=9)
    ax_dd.legend(fontsize=7, loc="lower left")


def _x_axis(ax_eq, ax_pos, ax_dd, *, dated: bool) -> None:
    """Tick labels on the bottom panel only: concise dates, or "bar"."""
    import matplotlib.dates as mdates

    for ax in (ax_eq, ax_pos):
        ax.tick_params(labelbottom=False)
    if dated:
        locator = mdates.AutoDateLocator()
        ax_dd.xaxis.set_major_locator(locator)
        ax_dd.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    else:
        ax_dd.set_xlabel("bar")


def _mix_panels(fig, grid, results: dict) -> None:
    """Bottom row: the exposure mix and the routing mix (order type x urgency), one bar group per
    segment."""
    segments = list(results)
    ncol = len(segments)
    ax_exp = fig.add_subplot(grid[3, 0])
    ax_route = fig.add_subplot(grid[3, 1])
    width = 0.8 / ncol
    labels: list[str] = []
    for c, segment in enumerate(segments):
        exposure, labels, values = _mix_shares(results[segment].action_counts)
        shift = (c - (ncol - 1) / 2) * width
        ax_exp.bar(np.arange(NUM_EXPOSURES) + shift, exposure, width, label=segment)
        ax_route.bar(np.arange(len(values)) + shift, values, width, label=segment)
    ax_exp.set_xticks(np.arange(NUM_EXPOSURES), ["-1", "-0.5", "0", "+0.5", "+1"])
    ax_exp.set_title("exposure mix", fontsize=9)
    ax_route.set_xticks(np.arange(len(labels)), labels, fontsize=7)
    ax_route.set_title("routing mix (order type x urgency)", fontsize=9)
    if ncol > 1:
        ax_exp.legend(fontsize=7)
        ax_route.legend(fontsize=7)


def _sensitivity_panel(ax, execution: dict) -> None:
    """Sharpe of the policy and the best rule per sensitivity variant (cost x0/x1/x2/x4, all MARKET)."""
    s = execution["sensitivity"]
    names = list(s["policy_sharpe"])
    x = np.arange(len(names))
    ax.bar(x - 0.2, [s["policy_sharpe"][n] for n in names], 0.4, label="policy")
    ax.bar(x + 0.2, [s["best_rule_sharpe"][n] for n in names], 0.4, label=f"best rule {s['best_rule']['label']}")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(x, [n.replace("cost_", "cost ").replace("_", " ") for n in names])
    ax.set_ylabel("Sharpe")
    ax.set_title(f"{s['segment']}: cost and execution sensitivity (execution lag "
                 f"{execution['settings']['execution_lag']})", fontsize=10)
    ax.legend(fontsize=8)


def _mix_shares(counts) -> tuple[list, list[str], list]:
    """Factored action counts -> (share per exposure, routing labels, share per order type x urgency)."""
    total = max(counts.sum(), 1.0)
    exposure = [counts[e * 9:(e + 1) * 9].sum() / total for e in range(NUM_EXPOSURES)]
    labels, values = [], []
    for o, oname in enumerate(ORDER_TYPES):
        for u, uname in enumerate(URGENCIES):
            labels.append(f"{oname}\n{uname}")
            values.append(sum(counts[e * 9 + o * 3 + u] for e in range(NUM_EXPOSURES)) / total)
    return exposure, labels, values


def _many_few(res) -> tuple[bool, bool]:
    """(several assets, few enough for per-asset lines)."""
    many = len(res.assets) > 1
    return many, many and len(res.assets) <= MAX_ASSET_LINES


def _portfolio_x(res, port):
    """x values of the portfolio curves: its dates, else (undated) steps from the first tradable
    bar, on the bars of the longest asset."""
    if "timestamp" in port:
        return _x(port["timestamp"].to_numpy(), None)
    longest = int(np.argmax([len(b) for b in res.bars]))
    return np.asarray(res.bars[longest][0] + port["step"].to_numpy())


def _x(stamps, bars):
    """x values of a curve: dates when the data has timestamps, else bar indices."""
    if stamps is None:
        return np.asarray(bars)
    import pandas as pd

    return pd.to_datetime(np.asarray(stamps))


def _drawdown(eq: np.ndarray) -> np.ndarray:
    eq = np.asarray(eq, dtype=np.float64)
    peak = np.maximum.accumulate(eq)
    return 1.0 - eq / np.where(peak > 0, peak, 1.0)


def _rule_portfolio(res, nets: list[np.ndarray]) -> np.ndarray | None:
    """Equity of the equal-weight portfolio of a rule's per-asset net returns (the bars of
    :func:`~rl_zerosync.evaluation.backtest.portfolio_table`)."""
    from dataclasses import replace

    from rl_zerosync.evaluation.backtest import portfolio_table

    as_bench = replace(res, baseline_net={"buy_and_hold": nets})
    return portfolio_table(as_bench)["benchmark_equity"].to_numpy()
