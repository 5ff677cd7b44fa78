"""A validation-only sweep of training variants on the 10-stock panel (``configs/panel.yaml``); the
sealed 2015-2022 test is read once, afterwards, for the chosen variant only (``--final-test``).

How to run (from the repository root; every run uses a GPU when there is one)::

    python -m benchmarks.panel_sweep --jobs 8 --seeds 0,1,2        # one factor at a time around the config
    python -m benchmarks.panel_sweep --full --jobs 16 --seeds 0,1   # the whole factorial of --factors
    python -m benchmarks.panel_sweep --quick                        # smoke: 2 variants x 3 iterations (temp JSON)
    python -m benchmarks.panel_sweep --final-test --out benchmarks/results/realdata_sweep.json

Factors (``--factors``; the first level of each is the config's own setting):

* ``budget`` 1, 5, 20: iterations x B, the epsilon schedule's steps x B (the same exploration per
  env step seen), validation and checkpoints every ``eval_every x B`` (the same 12 passes);
* ``turnover`` 0, 5e-4, 2e-3: ``env.turnover_penalty``, the reward's charge per unit traded (the panel
  pays 3 bps per unit: half of its 5 bps spread plus the 0.5 bps fee);
* ``hidden`` 64x64, 32: ``model.hidden``;
* ``reward`` plain, vol: ``env.reward_vol_scaled`` with ``env.reward_scale: 1.0`` (P&L in units of the
  bar's volatility);
* ``replay`` 1, 4: ``algo.replay_ratio`` (updates per env step x batch).

Each (variant, seed) is one ``rl-zerosync train --config configs/panel.yaml --set run.evaluate=false``:
the run validates on 2010-2014 as configured and keeps its best checkpoint, and **never walks the
test segment** (no end-of-run evaluation). What the sweep reads of a run is ``metrics.jsonl`` and
``validation_returns/`` only (:func:`read_run`): the selected checkpoint's per-asset validation
returns give its validation Sharpe with the calibrated interval and the paired interval against
buy-and-hold on the same validation bars. The variant chosen is the one with the highest mean
validation Sharpe over seeds (:func:`choose`); the trials are counted for the deflated Sharpe as
the effective number among every validation pass of every run (the checkpoints compared inside each
run and the variants and seeds compared across runs). ``--final-test`` then evaluates the chosen
variant's runs (``rl-zerosync evaluate``: validation and test) once and adds ``final_test`` to the
JSON; a second ``--final-test`` on the same JSON is refused.

Writes ``benchmarks/results/realdata_sweep.json`` (``--out``) with the date, hardware, versions, the
config and every variant's numbers; the runs' logs go to ``<out dir>/logs/panel_sweep/``.

Results to expect: on the CPU budget the agent trades much less with a turnover penalty, and its
validation Sharpe stays below buy-and-hold's (+0.64 on 2010-2014) with intervals that span zero.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from benchmarks.common import parser, print_table, quick_path, repo_relative, result_header, results_path, write_json

ROOT = Path(__file__).resolve().parents[1]
PANEL = "configs/panel.yaml"
FACTORS: dict[str, tuple[str, ...]] = {
    "budget": ("1", "5", "20"), "turnover": ("0", "5e-4", "2e-3"), "hidden": ("64x64", "32"),
    "reward": ("plain", "vol"), "replay": ("1", "4"),
}
"""Each factor's levels; the first is the config's own setting."""
QUICK_VARIANTS = ({}, {"turnover": "2e-3"})


# ----------------------------------------------------------------------------------------- variants
def parse_factors(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``name=l1,l2,...`` items over :data:`FACTORS` (a factor left out keeps its levels)."""
    out = dict(FACTORS)
    for item in items:
        name, _, levels = item.partition("=")
        if name not in FACTORS or not levels:
            raise SystemExit(f"--factors {item!r}: expected NAME=L1,L2,... with NAME one of {sorted(FACTORS)}")
        values = tuple(v.strip() for v in levels.split(","))
        bad = [v for v in values if v not in FACTORS[name]]
        if bad:
            raise SystemExit(f"--factors {name}: unknown level(s) {bad}; allowed {list(FACTORS[name])}")
        out[name] = values
    return out


