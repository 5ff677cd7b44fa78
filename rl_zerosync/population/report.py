"""``population.json``: per member, per hyperparameter point, the selected member, the leaderboard.

Selection reads validation only: the selected member is the one with the highest best-validation
metric (``run.eval_metric``; NaN or a member that never validated is never selected; ties go to the
lower member index). Test numbers come from each member's end-of-run evaluation (its
``evaluation/metrics.json``, read once, for this report). The selected member's evidence counts
every member's validated checkpoints as trials (the whole population was searched), so its deflated
Sharpe is deflated by the population's size, not by one run's.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # the settings module imports Ray Tune (~1.4 s): `evaluate --member` needs none of it
    from rl_zerosync.population.space import PopulationSettings

POPULATION_FILE = "population.json"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def member_row(member, selection, run_dir: Path, lineage: Sequence[dict]) -> dict[str, Any]:
    """One member: seed, point, hyperparameters, best validation, test numbers when evaluated."""
    from rl_zerosync.run.seeds import seed_record

    row: dict[str, Any] = {
        "member": member.index, "seed": member.seed, "point": member.point,
        "hyperparameters": dict(member.overrides), "dir": run_dir.name,
        "best_iteration": selection.best_iteration,
        f"best_validation_{selection.metric}": selection.best_value,
        "lineage": list(lineage),
    }
    if (run_dir / "evaluation" / "metrics.json").is_file():
        rec = seed_record(run_dir)
        row["test"] = {k: rec[k] for k in ("test_sharpe", "test_sharpe_ci95", "test_total_return",
                                           "test_max_drawdown", "best_rule", "best_rule_test_sharpe",
                                           "agent_minus_best_rule", "agent_minus_best_rule_ci95",
                                           "checkpoint_iteration")}
    return row


def leaderboard(rows: Sequence[dict], metric: str) -> list[int]:
    """Member indices by best validation ``metric``, best first (unvalidated / NaN last)."""
    key = f"best_validation_{metric}"
    return sorted((r["member"] for r in rows),
                  key=lambda k: (not _finite(rows[k][key]), -(rows[k][key] if _finite(rows[k][key]) else 0.0), k))


def select(rows: Sequence[dict], metric: str) -> int | None:
    """The member selected on validation (see the module docstring), or None when none validated."""
    order = leaderboard(rows, metric)
    return order[0] if order and _finite(rows[order[0]][f"best_validation_{metric}"]) else None


def _population_evidence(parent: Path, eval_dir: Path, members: int, extra: int = 0) -> dict[str, Any] | None:
    """The test evidence of the evaluation in ``eval_dir`` (the selected member's, or the ensemble's):
    calibrated intervals on its series, and the DSR of its validation Sharpe with every member's
    validation passes as the candidates (the whole population was searched: the effective number of
    trials over all members' passes together; ``extra``: more candidates compared, e.g. the ensemble
    beside the single best, each counted as one more independent trial)."""
    import numpy as np

    from rl_zerosync.evaluation.evidence_report import read_returns
    from rl_zerosync.evidence.block import checkpoint_history, pooled_evidence, validation_passes
    from rl_zerosync.evidence.calibrated import effective_trials
    from rl_zerosync.population.members import member_dir

    try:
        mine = read_returns(eval_dir)
    except FileNotFoundError:
        return None
    passes = [validation_passes(member_dir(parent, k)) for k in range(members)]
    trials = dict(mine["trials"])
    if all(x is not None for x in passes) and len({x.shape[0] for x in passes}) == 1:
        n, counted = effective_trials(np.column_stack(passes))
        trials["n"], trials["counted"] = n + extra, f"{counted} over {members} member(s)" + (
            f" + {extra} ensemble" if extra else "")
    else:
        trials["n"] = float(sum(len(checkpoint_history(member_dir(parent, k), "sharpe")[0]) or 1
                                for k in range(members)) + extra)
        trials["counted"] = (f"every validation pass of {members} member(s) counted as independent (no per-pass "
                             "returns kept: conservative)" + (f" + {extra} ensemble" if extra else ""))
    return pooled_evidence([mine["agent"]], [mine["best_rule"]], [mine["buy_and_hold"]], mine["periods_per_year"],
                           independent=mine["independent"], selections=[trials], positions=mine["position"])


def _points(pop: PopulationSettings, rows: Sequence[dict], parent: Path) -> list[dict[str, Any]]:
    """Per hyperparameter point: its members and, when evaluated, the mean and spread over seeds."""
    from rl_zerosync.evaluation.evidence_report import read_returns
    from rl_zerosync.population.members import member_dir
    from rl_zerosync.run.seeds import seed_record, summarize

    out = []
    for i, point in enumerate(pop.points):
        mine = [r for r in rows if r["point"] == i]
        entry: dict[str, Any] = {"point": i, "hyperparameters": dict(point), "members": [r["member"] for r in mine]}
        if all("test" in r for r in mine):
            per_seed = {r["seed"]: seed_record(member_dir(parent, r["member"])) for r in mine}
            try:
                returns = [read_returns(member_dir(parent, r["member"]) / "evaluation") for r in mine]
            except FileNotFoundError:
                returns = None
            entry["over_seeds"] = summarize(per_seed, returns)
        out.append(entry)
    return out


def population_report(pop: PopulationSettings, metric: str, rows: Sequence[dict], parent: Path, *,
                      partial: bool = False, interrupted_by: int | None = None,
                      ensemble: dict | None = None) -> dict[str, Any]:
    """The whole ``population.json`` (see the module docstring); ``ensemble``: what
    :func:`ensemble_entry` made of the ``ensemble_top_k`` evaluation."""
    chosen = select(rows, metric)
    report: dict[str, Any] = {
        "members": len(rows), "seeds": list(pop.seeds), "points": len(pop.points),
        "selection": {"by": f"best_validation_{metric}", "reads": "validation only", "member": chosen},
        "leaderboard": leaderboard(rows, metric), "per_member": list(rows), "per_point": _points(pop, rows, parent),
        "partial": bool(partial),
    }
    if interrupted_by is not None:
        report["interrupted_by"] = int(interrupted_by)
    if chosen is not None and "test" in rows[chosen]:
        from rl_zerosync.population.members import member_dir

        ev = _population_evidence(parent, member_dir(parent, chosen) / "evaluation", len(rows),
                                  extra=1 if ensemble is not None else 0)
        sel = report["selection"]
        sel["test"] = rows[chosen]["test"]
        if ev is not None:
            sel["evidence"] = ev
            sel["deflated_sharpe"] = ev["deflated_sharpe"]["value"]
            sel["trials"] = ev["trials"]["n"]
    if ensemble is not None:
        ev = _population_evidence(parent, parent / ensemble["dir"] / "evaluation", len(rows), extra=1)
        if ev is not None:
            ensemble["evidence"] = ev
            ensemble["deflated_sharpe"] = ev["deflated_sharpe"]["value"]
            ensemble["trials"] = ev["trials"]["n"]
        report["ensemble"] = ensemble
    return report


ENSEMBLE_DIR = "ensemble_top{k}"
"""The ensemble's directory in the population directory (its ``evaluation/`` inside)."""


