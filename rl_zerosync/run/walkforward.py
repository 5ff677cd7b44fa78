"""Walk-forward evaluation for file data sources (``rl-zerosync evaluate --walk-forward K``).

K folds in time order, each a window ``[lo, hi]`` of every asset's bars (``data.window``) split into
train / validation / test with the run's ``data.split`` fractions ``(train, validation, test)``:

* fold window length ``L = 1 / (1 + (K - 1) * test)`` and step ``s = test * L``;
* fold ``i`` (0-based) covers ``[i * s, i * s + L]``: the first starts at 0, the last ends at 1;
* so the test segment of fold ``i`` (the last ``test * L`` of its window) ends exactly where the test
  segment of fold ``i + 1`` starts: the test segments tile the last ``K * s`` of the series without
  overlap, and inside every fold train < validation < test in time. Fold ``i + 1`` trains on bars
  that were fold ``i``'s validation and test bars (retraining per fold, as in a live deployment).
* ``K = 1`` is the plain split of the whole series.

When the config already sets ``data.window``, the folds tile that window instead of the whole series.
Every fold is a fresh training run ``<run.dir>/<run.name>/fold<i>`` (:func:`rl_zerosync.run.train.train`,
evaluated on its validation and test segments at the end); :func:`walk_forward` collects the test
summaries per fold and pooled over folds into ``<run.dir>/<run.name>/walk_forward.json``.

Synthetic data is rejected: its held-out evaluation uses fresh series from other seeds.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

from rl_zerosync.data.data_settings import DEFAULT_SPLIT, split_fractions
from rl_zerosync.data.market import SPLITS, check_window

RESULT_FILE = "walk_forward.json"
FILE_SOURCES = ("csv", "parquet")
# Test-segment summary values pooled (mean over folds) when present in every report that has them.


class WalkForwardError(ValueError):
    """A walk-forward set-up that cannot run (source, K, fractions, a fold too short for ``env``)."""


POOLED_KEYS = ("sharpe", "total_return", "max_drawdown", "flat_sharpe", "buy_and_hold_sharpe", "best_rule_sharpe",
               "agent_minus_best_rule", "train_sharpe", "validation_sharpe", "turnover_per_bar")


def fold_windows(k: int, fractions: Any = None,
                 within: Sequence[float] | None = None) -> list[tuple[float, float]]:
    """The K fold windows ``[(lo, hi), ...]`` (fractions of each asset's bars, see the module doc).

    ``fractions``: ``data.split`` (a dict or a 3-sequence, default 0.7/0.15/0.15); only its test
    fraction sets the geometry. ``within``: a ``data.window`` to tile instead of ``[0, 1]``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"walk-forward: K (the number of folds) must be an int >= 1, got {k!r}")
    test = split_fractions(DEFAULT_SPLIT if fractions is None else fractions)[2]
    if k > 1 and test <= 0.0:
        raise ValueError(
            f"walk-forward: K={k} folds need a test fraction > 0 in data.split (the folds advance by "
            f"one test segment), got {test}"
        )
    lo0, hi0 = (0.0, 1.0) if within is None else check_window(within)
    base, span = Fraction(lo0), Fraction(hi0) - Fraction(lo0)
    # Exact rationals, rounded once: the last window ends exactly at hi0.
    length = 1 / (1 + (k - 1) * Fraction(test))
    step = Fraction(test) * length
    windows = []
    for i in range(k):
        lo, hi = i * step, i * step + length
        windows.append((float(base + span * lo), float(base + span * hi)))
    return windows


def _fold_settings(settings, i: int, window: tuple[float, float]):
    from rl_zerosync.config.settings import from_dict

    raw = settings.to_dict()
    raw["data"]["window"] = [window[0], window[1]]
    raw["run"]["dir"] = str(settings.run_dir)  # the fold's run directory: <run.dir>/<run.name>/fold<i>
    raw["run"]["name"] = f"fold{i}"
    raw["run"]["evaluate"] = True  # the fold's test summary is the point of the fold
    return from_dict(raw, source=f"{settings.source} (walk-forward fold {i})")


def _stamp(ts: Any) -> str:
    import pandas as pd

    return pd.Timestamp(ts).isoformat()


