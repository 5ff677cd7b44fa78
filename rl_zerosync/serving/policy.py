"""``Policy``: raw recent bars + the current position -> (exposure, order type, urgency), with the
training features, for paper or live trading.

    from rl_zerosync import Policy

    policy = Policy.from_checkpoint("runs/smoke")         # best-validation checkpoint (needs Ray)
    policy = Policy.from_export("policy.pt")              # or an exported TorchScript file (no Ray)
    action = policy.act(bars, position=0.5)               # bars: DataFrame, {column: array}, or closes
    exposure, order_type, urgency = action                # ints 0..4, OrderType, Urgency
    target = policy.target_position(action)               # exposure level, a fraction of equity

    # an ONNX export: build its inputs here, run them with onnxruntime
    obs, market = Policy(None, json.load(open("policy.onnx.json"))).observe(bars, position)

``bars`` are one asset's recent bars, oldest first, the last one the bar to act on: a pandas
DataFrame with the data loaders' columns (``close`` required; ``high``/``low``, ``bid``/``ask``,
``timestamp`` optional; names case-insensitive, or the run's ``data.columns`` mapping), a mapping of
those column names to arrays, or a 1-D array of closes. They go through the loaders' own cleaning
and spread estimation (:mod:`rl_zerosync.data.loaders`, the run's ``spread_source`` settings) and
:func:`~rl_zerosync.data.market.build_market` (the features), and the observation is built by the
env's :func:`~rl_zerosync.envs.core.observe` at the last bar, so it is the env's observation at that
bar whenever the bars reach back as far as the env's series did (features are causal; with fewer
bars the EWMA volatility and the trailing medians start later: give ``recommended_bars``).

Execution: the action is meant to be executed one bar later (``execution_lag`` 1, the default
of training): decided on the last bar's close, sent as a MARKET order for the next open or as a
LIMIT/PASSIVE order resting over the next bar (:mod:`rl_zerosync.envs.core`); ``execution`` holds
the run's setting (policies trained before it existed report ``execution_lag`` 0: same-bar fills).

``position`` is the current position as a fraction of equity (the env's ``pos``). ``step`` only
feeds the progress feature ``(step % episode_len) / episode_len``, the fraction of a training
episode elapsed: left out (live trading, no episode) it is the export's live step
(:func:`~rl_zerosync.serving.sidecar.live_step`, ``episode_len // 2``: the sidecar's ``live_step``
and ``live_value``), so this class and any implementation of the sidecar feed the same value; an
int (the bars traded in an episode) replays an env episode or an ``evaluate`` backtest, which
cycles it every ``episode_len`` bars.

Bad input raises ``ValueError`` naming it: too few bars, NaN or non-positive prices (column and
row), bid above ask, a return spike beyond ``data.max_abs_log_return``, a missing column, a
non-finite position.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np
import torch

from rl_zerosync.actions import OrderType, Urgency, encode


class Action(NamedTuple):
    """One decision: unpacks as ``exposure, order_type, urgency``."""

    exposure: int
    order_type: OrderType
    urgency: Urgency

    @property
    def index(self) -> int:
        """The factored action index ``exposure * 9 + order_type * 3 + urgency``."""
        return encode(self.exposure, self.order_type, self.urgency)


class Observation(NamedTuple):
    """The exported net's inputs for one bar: ``obs`` f32[window + 4], ``market`` f32[4]."""

    obs: np.ndarray
    market: np.ndarray


