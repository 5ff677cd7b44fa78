"""``rl-zerosync train --seeds 0,1,2,3,4``: one run per seed, then ``runs/<name>/seeds.json``.

Each seed trains the same config with ``run.seed`` set (env episode schedule, network init,
exploration, replay sampling). Where the seeds fit one device (:func:`together_blocker`) and neither
``--parallel`` nor ``--processes`` is given, they train as the members of one population process
(``<dir>/<name>/population/member<k>/``, member k = the k-th seed, exactly its single run; the
header line says so); otherwise each in its own process (``--parallel N`` runs N at a time, e.g.
several on one GPU) into ``<dir>/<name>/seed<k>/``. ``seeds.json`` holds, per seed, the best-validation
iteration and metric and the test metrics of the best checkpoint beside the rules (variants chosen
on validation), and over seeds the mean with, from 5 seeds on, a 95% bootstrap interval of the seed
mean (10,000 resamples, percentile; ``<key>_seed_ci95``), below 5 seeds the min..max range
(``<key>_seed_range``: too few seeds for an interval). ``test_sharpe_ci95`` and
``agent_minus_best_rule_ci95`` resample seeds and bars together (the test returns of every seed and
asset, :func:`rl_zerosync.evidence.block.pooled_evidence`); ``evidence`` adds PSR, DSR and the
trials counted (the rule variants once, every seed's checkpoints compared on validation).
A selection sweep (``train_seeds(..., test=False)``) never reads the test segment: its seeds.json
holds validation numbers only.

``train --seeds ... --resume <dir>/<name>`` continues an interrupted sweep of one process per seed
(:func:`seed_plans`, the walk-forward's rules per fold): a finished seed (its evaluation written
after its newest checkpoint at ``run.iterations`` or an early stop) is read back, not retrained; an
interrupted one continues from its newest valid checkpoint (``train --resume``, which refuses changed
settings or data); one stopped before its first checkpoint starts again (``--overwrite`` of that
seed's directory alone); a seed not started yet trains. A sweep trained as one population process
is not resumed by ``--seeds`` yet (only ``--overwrite`` trains it again).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rl_zerosync.run.children import Stop, Stopped, spawn, stop_all, write_json_atomic
from rl_zerosync.rundir.metrics_table import read_metrics

BOOTSTRAP_RESAMPLES = 10_000
MIN_SEEDS_FOR_INTERVAL = 5
"""Fewer seeds than this give a min..max range over seeds, not a bootstrap interval."""


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2]; ValueError naming ``--seeds`` otherwise."""
    try:
        seeds = [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError as exc:
        raise ValueError(f"--seeds: expected comma-separated ints >= 0, got {text!r}") from exc
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: expected distinct comma-separated ints >= 0, got {text!r}")
    return seeds


def mean_ci95(values: Sequence[float], seed: int = 0) -> tuple[float, list[float]]:
    """Mean and the 95% percentile bootstrap interval of the mean (one value: [v, v])."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci95: no values")
    if x.size == 1:
        return float(x[0]), [float(x[0]), float(x[0])]
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(BOOTSTRAP_RESAMPLES, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), [float(lo), float(hi)]


def seed_record(run_dir: Path) -> dict[str, Any]:
    """One seed's numbers from its run directory (evaluation/metrics.json + metrics.jsonl)."""
    report = json.loads((run_dir / "evaluation" / "metrics.json").read_text())
    s = report["summary"]
    rows = read_metrics(run_dir)  # a seed's own metrics.jsonl, or its member's rows of the population's table
    evals = [r for r in rows if "eval/validation_sharpe" in r]
    return {
        "checkpoint_iteration": s.get("checkpoint_iteration"),
        "best_validation_sharpe": s.get("validation_sharpe"),
        "test_sharpe": s["sharpe"],
        "test_total_return": s["total_return"],
        "test_max_drawdown": s["max_drawdown"],
        "train_sharpe": s.get("train_sharpe"),
        "train_minus_test_sharpe": s.get("train_minus_test_sharpe"),
        "best_rule": s["best_rule"],
        "best_rule_test_sharpe": s["best_rule_sharpe"],
        "agent_minus_best_rule": s["agent_minus_best_rule"],
        "rules_test_sharpe": s["rules"],
        "rule_variants": s.get("rule_variants"),
        "test_sharpe_ci95": s.get("test_sharpe_ci95"),
        "agent_minus_best_rule_ci95": s.get("agent_minus_best_rule_ci95"),
        "deflated_sharpe": s.get("deflated_sharpe"),
        "trials": s.get("trials"),
        "pbo": s.get("pbo"),
        "heldout_test_series": s.get("heldout_test_series", 0),
        "iterations": rows[-1]["iteration"] if rows else 0,
        "validation_curve": [[r["iteration"], r["eval/validation_sharpe"]] for r in evals],
    }


def validation_record(run_dir: Path) -> dict[str, Any]:
    """One seed's validation numbers only (metrics.jsonl's validation passes; nothing of its test
    segment): the best pass's iteration and Sharpe, and the curve."""
    rows = read_metrics(run_dir)
    evals = [r for r in rows if r.get("eval/validation_sharpe") is not None]
    if not evals:
        raise RuntimeError(f"{run_dir}/metrics.jsonl: no validation pass (eval/validation_sharpe); a "
                           f"validation-only sweep needs run.eval_every > 0")
    best = max(evals, key=lambda r: r["eval/validation_sharpe"])
    return {"checkpoint_iteration": best["iteration"], "best_validation_sharpe": best["eval/validation_sharpe"],
            "validation_passes": len(evals), "iterations": rows[-1]["iteration"],
            "validation_curve": [[r["iteration"], r["eval/validation_sharpe"]] for r in evals]}


def seed_spread(values: Sequence[float]) -> tuple[float, str, list[float]]:
    """Mean over seeds and its spread: ``("seed_ci95", bootstrap interval)`` from
    :data:`MIN_SEEDS_FOR_INTERVAL` seeds on, else ``("seed_range", [min, max])``."""
    if len(values) >= MIN_SEEDS_FOR_INTERVAL:
        mean, ci = mean_ci95(values)
        return mean, "seed_ci95", ci
    return float(np.mean(values)), "seed_range", [float(min(values)), float(max(values))]


def seeds_evidence(returns: Sequence[dict[str, Any]], seed: int = 0,
                   extra_trials: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`~rl_zerosync.evidence.block.pooled_evidence` over the seeds' test returns (a
    ``[seed][series]`` panel; ``returns``: one :func:`read_returns` per seed): independent series drawn
    as clusters with the seeds crossed, series on one calendar by bars. The DSR is the mean of the
    seeds' selected validation Sharpes against the mean of their expected best (each seed selected
    among its own checkpoints), with the calibrated standard error of that mean (the seeds' validation
    returns, the same panel design). ``extra_trials`` (``n``, ``counted``): trials made before these
    runs that chose their config (e.g. a validation sweep), added to every seed's count."""
    from rl_zerosync.evidence.block import pooled_evidence
    from rl_zerosync.evidence.calibrated import panel_interval

    first = returns[0]
    selections = [dict(r["trials"]) for r in returns]
    if extra_trials:
        for t in selections:
            t["n"] = t["n"] + float(extra_trials["n"])
            t["counted"] = f"{t['counted']} + {extra_trials['counted']}"
    validation = [r["validation"] for r in returns]
    se_of_mean = panel_interval(validation, None, first["periods_per_year"], independent_series=first["independent"],
                                seed=seed)["se"] if len(returns) > 1 else None
    return pooled_evidence([r["agent"] for r in returns], [r["best_rule"] for r in returns],
                           [r["buy_and_hold"] for r in returns], first["periods_per_year"],
                           independent=first["independent"], selections=selections, se_of_mean=se_of_mean,
                           positions=first["position"], seed=seed)


