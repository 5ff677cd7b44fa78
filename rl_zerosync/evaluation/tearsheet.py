"""``rl-zerosync report RUN [--html] [--out DIR]``: a quantstats tear sheet of an evaluation's
equal-weight portfolio against buy-and-hold.

``RUN`` is a run directory (its ``evaluation/``) or an evaluation directory itself (``--out`` of
``evaluate``, ``evaluation_<stem>/``). The returns are the ``net_return`` of
``portfolio_<segment>.parquet`` (``.csv`` without pyarrow) of the evaluation's last segment
(``test``; ``all`` for ``evaluate --data``), rows after the start row, indexed by their
``timestamp`` (synthetic for undated data: :mod:`rl_zerosync.evaluation.series_sidecar`); the
benchmark is ``benchmark_net_return`` (buy-and-hold, same bars, execution and costs), both
annualized with ``series.json``'s ``periods_per_year``. Nothing is resampled and no start date is
matched (``match_dates=False``): quantstats sees exactly the bars the evaluation scored.

Writes ``tearsheet.json`` into ``--out DIR`` (default: the evaluation directory): quantstats'
metrics table (``qs.reports.metrics(mode="full", as_pct=True)``: the rows quantstats shows in
percent are in percent, rounded to 2 decimals by quantstats), what was read, and ``sharpe_check``:
quantstats' unrounded Sharpe (``qs.stats.sharpe``) of the agent and of buy-and-hold beside
``metrics.json``'s portfolio Sharpe of the segment; they agree within :data:`SHARPE_TOLERANCE`
(the parquet file holds the walk's float64 values, the CSV the per-bar values at float32), and a
difference beyond it is a ``warning:`` line. ``--html`` also writes ``tearsheet.html``
(``qs.reports.html``). The table and one summary line are printed.

A path that is neither a run directory with ``evaluation/`` nor an evaluation directory, or an
evaluation directory without ``metrics.json``, ``series.json`` or the per-bar portfolio file, is a
:class:`ReportError` (one line, exit 2).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SHARPE_TOLERANCE = 1e-6
"""Largest difference allowed between quantstats' Sharpe and ``metrics.json``'s (absolute)."""
TEARSHEET_JSON = "tearsheet.json"
TEARSHEET_HTML = "tearsheet.html"
AGENT_TITLE = "agent portfolio"
BENCHMARK_TITLE = "buy & hold"


class ReportError(ValueError):
    """A path that holds no evaluation ``rl-zerosync report`` can read (one line, exit 2)."""


def evaluation_dir(path: str | Path) -> Path:
    """The evaluation directory of ``path``: ``path`` itself when it holds ``metrics.json``, else
    ``path/evaluation`` (:class:`ReportError` when neither is there)."""
    from rl_zerosync.rundir.run_dir import EVALUATION_DIR

    path = Path(path)
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise ReportError(f"report {path}: {what}; expected a run directory (with {EVALUATION_DIR}/) or an "
                          f"evaluation directory written by rl-zerosync evaluate")
    if (path / "metrics.json").is_file():
        return path
    if (path / EVALUATION_DIR).is_dir():
        return path / EVALUATION_DIR
    raise ReportError(f"report {path}: no evaluation directory: expected {path / EVALUATION_DIR}/ (rl-zerosync "
                      f"evaluate --checkpoint {path} writes it) or an evaluation directory with metrics.json")


def _read_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"report {path.parent}: no {path.name}; expected {what}") from None
    except OSError as err:
        from rl_zerosync.rundir.os_errors import reason

        raise ReportError(f"report {path}: unreadable ({reason(err)}); expected {what}") from None
    except ValueError as err:
        raise ReportError(f"report {path}: unreadable ({err}); expected {what}") from None
    if not isinstance(value, dict):
        raise ReportError(f"report {path}: expected a JSON object ({what})")
    return value


def load_series(path: str | Path) -> dict[str, Any]:
    """What the tear sheet is made of (module doc): the evaluation directory, segment, returns and
    benchmark (pandas Series on their timestamps), periods_per_year, calendar, file read and the
    Sharpes of ``metrics.json``."""
    import importlib.util

    import pandas as pd

    ev_dir = evaluation_dir(path)
    report = _read_json(ev_dir / "metrics.json", "the metrics.json of rl-zerosync evaluate")
    segment = (report.get("summary") or {}).get("segment")
    port_metrics = ((report.get("segments") or {}).get(segment) or {}).get("portfolio")
    if not segment or not port_metrics:
        raise ReportError(f"report {ev_dir / 'metrics.json'}: no summary segment with portfolio metrics; expected "
                          f"the metrics.json of rl-zerosync evaluate")
    sidecar = _read_json(ev_dir / "series.json", "the series.json of rl-zerosync evaluate (periods_per_year, "
                                                 "calendar); evaluate again to write it")
    entry = (sidecar.get("segments") or {}).get(segment)
    if not entry:
        raise ReportError(f"report {ev_dir / 'series.json'}: no segment {segment!r}; expected the series.json of "
                          f"the evaluation in metrics.json")
    parquet = ev_dir / f"portfolio_{segment}.parquet"
    csv = ev_dir / f"portfolio_{segment}.csv"
    if parquet.is_file() and importlib.util.find_spec("pyarrow") is not None:
        source, table = parquet, pd.read_parquet(parquet)
    elif csv.is_file():
        source, table = csv, pd.read_csv(csv)
    else:
        raise ReportError(f"report {ev_dir}: no {parquet.name} or {csv.name}; expected the per-bar files of "
                          f"rl-zerosync evaluate")
    missing = [c for c in ("timestamp", "net_return", "benchmark_net_return") if c not in table.columns]
    if missing:
        raise ReportError(f"report {source}: no column {', '.join(missing)}; expected a portfolio file of "
                          f"rl-zerosync evaluate with timestamps and the benchmark's net return (evaluate again)")
    stamps = pd.DatetimeIndex(pd.to_datetime(table["timestamp"]))
    if stamps.tz is not None:
        stamps = stamps.tz_convert("UTC").tz_localize(None)
    rows = slice(1, None)  # the first row is the start (flat, return 0): not a traded bar
    returns = pd.Series(table["net_return"].to_numpy(float)[rows], index=stamps[rows], name=AGENT_TITLE)
    benchmark = pd.Series(table["benchmark_net_return"].to_numpy(float)[rows], index=stamps[rows],
                          name=BENCHMARK_TITLE)
    if len(returns) < 2 or not (returns.notna().all() and benchmark.notna().all()):
        raise ReportError(f"report {source}: expected at least 2 bars with finite net returns and benchmark "
                          f"net returns after the start row, got {len(returns)}")
    return {"dir": ev_dir, "segment": segment, "source": source, "returns": returns, "benchmark": benchmark,
            "periods_per_year": float(sidecar.get("periods_per_year", entry.get("periods_per_year"))),
            "calendar": entry.get("calendar", sidecar.get("calendar")), "assets": entry.get("assets", []),
            "sharpe": {"agent": port_metrics["agent"]["sharpe"],
                       "buy_and_hold": (port_metrics.get("buy_and_hold") or {}).get("sharpe")},
            "mean_over_assets": {k: (report.get("summary") or {}).get(k) for k in ("sharpe", "buy_and_hold_sharpe")}}


def _quantstats():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import quantstats
    except ImportError as err:
        raise ImportError(f"report: needs the quantstats package ({err}); pip install quantstats, or pip "
                          f"install -e '.[report]'") from None
    import logging

    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # a missing font per chart
    return quantstats


def _json_cell(value: Any) -> Any:
    """A metrics-table cell as JSON: numbers as floats (NaN as null), anything else as text."""
    if isinstance(value, str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def _not_the_mean(s: dict[str, Any], n_assets: int) -> str:
    """With several assets: the line's Sharpes are the equal-weight portfolio's, said beside the mean of
    the assets' own Sharpes that ``metrics.json``'s summary and the result line head with."""
    mean = s.get("mean_over_assets") or {}
    if n_assets < 2 or mean.get("sharpe") is None:
        return ""
    bh = mean.get("buy_and_hold_sharpe")
    return (f" | these are the equal-weight portfolio's; the mean of the {n_assets} assets' own Sharpes (metrics.json "
            f"summary.sharpe) is {mean['sharpe']:+.2f}" + (f", buy & hold {bh:+.2f}" if bh is not None else ""))


def _periods(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def tear_sheet(path: str | Path, html: bool = False, out: str | Path | None = None) -> dict[str, Any]:
    """Write the tear sheet of ``path`` (module doc); returns ``tearsheet.json``'s content plus
    ``"table"`` (the metrics table as text) and ``"line"`` (the summary line)."""
    import warnings

    from rl_zerosync.rundir.lock import check_writable_dir

    if out is not None:
        check_writable_dir(out, "report --out")
    s = load_series(path)
    qs = _quantstats()
    out_dir = Path(out) if out is not None else s["dir"]
    ppy = _periods(s["periods_per_year"])
    returns, benchmark = s["returns"], s["benchmark"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantstats' pandas and matplotlib notices
        table = qs.reports.metrics(returns.copy(), benchmark.copy(), rf=0.0, display=False, mode="full",
                                   periods_per_year=ppy, match_dates=False, as_pct=True,
                                   strategy_title=AGENT_TITLE, benchmark_title=BENCHMARK_TITLE)
        theirs = {"agent": float(qs.stats.sharpe(returns, rf=0.0, periods=ppy)),
                  "buy_and_hold": float(qs.stats.sharpe(benchmark, rf=0.0, periods=ppy))}
    check: dict[str, Any] = {"tolerance": SHARPE_TOLERANCE}
    for key, ours in s["sharpe"].items():
        if ours is not None:
            check[key] = {"metrics_json": ours, "quantstats": theirs[key], "difference": theirs[key] - ours}
    check["within_tolerance"] = all(abs(v["difference"]) <= SHARPE_TOLERANCE
                                    for k, v in check.items() if isinstance(v, dict))
    n_assets = len(s["assets"])
    doc: dict[str, Any] = {
        "evaluation_dir": str(s["dir"]),
        "segment": s["segment"],
        "returns": (f"equal-weight portfolio of {n_assets} assets" if n_assets > 1 else "the agent on its one asset")
                   + f": net_return of {s['source'].name}, the rows after the start",
        "benchmark": f"buy-and-hold on the same bars, same execution and costs: benchmark_net_return of "
                     f"{s['source'].name}",
        "source_file": str(s["source"]),
        "bars": int(len(returns)),
        "start": str(returns.index[0]),
        "end": str(returns.index[-1]),
        "periods_per_year": s["periods_per_year"],
        "calendar": s["calendar"],
        "quantstats_version": getattr(qs, "__version__", "unknown"),
        "quantstats_call": f"qs.reports.metrics(returns, benchmark, rf=0.0, mode='full', periods_per_year={ppy}, "
                           f"match_dates=False, as_pct=True, display=False)",
        "sharpe_check": check,
        "metrics": {str(col): {str(k): _json_cell(v) for k, v in table[col].items()} for col in table.columns},
        "html": None,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    if html:
        page = out_dir / TEARSHEET_HTML
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qs.reports.html(returns.copy(), benchmark.copy(), rf=0.0, periods_per_year=ppy, match_dates=False,
                            output=str(page), title=f"rl_zerosync {s['segment']}: {doc['returns'].split(':')[0]} "
                                                    f"vs buy & hold", benchmark_title=BENCHMARK_TITLE,
                            strategy_title=AGENT_TITLE)
        doc["html"] = str(page)
    path_json = out_dir / TEARSHEET_JSON
    path_json.write_text(json.dumps(doc, indent=2) + "\n")
    agent = check.get("agent", {})
    line = (f"report {s['segment']}: {doc['returns'].split(':')[0]} vs buy & hold, {doc['bars']} bars, "
            f"periods_per_year {ppy:g} ({s['calendar']} calendar) | sharpe {theirs['agent']:+.4f} quantstats, "
            f"{agent.get('metrics_json', float('nan')):+.4f} metrics.json (difference "
            f"{abs(agent.get('difference', float('nan'))):.1e}, tolerance {SHARPE_TOLERANCE:g}) | buy & hold "
            f"{theirs['buy_and_hold']:+.4f}" + _not_the_mean(s, n_assets) + f" | {path_json}"
            + (f" | {doc['html']}" if doc["html"] else ""))
    return {**doc, "table": table.to_string(), "line": line, "tearsheet_json": str(path_json)}