class Policy:
    """A greedy policy net (``(obs, market) -> i64[B, 4]``, see :mod:`rl_zerosync.serving.export`) with the
    metadata that builds its inputs from bars.

    ``columns``, ``spread_source`` and ``spread_bps`` override the run's data settings for live bars
    (e.g. ``columns={}`` to find columns by their usual names, ``spread_bps=5`` for a fixed spread).
    """

    def __init__(self, net, metadata: Mapping[str, Any], *, columns: Mapping[str, str] | None = None,
                 spread_source: str | None = None, spread_bps: float | None = None) -> None:
        from rl_zerosync.data.market import FeatureConfig
        from rl_zerosync.envs.params import EnvParams

        self.net = net
        self.metadata = dict(metadata)
        data = dict(self.metadata["data"])
        if columns is not None:
            data["columns"] = dict(columns)
        if spread_source is not None:
            data["spread_source"] = spread_source
        if spread_bps is not None:
            data["spread_bps"] = spread_bps
        self.data_settings = data
        self.features = FeatureConfig.from_dict(self.metadata["features"])
        self.params = EnvParams(window=int(self.metadata["window"]), episode_len=int(self.metadata["episode_len"]),
                                exposure_levels=tuple(self.metadata["exposure_levels"]))

    # ------------------------------------------------------------------------------ loading
    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path, which: str = "best", **overrides: Any) -> "Policy":
        """The greedy policy of a run or checkpoint directory (verified as ``evaluate`` does)."""
        from rl_zerosync.serving.export import load_checkpoint_policy

        net, meta = load_checkpoint_policy(checkpoint, which)
        return cls(net, meta, **overrides)

    @classmethod
    def from_export(cls, path: str | Path, **overrides: Any) -> "Policy":
        """A TorchScript file written by ``rl-zerosync export`` (its metadata is inside it)."""
        from rl_zerosync.serving.export import METADATA_FILE

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no exported policy file")
        extra = {METADATA_FILE: ""}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # torch >= 2.10 deprecates TorchScript
                net = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        except RuntimeError as err:
            raise ValueError(f"{path}: not a TorchScript file written by rl-zerosync export ({err})") from None
        if not extra[METADATA_FILE]:
            raise ValueError(f"{path}: no {METADATA_FILE} inside: not written by rl-zerosync export")
        return cls(net.eval(), json.loads(extra[METADATA_FILE]), **overrides)

    # ------------------------------------------------------------------------------ properties
    @property
    def action_mode(self) -> str:
        return self.metadata["action_mode"]

    @property
    def window(self) -> int:
        return self.params.window

    @property
    def min_bars(self) -> int:
        """Fewest bars :meth:`act` accepts (the env's first tradable bar plus one)."""
        return int(self.metadata["min_bars"])

    @property
    def recommended_bars(self) -> int:
        """Bars after which the features no longer depend on where the series starts (to ~1e-6)."""
        return int(self.metadata["recommended_bars"])

    @property
    def execution_lag(self) -> int:
        """Bars between the bar acted on and the execution the policy was trained for (1: the next
        bar; 0: the same close, for policies exported before the setting existed)."""
        return int(self.execution["execution_lag"])

    @property
    def execution(self) -> dict[str, Any]:
        """How the policy's actions are meant to execute (the export's ``execution`` metadata)."""
        return dict(self.metadata.get("execution") or {"execution_lag": 0, "maker_rebate_bps": 0.0,
                                                       "how": "exported before execution_lag: same-bar fills"})

    def target_position(self, action: Action) -> float:
        """The exposure level of ``action``: the target position as a fraction of equity."""
        return float(self.params.exposure_levels[int(action.exposure)])

    # ------------------------------------------------------------------------------ acting
    @property
    def live_step(self) -> int:
        """The step fed to the progress feature when :meth:`act` gets none (the sidecar's ``live_step``)."""
        from rl_zerosync.serving.sidecar import live_step_of

        return live_step_of(self.metadata)

    def act(self, bars: Any, position: float = 0.0, step: int | None = None) -> Action:
        """The greedy action at the last of ``bars`` (see the module doc)."""
        ob = self.observe(bars, position, step)
        with torch.no_grad():
            out = self.net(torch.from_numpy(ob.obs)[None], torch.from_numpy(ob.market)[None])
        _, e, o, u = (int(v) for v in out[0].tolist())
        return Action(e, OrderType(o), Urgency(u))

    def observe(self, bars: Any, position: float = 0.0, step: int | None = None) -> Observation:
        """The net's inputs at the last of ``bars``: the env's observation and routing inputs
        (``step`` None: :attr:`live_step`)."""
        from rl_zerosync.envs.core import make_tables, observe, route_inputs
        from rl_zerosync.data.market import build_market
        from rl_zerosync.evaluation.walk import WalkState

        pos = _position(position)
        j = (self.live_step if step is None else _step(step)) % self.params.episode_len
        close, spread = self._prices(bars)
        market = build_market([close], [spread], names=["bars"], features=self.features)
        # observe() reads only num_bars, win_offsets and params.episode_len of the tables; they are
        # compiled for a one-bar episode (make_tables checks that an episode fits in the bars) and
        # given the run's episode_len back for the progress feature.
        tables = replace(make_tables(market, replace(self.params, episode_len=1)), params=self.params)
        zero = torch.zeros(1, dtype=torch.int64)
        state = WalkState(env_id=zero, asset=zero, t=torch.tensor([len(close) - 1]), step=torch.tensor([j]),
                          pos=torch.tensor([pos], dtype=torch.float32), counter=zero)
        obs = observe(market, tables, state)[0].numpy()
        routing_inputs = torch.stack(route_inputs(market, state), dim=1)[0].numpy()
        return Observation(obs, routing_inputs)

    def _prices(self, bars: Any) -> tuple[np.ndarray, np.ndarray]:
        """(close, relative spread) of ``bars`` through the loaders' cleaning and spread estimation."""
        from rl_zerosync.data.loaders import clean_bars, resolve_columns
        from rl_zerosync.data.market import check_log_returns

        frame = _frame(bars)
        if len(frame) < self.min_bars:
            raise ValueError(
                f"bars: {len(frame)} bars, expected at least {self.min_bars} (max(features.warmup "
                f"{self.features.warmup}, env.window {self.window}) + 2); {self.recommended_bars} or more "
                "give the training features exactly")
        d = self.data_settings
        cols = resolve_columns("bars", frame, d.get("columns") or {})
        # the loaders' own functions: the very cleaning and spread maths the training data went through
        prices, (spread, _), _ = clean_bars("bars", frame, cols, self.features, d["spread_source"], d["spread_bps"],
                                            d["cs_window"], d["min_spread_bps"], d["timestamp_format"],
                                            d["dayfirst"], max_spread_bps=d.get("max_spread_bps"))
        close = prices["close"]
        check_log_returns(f"bars, column {cols['close']!r}", close, d.get("max_abs_log_return"),
                          labels=frame.index.to_numpy(), unit="row")
        return close, spread