def variants(factors: Mapping[str, Sequence[str]], full: bool) -> list[dict[str, str]]:
    """The variants as ``{factor: level}`` of the non-default levels: the whole factorial (``full``), or
    the config as it is plus one factor changed at a time."""
    if full:
        grid = itertools.product(*[[(f, lv) for lv in levels] for f, levels in factors.items()])
        out = [{f: lv for f, lv in combo if lv != FACTORS[f][0]} for combo in grid]
    else:
        out = [{}] + [{f: lv} for f, levels in factors.items() for lv in levels if lv != FACTORS[f][0]]
    unique = []
    for v in out:
        if v not in unique:
            unique.append(v)
    return unique


def variant_name(variant: Mapping[str, str]) -> str:
    return "_".join(f"{f}{variant[f].replace('.', 'p').replace('-', 'm')}" for f in FACTORS if f in variant) or "config"


def overrides(variant: Mapping[str, str], base, iterations: int | None) -> list[str]:
    """``--set`` items of ``variant`` on the settings ``base``. ``iterations``: the 1x budget instead of
    the config's; the epsilon schedule, validation and checkpoints scale with the run's length (the
    same exploration per fraction of the run, the same number of validation passes)."""
    its0 = base.run.iterations
    its = (iterations or its0) * int(variant.get("budget", "1"))
    stretch = its / its0
    eps = [[int(round(t * stretch)), float(e)] for t, e in base.algo.epsilon]
    sets = [f"run.iterations={its}", f"algo.epsilon={json.dumps(eps)}",
            f"run.eval_every={max(1, round(base.run.eval_every * stretch))}",
            f"run.checkpoint_every={max(1, round(base.run.checkpoint_every * stretch))}"]
    if "turnover" in variant:
        sets.append(f"env.turnover_penalty={float(variant['turnover'])}")
    if "hidden" in variant:
        sets.append(f"model.hidden={json.dumps([int(x) for x in variant['hidden'].split('x')])}")
    if variant.get("reward") == "vol":
        sets += ["env.reward_vol_scaled=true", "env.reward_scale=1.0"]
    if "replay" in variant:
        sets.append(f"algo.replay_ratio={float(variant['replay'])}")
    return sets


