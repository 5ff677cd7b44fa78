"""Validation during training: the greedy policy on every asset's validation segment.

A :class:`Validator` holds the validation segment on its device (the learner's GPU when there is
one), an inference copy of the Q module, and a :class:`~rl_zerosync.evaluation.walk.SegmentWalk` whose
steps are captured in CUDA graphs. ``validate(algo)`` copies the learner's weights into the copy
in place (device to device when the learner is in this process), walks all assets together, reads
the per-bar records back once, and returns ``eval/validation_*`` metrics (mean over assets). Long
segments are walked in time splits of SPLIT_BARS bars stepped in parallel, each starting flat
SPLIT_WARMUP bars early (a pass costs ``SPLIT_BARS + SPLIT_WARMUP`` sequential steps however long the
segment); the end-of-run evaluation walks the segments whole. The
rule baselines are walked once, at construction: their ``(lookback, threshold)`` are chosen on
this segment, and their metrics are logged beside the agent's at every pass.
"""
from __future__ import annotations

import os

import time
from typing import Any

import torch

from rl_zerosync.envs import EnvParams
from rl_zerosync.data import make_market
from rl_zerosync.kernels.route import routing_thresholds
from rl_zerosync.evaluation.backtest import add_baselines, best_rule, cached_rule_metrics, walk_result
from rl_zerosync.evaluation.rules import RULES
from rl_zerosync.evaluation.walk import SegmentWalk

SPLIT_BARS = 128
"""Validation walks in time splits of this many bars (all in parallel)..."""
SPLIT_WARMUP = 64
"""...each starting flat this many bars early (see :class:`~rl_zerosync.evaluation.walk.SegmentWalk`)."""
NETS_KEY = "_validation_nets"
"""A pass's per-asset net returns in its metrics (taken out before logging, kept in the run directory:
:func:`rl_zerosync.evidence.block.save_validation_returns`)."""
LOGGED = ("sharpe", "total_return", "max_drawdown", "turnover_per_bar")
"""Mean-over-assets metrics logged per validation pass (agent and each rule)."""


def _device(device: torch.device | str | None) -> torch.device:
    return torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")


_MARKET: dict = {}
"""The last validation market built (data settings and device -> market): ``prewalk_rules`` builds it at
start-up and the run's :class:`Validator` takes it, not building (reading) the segment a second time."""


def _segment(settings, device: torch.device):
    """(validation market on ``device``, env parameters, routing thresholds) of a run."""
    from rl_zerosync.data.identity import data_paths

    files = [(p, st.st_size, st.st_mtime_ns) for p in data_paths(dict(settings.data))
             for st in [os.stat(p)] if os.path.isfile(p)]  # a file rewritten since: built again
    key = (repr(sorted(dict(settings.data).items())), repr(files), str(device))
    if key not in _MARKET:
        _MARKET.clear()
        _MARKET[key] = make_market(dict(settings.data), "validation").to(device)
    return _MARKET[key], EnvParams.from_dict(settings.env), routing_thresholds(settings.runner)


def prewalk_rules(settings, device: torch.device | str | None = None) -> None:
    """Walk the rule baselines of the run's validation segment into the process's rule cache
    (:func:`~rl_zerosync.evaluation.backtest.cached_rule_metrics`), before the algorithm is built:
    ``train`` runs it while Ray's processes start, and the :class:`Validator` then finds its rules
    walked (a CPU walk of every variant is seconds)."""
    data, params, routing = _segment(settings, _device(device))
    cached_rule_metrics(data, params, routing)