def fold_segments(data_cfg: Mapping[str, Any], env_cfg: Mapping[str, Any] | None = None) -> dict[str, list[dict]]:
    """Per segment, per asset: the segment's bars ``[first, end)`` in full-series coordinates
    (first tradable bar .. one past the last bar) and their first/last time stamps when the data
    has them. Builds every segment and its env tables, so a fold too short for ``env`` (e.g.
    ``episode_len``) raises here, before any training."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.envs.core import make_tables

    params = EnvParams.from_dict(env_cfg)
    out: dict[str, list[dict]] = {}
    for segment in SPLITS:
        market = make_market(data_cfg, segment)
        make_tables(market, params)
        rows = []
        starts = market.valid_start.cpu().tolist()  # host read: setup
        lengths = market.length.cpu().tolist()  # host read: setup
        for a, name in enumerate(market.asset_names):
            off = market.offsets[a] if market.offsets is not None else 0
            row: dict[str, Any] = {"asset": name, "bars": [off + starts[a], off + lengths[a]]}
            if market.timestamps is not None:
                row["first"] = _stamp(market.timestamps[a][starts[a]])
                row["last"] = _stamp(market.timestamps[a][lengths[a] - 1])
            rows.append(row)
        out[segment] = rows
    return out


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        try:
            x = float(x)  # numpy scalars
        except (TypeError, ValueError):
            return None
    x = float(x)
    return x if math.isfinite(x) else None


def _rule_sharpes(summary: Mapping[str, Any]) -> dict[str, float]:
    """``summary["rules"]`` as ``{rule: sharpe}`` (a number or a mapping with "sharpe" per rule)."""
    rules = summary.get("rules")
    out: dict[str, float] = {}
    if isinstance(rules, Mapping):
        for name, value in rules.items():
            v = _number(value.get("sharpe")) if isinstance(value, Mapping) else _number(value)
            if v is not None:
                out[str(name)] = v
    return out


def pool(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pooled test metrics over folds: means of the agent's and each baseline's values, and more."""
    out: dict[str, Any] = {"folds": len(summaries)}
    for key in POOLED_KEYS:
        values = [_number(s.get(key)) for s in summaries]
        values = [v for v in values if v is not None]
        if values:
            out[f"mean_{key}"] = sum(values) / len(values)
            if len(values) != len(summaries):
                out[f"folds_with_{key}"] = len(values)
    rules: dict[str, list[float]] = {}
    for s in summaries:
        for name, v in _rule_sharpes(s).items():
            rules.setdefault(name, []).append(v)
    if rules:
        out["mean_rule_sharpe"] = {name: sum(v) / len(v) for name, v in sorted(rules.items())}
    returns = [_number(s.get("total_return")) for s in summaries]
    if summaries and all(r is not None for r in returns):
        chained = 1.0
        for r in returns:
            chained *= 1.0 + r
        # Test segments are adjacent: the return over the stitched out-of-sample period.
        out["chained_total_return"] = chained - 1.0
    bh = [(_number(s.get("sharpe")), _number(s.get("buy_and_hold_sharpe"))) for s in summaries]
    if summaries and all(a is not None and b is not None for a, b in bh):
        out["folds_beating_buy_and_hold"] = sum(1 for a, b in bh if a > b)
    sharpes = [_number(s.get("sharpe")) for s in summaries]
    if summaries and all(v is not None for v in sharpes):
        out["folds_positive_sharpe"] = sum(1 for v in sharpes if v > 0)
    return out


def fold_line(fold: Mapping[str, Any]) -> str:
    """One line per fold: window, test period, agent vs baselines on the test segment."""
    s = fold.get("summary") or {}
    lo, hi = fold["window"]
    test = (fold.get("segments") or {}).get("test") or []
    period = ""
    if test:
        t = test[0]
        period = f" test {t['first']}..{t['last']}" if "first" in t else f" test bars {t['bars'][0]}-{t['bars'][1]}"
        period = period.replace("T00:00:00", "")
    parts = [f"fold {fold['fold']} [{lo:.3f}, {hi:.3f}]{period}:"]
    if not s:
        return " ".join(parts + ["no evaluation"])
    base = f"buy&hold {_fmt(s.get('buy_and_hold_sharpe'))}"
    if s.get("best_rule") is not None:
        base += f", best rule {s['best_rule']} {_fmt(s.get('best_rule_sharpe'))}"
    parts.append(f"sharpe {_fmt(s.get('sharpe'))} ({base})")
    parts.append(f"| return {_fmt(s.get('total_return'), pct=True)}")
    parts.append(f"| max drawdown {_fmt(s.get('max_drawdown'), pct=True, sign=False)}")
    return " ".join(parts)