# ----------------------------------------------------------------------------------------- runs
def train_run(runs: Path, name: str, seed: int, sets: Sequence[str], logs: Path, threads: int) -> dict[str, Any]:
    """One ``rl-zerosync train`` of the panel without the end-of-run evaluation (the test is not walked)."""
    from rl_zerosync.run.children import spawn

    args = ["train", "--config", PANEL, "--set", f"run.dir={runs}", "--set", f"run.name={name}",
            "--set", f"run.seed={seed}", "--set", "run.num_cpus=1", "--set", "run.evaluate=false",
            *[x for s in sets for x in ("--set", s)], "--overwrite"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(logs / f"{name}.log", "w") as log:
        proc = spawn(["env", *[f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED")],
                      sys.executable, "-m", "rl_zerosync", *args], log)
        rc = proc.wait()
    return {"name": name, "seed": seed, "exit_code": rc, "wall_s": time.perf_counter() - t0,
            "run_dir": repo_relative(runs / name), "log": repo_relative(logs / f"{name}.log"),
            "command": "rl-zerosync " + " ".join(args)}


def read_run(run_dir: Path) -> dict[str, Any]:
    """What the sweep knows of a run, from ``metrics.jsonl`` and ``validation_returns/`` only: the
    selected (best validation) pass's iteration, logged metrics and per-asset returns, and every
    pass's returns (the trials)."""
    from rl_zerosync.evidence.block import VALIDATION_RETURNS_DIR

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    passes = [r for r in rows if "eval/validation_sharpe" in r]
    if not passes:
        raise ValueError(f"{run_dir}: no validation pass in metrics.jsonl")
    best = int(passes[-1]["eval/best_iteration"])
    chosen = next(r for r in passes if int(r["iteration"]) == best)
    folder = run_dir / VALIDATION_RETURNS_DIR

    def nets(it: int) -> list[np.ndarray]:
        with np.load(folder / f"{it:08d}.npz") as z:
            return [z[f"asset_{i}"].astype(np.float64) for i in range(len(z.files))]

    train = [v for r in rows for k, v in r.items() if k.startswith("env_runners/") and k.endswith("sharpe_mean")]
    return {"best_iteration": best, "passes": len(passes), "logged": {k[len("eval/"):]: v for k, v in chosen.items()
                                                                      if k.startswith("eval/validation_")},
            "nets": nets(best), "all_passes": [np.concatenate(nets(int(r["iteration"]))) for r in passes],
            "train_episode_sharpe_last": float(np.mean(train[-5:])) if train else None}


def buy_and_hold_validation(settings) -> tuple[list[np.ndarray], float]:
    """Buy-and-hold's per-asset net returns on the validation segment (the bars the runs validate on)
    and the data's bars per year."""
    from rl_zerosync.data import make_market
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.evaluation.rules import RuleVariant, RuleWalk
    from rl_zerosync.kernels.route import routing_thresholds

    data = make_market(dict(settings.data), "validation")
    walk = RuleWalk(data, EnvParams.from_dict(settings.env), routing_thresholds(settings.runner),
                    rule_variants=[RuleVariant("buy_and_hold")])
    recs = walk.run()["buy_and_hold"]
    return [np.asarray(r["net"], dtype=np.float64) for r in recs], float(data.periods_per_year)


def _iv(iv: Mapping[str, Any]) -> dict[str, Any]:
    return {"estimate": iv["estimate"], "ci95": [iv["low"], iv["high"]], "se": iv["se"], "method": iv["method"]}


def summarise(name: str, variant: Mapping[str, str], reads: Sequence[Mapping[str, Any]], bench: Sequence[np.ndarray],
              periods_per_year: float) -> dict[str, Any]:
    """A variant's validation numbers over its seeds: the mean of per-asset Sharpes of each seed's
    selected checkpoint with the calibrated interval (bars in blocks shared by the assets, seeds drawn
    with replacement), the same paired against buy-and-hold, turnover, and per seed what was logged."""
    from rl_zerosync.evidence.calibrated import panel_interval

    agent = [r["nets"] for r in reads]
    alone = panel_interval(agent, None, periods_per_year, independent_series=False)
    paired = panel_interval(agent, [list(bench)] * len(agent), periods_per_year, independent_series=False)
    per_seed = [{"best_iteration": r["best_iteration"], "passes": r["passes"],
                 "validation_sharpe": r["logged"]["validation_sharpe"],
                 "validation_turnover_per_bar": r["logged"]["validation_turnover_per_bar"],
                 "train_episode_sharpe_last": r["train_episode_sharpe_last"]} for r in reads]
    return {"variant": name, "factors": dict(variant), "seeds": len(reads), "validation_sharpe": _iv(alone),
            "validation_minus_buy_and_hold": _iv(paired),
            "validation_turnover_per_bar": float(np.mean([s["validation_turnover_per_bar"] for s in per_seed])),
            "per_seed": per_seed}


def choose(summaries: Sequence[Mapping[str, Any]], all_passes: Sequence[np.ndarray]) -> dict[str, Any]:
    """The variant with the highest mean validation Sharpe over seeds (the first on a tie), its
    deflated Sharpe over the effective number of trials among ``all_passes`` (every validation pass of
    every run: [bars] each), and how the trials were counted. Reads validation numbers only."""
    from rl_zerosync.evidence.calibrated import deflated_sharpe, effective_trials

    best = max(summaries, key=lambda s: s["validation_sharpe"]["estimate"])
    n, how = effective_trials(np.column_stack(all_passes))
    v = best["validation_sharpe"]
    dsr = deflated_sharpe(v["estimate"], v["se"], n)
    return {"variant": best["variant"], "rule": "highest mean validation Sharpe over seeds",
            "validation_sharpe": v, "validation_minus_buy_and_hold": best["validation_minus_buy_and_hold"],
            "variants_compared": len(summaries), "runs": sum(s["seeds"] for s in summaries),
            "trials": {"passes": len(all_passes), "effective": n, "counted": how},
            "deflated_sharpe": dsr}


def select(designed: Sequence[Mapping[str, str]], done: Sequence[Mapping[str, Any]], bench: Sequence[np.ndarray],
           periods_per_year: float) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Every variant's validation summary over its finished runs (``done``: ``variant``, ``run_dir``,
    ``exit_code``) and the choice among them (:func:`choose`); reads :func:`read_run` only."""
    summaries, all_passes = [], []
    for v in designed:
        reads = [read_run(ROOT / r["run_dir"]) for r in done if r["variant"] == variant_name(v) and r["exit_code"] == 0]
        if reads:
            summaries.append(summarise(variant_name(v), v, reads, bench, periods_per_year))
            all_passes += [c for r in reads for c in r["all_passes"]]
    return summaries, (choose(summaries, all_passes) if summaries else None)


# ----------------------------------------------------------------------------------------- the test, once
def final_test(out: Path, jobs: int, logs: Path) -> dict[str, Any]:
    """Evaluate the chosen variant's runs (validation and the sealed test) once; refused when ``out``
    already holds a final test."""
    from rl_zerosync.evaluation.evidence_report import read_returns
    from rl_zerosync.evidence.calibrated import panel_interval

    result = json.loads(out.read_text())
    if result.get("final_test"):
        raise SystemExit(f"{out}: the test was already read for {result['final_test']['variant']!r} "
                         f"({result['final_test']['date']}); the sealed test is read once")
    chosen = result["chosen"]["variant"]
    runs = [r for r in result["runs"] if r["variant"] == chosen and r["exit_code"] == 0]

    def evaluate(run: Mapping[str, Any]) -> dict[str, Any]:
        log = logs / f"{run['name']}_final_test.log"
        with open(log, "w") as f:
            rc = subprocess.call([sys.executable, "-m", "rl_zerosync", "evaluate", "--checkpoint",
                                  str(ROOT / run["run_dir"])], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        report = json.loads((ROOT / run["run_dir"] / "evaluation" / "metrics.json").read_text()) if rc == 0 else {}
        s = report.get("summary", {})
        keys = ("sharpe", "test_sharpe_ci95", "buy_and_hold_sharpe", "deployed", "deployed_test_sharpe",
                "deployed_test_sharpe_ci95", "deployed_minus_buy_and_hold_ci95", "turnover_per_bar",
                "train_sharpe", "validation_sharpe")
        return {"name": run["name"], "seed": run["seed"], "exit_code": rc, "log": repo_relative(log),
                **{k: s.get(k) for k in keys}}

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        per_seed = list(pool.map(evaluate, runs))
    ok = [ROOT / r["run_dir"] / "evaluation" for r, e in zip(runs, per_seed) if e["exit_code"] == 0]
    pooled = {}
    if ok:
        ret = [read_returns(d, "test") for d in ok]
        p = ret[0]["periods_per_year"]
        agent = [r["agent"] for r in ret]
        pooled = {"agent_test_sharpe": _iv(panel_interval(agent, None, p, independent_series=False)),
                  "agent_minus_buy_and_hold": _iv(panel_interval(agent, [r["buy_and_hold"] for r in ret], p,
                                                                 independent_series=False)),
                  "buy_and_hold_test_sharpe": _iv(panel_interval([ret[0]["buy_and_hold"]], None, p,
                                                                 independent_series=False))}
    from benchmarks.common import utc_date

    result["final_test"] = {"variant": chosen, "date": utc_date(), "per_seed": per_seed, "pooled_over_seeds": pooled,
                            "how": "rl-zerosync evaluate on each seed's best-validation checkpoint (validation and "
                                   "the sealed test); pooled: seeds drawn with replacement, bars in shared blocks"}
    write_json(result, out)
    return result["final_test"]


# ----------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    from rl_zerosync.config.settings import load
    from rl_zerosync.evidence.calibrated import panel_interval

    p = parser(__doc__, out=results_path("realdata_sweep"),
               quick="smoke: 2 variants x 3 iterations, seed 0 (temp JSON)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds per variant (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel subprocesses (default 1)")
    p.add_argument("--iterations", type=int, default=None, help="the 1x budget (default: the config's 60)")
    p.add_argument("--factors", nargs="*", default=[], help="NAME=L1,L2 restricting a factor's levels")
    p.add_argument("--full", action="store_true", help="the whole factorial (default: one factor at a time)")
    p.add_argument("--variants", default=None, help="comma-separated variant names to run (of those designed)")
    p.add_argument("--runs", default="runs/panel_sweep", help="where the runs go (default runs/panel_sweep: "
                   "--final-test evaluates the chosen runs there)")
    p.add_argument("--final-test", action="store_true", help="read the sealed test once for --out's chosen variant")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    logs = out.parent / "logs" / "panel_sweep"
    logs.mkdir(parents=True, exist_ok=True)
    if args.final_test:
        print(json.dumps(final_test(out, args.jobs, logs), indent=1, default=str))
        return 0
    base = load(ROOT / PANEL)
    if args.quick:
        designed, seeds, args.iterations = [dict(v) for v in QUICK_VARIANTS], [0], 3
        out = out if args.out != results_path("realdata_sweep") else Path(quick_path("realdata_sweep"))
    else:
        designed = variants(parse_factors(args.factors), args.full)
        seeds = [int(s) for s in args.seeds.split(",")]
    if args.variants:
        wanted = args.variants.split(",")
        unknown = sorted(set(wanted) - {variant_name(v) for v in designed})
        if unknown:
            raise SystemExit(f"--variants: unknown {unknown}; designed: {[variant_name(v) for v in designed]}")
        designed = [v for v in designed if variant_name(v) in wanted]
    if args.quick and args.runs == p.get_default("runs"):
        runs = Path(tempfile.mkdtemp(prefix="panel_sweep_")).resolve()
    else:
        runs = (ROOT / args.runs).resolve()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    jobs = [(variant_name(v), v, seed, overrides(v, base, args.iterations)) for v in designed for seed in seeds]
    result = result_header("realdata_sweep", device=device, config={
        "config": PANEL, "selection_segment": "validation (2010-01-04 .. 2014-12-31)", "test_read": False,
        "seeds": seeds, "jobs": args.jobs, "threads_per_job": threads, "one_x_iterations": args.iterations or
        base.run.iterations, "design": "full factorial" if args.full else "one factor at a time",
        "factors": {f: list(v) for f, v in parse_factors(args.factors).items()}, "quick": args.quick,
        "variants": {variant_name(v): {"factors": v, "set": overrides(v, base, args.iterations)} for v in designed}})
    print(f"{len(jobs)} runs ({len(designed)} variants x {len(seeds)} seeds), {args.jobs} at a time -> {runs}",
          flush=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        def one(job):
            name, _, seed, sets = job
            return {"variant": name, **train_run(runs, f"{name}_s{seed}", seed, sets, logs, threads)}

        done = list(pool.map(one, jobs))
    for r in done:
        print(f"{r['name']}: exit {r['exit_code']} in {r['wall_s']:.0f} s", flush=True)
    result["runs"] = done
    bench, ppy = buy_and_hold_validation(base)
    result["buy_and_hold_validation_sharpe"] = _iv(panel_interval([bench], None, ppy, independent_series=False))
    result["variants"], result["chosen"] = select(designed, done, bench, ppy)
    summaries = result["variants"]
    rows = [{"variant": s["variant"], "seeds": s["seeds"], "val Sharpe": s["validation_sharpe"]["estimate"],
             "CI": _pair(s["validation_sharpe"]["ci95"]), "- B&H": s["validation_minus_buy_and_hold"]["estimate"],
             "- B&H CI": _pair(s["validation_minus_buy_and_hold"]["ci95"]),
             "turnover": s["validation_turnover_per_bar"]}
            for s in summaries]
    print_table(rows, ("variant", "seeds", "val Sharpe", "CI", "- B&H", "- B&H CI", "turnover"), width=14,
                title="validation only (2010-2014): each seed's best-validation checkpoint")
    if result["chosen"]:
        c = result["chosen"]
        print(f"chosen on validation: {c['variant']} ({c['validation_sharpe']['estimate']:+.2f}); DSR "
              f"{c['deflated_sharpe']['value']:.2f} over {c['trials']['effective']:.1f} effective trials "
              f"({c['trials']['passes']} passes)", flush=True)
    write_json(result, out)
    return max((r["exit_code"] for r in done), default=0)


def _pair(pair) -> str:
    return f"[{pair[0]:+.2f}, {pair[1]:+.2f}]"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
