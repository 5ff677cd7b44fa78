"""Out-of-sample learning benchmark: seeds, budgets, rule baselines, validation cost.

How to run (one GPU; Ray 2.60 installed)::

    python -m benchmarks.learning                              # local.yaml, 5 seeds, 1x and 10x budgets
    python -m benchmarks.learning --quick                      # CPU-sized: smoke.yaml, held-out series
    python -m benchmarks.learning --sweep --out benchmarks/results/learning_sweep.json   # validation only
    python -m benchmarks.learning --from-sweep benchmarks/results/learning_sweep.json    # its choice, scored

For every budget (``run.iterations`` x B) the config trains once per seed (``rl-zerosync train
--seeds``; ``--parallel`` at a time on the one GPU), the policy is selected on validation
(``checkpoint_best/``) and scored on the held-out test segment beside the rules (flat,
buy-and-hold, momentum, mean reversion; their variants chosen on validation, frozen for test).
``--real`` adds the walk-forward evaluation of ``configs/walkforward_googl.yaml`` (a real daily
price file) per seed. The validation pass is timed on 8 assets x 30k validation bars against one
training iteration of the config. JSON -> ``benchmarks/results/learning.json``; ``summary`` holds
``seeds``, ``test_sharpe_mean``, ``test_sharpe_ci95``, ``best_rule_test_sharpe_mean``,
``agent_minus_best_rule``, ``test_sharpe_mean_10x_budget`` and ``train_minus_test_sharpe``, and the
evidence (:mod:`rl_zerosync.evidence.block`): ``ci_method`` (what the intervals resample: seeds,
assets or held-out series, and bars), ``test_sharpe_ci95`` and ``agent_minus_best_rule_ci95`` (paired),
``deflated_sharpe`` and ``trials`` (what N counts in ``trials_counted``), ``pbo`` (CSCV over the rule
variants), ``heldout_test_series`` (0: the test segment of the training series).

``--sweep`` trains every :data:`SWEEP` variant per seed and reads validation only (the runs end
without their evaluation, ``run.evaluate=false``; no test segment is read); ``chosen_on_validation``
is the variant with the highest mean best-validation Sharpe. ``--from-sweep FILE`` adds that
variant's overrides and counts every validation pass of the sweep in the DSR's trials.

``--quick`` (one CPU core, a few minutes): ``configs/smoke.yaml`` on the sealed held-out layout
(:data:`QUICK_OVERRIDES`: validation 8 and test 32 held-out series of 1,000 bars, never trained on),
seeds 0 and 1, one budget, no validation timing; JSON -> ``benchmarks/results/learning_cpu_quick.json``.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import parser, quick_path, result_header, results_path, write_json

ROOT = Path(__file__).resolve().parent.parent
QUICK_OVERRIDES = ["data.heldout_validation_series=8", "data.heldout_test_series=32", "data.heldout_bars=1000",
                   "run.num_cpus=1"]
"""The ``--quick`` layout: sealed held-out validation and test series (CPU-sized)."""

SWEEP = {
    # name: overrides on top of the config (each run with --budget-iterations iterations)
    "as_shipped_before": ["data.regenerate_every=0", "env.window=16", "model.layernorm=false",
                          "algo.weight_decay=0.0"],
    "fresh_data": ["data.regenerate_every=10", "env.window=16", "model.layernorm=false", "algo.weight_decay=0.0"],
    "fresh_window64": ["data.regenerate_every=10", "env.window=64", "model.layernorm=false",
                       "algo.weight_decay=0.0"],
    "fresh_window64_layernorm": ["data.regenerate_every=10", "env.window=64", "model.layernorm=true",
                                 "algo.weight_decay=0.0"],
    "fresh_window64_layernorm_wd": ["data.regenerate_every=10", "env.window=64", "model.layernorm=true",
                                    "algo.weight_decay=0.0001"],
    "fixed_window64_layernorm": ["data.regenerate_every=0", "env.window=64", "model.layernorm=true",
                                 "algo.weight_decay=0.0"],
}


RECIPES = {
    # Candidates for a recipe that closes the gap to the oracle, on top of local.yaml as shipped;
    # swept with --sweep --recipes (validation only), every validation pass counted as a trial.
    "shipped": [],
    "double_q": ["algo.double_q=true"],
    "long_horizon": ["algo.gamma=0.995", "algo.n_step=5"],
    "budget_3x": ["run.iterations=300", "run.eval_every=15"],
    "dueling": ["model.dueling=true"],
    "wide_net": ["model.hidden=[512,512]"],
}


def time_validation(config: str, device: str) -> dict:
    """Seconds of one validation pass (split walk, as in training), one whole walk and the rules
    walk, on 8 assets x 30k validation bars, with the config's network."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import FeatureConfig, make_market
    from rl_zerosync.evaluation.rules import RuleWalk
    from rl_zerosync.evaluation.walk import SegmentWalk
    from rl_zerosync.config.settings import load
    from rl_zerosync.evaluation.validation import SPLIT_BARS, SPLIT_WARMUP

    s = load(config)
    data_cfg = {**s.data, "num_assets": 8, "num_bars": 200_000, "regenerate_every": 0}
    data = make_market(data_cfg, "validation").to(device)
    params = EnvParams.from_dict(s.env)
    import gymnasium as gym

    from rl_zerosync.env_runner.gpu_env_runner import observation_space
    from rl_zerosync.module import make_module_spec

    spec = make_module_spec(observation_space=observation_space(params, FeatureConfig.from_dict(s.data.get("features"))),
                            action_space=gym.spaces.Discrete(5), action_mode="routed", hidden=list(s.model.hidden),
                            layernorm=s.model.layernorm)
    module = spec.build().to(device).eval()

    def act(obs, state):
        with torch.inference_mode():
            return module.greedy_actions(module.q_values(obs))

    out = {"assets": 8, "validation_bars": int(data.length[0]) - int(data.valid_start[0])}
    for name, kw in (("split", {"split_bars": SPLIT_BARS, "split_warmup": SPLIT_WARMUP}), ("whole", {})):
        walk = SegmentWalk(data, params, routing={}, **kw)
        t0 = time.perf_counter()
        walk.run(act, key="agent")  # capture (and a first pass)
        first = time.perf_counter() - t0
        times = []
        for _ in range(5 if name == "split" else 2):
            t0 = time.perf_counter()
            walk.run(act, key="agent")
            times.append(time.perf_counter() - t0)
        out[f"{name}_walk_s"] = statistics.median(times)
        out[f"{name}_walk_first_s"] = first
        out[f"{name}_steps"] = walk.num_chunks * walk.chunk
    t0 = time.perf_counter()
    RuleWalk(data, params, {}).run()
    out["rules_walk_s"] = time.perf_counter() - t0
    return out


