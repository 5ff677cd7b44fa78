"""A population's end-of-run evaluation in one pass: every member's walk of a segment is one walk.

:func:`evaluate_members` loads every member's checkpoint (as ``rl-zerosync evaluate`` does), groups the
members that walk the same way (the same data settings, env parameters, routing, action mode and
device: in a population, normally all of them) and, per group and segment (validation, then test),
builds the segment once and walks it once with ``P`` replicas (:class:`~rl_zerosync.evaluation.walk.SegmentWalk`
with ``replica_ids``: replica ``k`` is member ``k``'s own one-replica walk, the same env ids, so the
same stochastic fills; :class:`~rl_zerosync.evaluation.member_policies.MemberPolicies` with each
member's own forward: member ``k``'s records are bit for bit those of its own evaluation). The rule
baselines and the oracle reference are walked once per segment (their process caches, keyed by the
segment's content) and shared by every member; the rules' variants and the oracle's are chosen on
validation and frozen for test, as in one evaluation.

Each member's report then goes to its ``evaluation/`` as :func:`rl_zerosync.evaluation.evaluate.evaluate_walked`
writes it. ``full`` names the members whose evaluation is whole (per-bar files, the training-data
walk, the cost sensitivity, ``report.png``); the others' are lean: ``metrics.json`` with every segment's
metrics, the rules, the oracle, the evidence (calibrated intervals, DSR, SPA, PBO) and its returns
file, and ``lean`` saying what was left out and how to get it (``rl-zerosync evaluate --member K``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

LEAN = ("one pass over the population's members: metrics, rules, oracle and evidence only (no per-bar files, "
        "training-data walk, cost sensitivity or report.png); `rl-zerosync evaluate --checkpoint <population> "
        "--member K` writes the whole evaluation")
"""The ``lean`` entry of a lean member's ``metrics.json``."""


def evaluate_members(run_dirs: Sequence[Path], which: Sequence[str], *, full: Sequence[bool],
                     device: Optional[str] = None,
                     on_report: Optional[Callable[[int, dict], None]] = None) -> list[dict[str, Any]]:
    """Every member's end-of-run evaluation into ``<run_dir>/evaluation`` (module doc): ``run_dirs[k]``
    the member's run directory, ``which[k]`` its checkpoint (``best`` / ``last``), ``full[k]`` whether its
    evaluation is whole. Returns the reports in member order; ``on_report(k, report)`` as each is written."""
    from rl_zerosync.evaluation.evaluate import _load
    from rl_zerosync.rundir.run_dir import EVALUATION_DIR

    if not (len(run_dirs) == len(which) == len(full)):
        raise ValueError(f"evaluate_members: {len(run_dirs)} run directories, {len(which)} checkpoints and "
                         f"{len(full)} full flags: expected one of each per member")
    evs = [_load(d, None, Path(d) / EVALUATION_DIR, w, device, None) for d, w in zip(run_dirs, which)]
    reports: list[Optional[dict]] = [None] * len(evs)
    for group in _groups(evs):
        for k, walked in zip(group, walk_members([evs[k] for k in group], full=[full[k] for k in group])):
            reports[k] = _evaluate_one(evs[k], walked)
            if on_report is not None:
                on_report(k, reports[k])
    return reports  # type: ignore[return-value]


def _evaluate_one(ev, walked) -> dict[str, Any]:
    from rl_zerosync.evaluation.evaluate import evaluate_walked

    return evaluate_walked(ev, walked)


def _groups(evs: Sequence[Any]) -> list[list[int]]:
    """Member indices by how they walk (data settings, env parameters, routing, action mode, device)."""
    groups: dict[str, list[int]] = {}
    for k, ev in enumerate(evs):
        key = repr((sorted(ev.data_cfg.items()), ev.params, sorted(ev.routing.items()), ev.mode, str(ev.device),
                    ev.segments))
        groups.setdefault(key, []).append(k)
    return list(groups.values())


def walk_members(evs: Sequence[Any], *, full: Sequence[bool]) -> list[Any]:
    """One :class:`~rl_zerosync.evaluation.evaluate.Walked` per member of ``evs`` (members that walk the
    same way: :func:`_groups`), every segment walked once for all of them."""
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.evaluate import Walked
    from rl_zerosync.evaluation.threads import one_cpu_thread

    first = evs[0]
    results: list[dict] = [{} for _ in evs]
    markets: dict = {}
    choice, oracle = None, None
    with one_cpu_thread(first.device):
        for segment in first.segments:
            markets[segment] = market = make_market(first.data_cfg, segment)
            for k, res in enumerate(_walk_segment(evs, market, choice, oracle)):
                results[k][segment] = res
            choice = results[0][segment].rule_choice  # chosen on validation, frozen for test
            oracle = results[0][segment].oracle.get("variant")
    return [Walked(results=r, markets=markets, lean=None if f else LEAN) for r, f in zip(results, full)]


def _walk_segment(evs: Sequence[Any], market, choice, oracle_variant) -> list[Any]:
    """Every member's :class:`~rl_zerosync.evaluation.backtest.EvalResult` on ``market``: one walk of
    ``len(evs)`` replicas, then the rules and the oracle (walked once, shared)."""
    from rl_zerosync.evaluation.backtest import add_prices, add_rule_baselines, walk_result
    from rl_zerosync.evaluation.member_policies import MemberPolicies
    from rl_zerosync.evaluation.oracle import oracle_baseline
    from rl_zerosync.evaluation.walk import SegmentWalk

    first = evs[0]
    params = replace(first.params, stop_drawdown=0.0)
    data = market.to(first.device)
    walk = SegmentWalk(data, params, routing=first.routing if first.mode == "routed" else None,
                       replicas=len(evs), replica_ids=True)
    members = MemberPolicies([ev.modules[0] for ev in evs], walk, batched=False)
    records = walk.run(members.act, key="members")
    oracle = oracle_baseline(first.data_cfg, market, first.params, first.routing, device=first.device,
                             variant=oracle_variant)
    out = []
    for k in range(len(evs)):
        res = walk_result(walk, records, replica=k)
        add_prices(res, walk)
        add_rule_baselines(res, data, first.params, device=first.device, routing=first.routing, rule_choice=choice)
        res.oracle = oracle
        out.append(res)
    return out