def pooled_line(pooled: Mapping[str, Any]) -> str:
    """The pooled line: means over folds and the chained out-of-sample return."""
    n = pooled.get("folds", 0)
    base = f"buy&hold {_fmt(pooled.get('mean_buy_and_hold_sharpe'))}"
    if "mean_best_rule_sharpe" in pooled:
        base += f", best rule {_fmt(pooled['mean_best_rule_sharpe'])}"
    line = (f"walk-forward pooled over {n} folds: mean test sharpe {_fmt(pooled.get('mean_sharpe'))} ({base}) | "
            f"mean return {_fmt(pooled.get('mean_total_return'), pct=True)} | "
            f"chained return {_fmt(pooled.get('chained_total_return'), pct=True)}")
    if "folds_beating_buy_and_hold" in pooled:
        line += f" | beats buy&hold in {pooled['folds_beating_buy_and_hold']}/{n} folds"
    return line


def _fmt(x: Any, pct: bool = False, sign: bool = True) -> str:
    v = _number(x)
    if v is None:
        return "n/a"
    return format(v, ("+" if sign else "") + (".2%" if pct else ".2f"))


def _json_default(x: Any) -> Any:
    v = _number(x)
    if v is not None:
        return v
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def walk_forward(settings, k: int, out_dir: str | Path | None = None, *, overwrite: bool = False) -> dict[str, Any]:
    """Train and evaluate K walk-forward folds of ``settings`` (a file data source); returns the
    report written to ``<out_dir>/walk_forward.json`` (default ``out_dir``: the run directory).

    Every fold's windows and segments are built and checked against ``env`` before the first fold
    trains. A fold whose training was interrupted ends the walk: the report then has the folds done
    and ``"complete": false``.
    """
    from rl_zerosync.run import train as train_module

    source = (settings.data or {}).get("source", "synthetic")
    if source not in FILE_SOURCES:
        raise WalkForwardError(
            f"walk-forward: data.source is {source!r}; walk-forward evaluation needs a file source "
            f"({' or '.join(FILE_SOURCES)}) to roll through time. Synthetic data is evaluated on fresh "
            "held-out series instead (a new data.seed)."
        )
    try:
        fractions = split_fractions(settings.data.get("split", DEFAULT_SPLIT))
        windows = fold_windows(k, fractions, within=settings.data.get("window"))
    except ValueError as err:
        raise WalkForwardError(str(err)) from err
    out_dir = Path(out_dir) if out_dir is not None else settings.run_dir
    folds_settings, folds = [], []
    for i, window in enumerate(windows):
        fold_cfg = _fold_settings(settings, i, window)
        try:
            segments = fold_segments(fold_cfg.data, fold_cfg.env)
        except ValueError as err:
            raise WalkForwardError(f"walk-forward fold {i} of {k} (data.window {list(window)}): {err}") from err
        folds_settings.append(fold_cfg)
        folds.append({"fold": i, "window": list(window), "run_dir": str(fold_cfg.run_dir), "segments": segments})
    report: dict[str, Any] = {
        "k": k, "config": settings.source, "name": settings.run.name, "split": list(fractions),
        "within": [windows[0][0], windows[-1][1]],
        "folds": [], "pooled": {}, "complete": False,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    for fold, fold_cfg in zip(folds, folds_settings):
        print(f"walk-forward: fold {fold['fold'] + 1}/{k}, window {fold['window']}, run {fold['run_dir']}", flush=True)
        result = train_module.train(fold_cfg, overwrite=overwrite)
        evaluation = result.get("evaluation") if isinstance(result, Mapping) else None
        if evaluation is None:
            print(f"walk-forward: fold {fold['fold']} ended without an evaluation; stopping", flush=True)
            break
        summary = dict(evaluation.get("summary") or {})
        fold["summary"] = summary
        metrics = Path(fold["run_dir"]) / "evaluation" / "metrics.json"
        if metrics.is_file():
            fold["metrics"] = str(metrics)
        report["folds"].append(fold)
        report["pooled"] = pool([f["summary"] for f in report["folds"]])
        path.write_text(json.dumps(report, indent=2, default=_json_default))  # partial results survive a crash
    report["complete"] = len(report["folds"]) == k
    report["pooled"] = pool([f["summary"] for f in report["folds"]])
    report["lines"] = [fold_line(f) for f in report["folds"]] + [pooled_line(report["pooled"])]
    path.write_text(json.dumps(report, indent=2, default=_json_default))
    report["path"] = str(path)
    return report