def iteration_seconds(run_dir: Path) -> float:
    """Median ``time_this_iter_s`` of the training iterations of a run (metrics.jsonl)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    vals = [r["time_this_iter_s"] for r in rows if "time_this_iter_s" in r and "eval/validation_sharpe" not in r]
    return statistics.median(vals) if vals else float("nan")


def evidence_summary(seeds_summary: dict, per_seed: dict) -> dict:
    """The summary's evidence keys from a seeds report (intervals over seeds and bars, DSR, trials)
    and its seeds' evaluations (PBO over the rule variants, the held-out test series)."""
    ev = seeds_summary.get("evidence") or {}
    pbo = [p.get("pbo") for p in per_seed.values() if p.get("pbo") is not None]
    return {"ci_method": seeds_summary.get("ci_method"), "deflated_sharpe": seeds_summary.get("deflated_sharpe"),
            "psr": seeds_summary.get("psr"), "trials": seeds_summary.get("trials"),
            "dsr_trials": seeds_summary.get("dsr_trials"), "dsr_variance": seeds_summary.get("dsr_variance"),
            "dsr_expected_max": seeds_summary.get("dsr_expected_max"), "dsr_sharpe": seeds_summary.get("dsr_sharpe"),
            "dsr_on": "the mean of the seeds' selected validation Sharpes (each seed selected among its checkpoints)",
            "coverage": coverage_summary(),
            "trials_counted": (ev.get("trials") or {}).get("counted"),
            "pbo": statistics.mean(pbo) if pbo else None,
            "heldout_test_series": next(iter(per_seed.values())).get("heldout_test_series", 0),
            "test_sharpe_seed_spread": seeds_summary.get("test_sharpe_seed_range",
                                                         seeds_summary.get("test_sharpe_seed_ci95"))}


