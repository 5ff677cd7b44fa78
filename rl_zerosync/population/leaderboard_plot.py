"""``population.png``, written beside ``population.json``: the members' validation curves and the
leaderboard, the member selected on validation and the top-k ensemble marked.

* Top: each member's validation ``run.eval_metric`` over the iterations (its rows of the population's
  ``metrics.jsonl``), every member thin and grey, the ensemble's members coloured, the selected member thick, each
  member's best pass dotted; the rule chosen on validation (its validation Sharpe, the same data for
  every member) as a dashed line.
* Bottom: the leaderboard, members by their best validation value (bars, the order selection reads),
  and each member's test Sharpe as a dot (read once, for the report; never used to select), the
  selected member's bar and the ensemble's members marked, the ensemble itself as the last bar when
  there is one.

:func:`plot_population` reads ``population.json``'s content and the population's ``metrics.jsonl``
only; Agg backend.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.rundir.metrics_table import read_member_metrics, read_metrics

POPULATION_PNG = "population.png"
SELECTED_COLOR = "tab:red"
ENSEMBLE_COLOR = "tab:purple"
RULE_COLOR = "tab:cyan"
MAX_LABELLED = 40
"""With more members than this the leaderboard's x labels are thinned."""


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def validation_curve(run_dir: Path, metric: str = "sharpe") -> tuple[list[int], list[float], float | None]:
    """A member's validation passes from its metrics rows (the population's table,
    :func:`~rl_zerosync.rundir.metrics_table.read_metrics`): (iterations, values, the rule chosen on
    validation's validation Sharpe of the last pass or None)."""
    try:
        rows = read_metrics(run_dir)
    except FileNotFoundError:
        return [], [], None
    return _curve(rows, metric)


def validation_curves(run_dirs: Sequence[Path], metric: str = "sharpe") -> list[tuple]:
    """:func:`validation_curve` of each member directory, the population's table read once."""
    try:
        tables = read_member_metrics(run_dirs)
    except FileNotFoundError:
        return [validation_curve(d, metric) for d in run_dirs]
    return [_curve(rows, metric) for rows in tables]


def _curve(rows: Sequence[Mapping[str, Any]], metric: str) -> tuple[list[int], list[float], float | None]:
    its, values, rule = [], [], None
    for row in rows:
        value = row.get(f"eval/validation_{metric}")
        if value is None:
            continue
        its.append(int(row.get("iteration", len(its) + 1)))
        values.append(float(value))
        if _finite(row.get("eval/validation_best_rule_sharpe")):
            rule = float(row["eval/validation_best_rule_sharpe"])
    return its, values, rule


