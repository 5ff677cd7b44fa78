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
* ``anchored=True`` (``--anchored``, expanding windows): fold ``i`` covers ``[0, i * s + L]`` instead;
  its validation and test segments are the rolling fold's (the same bars: ``validation * L`` and
  ``test * L`` before the window's end), its training segment grows from the series start. The
  fold's ``data.split`` is rescaled to its window (:func:`fold_split`).

When the config already sets ``data.window``, the folds tile that window instead of the whole series.
Every fold is a fresh training run ``<run.dir>/<run.name>/fold<i>`` (:func:`rl_zerosync.run.train.train`,
evaluated on its validation and test segments at the end); :func:`walk_forward` collects the test
summaries per fold and pooled over folds into ``<run.dir>/<run.name>/walk_forward.json``. With
``seeds`` every fold trains once per seed (``<run.name>/seed<k>/fold<i>``, ``run.seed = k``), seeds x
folds pooled. ``evidence`` (:func:`walk_forward_evidence`): each asset's test returns stitched over
the folds (the pooled out-of-sample period), the agent's mean Sharpe, agent - best rule and agent -
buy-and-hold with block-bootstrap intervals over bars (and seeds, with several), PSR and DSR with
the trials counted (rule variants searched in every fold, checkpoints compared in every run).
``deployment`` (:func:`rl_zerosync.evaluation.deploy.walk_forward_deployment`): per fold the policy
deployed by a decision on that fold's validation returns only (the agent, or the best baseline on
validation; margin ``deploy_margin``), and the deployed policies' test returns stitched per asset:
pooled Sharpe and deployed - buy-and-hold with calibrated intervals, how many folds deployed the agent.

Synthetic data is rejected: its held-out evaluation uses fresh series from other seeds.

The parent ``<run.dir>/<run.name>`` is locked for the walk (``run.lock``). A walk whose fold
directories already hold a run, or whose output directory already holds ``walk_forward.json``, is
refused unless ``resume`` or ``overwrite`` (every fold and the old report cleared before the first
fold trains). ``resume=True`` (``--resume``) continues an interrupted walk; each fold is
(:func:`fold_plan`):

* **reused** when it is finished (:func:`finished_fold`): ``evaluation/metrics.json`` holds the
  fold's test summary on its own segments, the fold's newest checkpoint ``checkpoint/`` is at
  ``run.iterations`` (or its run state says the early stop ended it), and that ``metrics.json`` was
  written after the checkpoint's manifest (the evaluation that ends a run comes after its last save;
  an interrupted run writes no evaluation). Its summary is read back; it is not retrained;
* **resumed** from its newest valid checkpoint (``train(..., resume=<fold>)``, the single-run
  machinery: manifest checked, older ones tried in turn) when it has one but is not finished (a
  fold trained to the end whose evaluation is missing is only evaluated);
* **restarted** from scratch when it holds a run without a checkpoint to continue;
* **trained** when its directory holds no run.

Before anything is written, every fold directory with a ``settings.yaml`` is compared with the
fold's settings now (:func:`rl_zerosync.run.resume_settings.compare`): a changed ``model``, ``env``
or ``data`` key (a changed K or ``--anchored`` shows as ``data.window``) is a ``ResumeSettingsError``
naming the key, a data file that is not the one the fold recorded (size, SHA-256) a
``DataChangedError`` naming the file; other changes are printed per fold.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rl_zerosync.data.data_settings import DEFAULT_SPLIT, split_fractions
from rl_zerosync.data.market import SPLITS, check_window
from rl_zerosync.evaluation.deploy import DEFAULT_MARGIN, add_walk_forward_deployment, check_margin
from rl_zerosync.rundir.os_errors import reason
from rl_zerosync.rundir.progress import Steps, say