def coverage_summary() -> dict | None:
    """Coverage and width ratio of the calibrated intervals on the project's generator
    (``benchmarks/results/coverage.json``, ``python -m benchmarks.coverage``), or None before that run."""
    path = Path(results_path("coverage"))
    if not path.is_file():
        return None
    res = json.loads(path.read_text())["results"]
    return {k: {"coverage": res[k]["calibrated"]["coverage"], "width_ratio": res[k]["calibrated"]["width_ratio"],
                "sets": res[k]["calibrated"]["sets"]} for k in ("level", "paired_difference")}


def best_on_validation(sweep: dict) -> str:
    """The rule of a ``--sweep``: the finished variant with the highest mean best-validation Sharpe."""
    done = {k: v for k, v in sweep.items() if "summary" in v}
    return max(done, key=lambda k: done[k]["summary"]["best_validation_sharpe_mean"])


def sweep_choice(path: str) -> dict:
    """The variant of a ``--sweep`` file with the highest mean best-validation Sharpe (the only thing the
    sweep measured), its overrides, and the trials the sweep made (every validation pass of every
    variant and seed) for the DSR of the runs that use the choice."""
    d = json.loads(Path(path).read_text())
    done = {k: v for k, v in d["sweep"].items() if "summary" in v}
    if not done:
        raise SystemExit(f"--from-sweep {path}: no finished variant")
    if any(v["summary"].get("test_read", True) for v in done.values()):
        raise SystemExit(f"--from-sweep {path}: expected a validation-only sweep (test_read false)")
    name = best_on_validation(done)
    sharpes = [s for v in done.values() for p in v["per_seed"].values() for _, s in p["validation_curve"]]
    shown = Path(path).resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    return {"file": str(shown), "chosen": name, "overrides": list(done[name]["overrides"]), "variants": len(done),
            "trials": {"n": len(sharpes), "sharpes": sharpes,
                       "counted": f"{len(sharpes)} validation passes of the {len(done)} config variants swept "
                                  f"on validation ({shown})"}}


def run_budget(config, overrides, seeds, parallel, runs_dir, name, **kw):
    from rl_zerosync.run.seeds import train_seeds

    over = list(overrides) + [f"run.dir={runs_dir}", f"run.name={name}"]
    t0 = time.perf_counter()
    report = train_seeds(config, over, seeds, parallel=parallel, **kw)
    report["wall_s"] = time.perf_counter() - t0
    if report.get("partial"):  # interrupted: the finished seeds are in seeds.json, no summary to score
        raise SystemExit(f"{name}: the seeds run was interrupted (signal {report.get('interrupted_by')}) with "
                         f"seeds {report.get('unfinished_seeds')} unfinished; see {report.get('path')}")
    return report


def start_real(args, runs_dir: Path) -> dict:
    """Start the walk-forward (``--real-folds`` folds) of configs/walkforward_googl.yaml once per
    seed, the seeds in parallel background processes; :func:`finish_real` collects them."""
    import subprocess

    from rl_zerosync.run.seeds import parse_seeds

    real_cfg = ROOT / "configs" / "walkforward_googl.yaml"
    seeds = parse_seeds(args.real_seeds)
    procs = {}
    for seed in seeds:
        run_dir = runs_dir / f"googl_seed{seed}"
        run_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "rl_zerosync", "evaluate", "--walk-forward", str(args.real_folds),
               "--config", str(real_cfg), "--set", f"run.seed={seed}", "--set", f"run.dir={runs_dir}",
               "--set", f"run.name=googl_seed{seed}"]
        procs[seed] = subprocess.Popen(cmd, cwd=ROOT, stdout=open(run_dir / "walk_forward.log", "w"),
                                       stderr=subprocess.STDOUT)
    return procs


