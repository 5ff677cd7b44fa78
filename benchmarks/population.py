"""Population benchmark: P members in one population process vs the same P seeds as separate processes.

How to run (Ray 2.60 installed; from the repository root)::

    python -m benchmarks.population                 # GPU: configs/local.yaml, P in {1, 8, 64}, processes P = 8
    python -m benchmarks.population --quick --out benchmarks/results/population_cpu_quick.json
                                                    # CPU: configs/smoke.yaml, 6 iterations, P in {1, 4},
                                                    # processes P = 4 (--parallel 2 on 2 cores): ~3.5 min
    python -m benchmarks.population --dry-run       # write the configs, print the commands, run nothing

It is not one of ``rl-zerosync bench``'s benchmarks (that list is the component benchmarks); run it
as a module.

Both sides train the same members: member k of the population is the single run of the base config
with ``run.seed = k`` (:mod:`rl_zerosync.population.members`), which is what ``--seeds`` trains.

* ours, for every P of ``--p``: ``python -m rl_zerosync train --config <tmp>/pop_p<P>.yaml``, the
  base settings plus ``population: {seeds: [0, ..., P-1]}``: one process, the members in lockstep;
* processes, for P = ``--baseline-p``: ``python -m rl_zerosync train --config <tmp>/base.yaml --seeds
  0,...,P-1 --parallel N`` with the same base settings and no population section, N = min(P, CPU
  count): one process per seed (``rl_zerosync/run/seeds.py``), N at a time.

Every command is a subprocess, timed from its start to its exit, so ``wall_s`` covers Python and
Ray start-up, training, validation, the final checkpoints and the end-of-run evaluation of every
member (``run.evaluate`` is on). Per configuration, from every member's metrics rows (a seed's
``metrics.jsonl``, a member's rows of the population's one table; one row per training iteration;
``time_this_iter_s`` is RLlib's ``algo.train()`` time, validation and
checkpoints excluded; per-iteration env steps and updates are the increments of
``env_runners/num_env_steps_sampled_lifetime`` and ``learners/default_policy/zerosync/updates_lifetime``):

* ``env_steps`` / ``updates``: the sum over members of the last row's lifetime counters;
* whole run: ``env_steps_per_s = env_steps / wall_s``, ``updates_per_s = updates / wall_s``,
  ``agents_per_hour = P * 3600 / wall_s``;
* steady state, median over iterations i (the iterations every member logged) of
  ``sum_k steps[k, i] / T_i`` (``steady_env_steps_per_s``; ``steady_updates_per_s`` the same with
  updates), where T_i is the time the P members take for iteration i:

  - population: ``T_i`` = the population's own clock for its iteration i (``population.json``'s
    ``timing.iteration_train_s``: every member's sampling and adding, the population's updates and
    the rest of the members' iterations, validation excluded as ``time_this_iter_s`` excludes it);
  - processes: N run at once, in ceil(P / N) waves, so ``T_i = ceil(P / N) * max_k time_this_iter_s[k, i]``
    (the slowest member's iteration, once per wave);

* ``syncs_per_population_update`` (ours): on CUDA, after the timed runs, a population of the
  baseline P is built in this process, stepped until every member has trained, and then one update
  of the population (``PopulationUpdate.train([1] * P)``, ``--sync-updates`` times) runs under
  ``torch.cuda.set_sync_debug_mode("error")``: 0 when nothing synchronized, else the synchronizing
  calls counted in mode "warn" (``benchmarks.common.count_syncs``) per population update. On a CPU:
  null with the reason.

Ratios for the baseline P (ours / processes): ``agents_per_hour_vs_processes`` and
``wall_ratio_vs_processes`` (whole run). ``speedup_vs_one_member`` = ours' ``env_steps_per_s`` of the
largest P / that of P = 1 (the same run; ``..._steady`` from the steady-state numbers).

Every run directory lies in a temporary folder, removed at the end (``--keep`` keeps it). The JSON
names repository files by repository path and the temporary folder as ``<tmp>``; it holds the
commands, the base settings and the generated configs. ``summary``: ``p`` (the list),
``aggregate_env_steps_per_s_p<max>``, ``speedup_vs_one_member_p<max>``, ``wall_s_p<max>`` (whole
process), ``build_s_p<max>`` (building the members), ``training_clock_env_steps_per_s_p<max>`` (env steps
over the population's training clock) and ``graph_captures_p<max>`` (CUDA graphs of its population
update) from ``population.json``'s ``timing``, ``syncs_per_population_update`` and
``agents_per_hour_vs_processes`` (the baseline P), with their steady-state companions. Full mode writes ``benchmarks/results/population.json``; ``--quick``
writes ``population_cpu_quick.json`` in the temp folder unless ``--out`` says otherwise (a smoke
run never replaces committed results by default).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch
import yaml

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, write_json
from rl_zerosync.rundir.metrics_table import read_metrics

ROOT = Path(__file__).resolve().parent.parent
FULL = {"config": "configs/local.yaml", "p": "1,8,64", "baseline_p": 8, "overrides": []}
QUICK = {"config": "configs/smoke.yaml", "p": "1,4", "baseline_p": None,
         "overrides": ["run.iterations=6", "run.evaluate=true"]}
"""The two modes: base config (repository path), P list, the baseline's P (None: the largest P) and
the overrides of the base config."""
STEPS_KEY = "env_runners/num_env_steps_sampled_lifetime"
UPDATES_KEY = "learners/default_policy/zerosync/updates_lifetime"
TIME_KEY = "time_this_iter_s"
NO_CUDA = "no CUDA device: host syncs are measured on the GPU with torch.cuda.set_sync_debug_mode('error')"
TMP = "<tmp>"


def shown(text: str, tmp: Path) -> str:
    """``text`` with the temporary folder as ``<tmp>`` and the interpreter as ``python``."""
    return text.replace(sys.executable, "python").replace(str(tmp), TMP)


def repo_path(path: str | Path) -> str:
    """A repository file by its repository path (other paths as given)."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