def summarize(per_seed: dict[int, dict[str, Any]], returns: Sequence[dict[str, Any]] | None = None,
              extra_trials: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mean over seeds of the headline numbers with their seed spread (:func:`seed_spread`) and, given
    the seeds' test ``returns``, the intervals over seeds and bars (:func:`seeds_evidence`)."""
    out: dict[str, Any] = {"seeds": len(per_seed)}
    for key in ("test_sharpe", "agent_minus_best_rule", "best_rule_test_sharpe", "best_validation_sharpe",
                "train_minus_test_sharpe", "test_total_return"):
        vals = [r[key] for r in per_seed.values() if r.get(key) is not None]
        if vals:
            mean, kind, spread = seed_spread(vals)
            out[f"{key}_mean"], out[f"{key}_{kind}"] = mean, spread
    rules = next(iter(per_seed.values()))["rules_test_sharpe"]
    out["rules_test_sharpe_mean"] = {r: float(np.mean([p["rules_test_sharpe"][r] for p in per_seed.values()]))
                                     for r in rules}
    if returns:
        ev = seeds_evidence(returns, extra_trials=extra_trials)
        out["evidence"] = ev
        out["test_sharpe_ci95"] = [ev["intervals"]["agent"]["low"], ev["intervals"]["agent"]["high"]]
        d = ev["intervals"]["agent_minus_best_rule"]
        out["agent_minus_best_rule_ci95"] = [d["low"], d["high"]]
        out["deflated_sharpe"], out["psr"] = ev["deflated_sharpe"]["value"], ev["psr"]["value"]
        out["trials"], out["ci_method"] = ev["trials"]["n"], ev["ci_method"]
        dsr = ev["deflated_sharpe"]
        out["dsr_trials"], out["dsr_variance"], out["dsr_expected_max"] = dsr["trials"], dsr["variance"], dsr["expected_max"]
        out["dsr_sharpe"] = dsr["sharpe"]
    return out


POPULATION_DIR = "population"
"""``train --seeds`` as one population process: its directory inside the sweep's (members ``member<k>``)."""


def together_blocker(settings, seeds: Sequence[int]) -> str | None:
    """Why ``seeds`` cannot train as one population process (:func:`train_seeds` ``together``), or None:
    it needs 2+ seeds, the learner and env runner in the process (``num_learners`` and
    ``num_env_runners`` 0, no ``runner.overlap``) and every member's estimated bytes
    (:func:`~rl_zerosync.population.memory.estimated_member_bytes`) inside what the device has free."""
    from rl_zerosync.run.fits import estimated_member_bytes, free_bytes, member_device

    a = settings.algo
    if len(seeds) < 2:
        return "one seed"
    if a.num_learners or a.num_env_runners:
        return f"num_learners {a.num_learners} / num_env_runners {a.num_env_runners} (a population needs 0 / 0)"
    if settings.runner.typed.overlap:
        return "runner.overlap is on (a population samples, then trains)"
    device = member_device(settings)
    per, free = estimated_member_bytes(settings), free_bytes(device)
    if free is not None and per * len(seeds) > free:
        return (f"{len(seeds)} members x {per / 2**20:,.0f} MiB (estimated) exceed the {free / 2**30:,.1f} GiB "
                f"free on {device}")
    return None


def together_line(settings, seeds: Sequence[int]) -> str:
    """The header line of a sweep run as one population process."""
    from rl_zerosync.run.fits import estimated_member_bytes, free_bytes, member_device

    device = member_device(settings)
    free = free_bytes(device)
    room = f" of {free / 2**30:,.1f} GiB free" if free is not None else ""
    return (f"seeds {','.join(map(str, seeds))}: one population process on {device} ({len(seeds)} members x "
            f"{estimated_member_bytes(settings) / 2**20:,.0f} MiB estimated{room}); members in "
            f"{POPULATION_DIR}/member<k> (member k = the k-th seed)")


def seed_settings(config: str, overrides: Sequence[str], parent: Path, seed: int):
    """The settings of seed ``seed``'s own run in the sweep directory ``parent`` (what its process loads)."""
    from rl_zerosync.config.settings import load

    return load(config, [*overrides, f"run.seed={seed}", f"run.dir={parent}", f"run.name=seed{seed}"])


def seed_plans(config: str, overrides: Sequence[str], parent: Path, seeds: Sequence[int]) -> dict[int, tuple[str, str]]:
    """What a resumed sweep does with each seed: ``(plan, why)``, the plan one of
    :data:`~rl_zerosync.run.walkforward.FOLD_PLANS` (reused, resumed, restarted, trained) by
    :func:`~rl_zerosync.run.walkforward.fold_plan` on the seed's run directory ``<parent>/seed<k>``."""
    from rl_zerosync.run.walkforward import fold_plan

    plans = {}
    for seed in seeds:
        plan, why, _ = fold_plan(seed_settings(config, overrides, parent, seed))
        plans[seed] = (plan, why)
    return plans


def train_seeds(config: str, overrides: Sequence[str], seeds: Sequence[int], *, parallel: int = 1,
                name_suffix: str = "", test: bool = True,
                extra_trials: dict[str, Any] | None = None, together: bool = False,
                plans: dict[int, tuple[str, str]] | None = None) -> dict[str, Any]:
    """Train ``config`` once per seed in subprocesses, ``parallel`` at a time; write seeds.json.

    ``together``: the seeds as the members of one population process instead (``<parent>/population/
    member<k>``, member k = the k-th seed: bit for bit the k-th seed's own run on a CPU; see
    :func:`together_blocker` for when it can). ``test=False`` (a selection sweep): the runs end
    without their evaluation (``run.evaluate=false``, so no test segment is read) and seeds.json holds
    validation only (:func:`validation_record`), as it does when the settings say
    ``run.evaluate: false``. ``extra_trials``: see :func:`seeds_evidence`.
    ``plans``: a resumed sweep (one process per seed; :func:`seed_plans`): reused seeds are read back,
    the others resumed, restarted or trained."""
    from rl_zerosync.config.settings import load

    if not test:
        overrides = [*overrides, "run.evaluate=false"]
    base = load(config, list(overrides))
    # The runs' own run.evaluate=false (the config's or a --set): no test segment is scored, so the
    # report is the validation-only one (it used to fail at the end reading evaluations never written).
    test = test and base.run.evaluate
    if parallel < 1:
        raise ValueError(f"--parallel: expected an int >= 1, got {parallel}")
    parent = Path(base.run.dir) / (base.run.name + name_suffix)
    parent.mkdir(parents=True, exist_ok=True)
    # Until the sweep ends, seeds.json says it is unfinished (a killed driver leaves this, not the last sweep's).
    write_json_atomic(parent / "seeds.json", {"config": str(config), "overrides": list(overrides), "per_seed": {},
                                              "partial": True, "unfinished_seeds": list(seeds)})
    running: dict[int, tuple[subprocess.Popen, Any, float]] = {}
    failed: dict[int, int] = {}
    walls: dict[int, float] = {}
    dirs = {s: parent / (f"{POPULATION_DIR}/member{k}" if together else f"seed{s}") for k, s in enumerate(seeds)}
    if together and plans:
        raise ValueError("a sweep trained as one population process is not resumed by --seeds yet; pass "
                         "--overwrite to train the seeds again")
    plans = plans or {}
    for seed, (plan, why) in plans.items():
        print(f"seed {seed}: {plan} ({why})", flush=True)
        if plan == "reused":
            walls[seed] = 0.0
    pending = [s for s in seeds if plans.get(s, ("trained",))[0] != "reused"]
    try:
        with Stop():
            if together:
                _run_together(base, parent, seeds, running, failed, walls)
            else:
                _run_seeds(config, overrides, parent, pending, running, failed, walls, parallel,
                           {s: plans[s][0] for s in plans})
    except Stopped as stop:
        stop_all(p for p, _, _ in running.values())
        return _partial_report(config, overrides, parent, seeds, walls, stop.signum, dirs)
    if failed:
        where = f"{parent}/{POPULATION_DIR}_train.log" if together else f"{parent}/seed<k>/train.log"
        raise RuntimeError(f"seeds {sorted(failed)} failed (exit codes {failed}); see {where}")
    run_as = {"run_as": "one population process" if together else "one process per seed"}
    if together:
        run_as["member_dirs"] = {s: str(d.relative_to(parent)) for s, d in dirs.items()}
    if not test:
        per_seed = {s: {**validation_record(dirs[s]), "wall_s": walls[s]} for s in seeds}
        mean, kind, spread = seed_spread([r["best_validation_sharpe"] for r in per_seed.values()])
        report = {"config": str(config), "overrides": list(overrides), "per_seed": per_seed, "partial": False,
                  "summary": {"seeds": len(seeds), "best_validation_sharpe_mean": mean,
                              f"best_validation_sharpe_{kind}": spread, "test_read": False}, **run_as}
        report["path"] = str(write_json_atomic(parent / "seeds.json", report))
        return report
    from rl_zerosync.evaluation.evidence_report import read_returns

    per_seed = {s: {**seed_record(dirs[s]), "wall_s": walls[s]} for s in seeds}
    returns = [read_returns(dirs[s] / "evaluation") for s in seeds]
    report = {"config": str(config), "overrides": list(overrides), "per_seed": per_seed,
              "summary": summarize(per_seed, returns, extra_trials), "partial": False, **run_as}
    report["path"] = str(write_json_atomic(parent / "seeds.json", report))
    return report


def _run_seeds(config, overrides, parent: Path, pending: list, running: dict, failed: dict, walls: dict,
               parallel: int, plans: dict[int, str] | None = None) -> None:
    """Start the pending seeds ``parallel`` at a time and wait for them (``running``, ``failed`` and
    ``walls`` are updated in place, so an interrupt knows what was running). ``plans``: a resumed
    seed's ``train --resume`` of its directory, a restarted one's ``--overwrite``."""
    plans = plans or {}
    while pending or running:
        while pending and len(running) < parallel:
            seed = pending.pop(0)
            run_dir = parent / f"seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "rl_zerosync", "train", "--config", str(config),
                   *[x for o in overrides for x in ("--set", o)],
                   "--set", f"run.seed={seed}", "--set", f"run.dir={parent}", "--set", f"run.name=seed{seed}"]
            plan = plans.get(seed)
            cmd += ["--resume", str(run_dir)] if plan == "resumed" else ["--overwrite"] if plan == "restarted" else []
            log = open(run_dir / "train.log", "a" if plan == "resumed" else "w")
            running[seed] = (spawn(cmd, log), log, time.perf_counter())
            print(f"seed {seed}: started ({run_dir / 'train.log'})", flush=True)
        time.sleep(0.5)
        for seed, (proc, log, t0) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            walls[seed] = time.perf_counter() - t0
            del running[seed]
            if proc.returncode != 0:
                failed[seed] = proc.returncode
            print(f"seed {seed}: exit {proc.returncode} after {walls[seed]:.0f} s", flush=True)


