"""Fail fast, before Ray starts: the checks ``rl-zerosync train`` runs on a loaded config.

:func:`check` runs in the driver, after :func:`rl_zerosync.config.settings.load` and before
:func:`rl_zerosync.run.train.train` (which starts Ray), in this order:

0. **Run directory** (:func:`check_run_dir`): ``<run.dir>/<run.name>`` can be created and written.
1. **GPU requests** (:func:`check_gpus`): ``algo.num_gpus_per_learner`` > 0, ``algo.num_gpus_per_env_runner``
   > 0 with remote env runners, ``runner.device: cuda`` and ``data.device: cuda`` need CUDA devices
   that torch sees here; the GPUs of all requests are packed like Ray packs fractional GPUs (first
   fit, whole requests > 1 on their own) and must fit in ``torch.cuda.device_count()``. With
   ``RAY_ADDRESS`` set (a cluster: ``ray job submit`` sets it) this count is skipped: the
   cluster's resources decide there, and Ray waits for them.
2. **Data** (:func:`check_data`): the market is loaded and validated once (files: columns, prices,
   timestamps, ``data.max_abs_log_return`` spikes; synthetic: the generator and its keywords), then
   every segment the run uses is cut from it exactly as ``make_market`` cuts it, and the env tables
   are built on it (``make_tables``: ``env.window`` and ``env.episode_len`` must fit after the
   warm-up), and the segment walk must have at least 2 tradable bars: ``train`` (with
   ``data.regenerate_every``: the whole series of ``data.num_bars`` bars, the shape of every fresh
   generation), ``validation`` (validation passes) and, with ``run.evaluate``, ``test``.
3. **Validation power** (:func:`check_power`): the standard error of an annualized Sharpe on the
   validation and test segments (tradable bars pooled over assets), printed, and a one-line warning
   when validation cannot tell Sharpe 1 from 0, saying what to change.
4. **Kernels**: which backend runs is printed once (:func:`rl_zerosync.kernels.log_backend`).

Every failure is a :class:`PreflightError` (a ``ValueError``) whose message is one line that starts
with the config file and names the key, the data file, asset, segment or row, and what is needed;
the CLI prints it as ``error: <message>`` and exits with 2.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Mapping

import numpy as np

SEGMENTS = ("train", "validation", "test")


class PreflightError(ValueError):
    """A config, data or machine problem found before Ray starts (one line, naming the file)."""


def check(settings, *, segments: bool = True, log: bool = True) -> dict[str, Any]:
    """Run the checks of the module doc on ``settings`` (a :class:`~rl_zerosync.config.settings.Settings`).

    ``segments=False`` loads and validates the data but cuts no segments (walk-forward folds
    check their own). Returns ``{"gpus": ..., "segments": ..., "kernels": backend_info}``; raises
    :class:`PreflightError`.
    """
    check_run_dir(settings)
    report: dict[str, Any] = {"gpus": check_gpus(settings)}
    report["segments"], periods_per_year = _check_data(settings, segments=segments)
    report["power"] = check_power(report["segments"], periods_per_year, log=log)
    from rl_zerosync.kernels.backend import backend_info, log_backend

    device = _kernel_device(settings)
    report["kernels"] = log_backend(device) if log else backend_info(device)
    return report


def check_run_dir(settings) -> None:
    """``run.dir`` / ``run.name``: the run directory can be created and written (not a file, not
    read-only), before Ray starts (:class:`PreflightError` naming the config file and the path)."""
    from rl_zerosync.rundir.lock import RunDirError, check_writable_dir

    try:
        check_writable_dir(settings.run_dir, "run.dir/run.name: run directory")
    except RunDirError as err:
        raise PreflightError(f"{settings.source}: {err}") from None


# --- GPUs -----------------------------------------------------------------------------------------

def _cuda_state() -> tuple[int, str]:
    """(CUDA devices torch sees here, why none when 0)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count(), ""
    from rl_zerosync.kernels.backend import _torch_cuda_reason

    return 0, _torch_cuda_reason() or "no CUDA device"