# --------------------------------------------------------------------------------- configs, commands
def base_settings(config: str, overrides: list[str]) -> dict:
    """The base settings as plain data (``Settings.to_dict``), without a population section."""
    from rl_zerosync.config.settings import load

    raw = load(ROOT / config if not Path(config).is_absolute() else config, overrides).to_dict()
    raw.pop("population", None)
    return raw


def write_config(tmp: Path, file: str, base: dict, name: str, population: Optional[dict]) -> Path:
    """``<tmp>/<file>``: the base settings with run.dir ``<tmp>/runs``, run.name ``name`` and, when
    given, the population section; loaded back (and its members' settings built) so that a bad
    config fails here, not in a run."""
    from rl_zerosync.config.settings import load

    raw = json.loads(json.dumps(base))
    raw["run"]["dir"], raw["run"]["name"] = str(tmp / "runs"), name
    if population is not None:
        raw["population"] = population
    path = tmp / file
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    settings = load(path)
    if population is not None:  # the members' settings, as the population command will build them
        from rl_zerosync.population.members import all_member_settings
        from rl_zerosync.population.space import parse_population

        all_member_settings(settings, parse_population(settings.population, settings.source))
    return path


def plan(tmp: Path, base: dict, ps: list[int], baseline_p: int, cores: int) -> list[dict]:
    """Every configuration to run: ours for each P, then the processes for ``baseline_p``."""
    runs = []
    for p in ps:
        population = {"seeds": list(range(p))}
        cfg = write_config(tmp, f"pop_p{p}.yaml", base, f"pop_p{p}", population)
        runs.append({"side": "population", "p": p, "config_file": cfg, "population": population,
                     "run_name": f"pop_p{p}", "members": [f"member{k}" for k in range(p)],
                     "cmd": [sys.executable, "-m", "rl_zerosync", "train", "--config", str(cfg)]})
    n = min(baseline_p, cores)
    cfg = write_config(tmp, "base.yaml", base, f"procs_p{baseline_p}", None)
    runs.append({"side": "processes", "p": baseline_p, "parallel": n, "config_file": cfg, "population": None,
                 "run_name": f"procs_p{baseline_p}", "members": [f"seed{k}" for k in range(baseline_p)],
                 "cmd": [sys.executable, "-m", "rl_zerosync", "train", "--config", str(cfg), "--seeds",
                         ",".join(str(k) for k in range(baseline_p)), "--parallel", str(n)]})
    return runs


# ----------------------------------------------------------------------------------------- metrics
def iteration_rows(run_dir: Path) -> list[dict]:
    """A run's metrics rows (one per training iteration): a seed's metrics.jsonl, or a member's rows of
    the population's table."""
    return read_metrics(run_dir)