RESULT_FILE = "walk_forward.json"
PLOT_FILE = "walk_forward.png"
"""Beside ``walk_forward.json``: per-fold test Sharpe with intervals, chained test equity
(:mod:`rl_zerosync.evaluation.walkforward_plot`)."""
FOLD_METRICS = "metrics.json"
"""A fold's evaluation report in ``<fold>/evaluation/``: its ``summary`` goes into walk_forward.json."""
FOLD_PLANS = ("reused", "resumed", "restarted", "trained")
"""What a walk does with a fold (:func:`fold_plan`)."""
FILE_SOURCES = ("csv", "parquet")
# Test-segment summary values pooled (mean over folds) when present in every report that has them.


class WalkForwardError(ValueError):
    """A walk-forward set-up that cannot run (source, K, fractions, a fold too short for ``env``)."""


POOLED_KEYS = ("sharpe", "total_return", "max_drawdown", "flat_sharpe", "buy_and_hold_sharpe", "best_rule_sharpe",
               "agent_minus_best_rule", "train_sharpe", "validation_sharpe", "turnover_per_bar")


def fold_windows(k: int, fractions: Any = None, within: Sequence[float] | None = None,
                 anchored: bool = False) -> list[tuple[float, float]]:
    """The K fold windows ``[(lo, hi), ...]`` (fractions of each asset's bars, see the module doc).

    ``fractions``: ``data.split`` (a dict or a 3-sequence, default 0.7/0.15/0.15); only its test
    fraction sets the geometry. ``within``: a ``data.window`` to tile instead of ``[0, 1]``.
    ``anchored``: every window starts at ``within``'s start (expanding windows).
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
        lo, hi = (0 if anchored else i * step), i * step + length
        windows.append((float(base + span * lo), float(base + span * hi)))
    return windows


def fold_split(i: int, k: int, fractions: Any = None, anchored: bool = False) -> tuple[float, float, float]:
    """Fold ``i``'s ``data.split``: the run's fractions for rolling folds; for anchored ones rescaled
    to the expanding window ``[0, i * s + L]``, so that validation and test keep the rolling fold's
    lengths ``validation * L`` and ``test * L`` (train takes the rest)."""
    fr = split_fractions(DEFAULT_SPLIT if fractions is None else fractions)
    if not anchored:
        return fr
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < k:
        raise ValueError(f"walk-forward: fold index must be an int in [0, {k}), got {i!r}")
    train, val, test = (Fraction(x) for x in fr)
    length = 1 / (1 + (k - 1) * test)
    width = i * test * length + length
    val_f, test_f = val * length / width, test * length / width
    return (float(1 - val_f - test_f), float(val_f), float(test_f))


def _fold_settings(settings, i: int, window: tuple[float, float], split: Sequence[float] | None = None,
                   seed_dir: str | None = None, seed: int | None = None):
    from rl_zerosync.config.settings import from_dict

    raw = settings.to_dict()
    raw["data"]["window"] = [window[0], window[1]]
    if split is not None:
        raw["data"]["split"] = list(split)
    # The fold's run directory: <run.dir>/<run.name>[/seed<k>]/fold<i> (run.name stays a plain name).
    raw["run"]["dir"] = str(settings.run_dir if seed_dir is None else settings.run_dir / seed_dir)
    raw["run"]["name"] = f"fold{i}"
    if seed is not None:
        raw["run"]["seed"] = int(seed)
    raw["run"]["evaluate"] = True  # the fold's test summary is the point of the fold
    return from_dict(raw, source=f"{settings.source} (walk-forward fold {i})")


def fold_segments(data_cfg: Mapping[str, Any], env_cfg: Mapping[str, Any] | None = None) -> dict[str, list[dict]]:
    """Per segment, per asset: the segment's bars ``[first, end)`` in full-series coordinates
    (first tradable bar .. one past the last bar), their count and their first/last time stamps when
    the data has them (:func:`rl_zerosync.data.identity.segment_rows`). Builds every segment and its
    env tables, so a fold too short for ``env`` (e.g. ``episode_len``) raises here, before any training."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.data.identity import segment_rows
    from rl_zerosync.envs.core import make_tables

    params = EnvParams.from_dict(env_cfg)
    out: dict[str, list[dict]] = {}
    for segment in SPLITS:
        market = make_market(data_cfg, segment)
        make_tables(market, params)
        out[segment] = segment_rows(market)
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
        base += f", rule chosen on validation: {s['best_rule']} (test {_fmt(s.get('best_rule_sharpe'))})"
    parts.append(f"sharpe {_fmt(s.get('sharpe'))} ({base})")
    parts.append(f"| return {_fmt(s.get('total_return'), pct=True)}")
    parts.append(f"| max drawdown {_fmt(s.get('max_drawdown'), pct=True, sign=False)}")
    return " ".join(parts)