def _gpus_needed(requests: list[tuple[str, float, int]]) -> int:
    """GPUs that the actors' requests (name, GPUs each, count) need when packed first-fit like Ray:
    a request > 1 takes whole GPUs of its own, fractions share a GPU while they fit."""
    whole = 0
    fractions: list[float] = []
    for _, each, count in requests:
        if each >= 1:
            whole += math.ceil(each - 1e-9) * count
        else:
            fractions += [each] * count
    bins: list[float] = []
    for f in sorted(fractions, reverse=True):
        for i, used in enumerate(bins):
            if used + f <= 1.0 + 1e-9:
                bins[i] = used + f
                break
        else:
            bins.append(f)
    return whole + len(bins)


def check_gpus(settings) -> dict[str, Any]:
    """The GPU requests of ``settings`` against the CUDA devices here (see the module doc)."""
    src = settings.source
    a = settings.algo
    runner_device = settings.runner.typed.device
    data_device = settings.data.typed.device
    for key, value in (("algo.num_gpus_per_learner", a.num_gpus_per_learner),
                       ("algo.num_gpus_per_env_runner", a.num_gpus_per_env_runner)):
        if value > 1 and not float(value).is_integer():
            raise PreflightError(f"{src}: {key}: {value} GPUs: Ray takes fractions up to 1 or whole numbers")
    # (name, GPUs each, actors): remote actors are packed by Ray; the driver's own learner/runner
    # use cuda:0 outside Ray's accounting, so they need one visible device.
    actors: list[tuple[str, float, int]] = []
    local: list[str] = []
    if a.num_gpus_per_learner > 0:
        if a.num_learners > 0:
            actors.append(("algo.num_gpus_per_learner", a.num_gpus_per_learner, a.num_learners))
        else:
            local.append(f"algo.num_gpus_per_learner = {a.num_gpus_per_learner:g} for the learner in the driver")
    if a.num_gpus_per_env_runner > 0 and a.num_env_runners > 0:
        actors.append(("algo.num_gpus_per_env_runner", a.num_gpus_per_env_runner, a.num_env_runners))
    if runner_device == "cuda":
        local.append("runner.device = cuda")
    if data_device.startswith("cuda"):
        local.append(f"data.device = {data_device}")
    needed = max(_gpus_needed(actors), 1 if local else 0)
    report: dict[str, Any] = {"needed": needed, "checked": False}
    if needed == 0:
        return report
    if os.environ.get("RAY_ADDRESS"):
        report["skipped"] = "RAY_ADDRESS is set: the cluster's resources decide"
        return report
    have, why = _cuda_state()
    report.update(checked=True, available=have)
    if have >= needed:
        return report
    parts = [f"{key} = {each:g} x {n} {'learner' if 'learner' in key else 'env runner'}{'s' if n != 1 else ''}"
             for key, each, n in actors] + local
    first = actors[0][0] if actors else local[0].split(" = ")[0]
    machine = f"this machine has none ({why})" if have == 0 else f"this machine has {have} (torch.cuda.device_count())"
    raise PreflightError(
        f"{src}: {first}: the config asks for {needed} GPU{'s' if needed != 1 else ''} "
        f"({'; '.join(parts)}) but {machine}: set the GPU counts to 0 (or -1: one if CUDA is there) and "
        f"runner.device to auto or cpu, or run where the GPUs are (a Ray cluster: RAY_ADDRESS)"
    )