def plot_population(report: Mapping[str, Any], parent: Path, path: Path, metric: str = "sharpe") -> dict[str, Any]:
    """Draw ``population.png`` of ``report`` (``population.json``'s content; members' directories under
    ``parent``) into ``path``; returns the texts placed (``{"curves_title", "leaderboard_title",
    "legend": [labels], "order": [member indices as drawn]}``) for tests."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rl_zerosync.population.members import member_dir

    rows = list(report["per_member"])
    selected = report["selection"]["member"]
    ensemble = report.get("ensemble") or {}
    in_ensemble = set(ensemble.get("members") or [])
    width = min(19.0, max(13.0, 0.22 * len(rows) + 7))  # the legends sit right of the panels
    fig, (ax_c, ax_l) = plt.subplots(2, 1, figsize=(width, 9.5), height_ratios=[1.1, 1.0])
    curves = dict(zip([r["member"] for r in rows],
                      validation_curves([member_dir(parent, r["member"]) for r in rows], metric)))
    texts: dict[str, Any] = {"curves_title": _curves_panel(ax_c, rows, curves, selected, in_ensemble, metric)}
    texts["leaderboard_title"], texts["order"] = _leaderboard_panel(ax_l, report, rows, selected, in_ensemble, metric)
    texts["legend"] = [t.get_text() for ax in (ax_c, ax_l) if ax.get_legend() for t in ax.get_legend().get_texts()]
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return texts


def _curves_panel(ax, rows: Sequence[Mapping[str, Any]], curves: Mapping[int, tuple], selected: int | None,
                  in_ensemble: set, metric: str) -> str:
    rule = None
    for r in rows:
        k = r["member"]
        its, values, rule_k = curves[k]
        rule = rule_k if rule_k is not None else rule
        if not its:
            continue
        if k == selected:
            style = {"lw": 2.4, "color": SELECTED_COLOR, "zorder": 4, "label": f"member{k} (selected on validation)"}
        elif k in in_ensemble:
            style = {"lw": 1.3, "color": ENSEMBLE_COLOR, "alpha": 0.8, "zorder": 3, "label": "ensemble member"}
        else:
            style = {"lw": 0.8, "color": "0.6", "alpha": 0.7, "zorder": 2, "label": "member"}
        ax.plot(its, values, **style)
        best = r.get("best_iteration")
        if best in its:
            ax.plot([best], [values[its.index(best)]], "o", ms=3.5, color=style["color"], zorder=style["zorder"])
    if rule is not None:
        ax.axhline(rule, color=RULE_COLOR, ls="--", lw=1.2, label=f"rule chosen on validation ({rule:+.2f})")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one entry per kind
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"validation {metric}")
    title = f"validation {metric} of {len(rows)} members over training (dots: each member's best pass)"
    ax.set_title(title, fontsize=10)
    return title


def _leaderboard_panel(ax, report: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], selected: int | None,
                       in_ensemble: set, metric: str) -> tuple[str, list]:
    key = f"best_validation_{metric}"
    order = list(report["leaderboard"])
    vals = [rows[k][key] if _finite(rows[k][key]) else np.nan for k in order]
    tests = [(rows[k].get("test") or {}).get("test_sharpe") for k in order]
    colors = [SELECTED_COLOR if k == selected else ENSEMBLE_COLOR if k in in_ensemble else "0.65" for k in order]
    x = np.arange(len(order))
    ax.bar(x, np.nan_to_num(vals), color=colors, width=0.8, label=f"best validation {metric} (selects)")
    labels = [f"m{k}" for k in order]
    ens = report.get("ensemble")
    drawn = list(order)
    if ens is not None and _finite(ens.get("validation_sharpe")):
        ax.bar([len(order)], [ens["validation_sharpe"]], color="white", edgecolor=ENSEMBLE_COLOR, hatch="//",
               width=0.8, label=f"ensemble of the top {ens['k']} (mean Q): its validation {metric}")
        tests.append((ens.get("test") or {}).get("test_sharpe"))
        labels.append(f"top{ens['k']}")
        drawn.append("ensemble")
    xs = np.arange(len(tests))
    ok = [i for i, t in enumerate(tests) if _finite(t)]
    if ok:
        ax.plot(xs[ok], [tests[i] for i in ok], "o", color="k", ms=4, zorder=4,
                label="test Sharpe (read once for the report, not used to select)")
    step = max(1, -(-len(labels) // MAX_LABELLED))
    ax.set_xticks(xs[::step], labels[::step], fontsize=7, rotation=90 if len(labels) > 16 else 0)
    ax.axhline(0.0, color="0.5", lw=0.6)
    ax.set_ylabel("Sharpe")
    sel = report["selection"]
    title = "leaderboard by best validation " + metric
    if selected is not None:
        title += f" | selected: member{selected}"
        test = sel.get("test") or {}
        if _finite(test.get("test_sharpe")):
            title += f", test Sharpe {test['test_sharpe']:+.2f}"
            ci = test.get("test_sharpe_ci95")
            if ci and all(_finite(c) for c in ci):
                title += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
        if _finite(sel.get("deflated_sharpe")):
            title += f", DSR {sel['deflated_sharpe']:.2f} over {sel['trials']:.1f} trials"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: no bar or dot hidden
    return title, drawn