def pooled_line(pooled: Mapping[str, Any]) -> str:
    """The pooled line: means over folds and the chained out-of-sample return."""
    n = pooled.get("folds", 0)
    base = f"buy&hold {_fmt(pooled.get('mean_buy_and_hold_sharpe'))}"
    if "mean_best_rule_sharpe" in pooled:
        base += f", rules chosen on validation {_fmt(pooled['mean_best_rule_sharpe'])}"
    line = (f"walk-forward pooled over {n} folds: mean test sharpe {_fmt(pooled.get('mean_sharpe'))} ({base}) | "
            f"mean return {_fmt(pooled.get('mean_total_return'), pct=True)} | "
            f"chained return {_fmt(pooled.get('chained_total_return'), pct=True)}")
    if "folds_beating_buy_and_hold" in pooled:
        line += f" | beats buy&hold in {pooled['folds_beating_buy_and_hold']}/{n} folds"
    if "test_sharpe_ci95" in pooled:
        lo, hi = pooled["test_sharpe_ci95"]
        dlo, dhi = pooled["agent_minus_best_rule_ci95"]
        dsr = pooled.get("deflated_sharpe")
        line += (f" | pooled sharpe {_fmt(pooled['pooled_test_sharpe'])} 95% CI [{lo:+.2f}, {hi:+.2f}], vs rules "
                 f"chosen on validation [{dlo:+.2f}, {dhi:+.2f}], DSR {_fmt(dsr, sign=False)} over {pooled['trials']} "
                 "trials")
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


