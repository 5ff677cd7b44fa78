"""``walk_forward.png`` of ``rl-zerosync evaluate --walk-forward K``: per fold the agent's test Sharpe
with its 95% interval beside buy-and-hold's and the rule chosen on the fold's validation segment
(their intervals too, when the fold's evidence has them), and the test equity chained over the
folds (the folds' test segments are adjacent: the stitched out-of-sample period).

:func:`plot_walk_forward` reads only the walk's report (``walk_forward.json``'s content) and each
fold's ``evaluation/returns_test.npz`` (:func:`rl_zerosync.evaluation.evidence_report.read_returns`): the
chained curves are the equal-weight portfolio of the fold's assets, bar by bar, compounded over the
folds in order (one curve per seed for the agent). A fold without its returns file is chained from
its summary's ``total_return`` instead (one point per fold end, said in the legend). Agg backend, no
more than :data:`MAX_POINTS` points per curve.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.evaluation.report_plot import CHOSEN_COLOR, decimate

MAX_POINTS = 2000
"""Most points drawn per chained curve (min/max kept per bucket by :func:`decimate`)."""


def _fold_returns(fold: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """One fold's per-bar test returns of the equal-weight portfolio of its assets (agent, rule
    chosen on validation, buy-and-hold); None without its returns file."""
    from rl_zerosync.evaluation.evidence_report import read_returns

    try:
        r = read_returns(Path(fold["run_dir"]) / "evaluation")
    except (FileNotFoundError, KeyError, ValueError, OSError):
        return None
    out = {}
    for side in ("agent", "best_rule", "buy_and_hold"):
        series = [np.asarray(x, dtype=np.float64) for x in r[side]]
        n = min(len(x) for x in series)
        out[side] = np.mean([x[-n:] for x in series], axis=0)  # the assets' common last n bars
    return out


def chained(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Chained test equity over ``folds`` (in order): ``{"agent": {seed: (x, equity)}, "best_rule": (x,
    equity), "buy_and_hold": (x, equity), "bounds": [x of each fold's start], "per_bar": bool}``."""
    by_seed: dict[Any, list[Mapping[str, Any]]] = {}
    for fold in folds:
        by_seed.setdefault(fold.get("seed"), []).append(fold)
    first = next(iter(by_seed.values()))
    parts = [[_fold_returns(f) for f in runs] for runs in by_seed.values()]
    per_bar = all(p is not None for runs in parts for p in runs)
    out: dict[str, Any] = {"agent": {}, "per_bar": per_bar}
    if per_bar:
        lengths = [len(p["agent"]) for p in parts[0]]
        out["bounds"] = list(np.cumsum([0] + lengths[:-1]))
        for seed, runs in zip(by_seed, parts):
            nets = np.concatenate([p["agent"] for p in runs])
            out["agent"][seed] = (np.arange(len(nets) + 1), np.concatenate(([1.0], np.cumprod(1.0 + nets))))
        for side in ("best_rule", "buy_and_hold"):
            nets = np.concatenate([p[side] for p in parts[0]])
            out[side] = (np.arange(len(nets) + 1), np.concatenate(([1.0], np.cumprod(1.0 + nets))))
        return out
    out["bounds"] = list(range(len(first)))
    for seed, runs in by_seed.items():
        rets = [float((f.get("summary") or {}).get("total_return") or 0.0) for f in runs]
        out["agent"][seed] = (np.arange(len(rets) + 1), np.concatenate(([1.0], np.cumprod(1.0 + np.array(rets)))))
    return out


def plot_walk_forward(report: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Draw ``walk_forward.png`` of a walk's ``report`` into ``path``; returns the texts placed
    (``{"sharpe_title", "equity_title", "legend": [labels]}``) for tests."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folds = list(report["folds"])
    fig, (ax_s, ax_e) = plt.subplots(2, 1, figsize=(11, 8.5), height_ratios=[1.0, 1.2])
    texts = {"sharpe_title": _sharpe_panel(ax_s, folds, report), "legend": []}
    texts["equity_title"] = _equity_panel(ax_e, folds, report)
    texts["legend"] = [t.get_text() for ax in (ax_s, ax_e) if ax.get_legend() for t in ax.get_legend().get_texts()]
    verdict = report.get("verdict")
    if verdict:
        fig.suptitle(textwrap.fill(verdict, 150), fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.95) if verdict else None)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return texts