def _run_together(base, parent: Path, seeds: Sequence[int], running: dict, failed: dict, walls: dict) -> None:
    """The seeds as one population process (``<parent>/population.yaml``: the base settings and
    ``population: {seeds: ...}``; its log ``<parent>/population_train.log``); ``running``, ``failed`` and
    ``walls`` as :func:`_run_seeds` keeps them, every seed with the population's wall time."""
    import yaml

    raw = base.to_dict()
    raw["run"] = {**raw.get("run", {}), "dir": str(parent), "name": POPULATION_DIR}
    raw["population"] = {"seeds": [int(s) for s in seeds]}
    path = parent / f"{POPULATION_DIR}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    log = open(parent / f"{POPULATION_DIR}_train.log", "w")
    t0 = time.perf_counter()
    proc = spawn([sys.executable, "-m", "rl_zerosync", "train", "--config", str(path)], log)
    for s in seeds:
        running[s] = (proc, log, t0)
    print(f"seeds {','.join(map(str, seeds))}: population started ({parent / (POPULATION_DIR + '_train.log')})",
          flush=True)
    while proc.poll() is None:
        time.sleep(0.5)
    log.close()
    wall = time.perf_counter() - t0
    running.clear()
    for s in seeds:
        walls[s] = wall
        if proc.returncode != 0:
            failed[s] = proc.returncode
    print(f"seeds population: exit {proc.returncode} after {wall:.0f} s", flush=True)


