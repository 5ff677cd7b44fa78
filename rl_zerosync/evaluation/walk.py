"""``SegmentWalk``: every asset of one segment walked once, all envs stepped together on the device.

Env ``e`` of a walk with ``replicas`` copies and ``S`` time splits trades asset ``e % A``, split
``(e // A) % S`` of replica ``e // (A S)`` (e.g. one rule variant per replica). Each env starts flat at its asset's first tradable bar
``max(valid_start, window)`` and trades every bar up to the second-to-last one (the last return it
earns is into the last bar) with the training env's execution (:func:`rl_zerosync.envs.core.execute`:
fills, costs, pnl). Position carries over the whole segment; the progress feature of the
observation cycles every ``episode_len`` steps as in training episodes; there is no drawdown stop.
Envs whose asset has fewer bars than the longest stay at their last bar, and their extra records
are dropped on the host.

Long segments can be walked in time splits (``split_bars``): split ``k`` of an asset counts bars
``[k L, (k+1) L)`` of its walk and starts flat ``split_warmup`` bars before them (its progress
feature aligned with the whole walk), so the splits step in parallel and only the position at
each split's first counted bar can differ from one whole walk. Validation during training uses
splits; the end-of-run evaluation walks each segment whole.

Per step (no host read): observation -> ``act(obs, state)`` (factored actions, or exposures routed by
the routing kernel) -> execution -> the step's record (net, pnl, cost, trade, position, action,
order type) written into row ``j`` of a device buffer (``j`` a device counter). On CUDA the steps
run in chunks of ``chunk`` steps captured once in a CUDA graph and replayed (the policy's weights
must be updated in place to keep the graph valid); the records come to the host in one copy at
the end.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np
import torch

from rl_zerosync.envs.core import EnvTables, execute, make_tables, observe, route_inputs
from rl_zerosync.data.market import MarketData
from rl_zerosync.envs.params import EnvParams

RECORD_KEYS = ("net", "pnl", "cost", "trade", "position", "action", "order_type", "fill_price")
"""Per-bar records of a walk (``action`` = the factored action executed, ``fill_price`` = the price
the trade filled at: the bar's close with ``execution_lag: 0``, the next open / close or the limit price
with lag 1; see :func:`rl_zerosync.envs.core.execute`)."""


@dataclass
class WalkState:
    """The part of the env state a walk carries (what ``observe`` and ``execute`` read)."""

    env_id: torch.Tensor   # i64[E]
    asset: torch.Tensor    # i64[E]
    t: torch.Tensor        # i64[E] current bar
    step: torch.Tensor     # i64[E] steps into the current (cycled) episode
    pos: torch.Tensor      # f32[E]
    counter: torch.Tensor  # i64[1] RNG step of stochastic fills


ActFn = Callable[[Optional[torch.Tensor], WalkState], torch.Tensor]
"""(obs f32[E, D] or None, state) -> actions i64[E]: factored (0..44) or exposures (0..4) when
routed; obs is None in a walk built with ``observe=False``."""


class SegmentWalk:
    """Static buffers and the stepping loop of one walk (see the module docstring).

    Args:
        data: One segment (all assets), on the walk's device.
        params: Env parameters (``stop_drawdown`` is ignored).
        replicas: Envs per asset.
        routing: Routing thresholds (``wide``, ``high_vol``, ``low_vol``): ``act`` returns exposures
            that the routing kernel turns into factored actions. ``None``: ``act`` returns
            factored actions.
        route_mask: bool[E] (with ``routing``): envs whose exposure is routed; the others execute
            it as a MARKET order of NORMAL urgency.
        chunk: Steps per captured CUDA graph.
        graph: Capture on CUDA (default True); eager on the CPU either way.
        cost_scale: f32[E] (optional): each env's costs multiplied by it (cost sensitivity).
        force_market: bool[E] (optional): those envs execute every order as MARKET (same urgency).
        replica_ids: Every replica's envs take replica 0's env ids (a population's members walking
            the same segment: replica k is the one-replica walk of member k); default: distinct ids.
        observe: Build each step's observation for ``act`` (default True); False hands ``act``
            None, for policies that read only the walk state (rules, the oracle).
    """

    def __init__(self, data: MarketData, params: EnvParams, *, replicas: int = 1,
                 routing: Optional[Mapping[str, float]] = None, route_mask: Optional[torch.Tensor] = None,
                 chunk: int = 64, graph: bool = True, split_bars: int = 0, split_warmup: int = 128,
                 cost_scale: Optional[torch.Tensor] = None, force_market: Optional[torch.Tensor] = None,
                 replica_ids: bool = False, observe: bool = True) -> None:
        for name, v, lo in (("replicas", replicas, 1), ("chunk", chunk, 1), ("split_bars", split_bars, 0),
                            ("split_warmup", split_warmup, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"SegmentWalk.{name}: expected an int >= {lo}, got {v!r}")
        self.data = data
        self.device = dev = data.device
        self.tables: EnvTables = make_tables(data, params)
        self.params = params
        a = data.num_assets
        first = self.tables.start_lo
        last = data.length - 2  # last bar at which a trade can earn a return
        self.steps = (last - first + 1).cpu().tolist()  # host read: walk setup
        self.starts = first.cpu().tolist()  # host read: walk setup
        # Time splits: split k of an asset counts bars [k*L, (k+1)*L) of its walk and starts
        # ``split_warmup`` bars earlier (flat), so the boundary effect is a warm-up, not a reset.
        self.split_len = split_bars if 0 < split_bars < max(self.steps) else max(self.steps)
        self.num_splits = ns = -(-max(self.steps) // self.split_len)
        self.warm = split_warmup if ns > 1 else 0
        self.replicas = replicas
        self.num_envs = e = replicas * ns * a
        env = torch.arange(e, dtype=torch.int64, device=dev)
        asset = env % a
        split = (env // a) % ns
        offset = split * self.split_len
        lead = torch.minimum(offset, torch.full_like(offset, self.warm))  # bars walked before counting
        self._first = first[asset] + offset - lead
        self._step0 = (offset - lead) % params.episode_len
        self._last = last[asset]
        self.cost_scale = _per_env("cost_scale", cost_scale, e, torch.float32, dev)
        self.force_market = _per_env("force_market", force_market, e, torch.bool, dev)
        self.chunk = chunk
        self.num_chunks = -(-(self.split_len + self.warm) // chunk)
        # replica_ids: every replica's envs take the ids of replica 0 (their stochastic fills draw the
        # same numbers), so replica k of a population's walk is the one-replica walk of member k.
        self.state = WalkState(
            env_id=env % (ns * a) if replica_ids else env, asset=asset, t=self._first.clone(), step=self._step0.clone(),
            pos=torch.zeros(e, device=dev), counter=torch.zeros(1, dtype=torch.int64, device=dev),
        )
        self._lead = lead.cpu().tolist()  # host read: walk setup
        rows = self.num_chunks * chunk
        self.records = torch.zeros(len(RECORD_KEYS), rows, e, device=dev)  # f32: actions are small ints
        self.bad = torch.zeros(1, dtype=torch.int64, device=dev)
        self._j = torch.zeros(1, dtype=torch.int64, device=dev)
        self._zero_pos = torch.zeros(e, device=dev)
        self.route_fn = None
        if routing is not None:
            from rl_zerosync.actions import OrderType, Urgency, encode
            from rl_zerosync.kernels import get_kernels

            kern = get_kernels(dev)
            thresholds = {k: float(v) for k, v in routing.items()}
            self._routed = torch.empty(e, dtype=torch.int64, device=dev)
            mask = route_mask.to(dev) if route_mask is not None else None
            market = encode(0, OrderType.MARKET, Urgency.NORMAL)

            def route(exposure: torch.Tensor, state: WalkState) -> torch.Tensor:
                kern.route(exposure.contiguous(), *route_inputs(data, state), self._routed, **thresholds)
                if mask is None:
                    return self._routed
                return torch.where(mask, self._routed, exposure * 9 + market)

            self.route_fn = route
        self.use_graph = bool(graph and dev.type == "cuda")
        self._graphs: dict = {}
        # A policy that reads only the walk state (rules, the oracle) is handed no observation:
        # the window gather is most of a walk step's work on a CPU.
        self._observe = bool(observe)

    def captured(self, key: object) -> bool:
        """Whether a CUDA graph of the walk was captured for ``key`` (by :meth:`run`)."""
        return key in self._graphs

    def replay_captured(self, key: object) -> None:
        """Reset the walk state and replay the graph captured for ``key`` over the whole segment,
        on the device only: the records stay on the device (``run`` reads them back once)."""
        graph = self._graphs.get(key)
        if graph is None:
            raise KeyError(f"no walk graph captured for key {key!r}; run(act, key={key!r}) captures one")
        self._reset()
        for _ in range(self.num_chunks):
            graph.replay()

    # --- stepping -----------------------------------------------------------------------------
    def _reset(self) -> None:
        s = self.state
        s.t.copy_(self._first)
        s.step.copy_(self._step0)
        s.pos.copy_(self._zero_pos)
        s.counter.zero_()
        self._j.zero_()
        self.bad.zero_()

    def _chunk_body(self, act: ActFn) -> None:
        """``chunk`` steps from the static state, results written back into it."""
        s, tables, data = self.state, self.tables, self.data
        n_actions = 5 if self.route_fn is not None else 45
        st = WalkState(env_id=s.env_id, asset=s.asset, t=s.t, step=s.step, pos=s.pos, counter=s.counter)
        with torch.no_grad():
            for _ in range(self.chunk):
                obs = observe(data, tables, st) if self._observe else None
                actions = act(obs, st).to(torch.int64).reshape(self.num_envs)
                self.bad.add_(((actions < 0) | (actions >= n_actions)).any().to(torch.int64))
                # Kept in range so the step can index its tables; the walk raises at the end.
                actions = actions.clamp(0, n_actions - 1)
                if self.route_fn is not None:
                    actions = self.route_fn(actions, st)
                counter = st.counter + 1
                trade, _, pos, cost, pnl, order, _, price = execute(data, tables, st, actions, counter,
                                                                    self.cost_scale, self.force_market)
                row = torch.stack((pnl - cost, pnl, cost, trade, pos, actions.to(torch.float32),
                                   order.to(torch.float32), price))
                self.records.index_copy_(1, self._j, row[:, None, :])
                self._j.add_(1)
                st = WalkState(env_id=st.env_id, asset=st.asset, t=torch.minimum(st.t + 1, self._last),
                               step=(st.step + 1) % self.params.episode_len, pos=pos, counter=counter)
        for name in ("t", "step", "pos", "counter"):
            getattr(s, name).copy_(getattr(st, name))

    def run(self, act: ActFn, key: object = None) -> dict[str, np.ndarray]:
        """Walk the segment with ``act``; returns host records ``[E, steps]`` per RECORD_KEYS
        (rows beyond an env's own step count included; see :meth:`env_records`).

        ``key``: identifies ``act`` for graph reuse (same key = same function, same tensors);
        ``None`` runs eagerly.
        """
        self._reset()
        if not self.use_graph or key is None:
            for _ in range(self.num_chunks):
                self._chunk_body(act)
        else:
            if key not in self._graphs:
                self._graphs[key] = self._capture(act)
            self.replay_captured(key)
        host = torch.cat((self.records.reshape(-1).to(torch.float64), self.bad.to(torch.float64))).cpu()  # host read: once per walk
        bad = int(host[-1])
        if bad:
            n = 5 if self.route_fn is not None else 45
            raise ValueError(f"policy: expected actions in 0..{n - 1}, got out-of-range actions at {bad} step(s)")
        rec = host[:-1].numpy().reshape(self.records.shape)  # host read: the copy above, already on the host
        return {k: rec[i].T for i, k in enumerate(RECORD_KEYS)}

    def env_records(self, records: Mapping[str, np.ndarray], asset: int, replica: int = 0) -> dict[str, np.ndarray]:
        """The per-bar records of ``asset`` (replica ``replica``) over its whole walk, splits
        joined in time order (actions and order types as int64)."""
        a, n, L = self.data.num_assets, self.steps[asset], self.split_len
        parts: dict[str, list[np.ndarray]] = {k: [] for k in records}
        for k in range(self.num_splits):
            count = min(L, n - k * L)
            if count <= 0:
                break
            env = (replica * self.num_splits + k) * a + asset
            lead = self._lead[env]
            for key, v in records.items():
                parts[key].append(v[env, lead:lead + count])
        out = {k: np.concatenate(v) for k, v in parts.items()}
        for k in ("action", "order_type"):
            out[k] = out[k].astype(np.int64)
        return out

    def _capture(self, act: ActFn) -> torch.cuda.CUDAGraph:
        """One eager chunk on a side stream (warm-up), then one chunk captured."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._chunk_body(act)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._reset()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._chunk_body(act)
        return graph


def _per_env(name: str, values: Optional[torch.Tensor], num_envs: int, dtype: torch.dtype,
             device: torch.device) -> Optional[torch.Tensor]:
    """``values`` as a ``dtype[num_envs]`` tensor on ``device`` (ValueError naming ``name`` on a wrong shape)."""
    if values is None:
        return None
    values = torch.as_tensor(values)
    if values.shape != (num_envs,):
        raise ValueError(f"SegmentWalk.{name}: expected one value per env (shape ({num_envs},)), got shape "
                         f"{tuple(values.shape)}")
    return values.to(device=device, dtype=dtype)