def _kernel_device(settings) -> str:
    """The device whose kernel backend the run's driver uses (env runner or learner on CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    runner = settings.runner.typed.device
    learner_gpu = settings.algo.num_gpus_per_learner != 0
    return "cuda" if runner in ("auto", "cuda") or learner_gpu else "cpu"


# --- data -----------------------------------------------------------------------------------------

def _asset_files(cfg: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    """Asset name -> data file, where one file holds one asset (file sources without asset_column)."""
    if cfg.get("source", "synthetic") == "synthetic" or cfg.get("asset_column") is not None:
        return {}
    paths = cfg.get("paths")
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or [])
    return {n: str(p) for n, p in zip(names, paths)} if len(paths) == len(names) else {}


def _where(cfg: Mapping[str, Any], files: Mapping[str, str], asset: str | None = None) -> str:
    if asset is not None and asset in files:
        return f"file {files[asset]} (asset {asset!r})"
    if cfg.get("source", "synthetic") == "synthetic":
        return f"synthetic series (data.seed {cfg.get('seed', 0)})" + (f", asset {asset!r}" if asset else "")
    if asset is not None:
        return f"asset {asset!r} of data.paths"
    return "data"


def check_data(settings, *, segments: bool = True) -> dict[str, Any]:
    """Load and validate the data of ``settings`` once, then every segment the run uses with its env
    tables (see the module doc); returns per segment the tradable bars per asset."""
    return _check_data(settings, segments=segments)[0]


def _check_data(settings, *, segments: bool = True) -> tuple[dict[str, Any], float]:
    """:func:`check_data` and the data's bars per year."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data.data_settings import DEFAULT_SPLIT, make_market, split_fractions
    from rl_zerosync.envs.core import make_tables
    from rl_zerosync.data.data_settings import heldout_layout, regenerate_every
    from rl_zerosync.data.market import check_max_abs_log_return, check_window

    src = settings.source
    cfg = dict(settings.data or {})
    try:
        params = EnvParams.from_dict(settings.env)
        fractions = split_fractions(cfg.get("split", DEFAULT_SPLIT))
        window = check_window(cfg["window"]) if cfg.get("window") is not None else None
        regen = regenerate_every(cfg)
        heldout = heldout_layout(cfg)
        check_max_abs_log_return(cfg.get("max_abs_log_return"))
    except ValueError as err:
        raise PreflightError(f"{src}: {err}") from err
    # The whole series once, on the host; make_market(cfg, seg) == full.split(seg, fractions, window).
    full_cfg = {k: v for k, v in cfg.items() if k != "window"}
    full_cfg["device"] = "cpu"
    try:
        full = make_market(full_cfg, "all")
    except ValueError as err:
        raise PreflightError(f"{src}: data: {err}") from err
    files = _asset_files(cfg, full.asset_names)
    out: dict[str, Any] = {}
    if full.source_info is not None:
        out["data"] = dict(full.source_info)
        print(data_line(full.source_info), flush=True)
        for w in full.source_info.get("warnings") or []:
            print(f"warning: data: {w}", file=sys.stderr, flush=True)
    spreads, execution = _spread_and_execution_lines(full, cfg, params)
    if "data" in out:  # file data: how it was read, its spreads and how orders execute on it
        out["data"].update(spreads=spreads, execution=execution)
    periods_per_year = float(full.periods_per_year)
    if not segments:
        return out, periods_per_year
    wanted = [s for s in SEGMENTS if s != "test" or settings.run.evaluate]
    for seg in wanted:
        label = f"data split {seg!r}" + (f" of data.window {list(window)}" if window else "")
        try:
            if seg == "train" and (regen or heldout):
                # Fresh generations / the held-out layout: the whole series (the window, if any, applies).
                label = ("training series of data.regenerate_every (whole series)" if regen
                         else "training series (whole series data.seed: held-out validation and test)")
                market = full if window is None else full.window(*window)
            elif heldout:
                label = f"held-out {seg} series (data.heldout_{seg}_series)"
                market = make_market(full_cfg, seg)
            else:
                market = full.split(seg, fractions, window=window)
        except ValueError as err:
            raise PreflightError(f"{src}: {label}: {_with_files(str(err), files)}") from err
        out[seg] = _check_segment(src, label, market, params, cfg, files)
        try:
            make_tables(market, params)  # the env's own check, whatever _check_segment missed
        except ValueError as err:
            raise PreflightError(f"{src}: {label}: {_with_files(str(err), files)}") from err
    return out, periods_per_year


