"""``rl-zerosync export``: a checkpoint's greedy policy as one TorchScript or ONNX file + JSON metadata.

    rl-zerosync export --checkpoint runs/smoke [--which best|last] --format torchscript [--out policy.pt]

The file holds the Q network, the greedy action choice of its action mode and, in routed mode, the
routing rule (the route kernel's torch twin :func:`rl_zerosync.kernels.reference.route` with the
run's thresholds), so it maps a batch of observations to actions with no Ray and no package code::

    net = torch.jit.load("policy.pt")             # or onnxruntime.InferenceSession("policy.onnx")
    out = net(obs, market)                        # obs f32[B, window + 4], market f32[B, 4]
    action, exposure, order_type, urgency = out.unbind(1)   # i64[B, 4]

* ``obs``: the env's observation (:func:`rl_zerosync.envs.core.observe`): ``window`` normalized returns
  ``ret_norm[t-window+1 .. t]``, position, ``obs_spread``, ``obs_vol``, episode progress.
* ``market``: ``(spread, median_spread, vol, median_vol)`` at the same bar
  (:func:`rl_zerosync.envs.core.route_inputs`); only routed mode reads it (order type and urgency).
* output columns :data:`OUTPUT_COLUMNS`: the factored action ``exposure * 9 + order_type * 3 +
  urgency`` and its three parts (:mod:`rl_zerosync.actions`).

Both formats are built in memory (TorchScript saved into a ``BytesIO``, ONNX as its model proto) and
written by Python's file I/O (:func:`write_file`) into ``<out>.tmp``, then renamed: a full disk is an
``OSError`` naming the path (the CLI's exit 4, the ``.tmp`` removed, an earlier export untouched),
never an abort inside torch's C++ writer.

The metadata (:func:`policy_metadata`: action mode, observation layout, window, episode length,
exposure levels, feature settings, spread settings of the data, routing thresholds) is written beside
the file as ``<out>.json`` and also inside it (TorchScript extra file ``metadata.json``; ONNX model
metadata ``rl_zerosync``). It describes every input as a formula of raw bars and the agent's state
(:mod:`rl_zerosync.serving.sidecar`: ``bars``, ``series``, ``inputs.obs.elements``,
``inputs.market.elements``, ``actions``), so the model can be served with no package code, and gives
``episode_progress`` its live value. :class:`rl_zerosync.serving.policy.Policy` turns raw bars into
``obs`` and ``market`` with the training features and runs either the checkpoint or an exported
TorchScript file.

ONNX export needs the ``onnx`` and ``onnxscript`` packages (``pip install onnx onnxscript``);
without them it raises ``ModuleNotFoundError`` naming the missing one.
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import inspect
import json
import logging
import math
import os
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from rl_zerosync.actions import OrderType, Urgency, decode_t
from rl_zerosync.kernels.reference import route
from rl_zerosync.rundir.os_errors import reason
from rl_zerosync.serving.sidecar import MARKET_COLUMNS, OUTPUT_COLUMNS, input_spec

FORMATS = ("torchscript", "onnx")
SUFFIX = {"torchscript": ".pt", "onnx": ".onnx"}
METADATA_FILE = "metadata.json"
"""Name of the metadata inside a TorchScript file (``torch.jit.load(..., _extra_files=...)``)."""
FORMAT_VERSION = 2
"""2: the inputs as formulas of raw bars (:func:`rl_zerosync.serving.sidecar.input_spec`) and the live
value of ``episode_progress``; 1: names and feature settings only."""
_SPREAD_KEYS = ("spread_source", "spread_bps", "cs_window", "min_spread_bps", "timestamp_format", "dayfirst",
                "max_spread_bps")


class GreedyPolicyNet(nn.Module):
    """``(obs f32[B, D], market f32[B, 4]) -> i64[B, 4]`` (see the module doc).

    Holds the module's online ``q_net`` (not the target network) and calls the module's own
    ``greedy_actions`` and, in routed mode, :func:`~rl_zerosync.kernels.reference.route`, so it is
    the in-process policy exactly; ``torch.jit.trace`` and the ONNX exporter record these ops.
    """

    def __init__(self, module, routing: dict[str, float]) -> None:
        super().__init__()
        self.q_net = module.q_net
        self.action_mode = str(module.action_mode)
        self.routing = {k: float(v) for k, v in routing.items()}
        # A bound method, not a sub-module: only the q_net's parameters belong to this module.
        self.__dict__["_greedy"] = module.greedy_actions

    def forward(self, obs: torch.Tensor, market: torch.Tensor) -> torch.Tensor:
        action = self._greedy(self.q_net(obs))
        if self.action_mode == "routed":
            routed = torch.empty_like(action)
            route(action, market[:, 0], market[:, 1], market[:, 2], market[:, 3], routed, **self.routing)
            action = routed
        e, o, u = decode_t(action)
        return torch.stack((action, e, o, u), dim=1)


def resolved_routing(settings: dict) -> dict[str, float]:
    """The run's routing thresholds with the env runner's defaults filled in (validated)."""
    from rl_zerosync.env_runner.runner_settings import RunnerSettings
    from rl_zerosync.kernels.route import ROUTING_THRESHOLDS, routing_thresholds

    runner = RunnerSettings(**routing_thresholds(settings.get("runner")))
    return {k: float(getattr(runner, k)) for k in ROUTING_THRESHOLDS}


def _data_metadata(data: dict) -> dict[str, Any]:
    """How bars become prices and spreads: the loader settings of the run (defaults filled in)."""
    from rl_zerosync.data.loaders import load_market
    from rl_zerosync.data.market import DEFAULT_MAX_ABS_LOG_RETURN, check_max_abs_log_return

    defaults = {k: p.default for k, p in inspect.signature(load_market).parameters.items() if k in _SPREAD_KEYS}
    source = data.get("source", "synthetic")
    files = source in ("csv", "parquet")
    out: dict[str, Any] = {"source": source}
    for key in _SPREAD_KEYS:
        out[key] = data.get(key, defaults[key]) if files else defaults[key]
    out["columns"] = dict(data.get("columns") or {}) if files else {}
    out["max_abs_log_return"] = check_max_abs_log_return(data.get("max_abs_log_return", DEFAULT_MAX_ABS_LOG_RETURN))
    if not files:
        out["note"] = (f"trained on {source} spreads: live bars need bid/ask or high/low columns, "
                       "or a spread_bps")
    return out


def execution_metadata(params) -> dict[str, Any]:
    """When the policy's actions are meant to execute: the run's ``env.execution_lag`` and how."""
    lag = params.execution_lag
    how = ("the action decided on a bar's close executes on the NEXT bar: MARKET at its open (its close "
           "without opens), LIMIT/PASSIVE resting at close * (1 + side * spread_frac * spread) until that "
           "bar trades through" if lag == 1 else
           "the action decided on a bar's close executes at that same close (same-bar fills, the model the "
           "policy was trained and selected under: live results will be worse by a bar's latency)")
    return {"execution_lag": lag, "maker_rebate_bps": params.maker_rebate_bps, "how": how}


def policy_metadata(settings: dict, checkpoint: Path | None = None, run_state: dict | None = None) -> dict[str, Any]:
    """Everything needed to build the exported net's inputs from bars, from a run's settings."""
    from rl_zerosync.data.market import FeatureConfig
    from rl_zerosync.envs.params import EnvParams, with_recorded_lag

    params = EnvParams.from_dict(with_recorded_lag(settings.get("env")))
    data = dict(settings.get("data") or {})
    features = FeatureConfig.from_dict(data.get("features"))
    k = params.window
    layout = [f"ret_norm[t-{k - 1 - i}]" if i < k - 1 else "ret_norm[t]" for i in range(k)]
    layout += ["position", "obs_spread", "obs_vol", "episode_progress"]
    min_bars = max(features.warmup, k) + 2
    # EWMA weight beyond 20 half-lives is 2**-20; the medians need median_window bars.
    recommended = max(min_bars, features.median_window + k, math.ceil(20 * features.vol_halflife))
    run_state = run_state or {}
    mode = settings["model"]["action_mode"]
    routing = resolved_routing(settings)
    data_meta = _data_metadata(data)
    spec = input_spec(params, features, data_meta, mode, routing, min_bars, recommended)
    return {
        "format_version": FORMAT_VERSION,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "checkpoint_iteration": run_state.get("iteration"),
        "action_mode": mode,
        "inputs": {
            "obs": {"dtype": "float32", "shape": ["batch", params.observation_dim], "columns": layout,
                    "elements": spec["obs"]},
            "market": {"dtype": "float32", "shape": ["batch", len(MARKET_COLUMNS)], "columns": list(MARKET_COLUMNS),
                       "used": mode == "routed", "elements": spec["market"]},
        },
        "bars": spec["bars"],
        "series": spec["series"],
        "output": {"name": "actions", "dtype": "int64", "shape": ["batch", len(OUTPUT_COLUMNS)],
                   "columns": list(OUTPUT_COLUMNS)},
        "actions": spec["actions"],
        "action_layout": "action = exposure * 9 + order_type * 3 + urgency",
        "order_types": [o.name for o in OrderType],
        "urgencies": [u.name for u in Urgency],
        "window": k,
        "episode_len": params.episode_len,
        "exposure_levels": list(params.exposure_levels),
        "execution": execution_metadata(params),
        "routing": routing,  # thresholds; applied in routed mode only
        "features": asdict(features),
        "data": data_meta,
        "min_bars": min_bars,
        "recommended_bars": recommended,
        "torch_version": torch.__version__,
    }


def load_checkpoint_policy(checkpoint: str | Path, which: str = "best") -> tuple[GreedyPolicyNet, dict[str, Any]]:
    """The greedy policy net (CPU, eval mode) and metadata of a run or checkpoint directory.

    The checkpoint is found and verified against its manifest as ``evaluate`` does
    (:func:`~rl_zerosync.rundir.checkpoints.verified_checkpoint`: ``CheckpointError`` naming a damaged file,
    ``FileNotFoundError`` when there is none)."""
    from rl_zerosync.rundir.checkpoints import SETTINGS_FILE, load_module, read_run_state, verified_checkpoint

    ckpt = verified_checkpoint(checkpoint, which)
    settings = yaml.safe_load((ckpt / SETTINGS_FILE).read_text())
    meta = policy_metadata(settings, ckpt, read_run_state(ckpt))
    net = GreedyPolicyNet(load_module(ckpt), meta["routing"]).eval()
    return net, meta


def example_inputs(meta: dict[str, Any], batch: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Plausible inputs for tracing (any values work: the traced graph has no data-dependent branch)."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(batch, meta["inputs"]["obs"]["shape"][1], generator=g)
    market = torch.rand(batch, len(MARKET_COLUMNS), generator=g) + 0.5
    return obs, market


def missing_onnx_packages() -> list[str]:
    """The packages ONNX export needs that are not importable here."""
    return [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]


def _torchscript_bytes(net: GreedyPolicyNet, meta: dict) -> bytes:
    """The traced policy as the bytes of a TorchScript file (saved into memory: the file itself is
    written by :func:`write_file`, so a full disk is an ``OSError``, never an abort in torch's writer)."""
    obs, market = example_inputs(meta)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch >= 2.10 deprecates TorchScript
        traced = torch.jit.trace(net, (obs, market), check_inputs=[example_inputs(meta, 1), example_inputs(meta, 7)])
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer, _extra_files={METADATA_FILE: json.dumps(meta)})
    return buffer.getvalue()