def _frame(bars: Any):
    """``bars`` as a DataFrame with a 0-based row index (rows named in errors)."""
    import pandas as pd

    if isinstance(bars, pd.DataFrame):
        return bars.reset_index(drop=True)
    if isinstance(bars, Mapping):
        arrays = {}
        for name, values in bars.items():
            arr = np.asarray(values)
            if arr.ndim != 1:
                raise ValueError(f"bars[{name!r}]: expected a 1-D array, got shape {arr.shape}")
            arrays[name] = arr
        lengths = {k: len(v) for k, v in arrays.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"bars: expected columns of equal length, got {lengths}")
        return pd.DataFrame(arrays)
    if isinstance(bars, (np.ndarray, list, tuple, pd.Series)):
        arr = np.asarray(bars)
        if arr.ndim != 1:
            raise ValueError(f"bars: expected a 1-D array of closes, got shape {arr.shape}")
        return pd.DataFrame({"close": arr})
    raise ValueError("bars: expected a pandas DataFrame, a mapping of column name -> array or a 1-D array of "
                     f"closes, got {type(bars).__name__}")


def _position(position: Any) -> float:
    if isinstance(position, bool) or not isinstance(position, (int, float, np.number)) or not np.isfinite(position):
        raise ValueError(f"position: expected a finite number (the position as a fraction of equity), got {position!r}")
    return float(position)


def _step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step: expected None (live) or an int >= 0 (bars traded in the current episode), "
                         f"got {step!r}")
    return int(step)