def _partial_report(config, overrides, parent: Path, seeds, walls: dict, signum: int,
                    dirs: dict | None = None) -> dict[str, Any]:
    """seeds.json of an interrupted sweep: the seeds that finished, ``partial: true``, the rest named."""
    dirs = dirs or {s: parent / f"seed{s}" for s in seeds}
    done = [s for s in seeds if s in walls and (dirs[s] / "evaluation" / "metrics.json").is_file()]
    per_seed = {s: {**seed_record(dirs[s]), "wall_s": walls[s]} for s in done}
    report = {"config": str(config), "overrides": list(overrides), "per_seed": per_seed,
              "summary": summarize(per_seed) if per_seed else {"seeds": 0}, "partial": True,
              "interrupted_by": signum, "unfinished_seeds": [s for s in seeds if s not in done]}
    report["path"] = str(write_json_atomic(parent / "seeds.json", report))
    return report


def summary_line(report: dict[str, Any]) -> str:
    s = report["summary"]
    if not s.get("test_read", True):  # validation only: no test segment was scored
        kind = next(k for k in s if k.startswith("best_validation_sharpe_") and k != "best_validation_sharpe_mean")
        lo, hi = s[kind]
        return (f"{s['seeds']} seeds: best validation sharpe {s['best_validation_sharpe_mean']:+.2f} "
                f"[{lo:+.2f}, {hi:+.2f}] ({kind.removeprefix('best_validation_sharpe_').replace('_', ' ')}) | "
                "test not read (run.evaluate false)")
    r = s["rules_test_sharpe_mean"]
    if "test_sharpe_ci95" in s:
        lo, hi = s["test_sharpe_ci95"]
        spread = f"[{lo:+.2f}, {hi:+.2f}] (95% over seeds and bars)"
    else:
        kind = "seed_ci95" if "test_sharpe_seed_ci95" in s else "seed_range"
        lo, hi = s[f"test_sharpe_{kind}"]
        spread = f"[{lo:+.2f}, {hi:+.2f}] ({'95% over seeds' if kind == 'seed_ci95' else 'range over seeds'})"
    return (f"{s['seeds']} seeds: test sharpe {s['test_sharpe_mean']:+.2f} {spread} | rule chosen on validation "
            f"(test) {s['best_rule_test_sharpe_mean']:+.2f} | agent - rule chosen on validation "
            f"{s['agent_minus_best_rule_mean']:+.2f} | "
            + " ".join(f"{k} {v:+.2f}" for k, v in r.items()))