def require_onnx() -> None:
    """``ModuleNotFoundError`` naming the missing package(s) when ONNX export cannot run here."""
    missing = missing_onnx_packages()
    if missing:
        raise ModuleNotFoundError(
            f"ONNX export needs the package(s) {', '.join(missing)} (pip install {' '.join(missing)}); "
            "--format torchscript needs nothing extra", name=missing[0])


def _onnx_bytes(net: GreedyPolicyNet, meta: dict) -> bytes:
    """The policy as the bytes of an ONNX model with the metadata in its properties (exported into
    memory; the file is written by :func:`write_file`)."""
    require_onnx()
    import onnx

    batch = torch.export.Dim("batch")
    registry_log = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)  # "torchvision is not installed" notes: nothing here uses it
    # The torch.export-based exporter (torch's default since 2.9) keeps the ``market`` input that
    # flat/branching policies do not read, so every mode has the same signature. Its progress lines
    # and warnings about its own internals are muted.
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
            program = torch.onnx.export(net, example_inputs(meta), None, input_names=["obs", "market"],
                                        output_names=["actions"], dynamic_shapes=({0: batch}, {0: batch}),
                                        dynamo=True, external_data=False, verbose=False)
    finally:
        registry_log.setLevel(level)
    model = program.model_proto
    onnx.helper.set_model_props(model, {"rl_zerosync": json.dumps(meta)})
    return model.SerializeToString()


