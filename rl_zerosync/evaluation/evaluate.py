"""``rl-zerosync evaluate``: the greedy policy of a checkpoint on held-out data -> JSON, per-bar
series and a PNG report.

Loads the Q module from the checkpoint (by default the run's best-validation checkpoint; no Ray
needed), rebuilds the run's data from the checkpoint's ``settings.yaml`` and walks the validation
and test segments once per asset with :func:`rl_zerosync.evaluation.backtest.evaluate_policy` (or the
whole of ``--data FILE``), beside the rule baselines (variants chosen on validation, frozen for
test). The output directory is ``--out DIR``, else ``<run>/evaluation/`` (``<run>/evaluation_<file
stem>/`` with ``--data``); it is written whole into ``<dir>.tmp`` and swapped in, and a directory
that is not an evaluation's is refused (:mod:`rl_zerosync.evaluation.eval_dir`). Writes to it:

* ``metrics.json``: policy and rule metrics per segment (per asset, their mean, and the
  equal-weight portfolio of the assets), which checkpoint and iteration, action and routing mix,
  the data settings used (``data``, with ``periods_per_year`` and how the files were read per
  segment), ``overlap`` (the training-period check below) and ``warnings``.
* ``bars_<segment>.csv`` (and ``.parquet`` when pyarrow is installed) per evaluated segment
  (``validation``, ``test``; ``all`` for ``--data``): one row per asset and bar with ``timestamp``
  (the data's, or for data without timestamps a synthetic calendar's, e.g. business days from
  2000-01-03 at 252 bars a year: see ``series.json``), ``bar`` (the bar's index in the asset's series), ``asset``,
  ``price`` (close), ``position`` (exposure held at its close), ``trade`` (the change in position
  into it), ``fill_price`` (its price: within the bar with execution lag 1), ``cost`` (of that
  trade, fraction of equity), ``net_return`` (the previous position's return over the bar plus the
  trade's from its fill price, less the cost), ``equity`` (from 1), ``benchmark_net_return`` and
  ``benchmark_equity`` (the buy-and-hold rule, same execution and costs); see
  :func:`rl_zerosync.evaluation.backtest.bar_table`. The last ``equity`` of an asset is ``1 +
  total_return`` of its metrics.
* ``portfolio_<segment>.csv`` (and ``.parquet``): the equal-weight portfolio of the assets (the mean
  of their net returns each bar) and its buy-and-hold benchmark
  (:func:`rl_zerosync.evaluation.backtest.portfolio_table`; ``timestamp`` as in the bars).
* ``series.json`` (:mod:`rl_zerosync.evaluation.series_sidecar`): what those files are for a
  tear-sheet tool: per segment the file names, ``periods_per_year``, the returns and benchmark
  columns, and ``calendar`` (``"data"``, or ``"synthetic"`` with how the timestamps were made up).
  ``rl-zerosync report`` (:mod:`rl_zerosync.evaluation.tearsheet`) reads them into quantstats.
* ``report.png`` (:mod:`rl_zerosync.evaluation.report_plot`): one column per segment (validation,
  test), dates on the x axis when the data has timestamps: the equal-weight portfolio and its
  buy-and-hold benchmark (and the tuned rules' portfolios, the one chosen on validation marked;
  per-asset lines up to 8 assets), titled with what each number sums; positions (a heat map with
  several assets); drawdowns; each asset's Sharpe against buy-and-hold's; below, the exposure and
  routing mix, the cost sensitivity, and a costs line on top (fee, spread, execution lag).

The summary line (test segment, or ``all`` for ``--data``) reports, labelled apart, the means over
the assets (Sharpe beside flat, buy-and-hold and the rule chosen on validation with its Sharpe on
the reported segment, equity return, max drawdown) and the equal-weight portfolio (its Sharpe and
equity return beside buy-and-hold's), the oracle reference "oracle (knows the generator)" with the
agent's efficiency (agent Sharpe / oracle Sharpe; synthetic data only,
:mod:`rl_zerosync.evaluation.oracle`, its variant chosen on validation like the rules';
``segments.<name>.oracle`` and ``summary.oracle_*`` / ``summary.efficiency`` in ``metrics.json``).
The verdict line follows (``verdict_line``, :mod:`rl_zerosync.evaluation.verdict`: the agent against
the rule chosen on validation and buy-and-hold, from the evidence's calibrated intervals). Each step
of the evaluation prints a progress line (:func:`evaluation_steps`, ``quiet`` to silence them).

``--data FILE`` takes the run's column mapping, asset column, spread, feature and spike-check
settings and ``periods_per_year`` when the run trained on files (``auto`` or unset: inferred from
the file's own timestamps). ``overrides`` (``--set data.KEY=VALUE``,
parsed as the settings loader parses ``--set``) change the evaluated data's settings last, so an
explicit ``data.periods_per_year`` wins over the run's value and over inference from timestamps;
only ``data.*`` keys are accepted (the rest of a checkpoint's settings belong to the trained model).
Without ``--data`` they change the run's data settings for every segment evaluated (the ``train``
segment of the train-minus-test gap included).

A run's own segments (no ``--data``) are evaluated only on the data files the run recorded
(``data_record.json``, :mod:`rl_zerosync.data.identity`): a file changed or missing since is a
``DataChangedError`` naming it (``--data FILE`` evaluates the file as it is now).

Training-period overlap (:mod:`rl_zerosync.evaluation.overlap`): an evaluated asset the run trained
on (the same name, or a file of the same SHA-256 as a training file) has its evaluated bars
compared with its training period (the one the run recorded; for runs without a record, rebuilt
from the checkpoint's data settings, before any override; ``overlap.training_period_source`` says
which); bars inside it give a one-line warning on stderr and an entry in ``warnings`` (results
partly in sample). Another asset over the same dates is not in sample. Synthetic data has no
timestamps, so runs trained on synthetic data (or evaluated on undated files) are not checked
(``overlap.checked`` false, with the reason).
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import yaml


OWN_DATA_CHANGED = ("the run's validation and test segments are cut from the recorded file; evaluate the file as "
                    "it is now with --data FILE (other data: its overlap with the recorded training period is checked)")


def greedy_policy(module):
    """obs -> greedy action: exposure index (routed) or factored index (flat, branching)."""

    def policy(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return module.greedy_actions(module.q_values(obs))

    return policy


def ensemble_policy(modules):
    """obs -> greedy action of the mean Q values of ``modules`` (same spaces; the first one's greedy rule)."""
    first = modules[0]

    def policy(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            q = torch.stack([m.q_values(obs) for m in modules]).mean(dim=0)
            return first.greedy_actions(q)

    return policy


def data_overrides(data_cfg: dict, overrides: list[str] | None) -> dict:
    """``data_cfg`` with ``--set data.KEY=VALUE`` overrides applied (values parsed as the settings
    loader parses ``--set``; nested keys like ``data.columns.close=...`` allowed). Any other section
    raises :class:`~rl_zerosync.config.settings.SettingsError` naming the key."""
    from rl_zerosync.config.settings import SettingsError, apply_overrides

    for item in overrides or []:
        section = next(iter(apply_overrides({}, [item])))  # SettingsError on a malformed item
        if section != "data":
            key = item.split("=", 1)[0].strip()
            raise SettingsError(
                f"--set {key}: with --checkpoint only data.KEY settings can be changed (the evaluated "
                f"data: columns, asset_column, periods_per_year, spread_source, spread_bps, ...); the "
                f"run's other settings belong to the trained model"
            )
    return apply_overrides({"data": dict(data_cfg)}, list(overrides or []))["data"]


def _data_cfg(settings: dict, data_file: str | None,
              overrides: list[str] | None = None) -> tuple[dict, list[str]]:
    cfg = dict(settings.get("data") or {})
    if data_file is None:
        return data_overrides(cfg, overrides), ["validation", "test"]
    suffix = Path(data_file).suffix.lower()
    source = "parquet" if suffix in (".parquet", ".pq") else "csv"
    file_cfg = {"source": source, "paths": [data_file]}
    for key in ("columns", "asset_column", "spread_source", "spread_bps", "features", "periods_per_year",
                "max_abs_log_return"):
        if key in cfg and cfg.get("source") in ("csv", "parquet"):
            file_cfg[key] = cfg[key]
    return data_overrides(file_cfg, overrides), ["all"]


def _training_market(settings: dict):
    """What the run trained on: its ``train`` segment, or with ``data.regenerate_every`` the first
    fresh series of the local env runner."""
    from rl_zerosync.data import make_market
    from rl_zerosync.data.data_settings import regenerate_every
    from rl_zerosync.data.fresh import build_training_market, training_seed

    data_cfg = dict(settings.get("data") or {})
    if not regenerate_every(data_cfg):
        return make_market(data_cfg, "train")
    runner_seed = (settings.get("runner") or {}).get("seed")
    run_seed = runner_seed if runner_seed is not None else settings["run"]["seed"]
    return build_training_market(data_cfg, training_seed(data_cfg.get("seed", 0), run_seed, 0, 0))


def _train_segment_market(settings: dict, train_market=None):
    """The run's training market for the overlap check: ``train_market`` when given, None for
    synthetic data (no timestamps), else rebuilt from the run's data settings."""
    if (settings.get("data") or {}).get("source", "synthetic") not in ("csv", "parquet"):
        return None
    if train_market is not None:
        return train_market
    return _training_market(settings)


def write_series(results: dict, out_dir: Path) -> tuple[dict[str, dict[str, str]], dict]:
    """Write ``bars_<segment>.csv`` and ``portfolio_<segment>.csv`` (and ``.parquet`` when pyarrow
    is installed) of every result, with a synthetic ``timestamp`` when the data has none, and
    ``series.json`` (:mod:`rl_zerosync.evaluation.series_sidecar`); returns (segment -> kind -> path
    plus ``"series_json"``, segment -> portfolio table as walked, without a synthetic timestamp)."""
    from rl_zerosync.evaluation.backtest import bar_table, portfolio_table
    from rl_zerosync.evaluation.series_sidecar import segment_entry, with_calendar, write_sidecar

    parquet = importlib.util.find_spec("pyarrow") is not None
    outputs, portfolios, entries = {}, {}, {}
    for segment, res in results.items():
        paths = {}
        portfolios[segment] = portfolio_table(res)
        bars, port, calendar = with_calendar(res, bar_table(res), portfolios[segment])
        for kind, table in (("bars", bars), ("portfolio", port)):
            path = out_dir / f"{kind}_{segment}.csv"
            # The walk's per-bar values are float32: written at that precision (0.15, not
            # 0.15000000596); equity curves (compounded in float64) in full.
            f32 = {c: np.float32 for c in table.columns if table[c].dtype == np.float64 and "equity" not in c}
            table.astype(f32).to_csv(path, index=False)
            paths[f"{kind}_csv"] = str(path)
            if parquet:
                path = out_dir / f"{kind}_{segment}.parquet"
                table.to_parquet(path, index=False)
                paths[f"{kind}_parquet"] = str(path)
        outputs[segment] = paths
        entries[segment] = segment_entry(res, paths, bars, port, calendar)
    if entries:
        outputs["series_json"] = str(write_sidecar(out_dir, entries))
    return outputs, portfolios


def _json_value(value: Any) -> Any:
    """numpy numbers as floats; anything else not JSON-able (a date in a data setting) as text."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class _Evaluation:
    """One evaluation's inputs, loaded once: the checkpoint, its settings and greedy policy, the
    evaluated data and where the outputs go."""

    ckpt: Path
    settings: dict
    run_state: dict
    data_file: str | None
    overrides: list[str] | None
    data_cfg: dict
    segments: list[str]
    device: torch.device
    mode: str
    params: Any
    routing: dict[str, float]
    policy: Callable[[torch.Tensor], torch.Tensor]
    out_dir: Path
    """Where the evaluation goes once written whole (:func:`~rl_zerosync.evaluation.eval_dir.written_whole`)."""
    out_line: str | None = None
    """The line that names the default ``evaluation_<stem>/`` of ``--data`` (None otherwise)."""
    markets: dict = field(default_factory=dict)
    """Segment -> the market walked (built once: the test segment is read once, for the report)."""
    modules: list = field(default_factory=list)
    """The Q modules behind ``policy`` (the checkpoint's, then the ensemble's others)."""

    def walk(self, market, **kwargs):
        """The greedy policy over ``market`` (and, unless ``baselines=False``, the rules)."""
        from rl_zerosync.evaluation.backtest import evaluate_policy

        return evaluate_policy(self.policy, market, self.params, device=self.device,
                               route_exposure=(self.mode == "routed"), routing=self.routing,
                               graph_key="agent", **kwargs)


def evaluate_checkpoint(checkpoint: str | Path, data: str | None = None,
                        out_dir: str | Path | None = None, which: str = "best",
                        device: str | None = None, overrides: list[str] | None = None,
                        ensemble: Sequence[str | Path] = (), quiet: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint (a run directory: its best-validation checkpoint, or the last with
    ``which="last"``); returns the JSON report (also written to ``out_dir`` with the per-bar series
    and the figure; see the module doc). ``ensemble``: more run or checkpoint directories (same
    spaces) whose Q values are averaged with this one's (:func:`ensemble_policy`; a population's
    ``ensemble_top_k``).

    The rules' variants are chosen on the validation segment and frozen for the test segment
    (with ``data``: chosen on that file, in sample, and marked so). ``overrides``: ``--set
    data.KEY=VALUE`` items for the evaluated data (any other section: ``SettingsError``).

    Every step prints a progress line when it ends (:class:`~rl_zerosync.rundir.progress.Steps`:
    ``evaluate n/N | elapsed | <step> <its time>``, live on a terminal); ``quiet``: none (a
    population prints one line per member instead)."""
    from rl_zerosync.evaluation.threads import one_cpu_thread
    from rl_zerosync.rundir.progress import Steps

    segments = ["all"] if data is not None else ["validation", "test"]
    steps = Steps("evaluate", total=len(evaluation_steps(segments)), quiet=quiet)
    with steps.step("load the checkpoint"):
        ev = _load(checkpoint, data, out_dir, which, device, overrides, ensemble)
    with one_cpu_thread(ev.device):  # the walks step tiny tensors: see evaluation/threads.py
        return _evaluate_loaded(ev, data, steps)


@dataclass
class Walked:
    """An evaluation's walks made elsewhere, handed to :func:`evaluate_walked` (a population's one pass
    over all its members: :mod:`rl_zerosync.evaluation.population_pass`)."""

    results: dict
    """Segment -> the member's :class:`~rl_zerosync.evaluation.backtest.EvalResult` (agent, rules, oracle)."""
    markets: dict
    """Segment -> the market walked."""
    lean: str | None = None
    """None: the whole evaluation. A reason: metrics.json, the evidence and its returns only (no per-bar
    files, training-data walk, cost sensitivity or report.png), the reason in the report's ``lean``."""


def evaluate_walked(ev: "_Evaluation", walked: Walked) -> dict[str, Any]:
    """The evaluation of ``ev`` from walks already made (``walked``), quietly; returns the report."""
    from rl_zerosync.evaluation.threads import one_cpu_thread
    from rl_zerosync.rundir.progress import Steps

    ev.markets.update(walked.markets)
    with one_cpu_thread(ev.device):
        return _evaluate_loaded(ev, None, Steps("evaluate", total=1, quiet=True), walked)


def _evaluate_loaded(ev: "_Evaluation", data: str | None, steps, walked: Walked | None = None) -> dict[str, Any]:
    """:func:`evaluate_checkpoint` once the checkpoint is loaded: every step after the first (``walked``:
    the segments walked already, :func:`evaluate_walked`)."""
    from rl_zerosync.evaluation.evidence_report import add_evidence
    from rl_zerosync.evaluation.eval_dir import record_in_run, written_whole
    from rl_zerosync.evaluation.sensitivity import execution_line
    from rl_zerosync.evaluation.verdict import verdict

    report = _report_head(ev)
    record_in_run(ev.out_dir, ev.ckpt.parent)  # inside the run directory: in its inventory, before writing
    marker = {"checkpoint": str(ev.ckpt.resolve()), "data": str(Path(data).resolve()) if data else None}
    # Written whole into <out>.tmp, then swapped in: no earlier evaluation's file stays beside these,
    # and a failure on the way leaves the previous evaluation as it was.
    with written_whole(ev.out_dir, marker) as tmp:
        if walked is None:
            results = _walk_segments(ev, report["segments"], steps)
        else:
            results = walked.results
            for segment, res in results.items():
                report["segments"][segment] = segment_report(res, walked.markets[segment])
        lean = walked.lean if walked is not None else None
        outputs, portfolios, train = _files_and_walks(ev, results, report, tmp, steps, lean)
        report["outputs"] = {"dir": str(tmp), "metrics_json": str(tmp / "metrics.json"), **outputs}
        report["summary"] = _summary(ev, results, report, train)
        with steps.step("evidence statistics"):
            add_evidence(report, results, ev.segments, ev.ckpt.parent,
                         ev.settings["run"].get("eval_metric", "sharpe"), tmp)
        png = _plot(results, portfolios, report, tmp, steps, lean)
        report["outputs"] = _moved(report["outputs"], tmp, ev.out_dir)  # the paths they have once swapped in
        report["verdict_line"] = report["summary"]["verdict"] = verdict(
            report.get("evidence"), rule=report["summary"]["rule_chosen_on_validation"], segment=ev.segments[-1])
        report["summary_line"] = (_summary_line(ev, results[ev.segments[-1]], report, png and ev.out_dir / png.name)
                                  + (execution_line(report["execution"]) if "execution" in report else ""))
        if ev.out_line:
            report["output_line"] = ev.out_line
        with steps.step("write metrics.json"):
            _write_report(report, tmp)
    return report


def _files_and_walks(ev: "_Evaluation", results: dict, report: dict, tmp: Path, steps,
                     lean: str | None) -> tuple[dict, dict, Any]:
    """The per-bar files, the portfolios' metrics, the training-data walk with its overlap check, the
    execution report; ``lean`` (a reason): the portfolios' metrics and the overlap check only, the
    reason in ``report["lean"]``. Returns (outputs, segment -> portfolio table, training result)."""
    from rl_zerosync.evaluation.backtest import portfolio_table
    from rl_zerosync.evaluation.sensitivity import execution_report

    train, train_market, outputs = None, None, {}
    if lean is None:
        with steps.step("write the per-bar files"):
            outputs, portfolios = write_series(results, tmp)
    else:
        report["lean"] = lean
        portfolios = {segment: portfolio_table(res) for segment, res in results.items()}
    _score_portfolios(results, portfolios, report["segments"])
    if ev.data_file is None and lean is None:
        with steps.step("walk the training data"):
            train, train_market = _walk_training_data(ev)
            report["segments"]["train"] = train.summary()
    report["overlap"], report["warnings"] = _check_overlap(ev, results, train_market)
    if lean is None:
        with steps.step(f"cost sensitivity on {ev.segments[-1]}"):
            report["execution"] = execution_report(ev, results)  # settings, spreads, cost sensitivity
    return outputs, portfolios, train


def _plot(results: dict, portfolios: dict, report: dict, tmp: Path, steps, lean: str | None) -> Path | None:
    """``report.png`` (not in a ``lean`` evaluation: None)."""
    from rl_zerosync.evaluation.report_plot import plot_report

    if lean is not None:
        return None
    with steps.step("draw report.png"):
        plot_report(results, portfolios, tmp / "report.png", execution=report["execution"])
    report["outputs"]["report_png"] = str(tmp / "report.png")
    return tmp / "report.png"


def evaluation_steps(segments: Sequence[str]) -> list[str]:
    """The steps of :func:`evaluate_checkpoint` over ``segments`` (``["validation", "test"]``, or
    ``["all"]`` for ``--data``), in order: what its progress lines count."""
    walks = [f"{what} on {segment}" for segment in segments for what in ("walk the agent", "rules", "oracle")]
    train = ["walk the training data"] if list(segments) != ["all"] else []
    return ["load the checkpoint", *walks, "write the per-bar files", *train, f"cost sensitivity on {segments[-1]}",
            "evidence statistics", "draw report.png", "write metrics.json"]


def _moved(outputs: dict, tmp: Path, out: Path) -> dict:
    """``outputs`` (name -> path, or segment -> name -> path) with the paths under ``tmp`` as under ``out``."""
    def move(value):
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        path = Path(value)
        return str(out / path.relative_to(tmp)) if path == tmp or tmp in path.parents else value

    return move(outputs)


def _load(checkpoint: str | Path, data: str | None, out_dir: str | Path | None, which: str,
          device: str | None, overrides: list[str] | None, ensemble: Sequence[str | Path] = ()) -> _Evaluation:
    """Check the overrides and the checkpoint, read its settings, load its module (on ``device``)
    and make the output directory; every bad input fails here, before any walk."""
    from rl_zerosync.rundir.checkpoints import SETTINGS_FILE, load_module, read_run_state, verified_checkpoint
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.envs.params import with_recorded_lag
    from rl_zerosync.data.data_settings import check_data_keys
    from rl_zerosync.data.identity import check_unchanged, data_paths, read_record
    from rl_zerosync.kernels.route import routing_thresholds

    from rl_zerosync.evaluation.eval_dir import check_out_dir, check_same_data, default_out_dir
    from rl_zerosync.rundir.lock import check_writable_dir

    data_overrides({}, overrides)  # a bad key fails before anything is loaded
    if out_dir:
        check_writable_dir(out_dir, "evaluate --out")  # a file or a read-only folder, before any load
    ckpt = verified_checkpoint(checkpoint, which)  # CheckpointError naming the first damaged file
    if out_dir:
        out, out_line = Path(out_dir), None
        if out.name in ("", ".", ".."):
            out = out.resolve()
        check_out_dir(out, ckpt.parent)  # not the run directory, a checkpoint or a folder of other files
    else:
        out, out_line = default_out_dir(ckpt.parent, data)  # evaluation/ or evaluation_<stem>/
        check_out_dir(out, ckpt.parent, "evaluate: output directory")
        if data:
            check_same_data(out, data)  # not another file's evaluation of the same stem
    settings = yaml.safe_load((ckpt / SETTINGS_FILE).read_text())
    data_cfg, segments = _data_cfg(settings, data, overrides)
    check_data_keys(data_cfg)  # an unknown data key (e.g. a mistyped --set) before the module loads
    if data is None:  # the run's own segments: only of the files it recorded (DataChangedError)
        check_unchanged(read_record(ckpt), OWN_DATA_CHANGED, paths=data_paths(data_cfg))
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    module = load_module(ckpt).to(dev)
    others = [load_module(verified_checkpoint(p, which)).to(dev) for p in ensemble]
    return _Evaluation(
        ckpt=ckpt, settings=settings, run_state=read_run_state(ckpt), data_file=data, overrides=overrides,
        data_cfg=data_cfg, segments=segments, device=dev, mode=settings["model"]["action_mode"],
        params=EnvParams.from_dict(with_recorded_lag(settings.get("env"))),
        routing=routing_thresholds(settings.get("runner")),
        policy=ensemble_policy([module, *others]) if others else greedy_policy(module), out_dir=out,
        out_line=out_line, modules=[module, *others])


def _report_head(ev: _Evaluation) -> dict[str, Any]:
    """The report's first keys: which checkpoint, how it acts, the data evaluated (segments filled
    by the walks)."""
    return {"checkpoint": str(ev.ckpt), "checkpoint_iteration": ev.run_state.get("iteration"),
            "selected_by": ev.run_state.get("best"), "action_mode": ev.mode, "segments": {},
            "rule_choice_source": "validation" if ev.data_file is None else "in_sample",
            "data": ev.data_cfg, "overrides": list(ev.overrides or [])}


def _walk_segments(ev: _Evaluation, reports: dict, steps) -> dict:
    """Walk every evaluated segment in order (the rules' variants chosen on the first, frozen for
    the next), each its agent, rules and oracle a step of ``steps``; returns segment -> result and
    fills ``reports`` (segment -> summary)."""
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.backtest import add_rule_baselines
    from rl_zerosync.evaluation.oracle import oracle_baseline

    results, choice, oracle = {}, None, None
    for segment in ev.segments:
        with steps.step(f"walk the agent on {segment}"):
            market = ev.markets[segment] = make_market(ev.data_cfg, segment)
            res = ev.walk(market, baselines=False)
        with steps.step(f"rules on {segment}"):
            add_rule_baselines(res, market, ev.params, device=ev.device, routing=ev.routing, rule_choice=choice)
        choice = res.rule_choice  # chosen on validation, frozen for test
        with steps.step(f"oracle on {segment}"):
            res.oracle = oracle_baseline(ev.data_cfg, market, ev.params, ev.routing, device=ev.device,
                                         variant=oracle)
        oracle = res.oracle.get("variant")  # likewise (absent on file data, with the reason)
        results[segment] = res
        reports[segment] = segment_report(res, market)
    return results


def segment_report(res, market) -> dict[str, Any]:
    """A segment's entry of ``metrics.json``'s ``segments``: the result's summary, the bars per year and
    how the files were read (``market``: the segment's data)."""
    out = res.summary()
    out["periods_per_year"] = float(market.periods_per_year)
    info = getattr(market, "source_info", None)
    if info:
        out["data_info"] = dict(info)
    return out


def _score_portfolios(results: dict, portfolios: dict, reports: dict) -> None:
    """Each segment's equal-weight portfolio metrics into its report."""
    from rl_zerosync.evaluation.backtest import portfolio_metrics

    for segment, res in results.items():
        reports[segment]["portfolio"] = portfolio_metrics(portfolios[segment], res.periods_per_year)


TRAIN_SPLIT_BARS = 1024
"""The training-data walk (a diagnostic: the overfitting gap) steps in time splits of this many bars,
all in parallel, each starting flat ``SPLIT_WARMUP`` bars early, as the validation passes do; the
validation and test segments are walked whole. (Whole, the training walk was the longest sequential
loop of an evaluation: ~20,000 steps for ``local.yaml``.)"""


def _walk_training_data(ev: _Evaluation) -> tuple[Any, Any]:
    """Without ``--data``: the greedy policy on the data it trained on (the overfitting gap, no
    rules; in time splits, :data:`TRAIN_SPLIT_BARS`), as (result, training market); with
    ``--data``: (None, None)."""
    from rl_zerosync.evaluation.validation import SPLIT_WARMUP

    if ev.data_file is not None:
        return None, None
    train_market = _training_market({**ev.settings, "data": ev.data_cfg})
    result = ev.walk(train_market, baselines=False, split_bars=TRAIN_SPLIT_BARS, split_warmup=SPLIT_WARMUP)
    return result, train_market


def _check_overlap(ev: _Evaluation, results: dict, train_market) -> tuple[dict[str, Any], list[str]]:
    """The training-period overlap check (:mod:`rl_zerosync.evaluation.overlap`: by asset and time):
    (``overlap`` of the report, its warnings, each also written to stderr)."""
    from rl_zerosync.rundir.checkpoints import warn
    from rl_zerosync.rundir.os_errors import os_error_text

    from rl_zerosync.data.identity import data_paths, file_identity, read_record
    from rl_zerosync.evaluation.overlap import trained_assets_from_market, trained_assets_from_record, training_overlap

    warnings: list[str] = []
    try:
        record = read_record(ev.ckpt)  # recorded at training: never re-derived from a file now
        files = [file_identity(p) for p in data_paths(ev.data_cfg)]  # the evaluated data's files
        if record is not None and record.get("training_period"):
            trained, why, source = trained_assets_from_record(record), None, "recorded by the run"
        else:
            same = ev.data_file is None and not ev.overrides  # the train segment walked is the run's own
            market = _train_segment_market(ev.settings, train_market if same else None)
            why = ("synthetic data" if market is None else "its files have no timestamp column"
                   if market.timestamps is None else None)
            trained = None if why else trained_assets_from_market(
                market, {f["sha256"] for f in _files_now(data_paths(ev.settings.get("data")))})
            source = "rebuilt from the data settings"
        overlap, warning = training_overlap(list(results.values()), trained, files, why_unchecked=why)
        if overlap["checked"]:
            overlap["training_period_source"] = source
    except (OSError, ValueError) as err:  # the run's training files moved or changed
        text = os_error_text(err) if isinstance(err, OSError) else str(err)
        overlap = {"checked": False, "reason": f"the run's training data could not be rebuilt: {text}"}
        warning = f"could not check the overlap with the run's training period: {text}"
    if warning is not None:
        warnings.append(warning)
    for w in warnings:
        warn(w)
    return overlap, warnings


def _files_now(paths: list[str]) -> list[dict[str, Any]]:
    """The identities of those of ``paths`` that are files now (a run without a record)."""
    from rl_zerosync.data.identity import file_identity

    return [file_identity(p) for p in paths if Path(p).is_file()]


def _summary(ev: _Evaluation, results: dict, report: dict, train) -> dict[str, Any]:
    """The report's ``summary``: the last segment's policy beside flat, buy-and-hold and the rule
    chosen on validation (the rule variant with the highest Sharpe on the segment that chose the
    variants, the first: ``best_rule`` / ``rule_chosen_on_validation``, never picked on the reported
    segment). ``sharpe``, ``total_return``, ``max_drawdown``, ``turnover_per_bar`` and the rules'
    Sharpes are means over the assets of per-asset values; ``portfolio_*`` are the equal-weight
    portfolio's (one series, the mean of the assets' net returns each bar)."""
    from rl_zerosync.data.data_settings import regenerate_every
    from rl_zerosync.evaluation.backtest import best_rule
    from rl_zerosync.evaluation.oracle import oracle_summary

    last = results[ev.segments[-1]]
    m = last.metrics["mean"]
    b = last.baselines
    chooser = results[ev.segments[0]]
    best = best_rule(chooser.baselines)
    port = report["segments"][last.segment]["portfolio"]
    summary = {
        "segment": last.segment,
        "assets": len(last.assets),
        "sharpe": m["sharpe"],
        "total_return": m["total_return"],
        "total_return_pct": 100.0 * m["total_return"],
        "buy_and_hold_total_return": b["buy_and_hold"]["mean"]["total_return"],
        "portfolio_sharpe": port["agent"]["sharpe"],
        "portfolio_total_return": port["agent"]["total_return"],
        "max_drawdown": m["max_drawdown"],
        "turnover_per_bar": m["turnover_per_bar"],
        "flat_sharpe": 0.0,
        "buy_and_hold_sharpe": b["buy_and_hold"]["mean"]["sharpe"],
        "rules": {r: b[r]["mean"]["sharpe"] for r in b},
        "rule_variants": {r: b[r]["variant"] for r in b if "variant" in b[r]},
        "rule_chosen_on": chooser.segment,
        "rule_chosen_on_validation": b[best].get("variant", best),
        "best_rule": b[best].get("variant", best),
        "best_rule_sharpe": b[best]["mean"]["sharpe"],
        "best_rule_validation_sharpe": chooser.baselines[best]["mean"]["sharpe"],
        "agent_minus_best_rule": m["sharpe"] - b[best]["mean"]["sharpe"],
        "checkpoint_iteration": ev.run_state.get("iteration"),
        "beats_flat_and_buy_and_hold": bool(m["sharpe"] > 0.0 and m["sharpe"] > b["buy_and_hold"]["mean"]["sharpe"]),
        "periods_per_year": last.periods_per_year,
        "warnings": len(report["warnings"]),
    }
    if "buy_and_hold" in port:
        summary["portfolio_buy_and_hold_sharpe"] = port["buy_and_hold"]["sharpe"]
        summary["portfolio_buy_and_hold_total_return"] = port["buy_and_hold"]["total_return"]
    summary.update(oracle_summary(m["sharpe"], last.oracle))  # the bound of synthetic data: efficiency
    if train is not None:
        train_sharpe = train.metrics["mean"]["sharpe"]
        summary["train_sharpe"] = train_sharpe
        if not regenerate_every(ev.data_cfg):  # fresh series: the first one is another out-of-sample draw, no gap
            summary["train_minus_test_sharpe"] = train_sharpe - m["sharpe"]
    if "validation" in results:
        summary["validation_sharpe"] = results["validation"].metrics["mean"]["sharpe"]
    return summary


def _summary_line(ev: _Evaluation, last, report: dict, png: Path | None) -> str:
    """The one printed line (module doc), from the report's ``summary`` of segment ``last``: with
    several assets the means over the assets first, then the equal-weight portfolio, each labelled;
    the rule is the one chosen on validation (``--data``: on the file itself), its Sharpe on the
    reported segment beside it."""
    from rl_zerosync.evaluation.oracle import oracle_text

    s = report["summary"]
    port = report["segments"][last.segment]["portfolio"]
    it = ev.run_state.get("iteration")
    which_txt = f"{ev.ckpt.name} (iteration {it})" if it is not None else ev.ckpt.name
    n_assets = len(last.assets)
    chosen_on = "validation" if s["rule_chosen_on"] == "validation" else f"{s['rule_chosen_on']} (in sample)"
    rules = (f"flat +0.00, buy&hold {s['rules']['buy_and_hold']:+.2f}, rule chosen on {chosen_on}: "
             f"{s['rule_chosen_on_validation']} ({last.segment} {s['best_rule_sharpe']:+.2f})")
    agent, bh = f"{100 * s['total_return']:+.2f}%", f"{100 * s['buy_and_hold_total_return']:+.2f}%"
    if n_assets > 1:
        head = (f"{last.segment}, mean of {n_assets} assets: sharpe {s['sharpe']:+.2f} ({rules}), equity return "
                f"{agent} (buy&hold {bh}), max drawdown {100 * s['max_drawdown']:.2f}% | equal-weight portfolio: "
                f"sharpe {port['agent']['sharpe']:+.2f}, equity return {100 * port['agent']['total_return']:+.2f}%")
        if "buy_and_hold" in port:
            head += (f" (buy&hold sharpe {port['buy_and_hold']['sharpe']:+.2f}, equity return "
                     f"{100 * port['buy_and_hold']['total_return']:+.2f}%)")
    else:
        head = (f"{last.segment}: sharpe {s['sharpe']:+.2f} ({rules}) | equity return {agent} (buy&hold {bh}) | "
                f"max drawdown {100 * s['max_drawdown']:.2f}%")
    warnings = report["warnings"]
    return (
        f"{head} | {oracle_text(s)} | {which_txt}" + (f" | report {png}" if png is not None else "")
        + (f" | {report['evidence']['short']}" if "short" in report.get("evidence", {}) else "")
        + (f" | {len(warnings)} warning(s): see stderr / metrics.json" if warnings else "")
    )


def _write_report(report: dict, out_dir: Path) -> None:
    """``metrics.json``: the whole report."""
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2, default=_json_value))