# --- train --seeds: the sweep's command -------------------------------------------------------------

class SweepArgumentError(ValueError):
    """A ``train --seeds`` argument that cannot be run (one ``error:`` line, exit 2)."""


def _sweep_layout(settings, args) -> tuple[list[int], bool, int, str | None]:
    """(seeds, together, parallel, why not together) of ``train --seeds``; argument errors raised."""
    seeds = parse_seeds(args.seeds)  # ValueError: a SweepArgumentError below
    if args.parallel is not None and args.parallel < 1:
        raise SweepArgumentError(f"--parallel: expected an int >= 1, got {args.parallel}")
    parent = settings.run_dir
    if args.resume and Path(args.resume).resolve() != parent.resolve():
        raise SweepArgumentError(f"--resume {args.resume} with --seeds: expected the sweep's directory {parent} "
                                 "(run.dir/run.name of the config)")
    if args.resume and (parent / POPULATION_DIR).exists():
        raise SweepArgumentError(f"--resume {parent}: the sweep trained as one population process "
                                 f"({parent / POPULATION_DIR}/), which --seeds does not resume yet: pass "
                                 "--overwrite to train the seeds again")
    why = ("--parallel given" if args.parallel is not None else "--processes given" if args.processes
           else "--resume given" if args.resume else together_blocker(settings, seeds))
    return seeds, why is None, args.parallel or 1, why