def ensemble_members(rows: Sequence[dict], metric: str, k: int) -> list[int]:
    """The ``k`` best members on validation (validated ones only), best first."""
    key = f"best_validation_{metric}"
    return [m for m in leaderboard(rows, metric) if _finite(rows[m][key])][:k]


def ensemble_entry(members: Sequence[int], report: dict, directory: str) -> dict[str, Any]:
    """``population.json``'s ``ensemble``: who, and its validation and test numbers (``report``: its
    evaluation report)."""
    s = report["summary"]
    validation = report["segments"].get("validation", {}).get("metrics", {}).get("mean", {})
    return {"k": len(members), "members": list(members), "dir": directory, "chosen_on": "validation",
            "validation_sharpe": validation.get("sharpe"),
            "test": {"test_sharpe": s["sharpe"], "test_sharpe_ci95": s.get("test_sharpe_ci95"),
                     "best_rule": s["best_rule"], "best_rule_test_sharpe": s["best_rule_sharpe"],
                     "agent_minus_best_rule": s["agent_minus_best_rule"],
                     "agent_minus_best_rule_ci95": s.get("agent_minus_best_rule_ci95")}}


def leaderboard_lines(report: dict, metric: str, top: int = 10) -> list[str]:
    """The leaderboard as printed at the end: member, hyperparameters, best iteration, validation, test."""
    rows = report["per_member"]
    lines = [f"leaderboard (by validation {metric}; test read once, for this report):"]
    for rank, k in enumerate(report["leaderboard"][:top], 1):
        r = rows[k]
        val = r[f"best_validation_{metric}"]
        test = r.get("test", {}).get("test_sharpe")
        hp = ", ".join(f"{key}={value}" for key, value in r["hyperparameters"].items()) or "-"
        lines.append(f"  {rank:>2}. member{k} seed {r['seed']} | {hp} | best it {r['best_iteration']} | "
                     f"val {val:+.3f}" if _finite(val) else f"  {rank:>2}. member{k} seed {r['seed']} | {hp} | "
                     f"never validated")
        if test is not None and _finite(val):
            lines[-1] += f" | test sharpe {test:+.3f}"
    sel = report["selection"]
    if sel["member"] is not None:
        line = f"selected: member{sel['member']} (validation only)"
        if "deflated_sharpe" in sel:
            line += f"; test DSR {sel['deflated_sharpe']:.2f} over {sel['trials']} trials"
        lines.append(line)
        if "test" in sel:
            from rl_zerosync.evaluation.verdict import verdict

            lines.append(f"member{sel['member']}: " + verdict(sel.get("evidence") or {
                "reason": "no calibrated intervals (the member's evaluation kept no per-bar test returns)"},
                rule=sel["test"].get("best_rule")))
    ens = report.get("ensemble")
    if ens is not None:
        line = (f"ensemble of the top {ens['k']} on validation (members {ens['members']}): test sharpe "
                f"{ens['test']['test_sharpe']:+.3f}")
        if "deflated_sharpe" in ens:
            line += f"; DSR {ens['deflated_sharpe']:.2f} over {ens['trials']} trials"
        lines.append(line)
    return lines