def finish_real(args, runs_dir: Path, procs: dict) -> dict:
    """Per seed the walk-forward's per-fold test numbers (and its pooled evidence), then the mean over
    seeds with its spread: a 95% interval from 5 seeds on, else the min..max range
    (:func:`rl_zerosync.run.seeds.seed_spread`)."""
    from rl_zerosync.run.seeds import seed_spread

    real_cfg = ROOT / "configs" / "walkforward_googl.yaml"
    t0 = time.perf_counter()
    per = {}
    for seed, proc in procs.items():
        proc.wait()
        report = json.loads((runs_dir / f"googl_seed{seed}" / "walk_forward.json").read_text())
        folds = [f["summary"] for f in report["folds"]]
        per[seed] = {
            "exit_code": proc.returncode, "folds": len(folds),
            "test_sharpe": [f["sharpe"] for f in folds],
            "best_rule": [f["best_rule"] for f in folds],
            "best_rule_test_sharpe": [f["best_rule_sharpe"] for f in folds],
            "buy_and_hold_test_sharpe": [f["buy_and_hold_sharpe"] for f in folds],
            "pooled": report["pooled"],
        }
    out: dict = {"config": str(real_cfg.relative_to(ROOT)), "folds": args.real_folds, "per_seed": per,
                 "wait_s_after_budgets": time.perf_counter() - t0}
    for key, src in (("test_sharpe", "test_sharpe"), ("best_rule_test_sharpe", "best_rule_test_sharpe"),
                     ("buy_and_hold_test_sharpe", "buy_and_hold_test_sharpe")):
        vals = [sum(p[src]) / len(p[src]) for p in per.values() if p[src]]
        if vals:
            mean, kind, spread = seed_spread(vals)
            out[f"{key}_mean"], out[f"{key}_{kind}"] = mean, spread
    diffs = [sum(a - b for a, b in zip(p["test_sharpe"], p["best_rule_test_sharpe"])) / len(p["test_sharpe"])
             for p in per.values() if p["test_sharpe"]]
    if diffs:
        mean, kind, spread = seed_spread(diffs)
        out["agent_minus_best_rule_mean"], out[f"agent_minus_best_rule_{kind}"] = mean, spread
    return out