def check_power(segments: Mapping[str, Any], periods_per_year: float, *, log: bool = True) -> dict[str, Any]:
    """Per evaluated segment of :func:`check_data`'s report (``validation``, ``test``) the standard error
    of an annualized Sharpe over its tradable bars pooled over assets
    (:func:`rl_zerosync.evidence.significance.sharpe_standard_error`) and whether it can tell Sharpe 1
    from 0; ``warning``: validation's one-line message when it cannot (also on stderr), else None.
    Printed as one line with ``log``."""
    from rl_zerosync.evidence.significance import sharpe_power_check, sharpe_standard_error

    p = periods_per_year
    out: dict[str, Any] = {"warning": None}
    for seg in ("validation", "test"):
        if seg not in segments:
            continue
        bars = list(segments[seg].values())
        check = sharpe_power_check(bars, p)
        out[seg] = {"bars": check.bars, "assets": len(bars), "standard_error": sharpe_standard_error(bars, p),
                    "can_tell_sharpe_1_from_0": check.ok, "bars_needed": check.bars_needed}
    if "validation" in out and not out["validation"]["can_tell_sharpe_1_from_0"]:
        out["warning"] = sharpe_power_check(list(segments["validation"].values()), p).message
    if log and len(out) > 1:
        parts = [f"{seg} {v['bars']} bars over {v['assets']} asset(s): SE {v['standard_error']:.2f}"
                 for seg, v in out.items() if seg != "warning"]
        print(f"power: standard error of an annualized Sharpe: {'; '.join(parts)}", flush=True)
        if out["warning"]:
            print(f"warning: {out['warning']}", file=sys.stderr, flush=True)
    return out


def data_line(info: Mapping[str, Any]) -> str:
    """One line on how file data was read: bars per year and its source, spread source(s) and the
    median spread in bps (over assets: median, and the range when there are several)."""
    bps = list(info["median_spread_bps"].values())
    sources = sorted(set(info["spread_source"].values()))
    spread = f"median {float(np.median(bps)):.2f} bps"
    if len(bps) > 1:
        spread += f" (assets {min(bps):.2f}-{max(bps):.2f})"
    stamps = f" | {info['timestamps']}" if info.get("timestamps") else ""
    return (f"data: periods_per_year {info['periods_per_year']:g} ({info['periods_per_year_source']}) | "
            f"spread: {'/'.join(sources)}, {spread}{stamps}")


def _spread_and_execution_lines(full, cfg, params) -> tuple[dict, dict]:
    """Print the spread line (per asset source, median and range next to the floor / fixed / cap
    settings; its warnings on stderr) and the execution line (lag, where MARKET fills, what passive
    orders do without high/low); returns both as data."""
    from rl_zerosync.data.spreads import spread_line, spread_report
    from rl_zerosync.evaluation.sensitivity import execution_settings

    spreads = spread_report(full, cfg)
    print(spread_line(spreads), flush=True)
    for w in spreads["warnings"]:
        print(f"warning: data: {w}", file=sys.stderr, flush=True)
    ex = execution_settings(params, full)
    print(f"execution: env.execution_lag {ex['execution_lag']} | MARKET orders: {ex['market_orders']} | "
          f"LIMIT/PASSIVE: {ex['limit_and_passive_orders']} | maker rebate {ex['maker_rebate_bps']:g} bps",
          flush=True)
    return spreads, ex


def _with_files(msg: str, files: Mapping[str, str]) -> str:
    for name, path in files.items():
        if f"asset {name!r}" in msg:
            return f"{msg} [asset {name!r} is file {path}]"
    return msg


def _check_segment(src: str, label: str, market, params, cfg, files) -> dict[str, int]:
    """Per asset: enough bars after the warm-up and the observation window for one episode of
    ``env.episode_len`` steps (training env and ``make_tables``) and for a walk (>= 2 bars)."""
    lengths = market.length.cpu().tolist()  # host read: preflight
    starts = market.valid_start.cpu().tolist()  # host read: preflight
    offsets = market.offsets or (0,) * market.num_assets
    tradable: dict[str, int] = {}
    for a, (n, vs) in enumerate(zip(lengths, starts)):
        name = market.asset_names[a]
        first = max(vs, params.window)
        have = n - first  # bars from the first tradable one to the last
        need = max(params.episode_len + 1, 2)
        more = "more data.num_bars" if cfg.get("source", "synthetic") == "synthetic" else "a longer file"
        if have < need:
            span = f"bars {offsets[a] + first}..{offsets[a] + n - 1} of the series" if have > 0 else "none"
            raise PreflightError(
                f"{src}: {label}: {_where(cfg, files, name)}: {max(have, 0)} tradable bars ({span}, first "
                f"tradable after data.features.warmup = {market.warmup} and env.window = {params.window}); "
                f"env.episode_len = {params.episode_len} needs at least {need}: use {more}, other "
                f"data.split fractions or a smaller env.episode_len"
            )
        tradable[name] = have
    return tradable
