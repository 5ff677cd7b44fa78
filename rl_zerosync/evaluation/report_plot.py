"""``report.png`` of ``rl-zerosync evaluate``: one column per evaluated segment (equity, positions,
drawdowns, and with several assets each asset's Sharpe against buy-and-hold's), and below them the
exposure and routing mix of every segment.

:func:`plot_report` draws the figure from the walks of :func:`rl_zerosync.evaluation.evaluate.evaluate_checkpoint`
and their portfolio tables (:func:`rl_zerosync.evaluation.backtest.portfolio_table`); dates on the
x axis when the data has timestamps, bar indices otherwise. Each equity panel's title says what it
sums (the agent's equity return as the mean over the assets, the equal-weight portfolio's, its
buy-and-hold's) and names the rule chosen on validation, whose line the legend marks; with the
evaluation's ``execution`` block a costs line on top gives the fee and spread (bps), the maker
rebate, the execution lag and what the agent's portfolio paid.

Readable and quick with many assets and long segments: the equal-weight portfolio is drawn first
and thickest; per-asset equity lines only up to :data:`MAX_ASSET_LINES` assets; with several
assets the positions are a heat map (asset x time, :data:`HEATMAP_BINS` time bins) instead of
overlapping step lines, and a scatter of each asset's Sharpe against its buy-and-hold Sharpe
replaces per-asset lines; every curve is decimated to at most :data:`MAX_POINTS` points (the
minimum and the maximum of each bucket kept, so spikes and drawdown troughs stay); legends are
placed at a fixed corner (matplotlib's ``loc="best"`` scans every drawn point); Agg backend.
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
"""With more assets than this only the portfolio is drawn on the equity panel (no per-asset lines
or legend entries); the per-asset Sharpe scatter and the position heat map show every asset."""
MAX_POINTS = 2000
"""Most points drawn per curve (:func:`decimate`); a 3,000-bar segment stays whole."""
LOG_SPAN = 10.0
"""Equity curves spanning more than this factor (highest over lowest) get a log y axis."""
HEATMAP_BINS = 600
"""Time bins of the position heat map (mean position of each asset per bin)."""
ORDER_TYPES = ("MKT", "LMT", "PAS")
URGENCIES = ("low", "norm", "high")


def decimate(x, y, max_points: int = MAX_POINTS):
    """``(x, y)`` with at most about ``max_points`` points: ``y`` cut into ``max_points // 2`` buckets
    of consecutive points, each represented by its minimum and its maximum in their order (the curve's
    envelope: spikes and troughs stay). Shorter curves come back as they are; ``x`` may be dates."""
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max(max_points // 2, 1)
    size = -(-n // buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    rows = padded.reshape(buckets, size)
    full = ~np.all(np.isnan(rows), axis=1)
    rows, base = rows[full], (np.arange(buckets) * size)[full]
    filled = np.where(np.isnan(rows), np.inf, rows)
    lo = base + np.argmin(filled, axis=1)
    hi = base + np.argmax(np.where(np.isnan(rows), -np.inf, rows), axis=1)
    keep = np.unique(np.concatenate(([0, n - 1], lo, hi)))
    return (x[keep] if hasattr(x, "__getitem__") else np.asarray(x)[keep]), y[keep]


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
    several = max(len(r.assets) for r in results.values()) > 1
    ratios = [3.0, 1.6 if several else 1.3, 1.3] + ([2.2] if several else []) + [1.7] + ([1.7] if execution else [])
    rows = len(ratios)
    width, height = 7.5 * max(ncol, 2), sum(ratios) * 1.45
    fig = plt.figure(figsize=(width, height))
    # Margins set in inches, not by tight_layout (which measures every text box again: a third of the time).
    grid = fig.add_gridspec(rows, 2, height_ratios=ratios, left=0.75 / width, right=1.0 - 0.35 / width,
                            bottom=0.45 / height, top=1.0 - (1.45 if execution else 0.95) / height,
                            hspace=0.42, wspace=0.16)
    chosen = _chosen_rule(results[segments[0]])
    texts: dict = {"titles": {}, "legends": {}, "chosen_rule": chosen[1] if chosen else None, "costs": None}
    for c, segment in enumerate(segments):
        col = slice(None) if ncol == 1 else c
        ax_eq = _segment_column(fig, grid, col, segment, results[segment], portfolios[segment],
                                chosen and (*chosen, segments[0]), several)
        texts["titles"][segment] = ax_eq.get_title()
        texts["legends"][segment] = [t.get_text() for t in ax_eq.get_legend().get_texts()]
    _mix_panels(fig, grid, 4 if several else 3, results)
    if execution:
        _sensitivity_panel(fig.add_subplot(grid[rows - 1, :]), execution)
        texts["costs"] = costs_line(execution, portfolios.get(execution["sensitivity"]["segment"]))
        fig.suptitle(texts["costs"], fontsize=9, y=1.0 - 0.15 / height, va="top")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return texts


def _chosen_rule(chooser) -> tuple[str, str] | None:
    """(rule, variant label) with the highest mean Sharpe on the segment that chose the variants
    (the summary's rule chosen on validation), None without baselines."""
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


def _segment_column(fig, grid, col, segment: str, res, port, chosen=None, several: bool = False):
    """One segment's column: equity over positions over drawdowns, sharing the x axis, and (several
    assets) the per-asset Sharpe scatter below; returns the equity axes. ``chosen``: (rule, label,
    segment that chose it) or None."""
    ax_eq = fig.add_subplot(grid[0, col])
    ax_pos = fig.add_subplot(grid[1, col], sharex=ax_eq)
    ax_dd = fig.add_subplot(grid[2, col], sharex=ax_eq)
    px = _portfolio_x(res, port)
    _equity_panel(ax_eq, ax_dd, segment, res, port, px, chosen)  # the portfolio first
    _asset_lines(ax_eq, res)
    _equity_scale(ax_eq)
    _position_panel(fig, ax_pos, res, port, px)
    _drawdown_panel(ax_dd, res, port, px)
    _x_axis(ax_eq, ax_pos, ax_dd, dated=all(t is not None for t in res.timestamps))
    if several:
        _asset_scatter(fig.add_subplot(grid[3, col]), segment, res)
    ax_eq.legend(fontsize=7, ncol=2, loc="upper left")
    return ax_eq


def _asset_lines(ax_eq, res) -> None:
    """Per-asset equity, thin, behind the portfolio (2 to :data:`MAX_ASSET_LINES` assets); one asset
    draws none: its portfolio is the asset."""
    import matplotlib.pyplot as plt

    palette = plt.get_cmap("tab10")
    _, few = _many_few(res)
    for a, name in enumerate(res.assets if few else []):
        x = _x(res.timestamps[a], res.bars[a])
        ax_eq.plot(*decimate(x, res.equity[a]), lw=0.7, alpha=0.6, color=palette((a + 1) % 10),
                   label=f"agent {name}", zorder=1)


def _equity_panel(ax_eq, ax_dd, segment: str, res, port, px, chosen=None) -> None:
    """The portfolio's equity, its buy-and-hold benchmark (also on the drawdown panel), the tuned
    rules' portfolios (the chosen rule marked), and the title (:func:`plot_report`)."""
    many, _ = _many_few(res)
    mark = f" (chosen on {chosen[2]})" if chosen else ""
    label = "agent equal-weight portfolio" if many else f"agent {res.assets[0]}"
    ax_eq.plot(*decimate(px, port["equity"].to_numpy()), lw=2.0, color="tab:blue", label=label, zorder=4)
    bh = float(port["benchmark_equity"].iloc[-1] - 1.0)
    rule_return = {"flat": 0.0, "buy_and_hold": bh}
    if np.isfinite(port["benchmark_equity"]).all():
        bench = port["benchmark_equity"].to_numpy()
        ax_eq.plot(*decimate(px, bench), lw=1.8, ls="--", color="k", zorder=3,
                   label="buy & hold" + (" equal-weight portfolio" if many else "")
                   + (mark if chosen and chosen[0] == "buy_and_hold" else ""))
        ax_dd.plot(*decimate(px, _drawdown(bench)), lw=1.2, ls="--", color="k", label="buy & hold")
    for rule, nets in res.baseline_net.items():
        if rule == "buy_and_hold":
            continue
        curve = _rule_portfolio(res, nets)
        if curve is not None:
            name = res.baselines.get(rule, {}).get("variant", rule)
            rule_return[rule] = float(curve[-1] - 1.0)
            picked = bool(chosen) and chosen[0] == rule
            ax_eq.plot(*decimate(px, curve), lw=1.6 if picked else 1.0, ls=RULE_STYLES.get(rule, ":"), zorder=2,
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


def _equity_scale(ax) -> None:
    """A log y axis when the curves drawn span more than a factor :data:`LOG_SPAN` (a rule at +4,000%
    beside an agent near 0% leaves both readable); linear otherwise."""
    ys = [np.asarray(line.get_ydata(), dtype=np.float64) for line in ax.get_lines() if len(line.get_ydata()) > 2]
    values = np.concatenate(ys) if ys else np.array([1.0])
    values = values[np.isfinite(values)]
    if values.size and values.min() > 0 and values.max() / values.min() > LOG_SPAN:
        ax.set_yscale("log")
        ax.set_ylabel("equity (log scale)", fontsize=8)
    else:
        ax.set_ylabel("equity", fontsize=8)


def _position_panel(fig, ax_pos, res, port, px) -> None:
    """One asset: its position over each bar. Several: a heat map of every asset's position (rows,
    :data:`HEATMAP_BINS` time bins, the mean position in each), the portfolio's mean position in the
    title's terms below it."""
    many, _ = _many_few(res)
    ax_pos.set_title("position (at each bar's close)" + (": per asset, mean over each time bin" if many else ""),
                     fontsize=9)
    if not many:
        ax_pos.step(*decimate(px, port["position"].to_numpy()), where="pre", lw=1.2, color="tab:blue")
        ax_pos.set_ylim(-1.1, 1.1)
        ax_pos.axhline(0.0, color="0.7", lw=0.6)
        return
    image, extent, top = _position_bins(res)
    shown = ax_pos.imshow(image, aspect="auto", interpolation="nearest", cmap="RdBu", vmin=-top, vmax=top,
                          extent=extent, origin="upper")
    names = list(res.assets)
    step = max(1, -(-len(names) // 16))  # at most 16 asset labels
    ax_pos.set_yticks(range(0, len(names), step), names[::step], fontsize=6)
    fig.colorbar(shown, ax=ax_pos, pad=0.01, fraction=0.03, label="position")


def _position_bins(res) -> tuple[np.ndarray, list[float], float]:
    """(assets x bins mean positions, imshow extent, colour scale) on the x values of the curves."""
    import matplotlib.dates as mdates

    dated = all(t is not None for t in res.timestamps)
    xs, positions = [], []
    for a in range(len(res.assets)):
        x = _x(res.timestamps[a], res.bars[a])
        xs.append(np.asarray(mdates.date2num(x) if dated else x, dtype=np.float64))
        positions.append(np.concatenate(([0.0], np.asarray(res.records[a]["position"], dtype=np.float64))))
    lo, hi = min(x.min() for x in xs), max(x.max() for x in xs)
    width = max(hi - lo, 1e-9)
    bins = int(min(HEATMAP_BINS, max(len(x) for x in xs)))
    image = np.full((len(xs), bins), np.nan)
    for a, (x, pos) in enumerate(zip(xs, positions)):
        idx = np.minimum(((x - lo) / width * bins).astype(np.int64), bins - 1)
        counts = np.bincount(idx, minlength=bins)
        sums = np.bincount(idx, weights=pos, minlength=bins)
        image[a] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    top = float(max(1.0, np.nanmax(np.abs(image)) if np.isfinite(image).any() else 1.0))
    return image, [lo, hi, len(xs) - 0.5, -0.5], top


def _asset_scatter(ax, segment: str, res) -> None:
    """Several assets: each asset's Sharpe against its buy-and-hold Sharpe (above the diagonal: the
    agent did better on that asset), the means marked."""
    bh = res.baselines.get("buy_and_hold", {})
    names = [n for n in res.assets if n in bh]
    if not names:
        ax.set_axis_off()
        return
    x = np.array([bh[n]["sharpe"] for n in names])
    y = np.array([res.metrics[n]["sharpe"] for n in names])
    ax.scatter(x, y, s=14, color="tab:blue", alpha=0.75, label="one asset")
    ax.scatter([x.mean()], [y.mean()], s=60, marker="X", color="tab:red", label="mean over the assets")
    lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
    pad = 0.05 * max(hi - lo, 1e-6)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.6", lw=0.8, ls="--")
    ax.axhline(0.0, color="0.8", lw=0.6)
    above = int((y > x).sum())
    ax.set_xlabel("buy & hold Sharpe", fontsize=8)
    ax.set_ylabel("agent Sharpe", fontsize=8)
    ax.set_title(f"{segment}: per asset, agent vs buy & hold Sharpe ({above} of {len(names)} assets above the "
                 "diagonal)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _drawdown_panel(ax_dd, res, port, px) -> None:
    """The portfolio's drawdown, filled, downwards."""
    many, _ = _many_few(res)
    xd, dd = decimate(px, _drawdown(port["equity"].to_numpy()))
    ax_dd.fill_between(xd, 0.0, dd, color="tab:blue", alpha=0.3, label="agent" + (" portfolio" if many else ""))
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


def _mix_panels(fig, grid, row: int, results: dict) -> None:
    """The exposure mix and the routing mix (order type x urgency), one bar group per segment."""
    segments = list(results)
    ncol = len(segments)
    ax_exp = fig.add_subplot(grid[row, 0])
    ax_route = fig.add_subplot(grid[row, 1])
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
        ax_exp.legend(fontsize=7, loc="upper left")
        ax_route.legend(fontsize=7, loc="upper right")


def _sensitivity_panel(ax, execution: dict) -> None:
    """Sharpe (mean over the assets) of the policy and of the rule chosen on validation per
    sensitivity variant (cost x0/x1/x2/x4, all MARKET)."""
    s = execution["sensitivity"]
    names = list(s["policy_sharpe"])
    x = np.arange(len(names))
    ax.bar(x - 0.2, [s["policy_sharpe"][n] for n in names], 0.4, label="policy")
    ax.bar(x + 0.2, [s["best_rule_sharpe"][n] for n in names], 0.4,
           label=f"rule chosen on validation: {s['best_rule']['label']}")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(x, [n.replace("cost_", "cost ").replace("_", " ") for n in names])
    ax.set_ylabel("Sharpe (mean over assets)")
    ax.set_title(f"{s['segment']}: cost and execution sensitivity (execution lag "
                 f"{execution['settings']['execution_lag']})", fontsize=10)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.3 * (high - low))  # room for the legend above the bars
    ax.legend(fontsize=8, ncol=2, loc="upper center")


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