def main() -> int:
    p = parser(__doc__, out=results_path("learning"), quick="CPU-sized: smoke config, 2 seeds, 1x/2x")
    p.add_argument("--config", default=str(ROOT / "configs" / "local.yaml"))
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--budgets", default="1,10", help="multiples of the config's run.iterations")
    p.add_argument("--parallel", type=int, default=5)
    p.add_argument("--set", action="append", default=[], help="extra overrides for every run")
    p.add_argument("--real", action="store_true", help="also walk-forward on configs/walkforward_googl.yaml")
    p.add_argument("--real-seeds", default="0,1,2")
    p.add_argument("--real-folds", type=int, default=4)
    p.add_argument("--skip-budgets", action="store_true", help="with --real: only the walk-forward part")
    p.add_argument("--sweep", action="store_true", help="run the SWEEP variants (1 budget) instead")
    p.add_argument("--sweep-only", action="append", default=[], help="with --sweep: these variants only")
    p.add_argument("--recipes", action="store_true", help="with --sweep: the RECIPES candidates instead of SWEEP")
    p.add_argument("--from-sweep", default=None,
                   help="a --sweep JSON: add its validation-chosen variant's overrides, count its trials in the DSR")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_learning"))
    p.add_argument("--no-timing", action="store_true")
    args = p.parse_args()
    from rl_zerosync.run.seeds import parse_seeds
    from rl_zerosync.config.settings import load

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.quick:
        args.config, args.seeds, args.budgets, args.parallel = str(ROOT / "configs" / "smoke.yaml"), "0,1", "1", 1
        args.set, args.no_timing = QUICK_OVERRIDES + list(args.set), True
        if args.out == results_path("learning"):
            args.out = quick_path("learning_cpu_quick")  # a smoke run never replaces committed results
    seeds = parse_seeds(args.seeds)
    sweep = sweep_choice(args.from_sweep) if args.from_sweep else None
    if sweep:
        args.set = list(args.set) + sweep["overrides"]
    base = load(args.config, args.set)
    shown = Path(args.config).resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown  # the JSON names repo files by repo path
    result: dict = {**result_header("learning", device=device, config=str(shown), key="benchmark"),
                    "overrides": args.set, "settings": base.to_dict(), "seeds": seeds}
    if sweep:
        result["from_sweep"] = {k: v for k, v in sweep.items() if k != "trials"} | {"trials": sweep["trials"]["n"]}
    runs_dir = Path(args.runs_dir)
    if args.sweep:
        from concurrent.futures import ThreadPoolExecutor

        if args.out == results_path("learning"):
            args.out = results_path("learning_sweep")  # a sweep never replaces the scored results

        table = RECIPES if args.recipes else SWEEP
        variants = {k: v for k, v in table.items() if not args.sweep_only or k in args.sweep_only}
        result["sweep"] = {}

        def one(item):
            name, over = item
            try:
                return name, over, run_budget(args.config, list(args.set) + over, seeds, len(seeds), runs_dir,
                                              f"sweep_{name}", test=False)
            except Exception as exc:  # keep the other variants
                return name, over, {"error": repr(exc)}

        # ``--parallel`` runs at a time: variants side by side, their seeds in parallel.
        with ThreadPoolExecutor(max(1, args.parallel // len(seeds))) as pool:
            for name, over, rep in pool.map(one, variants.items()):
                if "error" in rep:
                    result["sweep"][name] = {"overrides": over, **rep}
                    print(f"{name}: {rep['error']}", flush=True)
                    continue
                result["sweep"][name] = {"overrides": over, "summary": rep["summary"], "wall_s": rep["wall_s"],
                                         "per_seed": rep["per_seed"]}
                print(f"{name}: best validation sharpe {rep['summary']['best_validation_sharpe_mean']:+.3f} "
                      f"({rep['wall_s']:.0f} s)", flush=True)
                write_json(result, args.out)
        if any("summary" in v for v in result["sweep"].values()):  # what a later --from-sweep applies
            result["chosen_on_validation"] = best_on_validation(result["sweep"])
            print(f"chosen on validation: {result['chosen_on_validation']}", flush=True)
            write_json(result, args.out)
        if not args.no_timing:
            result["validation_timing"] = time_validation(args.config, device)
            write_json(result, args.out)
        return 0
    real_procs = start_real(args, runs_dir) if args.real else None
    if args.skip_budgets:
        if real_procs is not None:
            result["real"] = finish_real(args, runs_dir, real_procs)
        write_json(result, args.out)
        return 0
    budgets = [int(b) for b in args.budgets.split(",")]
    result["budgets"] = {}
    for b in budgets:
        over = list(args.set) + [f"run.iterations={base.run.iterations * b}"]
        rep = run_budget(args.config, over, seeds, args.parallel, runs_dir, f"learning_{b}x",
                         extra_trials=sweep["trials"] if sweep else None)
        rep["iteration_s_median"] = statistics.median(
            iteration_seconds(runs_dir / f"learning_{b}x" / f"seed{s}") for s in seeds)
        result["budgets"][f"{b}x"] = {"iterations": base.run.iterations * b, **rep}
        write_json(result, args.out)
    one = result["budgets"][f"{budgets[0]}x"]["summary"]
    summary = {
        "seeds": len(seeds),
        "test_sharpe_mean": one["test_sharpe_mean"],
        "test_sharpe_ci95": one["test_sharpe_ci95"],
        "best_validation_sharpe_mean": one["best_validation_sharpe_mean"],
        "best_rule_test_sharpe_mean": one["best_rule_test_sharpe_mean"],
        "agent_minus_best_rule": one["agent_minus_best_rule_mean"],
        "agent_minus_best_rule_ci95": one["agent_minus_best_rule_ci95"],
        "train_minus_test_sharpe": one.get("train_minus_test_sharpe_mean"),
        "rules_test_sharpe_mean": one["rules_test_sharpe_mean"],
        **evidence_summary(one, result["budgets"][f"{budgets[0]}x"]["per_seed"]),
    }
    if len(budgets) > 1:
        big = result["budgets"][f"{budgets[-1]}x"]["summary"]
        summary[f"test_sharpe_mean_{budgets[-1]}x_budget"] = big["test_sharpe_mean"]
        summary[f"test_sharpe_ci95_{budgets[-1]}x_budget"] = big["test_sharpe_ci95"]
        summary[f"agent_minus_best_rule_{budgets[-1]}x_budget"] = big["agent_minus_best_rule_mean"]
        summary[f"train_minus_test_sharpe_{budgets[-1]}x_budget"] = big.get("train_minus_test_sharpe_mean")
        summary["more_budget_not_worse"] = bool(big["test_sharpe_mean"] >= one["test_sharpe_mean"])
    summary["goal_agent_at_least_best_rule"] = bool(summary["agent_minus_best_rule"] >= 0.0)
    result["summary"] = summary
    write_json(result, args.out)
    if not args.no_timing:
        timing = time_validation(args.config, device)
        it_s = result["budgets"][f"{budgets[0]}x"]["iteration_s_median"]
        timing["training_iteration_s_median"] = it_s
        timing["eval_every"] = base.eval_every
        timing["split_pass_over_eval_every_iterations"] = timing["split_walk_s"] / (it_s * base.eval_every)
        result["validation_timing"] = timing
        write_json(result, args.out)
    if real_procs is not None:
        result["real"] = finish_real(args, runs_dir, real_procs)
        write_json(result, args.out)
    print(json.dumps(result.get("summary", {}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