def _sharpe_panel(ax, folds: Sequence[Mapping[str, Any]], report: Mapping[str, Any]) -> str:
    """Per fold (and seed): the agent's test Sharpe with its interval, buy-and-hold's and the rule's."""
    seeds = list(dict.fromkeys(f.get("seed") for f in folds))
    width = 0.3 / max(len(seeds), 1)  # the agent's markers (one per seed) left of the fold's tick
    shown: set[str] = set()

    def mark(x, y, interval, **style):
        label = style.pop("label")
        if y is None:
            return
        err = None
        if interval and all(np.isfinite(interval)):
            err = [[max(y - interval[0], 0.0)], [max(interval[1] - y, 0.0)]]
        ax.errorbar([x], [y], yerr=err, capsize=3, label=None if label in shown else label, **style)
        shown.add(label)

    for f in folds:
        s, iv = f.get("summary") or {}, f.get("intervals") or {}
        j = seeds.index(f.get("seed"))
        x = f["fold"] - 0.15 + (j - (len(seeds) - 1) / 2) * width
        who = "agent" + (f" (seed {f['seed']})" if len(seeds) > 1 else "")
        mark(x, s.get("sharpe"), iv.get("agent"), fmt="o", color=f"C{j % 10}", ms=6, label=who)
        if j == 0:
            mark(f["fold"] + 0.1, s.get("buy_and_hold_sharpe"), iv.get("buy_and_hold"), fmt="s", color="k",
                 ms=5, label="buy & hold")
            mark(f["fold"] + 0.25, s.get("best_rule_sharpe"), iv.get("rule"), fmt="D", color=CHOSEN_COLOR, ms=5,
                 label="rule chosen on the fold's validation")
    k = int(report.get("k") or (max(f["fold"] for f in folds) + 1 if folds else 0))
    ax.axhline(0.0, color="0.6", lw=0.7)
    ax.set_xlim(-0.6, k - 0.4)
    ax.set_xticks(range(k), [_fold_tick(f) for f in _first_per_fold(folds, k)], fontsize=8)
    ax.set_ylabel("test Sharpe (annualized)")
    pooled = report.get("pooled") or {}
    title = "per fold: test Sharpe (mean over assets) with 95% interval"
    if "test_sharpe_ci95" in pooled:
        lo, hi = pooled["test_sharpe_ci95"]
        title += f" | pooled {pooled['pooled_test_sharpe']:+.2f} [{lo:+.2f}, {hi:+.2f}]"
    ax.set_title(title, fontsize=10)
    if shown:
        ax.legend(fontsize=8, loc="upper left")
    return title


def _first_per_fold(folds: Sequence[Mapping[str, Any]], k: int) -> list[Mapping[str, Any]]:
    out: dict[int, Mapping[str, Any]] = {}
    for f in folds:
        out.setdefault(f["fold"], f)
    return [out.get(i, {"fold": i}) for i in range(k)]


def _fold_tick(fold: Mapping[str, Any]) -> str:
    """``fold i`` and its test period (dates when the data has them)."""
    test = ((fold.get("segments") or {}).get("test") or [{}])[0]
    if "first" in test:
        return f"fold {fold['fold']}\n{str(test['first'])[:10]}..{str(test['last'])[:10]}"
    return f"fold {fold['fold']}"


def _equity_panel(ax, folds: Sequence[Mapping[str, Any]], report: Mapping[str, Any]) -> str:
    """The test equity chained over the folds: the agent (per seed), buy-and-hold, the rules chosen
    on validation; the folds' boundaries dotted."""
    if not folds:
        ax.set_title("no fold finished", fontsize=10)
        return "no fold finished"
    c = chained(folds)
    for j, (seed, (x, eq)) in enumerate(c["agent"].items()):
        label = "agent" + (f" (seed {seed})" if seed is not None else "")
        ax.plot(*decimate(x, eq, MAX_POINTS), lw=1.6 if j == 0 else 1.0, color=f"C{j % 10}", label=label)
    if c["per_bar"]:
        ax.plot(*decimate(*c["buy_and_hold"], MAX_POINTS), lw=1.4, ls="--", color="k", label="buy & hold")
        ax.plot(*decimate(*c["best_rule"], MAX_POINTS), lw=1.2, ls=":", color=CHOSEN_COLOR,
                label="rules chosen on each fold's validation")
    for b in c["bounds"][1:]:
        ax.axvline(b, color="0.75", lw=0.7, ls=":")
    ax.axhline(1.0, color="0.7", lw=0.6)
    ax.set_xlabel("test bar, folds stitched in time" if c["per_bar"] else "fold")
    ax.set_ylabel("equity (from 1)")
    title = ("test equity chained over the folds (equal-weight portfolio of the assets)" if c["per_bar"] else
             "test equity chained over the folds (fold ends only: no per-bar returns kept)")
    ends = [f"agent{'' if seed is None else f' seed {seed}'} {100 * (eq[-1] - 1):+.1f}%"
            for seed, (_, eq) in c["agent"].items()]
    if c["per_bar"]:
        ends.append(f"buy & hold {100 * (c['buy_and_hold'][1][-1] - 1):+.1f}%")
    title += "\n" + ", ".join(ends)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return title