def _claim_sweep(settings, args, seeds: Sequence[int], together: bool):
    """Check (and with --overwrite clear) every seed's directory or the population's, under the parent's
    lock held by the caller; the plans of a resumed sweep (None otherwise)."""
    from rl_zerosync.rundir.lock import RunExistsError
    from rl_zerosync.rundir.run_dir import RunDir

    parent = settings.run_dir
    plans = seed_plans(args.config, args.set, parent, seeds) if args.resume else None
    population_json = parent / POPULATION_DIR / "population.json"
    if together and not args.overwrite and population_json.is_file():
        # checked before the claim, which would take the population's metrics.jsonl for a run to resume
        raise RunExistsError(f"{parent / POPULATION_DIR} already holds a population (population.json); "
                             "pass --overwrite to train the seeds again", parent / POPULATION_DIR)
    for name in ([POPULATION_DIR] if together else
                 [f"seed{seed}" for seed in seeds if plans is None or plans[seed][0] == "trained"]):
        RunDir.claim(parent / name, overwrite=args.overwrite,
                     hint=f"pass --resume {parent} to continue the sweep or --overwrite to "
                          "train the seeds again").close()
    if together and population_json.is_file():
        population_json.unlink()  # --overwrite
    return plans


def sweep_command(settings, args) -> int:
    """``train --seeds`` (``args``: the parsed command line): the seeds as one population process or
    one process per seed, the report and its lines; the exit code. Raises :class:`SweepArgumentError`
    for arguments that cannot run and the run-directory errors of a seed's directory (the CLI prints
    both as one line, exit 2)."""
    import signal

    from rl_zerosync.rundir.lock import RunLock

    try:
        seeds, together, parallel, why = _sweep_layout(settings, args)
    except SweepArgumentError:
        raise
    except ValueError as err:
        raise SweepArgumentError(str(err)) from None
    parent = settings.run_dir
    print(together_line(settings, seeds) if together else
          f"seeds {','.join(map(str, seeds))}: one process per seed, {parallel} at a time ({why})", flush=True)
    # The parent is locked for the whole sweep; every seed's directory (or the population's) is
    # checked here, then locked again by its own process.
    with RunLock(parent):
        plans = _claim_sweep(settings, args, seeds, together)
        report = train_seeds(args.config, args.set, seeds, parallel=parallel, together=together, plans=plans)
    if report.get("partial"):
        print(f"seeds: interrupted; {len(report['per_seed'])} finished, unfinished "
              f"{report['unfinished_seeds']} (checkpoints kept); seeds.json marked partial; "
              f"--resume {parent} continues it", flush=True)
        print(f"seeds report: {report['path']}", flush=True)
        return 128 + int(report.get("interrupted_by") or signal.SIGTERM)
    print(summary_line(report), flush=True)
    print(f"seeds report: {report['path']}", flush=True)
    return 0