def write_file(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through Python's file I/O, flushed and synced: a full disk or a
    read-only file system is an ``OSError`` naming its errno, for the caller to clean up after."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def export_policy(checkpoint: str | Path, fmt: str = "torchscript", out: str | Path | None = None,
                  which: str = "best") -> dict[str, Any]:
    """Export the greedy policy of ``checkpoint`` (a run directory: its best-validation checkpoint,
    or the last with ``which="last"``) to ``out`` (default ``<run>/export/<checkpoint name>.pt`` or
    ``.onnx``) and its metadata to ``<out>.json``; returns the metadata with ``path`` and
    ``metadata_path`` added."""
    if fmt not in FORMATS:
        raise ValueError(f"export format: expected one of {FORMATS}, got {fmt!r}")
    if fmt == "onnx":
        require_onnx()  # before anything is loaded
    if out is not None and Path(out).is_dir():
        raise ValueError(f"export --out {out}: is a directory; expected a model file name, e.g. "
                         f"{Path(out) / ('policy' + SUFFIX[fmt])}")
    net, meta = load_checkpoint_policy(checkpoint, which)
    ckpt = Path(meta["checkpoint"])
    path = Path(out) if out is not None else ckpt.parent / "export" / (ckpt.name + SUFFIX[fmt])
    if path.suffix == ".json":
        raise ValueError(f"export --out {path}: expected a model file name, not .json (the metadata goes "
                         "beside it as <out>.json)")
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "format": fmt}
    meta_path = path.with_name(path.name + ".json")
    _write_both(net, meta, fmt, path, meta_path)
    return {**meta, "path": str(path), "metadata_path": str(meta_path)}


def _write_both(net, meta: dict, fmt: str, path: Path, meta_path: Path) -> None:
    """The model (built in memory, either format) and its sidecar written whole to ``<name>.tmp``
    files by :func:`write_file`, then renamed into place (the sidecar last): a failed write (a full
    disk) leaves any previous export untouched, the partial ``.tmp`` files removed, and an ``OSError``
    naming the path (the CLI's exit 4)."""
    model = (_onnx_bytes if fmt == "onnx" else _torchscript_bytes)(net, meta)  # nothing written yet
    tmp_model = path.with_name(path.name + ".tmp")
    tmp_meta = meta_path.with_name(meta_path.name + ".tmp")
    current = tmp_model
    try:
        write_file(tmp_model, model)
        current = tmp_meta
        write_file(tmp_meta, json.dumps(meta, indent=2).encode())
        current = path
        os.replace(tmp_model, path)
        current = meta_path
        os.replace(tmp_meta, meta_path)
    except OSError as err:
        for tmp in (tmp_model, tmp_meta):
            tmp.unlink(missing_ok=True)
        code = err.errno or errno.EIO
        why = reason(err).splitlines()[0]
        raise OSError(code, f"export: cannot write {current}: {why}") from None