def walk_forward_evidence(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pooled evidence of finished folds (see the module doc); folds without their per-bar test
    returns (``returns_test.npz`` beside ``metrics.json``) give ``{"value": None, "reason": ...}``."""
    from rl_zerosync.evaluation.evidence_report import read_returns
    from rl_zerosync.evidence.block import pooled_evidence

    by_seed: dict[Any, list[dict[str, Any]]] = {}
    try:
        for fold in folds:
            by_seed.setdefault(fold.get("seed"), []).append(read_returns(Path(fold["run_dir"]) / "evaluation"))
    except FileNotFoundError as err:
        return {"value": None, "reason": str(err)}
    agent, best, bench, positions = [], [], [], None
    selections = []
    for runs in by_seed.values():
        panel = {}
        for side in ("agent", "best_rule", "buy_and_hold", "position"):
            assets = len(runs[0][side])
            panel[side] = [np.concatenate([r[side][a] for r in runs]) for a in range(assets)]
        agent.append(panel["agent"])
        best.append(panel["best_rule"])
        bench.append(panel["buy_and_hold"])
        positions = positions or panel["position"]
        selections += [r["trials"] for r in runs]
    n_folds = len(next(iter(by_seed.values())))
    first = read_returns(Path(folds[0]["run_dir"]) / "evaluation")
    # The folds' selections are independent (separate periods): the standard error of their mean
    # validation Sharpe from theirs; seeds on one fold share its validation data (counted as one).
    se_of_mean = float(np.sqrt(np.mean([t["se"] ** 2 for t in selections]) / max(n_folds, 1)))
    ev = pooled_evidence(agent, best, bench, first["periods_per_year"], independent=first["independent"],
                         selections=selections, se_of_mean=se_of_mean, positions=positions)
    ev["series"] = (f"{len(by_seed)} seed(s) x {len(agent[0])} asset(s), each the test "
                    f"segments of {n_folds} folds stitched in time")
    if 1 < len(by_seed) < 5:
        ev["seeds_note"] = f"{len(by_seed)} seeds: the seed-level part of the interval is poorly estimated"
    return ev


def _evidence_summary(ev: Mapping[str, Any]) -> dict[str, Any]:
    """``walk_forward.json``'s share of the evidence beside ``pooled``."""
    if ev.get("intervals") is None:
        return {}
    iv = ev["intervals"]
    return {"pooled_test_sharpe": iv["agent"]["estimate"],
            "test_sharpe_ci95": [iv["agent"]["low"], iv["agent"]["high"]],
            "agent_minus_best_rule": iv["agent_minus_best_rule"]["estimate"],
            "agent_minus_best_rule_ci95": [iv["agent_minus_best_rule"]["low"], iv["agent_minus_best_rule"]["high"]],
            "deflated_sharpe": ev["deflated_sharpe"]["value"], "psr": ev["psr"]["value"],
            "trials": ev["trials"]["n"], "ci_method": ev["ci_method"]}


def finished_fold(fold_settings) -> tuple[dict[str, Any] | None, str]:
    """``(report, detail)`` of a finished fold (the module doc's definition): ``report`` is its
    ``evaluation/metrics.json``, ``detail`` says what made it finished; ``(None, why not)`` for a
    fold that is not."""
    from rl_zerosync.rundir.checkpoints import MANIFEST_FILE, RUN_STATE_FILE, checkpoint_candidates, read_run_state
    from rl_zerosync.rundir.run_dir import EVALUATION_DIR

    run = fold_settings.run
    path = fold_settings.run_dir / EVALUATION_DIR / FOLD_METRICS
    if not path.is_file():
        return None, f"no {EVALUATION_DIR}/{FOLD_METRICS}"
    try:
        report = json.loads(path.read_text())  # host read: run metadata
    except (OSError, ValueError) as err:
        return None, f"{EVALUATION_DIR}/{FOLD_METRICS} unreadable ({reason(err) if isinstance(err, OSError) else err})"
    summary = report.get("summary") if isinstance(report, dict) else None
    if not isinstance(summary, dict) or summary.get("segment") != "test":
        return None, f"{EVALUATION_DIR}/{FOLD_METRICS} holds no test summary"
    if report.get("rule_choice_source") != "validation" or report.get("overrides"):
        return None, f"{EVALUATION_DIR}/{FOLD_METRICS} is an evaluation of other data (--data or --set)"
    found = checkpoint_candidates(fold_settings.run_dir, "last")
    if not found:
        return None, "no checkpoint"
    newest = found[0]
    try:
        state = read_run_state(newest)
    except (OSError, ValueError) as err:
        return None, f"{newest.name}/{RUN_STATE_FILE} unreadable ({reason(err) if isinstance(err, OSError) else err})"
    it = state.get("iteration") if isinstance(state, dict) else None
    since = state.get("evals_since_best", 0) if isinstance(state, dict) else 0
    patience = run.early_stop_patience
    if isinstance(it, int) and it >= run.iterations:
        ended = f"{newest.name}/ at iteration {it} of {run.iterations}"
    elif patience and isinstance(since, int) and since >= patience:
        ended = f"{newest.name}/ at iteration {it}, stopped early"
    else:
        return None, f"{newest.name}/ at iteration {it} of {run.iterations}"
    stamp = newest / MANIFEST_FILE if (newest / MANIFEST_FILE).is_file() else newest / RUN_STATE_FILE
    if stamp.is_file() and path.stat().st_mtime_ns < stamp.stat().st_mtime_ns:
        return None, f"{EVALUATION_DIR}/{FOLD_METRICS} is older than {newest.name}/ (trained again since)"
    return report, f"{EVALUATION_DIR}/{FOLD_METRICS} after {ended}"


def fold_plan(fold_settings) -> tuple[str, str, dict[str, Any] | None]:
    """``(plan, detail, report)``: what a resumed walk does with this fold (one of ``FOLD_PLANS``,
    see the module doc), why, and the finished fold's ``metrics.json`` (None unless reused)."""
    from rl_zerosync.rundir.checkpoints import SETTINGS_FILE, checkpoint_candidates, checkpoint_iteration
    from rl_zerosync.rundir.run_dir import RunDir

    report, detail = finished_fold(fold_settings)
    if report is not None:
        return "reused", f"finished: {detail}", report
    run_dir = fold_settings.run_dir
    found = checkpoint_candidates(run_dir, "last")
    if found:
        it = checkpoint_iteration(found[0])
        done = isinstance(it, int) and it >= fold_settings.run.iterations
        return "resumed", (f"from its newest valid checkpoint (newest: {found[0].name}/ at iteration {it} of "
                           f"{fold_settings.run.iterations}{', training done: evaluating' if done else ''}; "
                           f"not finished: {detail})"), None
    if RunDir(run_dir).outputs() or (run_dir / SETTINGS_FILE).is_file():
        return "restarted", "from scratch: interrupted before its first checkpoint", None
    return "trained", "from scratch: no run in its directory", None


def _label(fold: Mapping[str, Any], k: int) -> str:
    return f"fold {fold['fold'] + 1}/{k}" + ("" if "seed" not in fold else f", seed {fold['seed']}")


def _fresh_folds(folds_settings, out_dir: Path, overwrite: bool) -> None:
    """A walk without ``resume``: refused (``RunDirError``) when a fold already holds a run or the
    output directory a report, unless ``overwrite``; then every fold and the old report cleared."""
    from rl_zerosync.rundir.lock import RunExistsError
    from rl_zerosync.rundir.run_dir import RunDir

    held = [str(s.run_dir) for s in folds_settings if RunDir(s.run_dir).outputs()]
    report = out_dir / RESULT_FILE
    if not overwrite and (held or report.is_file()):
        what = ([f"folds holding a run: {', '.join(held)}"] if held else []) + (
            [f"{report} exists"] if report.is_file() else [])
        raise RunExistsError(f"walk-forward: {'; '.join(what)}; not retraining over them: pass --resume to continue "
                             "the walk-forward (finished folds reused) or --overwrite to retrain every fold", out_dir)
    if overwrite:
        for s in folds_settings:
            if s.run_dir.is_dir():
                RunDir.claim(s.run_dir, overwrite=True).close()  # under the fold's lock: no live run is cleared
        if report.is_file():
            report.unlink()
            print(f"overwrite: removed {report}", flush=True)


def walk_forward(settings, k: int, out_dir: str | Path | None = None, *, overwrite: bool = False,
                 anchored: bool = False, seeds: Sequence[int] | None = None, resume: bool = False,
                 deploy_margin: float = DEFAULT_MARGIN) -> dict[str, Any]:
    """Train and evaluate K walk-forward folds of ``settings`` (a file data source); returns the
    report written to ``<out_dir>/walk_forward.json`` (default ``out_dir``: the run directory).

    ``anchored``: expanding windows (module doc). ``seeds``: every fold once per seed, seeds x folds.
    Every fold's windows and segments are built and checked against ``env`` before the first fold
    trains. ``resume``: continue an interrupted walk (finished folds reused, the interrupted one
    resumed from its checkpoint; module doc); ``overwrite``: retrain every fold. A fold whose
    training was interrupted ends the walk: the report then has the folds done, ``"complete": false``
    and, for a signal, ``"interrupted_by"``. ``deploy_margin``: the margin of every fold's deployment
    decision (:mod:`rl_zerosync.evaluation.deploy`), made on the fold's validation returns.
    """
    from rl_zerosync.run import train as train_module
    from rl_zerosync.rundir.lock import RunDirError, RunLock

    if resume and overwrite:
        raise RunDirError("walk-forward: --resume and --overwrite cannot be combined")
    source = (settings.data or {}).get("source", "synthetic")
    if source not in FILE_SOURCES:
        raise WalkForwardError(
            f"walk-forward: data.source is {source!r}; walk-forward evaluation needs a file source "
            f"({' or '.join(FILE_SOURCES)}) to roll through time. Synthetic data is evaluated on fresh "
            "held-out series instead (a new data.seed)."
        )
    try:
        fractions = split_fractions(settings.data.get("split", DEFAULT_SPLIT))
        windows = fold_windows(k, fractions, within=settings.data.get("window"), anchored=anchored)
    except ValueError as err:
        raise WalkForwardError(str(err)) from err
    deploy_margin = check_margin(deploy_margin)
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise WalkForwardError(f"walk-forward: seeds must be distinct ints >= 0, got {list(seeds)!r}")
    out_dir = Path(out_dir) if out_dir is not None else settings.run_dir
    folds_settings, folds = [], []
    for seed in (list(seeds) if seeds is not None else [None]):
        seed_dir = None if seed is None else f"seed{seed}"
        for i, window in enumerate(windows):
            split = fold_split(i, k, fractions, anchored) if anchored else None
            fold_cfg = _fold_settings(settings, i, window, split, seed_dir=seed_dir, seed=seed)
            try:
                segments = fold_segments(fold_cfg.data, fold_cfg.env)
            except ValueError as err:
                raise WalkForwardError(f"walk-forward fold {i} of {k} (data.window {list(window)}): {err}") from err
            folds_settings.append(fold_cfg)
            fold = {"fold": i, "window": list(window), "run_dir": str(fold_cfg.run_dir), "segments": segments}
            if split is not None:
                fold["split"] = list(split)
            if seed is not None:
                fold["seed"] = seed
            folds.append(fold)
    changes: list[list[str]] = [[] for _ in folds]
    if resume:
        from rl_zerosync.run.resume_settings import compare

        # Read only: a changed fixed key of any fold is refused before anything is written.
        changes = [compare(s, s.run_dir) for s in folds_settings]
    with RunLock(settings.run_dir):
        return _walk(settings, k, out_dir, folds, folds_settings, changes, fractions, windows, anchored, seeds,
                     resume, overwrite, train_module, deploy_margin)


def _walk(settings, k, out_dir: Path, folds, folds_settings, changes, fractions, windows, anchored, seeds,
          resume: bool, overwrite: bool, train_module, deploy_margin: float = DEFAULT_MARGIN) -> dict[str, Any]:
    """:func:`walk_forward` under the parent's lock: plan (or clear) the folds, train, pool, write."""
    if resume:
        plans = [fold_plan(s) for s in folds_settings]
    else:
        _fresh_folds(folds_settings, out_dir, overwrite)
        plans = [("trained", "", None)] * len(folds)
    report: dict[str, Any] = {
        "k": k, "config": settings.source, "name": settings.run.name, "split": list(fractions),
        "within": [windows[0][0], windows[-1][1]], "anchored": bool(anchored),
        "seeds": list(seeds) if seeds is not None else None, "deploy_margin": deploy_margin,
        "folds": [], "pooled": {}, "complete": False,
    }
    if resume:
        report["resume"] = {plan: [_label(f, k) for f, p in zip(folds, plans) if p[0] == plan] for plan in FOLD_PLANS}
        print("walk-forward resume: " + "; ".join(f"{plan} {', '.join(names) if names else '-'}"
                                                   for plan, names in report["resume"].items()), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    steps = Steps("walk-forward", total=len(folds), eta=True, live=False)  # a fold prints its own lines
    for fold, fold_cfg, (plan, detail, finished), changed in zip(folds, folds_settings, plans, changes):
        line = f"walk-forward: {_label(fold, k)}, window {fold['window']}, run {fold['run_dir']}"
        if resume:
            line += f": {plan} {detail}"
            if changed:
                line += f" | settings changed since it ran: {', '.join(changed)}"
        say(line)
        with steps.step(_label(fold, k)) as step:
            if finished is not None:
                evaluation = finished
                step.name += ": reused"
            else:
                kwargs = {"resume": str(fold_cfg.run_dir)} if plan == "resumed" else {
                    "overwrite": overwrite or plan == "restarted"}
                result = train_module.train(fold_cfg, **kwargs)
                evaluation = result.get("evaluation") if isinstance(result, Mapping) else None
                step.name += f": {plan} and evaluated" if evaluation is not None else ": ended without an evaluation"
        if evaluation is None:
            signum = result.get("interrupted_by") if isinstance(result, Mapping) else None
            if signum:
                report["interrupted_by"] = int(signum)
            say(f"walk-forward: fold {fold['fold']} ended without an evaluation; stopping (continue the "
                "walk-forward with --resume)")
            break
        summary = dict(evaluation.get("summary") or {})
        fold["summary"] = summary
        fold["intervals"] = fold_intervals(evaluation)
        metrics = Path(fold["run_dir"]) / "evaluation" / FOLD_METRICS
        if metrics.is_file():
            fold["metrics"] = str(metrics)
        report["folds"].append(fold)
        report["pooled"] = pool([f["summary"] for f in report["folds"]])
        path.write_text(json.dumps(report, indent=2, default=_json_default))  # partial results survive a crash
    return _conclude(report, folds, seeds, path)


def _conclude(report: dict[str, Any], folds: Sequence[Mapping[str, Any]], seeds, path: Path) -> dict[str, Any]:
    """The end of a walk: pooled metrics, the evidence, the verdict (printed last by the command line),
    ``walk_forward.png``, the lines and ``walk_forward.json``, each long step with its progress line."""
    from rl_zerosync.evaluation.verdict import verdict
    from rl_zerosync.evaluation.walkforward_plot import plot_walk_forward

    steps = Steps("walk-forward report", total=3 if report["folds"] else 1)
    report["complete"] = len(report["folds"]) == len(folds)
    report["pooled"] = pool([f["summary"] for f in report["folds"]])
    if seeds is not None:
        report["pooled_per_seed"] = {str(s): pool([f["summary"] for f in report["folds"] if f["seed"] == s])
                                     for s in seeds}
    if report["folds"]:
        with steps.step("evidence statistics (test segments stitched)"):
            report["evidence"] = walk_forward_evidence(report["folds"])
            report["pooled"].update(_evidence_summary(report["evidence"]))
    report["verdict"] = verdict(report.get("evidence") if report["folds"] else {"reason": "no fold finished"},
                                rule="per fold", segment=f"the test segments of {len(report['folds'])} fold(s)")
    if report["folds"]:
        png = path.with_name(PLOT_FILE)
        with steps.step(f"draw {PLOT_FILE}"):
            plot_walk_forward(report, png)
        report["plot"] = str(png)
    report["lines"] = [fold_line(f) for f in report["folds"]] + [pooled_line(report["pooled"])]
    add_walk_forward_deployment(report)  # per fold decided on its validation returns; the pooled line
    with steps.step(f"write {path.name}"):
        path.write_text(json.dumps(report, indent=2, default=_json_default))
    report["path"] = str(path)
    return report


def fold_intervals(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """A fold's test Sharpe intervals from its evaluation report's evidence (the agent, buy-and-hold and
    the rule chosen on validation: ``[low, high]`` each, with the rule's name); ``{}`` without evidence."""
    iv = (evaluation.get("evidence") or {}).get("intervals")
    if not isinstance(iv, Mapping) or "agent" not in iv:
        return {}
    rule = (iv.get("agent_minus_best_rule") or {}).get("best_rule")
    out = {"agent": [iv["agent"]["low"], iv["agent"]["high"]]}
    for key, name in (("buy_and_hold", "buy_and_hold"), ("rule", rule)):
        if name in iv:
            out[key] = [iv[name]["low"], iv[name]["high"]]
    if rule is not None:
        out["rule_name"] = rule
    return out