def increments(rows: list[dict], key: str) -> list[float]:
    """Per-iteration increments of a lifetime counter (the first row: its value)."""
    out, last = [], 0.0
    for r in rows:
        v = float(r.get(key, last))
        out.append(v - last)
        last = v
    return out


def measure(run: dict, parent: Path, wall_s: float) -> dict:
    """The numbers of one configuration (see the module docstring) from its members' metrics rows (read_metrics)."""
    rows = [iteration_rows(parent / m) for m in run["members"]]
    p = run["p"]
    n_iter = min(len(r) for r in rows)
    steps = [increments(r, STEPS_KEY) for r in rows]
    updates = [increments(r, UPDATES_KEY) for r in rows]
    times = [[float(x[TIME_KEY]) for x in r] for r in rows]
    env_steps = sum(float(r[-1][STEPS_KEY]) for r in rows)
    n_updates = sum(float(r[-1].get(UPDATES_KEY, 0.0)) for r in rows)
    waves = 1 if run["side"] == "population" else math.ceil(p / run["parallel"])
    pop_iter_s, timing = None, None
    if run["side"] == "population":  # the population's own clock: its members' iterations are one iteration
        timing = json.loads((parent / "population.json").read_text())["timing"]
        pop_iter_s = timing["iteration_train_s"]
    rate_steps, rate_updates, iter_s = [], [], []
    for i in range(n_iter):
        col = [t[i] for t in times]
        t_i = pop_iter_s[i] if pop_iter_s is not None else waves * max(col)
        iter_s.append(t_i)
        rate_steps.append(sum(s[i] for s in steps) / t_i)
        rate_updates.append(sum(u[i] for u in updates) / t_i)
    out = {
        "side": run["side"], "p": p, "wall_s": wall_s, "iterations": n_iter,
        "env_steps": env_steps, "updates": n_updates,
        "env_steps_per_s": env_steps / wall_s, "updates_per_s": n_updates / wall_s,
        "agents_per_hour": p * 3600.0 / wall_s,
        "steady_env_steps_per_s": statistics.median(rate_steps),
        "steady_updates_per_s": statistics.median(rate_updates),
        "iteration_s_median": statistics.median(iter_s),
        "member_iteration_s_median": statistics.median(t for ts in times for t in ts),
        "iteration_s": iter_s,
    }
    if run["side"] == "processes":
        out.update(parallel=run["parallel"], waves=waves)
    if timing is not None:  # population.json's own clock: building the members, training, CUDA graphs
        out.update(build_s=timing.get("build_s"), training_s=timing.get("training_s"),
                   training_clock_env_steps_per_s=timing.get("env_steps_per_s"),
                   graph_captures=timing.get("graph_captures"))
    return out


# ------------------------------------------------------------------------------------------- syncs
def population_syncs(config_file: Path, updates: int) -> dict:
    """Host syncs of one population update (``PopulationUpdate.train([1] * P)``; see the module
    docstring), measured in this process on CUDA; null with the reason elsewhere."""
    if not torch.cuda.is_available():
        return {"value": None, "reason": NO_CUDA}
    import contextlib

    from benchmarks.common import count_syncs
    from rl_zerosync.config.settings import load
    from rl_zerosync.rundir.run_dir import flatten_scalars
    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir
    from rl_zerosync.run.train import init_ray

    settings = load(config_file, ["run.name=syncs", "run.evaluate=false", "run.checkpoint_every=0"])
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        init_ray(settings)
        population = Population(settings, pop, all_member_settings(settings, pop), stack)
        update = population.update
        if update is None:
            return {"value": None, "reason": f"no population update: {population.update_line}"}
        warm = 0
        while warm < settings.run.iterations and not all(
                flatten_scalars(loop.result).get(UPDATES_KEY, 0.0) > 0 for loop in population.loops):
            population.step()
            warm += 1
        ones = [1] * pop.size
        update.train(ones)  # one more population update outside the count (graph capture, if due)
        torch.cuda.synchronize()

        def one_pass() -> None:
            for _ in range(updates):
                update.train(ones)

        error = None
        torch.cuda.set_sync_debug_mode("error")
        try:
            one_pass()
        except RuntimeError as exc:
            error = str(exc).splitlines()[0]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        counted = count_syncs(one_pass)
        for loop, pack in zip(population.loops, update.collect()):  # the boundary read, outside the counts
            loop.algo.local_learner.collect_metrics(values=pack)
    value = 0.0 if error is None else (counted.syncs + counted.waits) / updates
    return {"value": value, "members": pop.size, "mode": update.mode, "population_updates": updates,
            "warm_iterations": warm,
            "error_mode_raised": error, "warn_mode_syncs": counted.syncs, "warn_mode_event_waits": counted.waits}