def write_report(parent: Path, report: dict) -> Path:
    """``population.json`` written atomically."""
    from rl_zerosync.run.children import write_json_atomic

    return write_json_atomic(Path(parent) / POPULATION_FILE, report)


def read_report(parent: Path) -> dict:
    """A population directory's ``population.json`` (FileNotFoundError naming it otherwise)."""
    path = Path(parent) / POPULATION_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a population directory (no {POPULATION_FILE})")
    return json.loads(path.read_text())


def member_checkpoint(path: str | Path, member: int | None) -> str:
    """What ``evaluate`` / ``export --checkpoint PATH [--member K]`` reads: member K of a population
    directory, the member it selected on validation when K is not given (said in one line), or PATH
    itself when it is not a population directory. ``ValueError`` naming ``--member`` otherwise."""
    from rl_zerosync.population.members import member_dir

    p = Path(path)
    is_population = (p / POPULATION_FILE).is_file()
    if member is None and not is_population:
        return str(path)
    if not is_population:
        raise ValueError(f"--member: {p} is not a population directory (no {POPULATION_FILE})")
    report = read_report(p)
    if member is None:
        member = report["selection"]["member"]
        if member is None:
            raise ValueError(f"{p}: no member of this population validated, so none is selected; pass --member K")
        print(f"population {p}: member{member}, selected on validation", flush=True)
    n = int(report["members"])
    if isinstance(member, bool) or not 0 <= int(member) < n:
        raise ValueError(f"--member: {member} is out of range; {p} has members 0..{n - 1}")
    return str(member_dir(p, int(member)))