class Validator:
    """Greedy validation passes of one run (see the module docstring)."""

    def __init__(self, settings, algo, device: torch.device | str | None = None) -> None:
        self.device = _device(device)
        self.metric = settings.run.eval_metric
        self.data, self.params, routing = _segment(settings, self.device)
        self.routed = settings.model.action_mode == "routed"
        spaces = algo.env_runner.get_spaces() if algo.env_runner is not None else None
        spec = algo.config.get_rl_module_spec(spaces=spaces, inference_only=True)
        self._spec = spec
        self.module = spec.build().to(self.device).eval()
        self._routing = routing if self.routed else None
        self.walk = SegmentWalk(self.data, self.params, routing=self._routing,
                                split_bars=SPLIT_BARS, split_warmup=SPLIT_WARMUP)
        self.rules, _ = cached_rule_metrics(self.data, self.params, routing)  # walked by prewalk_rules at start-up
        self._members = None  # MemberPolicies of the last population pass (validate_population)

    def _load_weights(self, algo, target=None) -> None:
        from ray.rllib.core import DEFAULT_MODULE_ID

        from rl_zerosync.env_runner.weights import copy_weights_in_place

        target = self.module if target is None else target
        group = algo.learner_group
        if group.is_local:
            def load(learner, _target=target):
                source = learner.module[DEFAULT_MODULE_ID]
                source = source.unwrapped() if hasattr(source, "unwrapped") else source
                copy_weights_in_place(_target, source.state_dict())  # device to device, in place

            group.foreach_learner(load)
            return
        # Remote learners: the first learner's weights (DDP keeps every rank's identical).
        weights = group.get_weights(module_ids=[DEFAULT_MODULE_ID])
        copy_weights_in_place(target, weights[DEFAULT_MODULE_ID])

    def _act(self, obs: torch.Tensor, state) -> torch.Tensor:
        with torch.inference_mode():
            return self.module.greedy_actions(self.module.q_values(obs))

    def validate(self, algo) -> dict[str, Any]:
        """One pass: the learner's current weights on the validation segment -> metrics."""
        t0 = time.perf_counter()
        self._load_weights(algo)
        res = walk_result(self.walk, self.walk.run(self._act, key="agent"))
        out = self._metrics(res)
        out["validation_time_s"] = time.perf_counter() - t0
        return out

    def validate_population(self, algos: list, *, batched: bool) -> list[dict[str, Any]]:
        """One pass for P members at once: one walk of P replicas of the segment (replica k is member
        k's, with the env ids of a one-member walk), one readback; member k's metrics are those
        :meth:`validate` gives for its algorithm (``validation_time_s``: the whole pass).

        ``batched``: the members' Q networks run as one batched forward (``kernels/member_ops.py``; equal to
        each member's own forward to float32 rounding); else each member's own forward on its replica
        (bit for bit :meth:`validate`)."""
        from rl_zerosync.evaluation.member_policies import MemberPolicies

        t0 = time.perf_counter()
        size = len(algos)
        if self._members is None or (self._members.size, self._members.batched) != (size, batched):
            walk = SegmentWalk(self.data, self.params, routing=self._routing, split_bars=SPLIT_BARS,
                               split_warmup=SPLIT_WARMUP, replicas=size, replica_ids=True)
            self._members = MemberPolicies([self._spec.build().to(self.device).eval() for _ in range(size)], walk,
                                           batched=batched)
        members = self._members
        for algo, module in zip(algos, members.modules):
            self._load_weights(algo, module)
        members.refresh()
        records = members.walk.run(members.act, key="members")
        outs = []
        for k in range(size):
            outs.append(self._metrics(walk_result(members.walk, records, replica=k)))
        seconds = time.perf_counter() - t0
        for out in outs:
            out["validation_time_s"] = seconds
        return outs

    def _metrics(self, res) -> dict[str, Any]:
        """The ``validation_*`` metrics of one walk result, the rules' beside it."""
        add_baselines(res, self.rules)
        out: dict[str, Any] = {f"validation_{k}": res.metrics["mean"][k] for k in LOGGED}
        out[f"validation_{self.metric}"] = res.metrics["mean"][self.metric]
        for rule in RULES:
            for k in LOGGED:
                out[f"validation_{rule}_{k}"] = res.baselines[rule]["mean"][k]
        out["validation_best_rule_sharpe"] = res.baselines[best_rule(res.baselines)]["mean"]["sharpe"]
        out[NETS_KEY] = [rec["net"] for rec in res.records]
        return out