# -------------------------------------------------------------------------------------------- main
def run_one(run: dict, tmp: Path) -> tuple[float, int]:
    """Run one configuration's command as a subprocess; its wall seconds and exit code."""
    log = tmp / "logs" / f"{run['run_name']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {shown(' '.join(run['cmd']), tmp)}", flush=True)
    with open(log, "w") as f:
        t0 = time.perf_counter()
        rc = subprocess.call(run["cmd"], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    print(f"  exit {rc} after {wall:.1f} s", flush=True)
    if rc != 0:
        print(shown(log.read_text()[-3000:], tmp), file=sys.stderr, flush=True)
    return wall, rc


def main() -> int:
    p = parser(__doc__, out=None, quick="CPU-sized: configs/smoke.yaml, 6 iterations, P in {1, 4}",
               out_help="JSON output path (default benchmarks/results/population.json; --quick: the temp folder)")
    p.add_argument("--config", default=None, help="base config (default configs/local.yaml; --quick: smoke.yaml)")
    p.add_argument("--p", default=None, help="comma-separated population sizes (default 1,8,64; --quick: 1,4)")
    p.add_argument("--baseline-p", type=int, default=None, help="P of the separate processes (default 8; --quick: the largest --p)")
    p.add_argument("--set", action="append", default=None, help="overrides of the base config (repeatable; replace the mode's: --quick sets "
                   "run.iterations=6 and run.evaluate=true)")
    p.add_argument("--sync-updates", type=int, default=16, help="population updates under sync debug mode (CUDA)")
    p.add_argument("--dry-run", action="store_true", help="write the configs and print the commands only")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    args = p.parse_args()
    mode = QUICK if args.quick else FULL
    config = args.config or mode["config"]
    ps = sorted({int(x) for x in (args.p or mode["p"]).split(",") if x.strip()})
    baseline_p = args.baseline_p or mode["baseline_p"] or max(ps)
    overrides = mode["overrides"] if args.set is None else list(args.set)
    out = args.out or (quick_path("population_cpu_quick") if args.quick else results_path("population"))
    if 1 not in ps:
        raise SystemExit("--p: the list must hold 1 (the speedup is over one member)")
    cores = os.cpu_count() or 1
    device = "cuda" if torch.cuda.is_available() else "cpu"

    base = base_settings(config, overrides)
    tmp = Path(tempfile.mkdtemp(prefix="population_bench_"))
    try:
        runs = plan(tmp, base, ps, baseline_p, cores)
        if args.dry_run:
            for run in runs:
                print(shown(" ".join(run["cmd"]), tmp))
            return 0
        shown_base = json.loads(shown(json.dumps(base), tmp))
        shown_base["run"]["dir"] = f"{TMP}/runs"
        result: dict[str, Any] = {
            **result_header("population", device=device, config=repo_path(ROOT / config), key="benchmark"),
            "mode": "quick" if args.quick else "full", "overrides": overrides, "settings": shown_base,
            "cores": cores, "commands": [shown(" ".join(r["cmd"]), tmp) for r in runs],
            "configs": {shown(str(r["config_file"]), tmp): {
                "base": repo_path(ROOT / config), "overrides": overrides, "run.dir": f"{TMP}/runs",
                "run.name": r["run_name"], "population": r["population"]} for r in runs},
            "definitions": {
                "wall_s": "subprocess start to exit: start-up, training, validation, checkpoints, evaluation",
                "env_steps": f"sum over members of the last metrics.jsonl row's {STEPS_KEY}",
                "updates": f"sum over members of the last metrics.jsonl row's {UPDATES_KEY}",
                "env_steps_per_s": "env_steps / wall_s", "updates_per_s": "updates / wall_s",
                "agents_per_hour": "p * 3600 / wall_s",
                "steady_env_steps_per_s": "median over iterations i of sum_k steps[k,i] / T_i; population: "
                                          "T_i = the population's timing.iteration_train_s[i] (its own clock); "
                                          "processes: T_i = ceil(p / parallel) * max_k time_this_iter_s[k,i]",
                "steady_updates_per_s": "as steady_env_steps_per_s with the updates per iteration",
                "iteration_s": "T_i, iteration by iteration", "iteration_s_median": "median over iterations of T_i",
                "build_s": "population: population.json's timing.build_s (the members, their population update and "
                           "rollout built; Python and Ray start-up not included)",
                "training_s": "population: timing.training_s (sampling and adding, updates, the rest of the "
                              "members' iterations; validation, logs and checkpoints excluded)",
                "training_clock_env_steps_per_s": "population: timing.env_steps_per_s = env steps / training_s",
                "graph_captures": "population: CUDA graphs its population update captured (0 on a CPU)",
                "member_iteration_s_median": "median over members and iterations of time_this_iter_s (a "
                                             "population member's covers only the part of its iteration after "
                                             "the population's shared sampling and update)",
            },
            "runs": [],
        }
        for run in runs:
            wall, rc = run_one(run, tmp)
            if rc != 0:
                result["runs"].append({"side": run["side"], "p": run["p"], "wall_s": wall, "exit_code": rc,
                                       "error": f"exit code {rc}"})
                continue
            result["runs"].append({**measure(run, tmp / "runs" / run["run_name"], wall), "exit_code": 0})
        print_table(result["runs"], ["side", "p", "wall_s", "env_steps_per_s", "steady_env_steps_per_s",
                                     "updates_per_s", "agents_per_hour"], width=22)
        ours = {r["p"]: r for r in result["runs"] if r["side"] == "population" and r["exit_code"] == 0}
        procs = next((r for r in result["runs"] if r["side"] == "processes" and r["exit_code"] == 0), None)
        big = max(ps)

        def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
            return None if a is None or b is None else a / b

        mine = ours.get(baseline_p)
        comparison = {
            "p": baseline_p, "parallel": procs["parallel"] if procs else min(baseline_p, cores),
            "agents_per_hour_vs_processes": ratio(mine and mine["agents_per_hour"], procs and procs["agents_per_hour"]),
            "wall_ratio_vs_processes": ratio(mine and mine["wall_s"], procs and procs["wall_s"]),
            "env_steps_per_s_vs_processes": ratio(mine and mine["env_steps_per_s"], procs and procs["env_steps_per_s"]),
            "steady_env_steps_per_s_vs_processes": ratio(mine and mine["steady_env_steps_per_s"],
                                                         procs and procs["steady_env_steps_per_s"]),
        }
        result["comparison"] = comparison
        try:
            syncs = population_syncs(tmp / f"pop_p{baseline_p}.yaml", args.sync_updates) if baseline_p in ps \
                else {"value": None, "reason": f"--baseline-p {baseline_p} is not in --p"}
        except Exception as exc:  # keep the timed runs: the JSON says why the count is missing
            syncs = {"value": None, "reason": shown(f"measurement failed: {type(exc).__name__}: "
                                                    f"{str(exc).splitlines()[0] if str(exc) else ''}", tmp)}
        result["syncs"] = syncs
        top, one = ours.get(big), ours.get(1)
        summary = {
            "p": ps,
            f"aggregate_env_steps_per_s_p{big}": top and top["env_steps_per_s"],
            f"aggregate_env_steps_per_s_p{big}_steady": top and top["steady_env_steps_per_s"],
            f"speedup_vs_one_member_p{big}": ratio(top and top["env_steps_per_s"], one and one["env_steps_per_s"]),
            f"speedup_vs_one_member_p{big}_steady": ratio(top and top["steady_env_steps_per_s"],
                                                          one and one["steady_env_steps_per_s"]),
            f"wall_s_p{big}": top and top["wall_s"],
            f"build_s_p{big}": top and top.get("build_s"),
            f"training_clock_env_steps_per_s_p{big}": top and top.get("training_clock_env_steps_per_s"),
            f"graph_captures_p{big}": top and top.get("graph_captures"),
            "syncs_per_population_update": syncs["value"],
            "agents_per_hour_vs_processes": comparison["agents_per_hour_vs_processes"],
            "agents_per_hour_vs_processes_p": baseline_p,
            "wall_ratio_vs_processes": comparison["wall_ratio_vs_processes"],
        }
        if syncs["value"] is None:
            summary["syncs_per_population_update_reason"] = syncs["reason"]
        result["summary"] = summary
        print_summary(summary)
        write_json(result, out)
        failed = [r for r in result["runs"] if r["exit_code"] != 0]
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
