"""End-to-end benchmark: ``configs/local.yaml`` (ZeroSyncDQN) vs a tuned stock RLlib DQN, same run.

How to run (one GPU; Ray 2.60 installed; times measured on one H200 with 16 cores, 2026-12-01)::

    python -m benchmarks.e2e                       # full: sweep + 3 seeds per side (~17 min)
    python -m benchmarks.e2e --sweep-only --out /tmp/sweep.json      # the stock sweep alone (~3.5 min)
    python -m benchmarks.e2e --sweep-from /tmp/sweep.json --seed-list 0 --out /tmp/s0.json   # one seed
    ...                                                      # (~4.5 min each: 150 s stock + evaluation)
    python -m benchmarks.e2e --merge /tmp/s0.json /tmp/s1.json /tmp/s2.json                 # pool them
    python -m benchmarks.e2e --quick               # CPU smoke run (configs/smoke.yaml): ~75 s on 2 cores,
                                                   # writes e2e_quick.json in the temp folder

Both sides train on the same synthetic market (the fixed training segment: ``data.regenerate_every``
is set to 0 because the stock gymnasium twin has no fresh-series mode), the same env parameters,
the same Q network (``ZeroSyncQModule``: the config's hidden sizes, LayerNorm, dueling, routed
execution), the same batch size, replay ratio, replay capacity and kind (uniform, or prioritized if
the config says so), learning starts, lr, gamma, n-step, double Q, gradient clip, target-update
period (ours counts updates, stock env steps: converted) and epsilon schedule. Differences left:
stock's optimizer is RLlib's ``torch.optim.Adam`` (ours: AdamW in the adam_step kernel with the
config's weight decay) and stock's env runners step the numpy gymnasium twin on CPU cores.

Stock = ``DQNConfig`` + ``SingleAgentEnvRunner``s on the numpy twin + ``DQNTorchLearner`` (GPU
learner). Its ``rollout_fragment_length`` and number of env runners are tuned first: a short run
of each point of ``--stock-fragments`` x ``--stock-runners`` (default {4, 32, 128} x
{4, cpu count - 2}, seed 0, ``--sweep-s`` seconds of training each), scored by the env steps/s it
sustains at the target replay ratio after learning starts (``min(env steps/s, updates/s x batch /
replay ratio)``); the best point is used for every stock seed. ``training_intensity`` is set so
that RLlib's rounding gives the configured replay ratio (its native ratio counts the local runner,
which does not sample when there are remote runners); the achieved ratio is reported.

Ours = ``ZeroSyncDQN`` with the GPU env runner, device replay and graphed updates (the config).
Both sides are evaluated greedily on the validation segment every ``--eval-every-env-steps`` env
steps (default 262,144: eight iterations of ``local.yaml``); evaluation time is excluded from the
training clocks. Each side runs ``--seeds`` seeds (default 3; ``run.seed`` for ours, the
``debugging(seed=...)`` for stock).

Results to expect: per side the median and range over seeds of env steps/s, updates/s, training
seconds to the first validation Sharpe >= the target (fixed before training: the best rule's
validation Sharpe), the best validation Sharpe and the final policy's test Sharpe; ratios of the
medians (ours / tuned stock); the whole stock sweep and the chosen point (``stock_tuned``). JSON
goes to ``benchmarks/results/e2e.json`` (``--out``).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Optional

import torch

from benchmarks.common import (parser, print_summary, quick_path, result_header, results_path, timed_train,
                               write_json)
from rl_zerosync.evaluation.evaluate import greedy_policy  # the CLI's greedy policy

FORMAT = 2  # e2e.json layout: 2 = seeds + tuned stock (benchmarks/tables.py reads both)


# ------------------------------------------------------------------------------------ evaluation
def _evaluate(module, settings, segment: str) -> dict:
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.backtest import evaluate_policy

    dev = next(module.parameters()).device
    market = make_market(settings.data, segment)
    params = EnvParams.from_dict(settings.env)
    rules = segment == "test"  # the rules are walked once, on test (validation: the fixed target)
    res = evaluate_policy(greedy_policy(module), market, params, device=dev, route_exposure=True, baselines=rules)
    out = {"sharpe": res.metrics["mean"]["sharpe"], "total_return": res.metrics["mean"]["total_return"]}
    if rules:
        out["buy_and_hold_sharpe"] = res.baselines["buy_and_hold"]["mean"]["sharpe"]
    return out


def rule_target(settings) -> tuple[float, str]:
    """The time-to-target target, fixed in advance: the best rule's validation Sharpe (the rules
    of ``rl_zerosync.evaluation.rules``, their variants chosen on the validation segment; flat = 0)."""
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.backtest import rule_metrics
    from rl_zerosync.evaluation.rules import RuleWalk
    from rl_zerosync.kernels.route import routing_thresholds

    data = make_market(settings.data, "validation")
    grid, _ = rule_metrics(RuleWalk(data, EnvParams.from_dict(settings.env), routing_thresholds(settings.runner)))
    label = max(grid, key=lambda k: grid[k]["mean"]["sharpe"])
    best = grid[label]["mean"]["sharpe"]
    return (best, label) if best > 0.0 else (0.0, "flat")


# ------------------------------------------------------------------------------- training loops
def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _lifetime_env_steps(result: dict) -> float:
    return float(result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0.0))


def _ours_updates(result: dict, prev: float) -> float:
    k = result.get("num_updates_per_iteration")
    return prev + float(k) if k is not None else prev


def _stock_updates_of(batch: int):
    def updates_of(result: dict, prev: float) -> float:
        n = result.get("learners", {}).get("default_policy", {}).get("num_module_steps_trained_lifetime")
        return float(n) / batch if n is not None else prev
    return updates_of


def _train_loop(name, algo, settings, *, budget_s, max_iters, updates_of, eval_every_env_steps, target):
    """Train until ``budget_s`` of training time or ``max_iters``; evaluate the greedy policy on
    validation each time another ``eval_every_env_steps`` env steps have been sampled."""
    curve, train_time, next_eval, it = [], 0.0, float(eval_every_env_steps), 0
    env_steps = updates = 0.0
    while train_time < budget_s and it < max_iters:
        result, seconds = timed_train(algo)
        train_time += seconds
        it += 1
        env_steps = _lifetime_env_steps(result)
        updates = updates_of(result, updates)
        if env_steps >= next_eval or train_time >= budget_s or it >= max_iters:
            while next_eval <= env_steps:
                next_eval += eval_every_env_steps
            ev = _evaluate(algo.get_module(), settings, "validation")
            curve.append({"train_s": train_time, "iteration": it, "env_steps": env_steps,
                          "updates": updates, "val_sharpe": ev["sharpe"]})
            print(f"[{name}] it {it:5d} t {train_time:7.1f}s env_steps {env_steps:12,.0f} "
                  f"updates {updates:9,.0f} val_sharpe {ev['sharpe']:+.3f}", flush=True)
    test = _evaluate(algo.get_module(), settings, "test")
    t_target = next((p["train_s"] for p in curve if p["val_sharpe"] >= target), None)
    return {"curve": curve, "train_s": train_time, "env_steps": env_steps, "updates": updates, "iterations": it,
            "env_steps_per_s": env_steps / train_time if train_time > 0 else 0.0,
            "updates_per_s": updates / train_time if train_time > 0 else 0.0,
            "time_to_target_s": t_target,
            "best_val_sharpe": max(p["val_sharpe"] for p in curve) if curve else None,
            "test": test}


# ------------------------------------------------------------------------------------------ ours
def run_ours(settings, *, budget_s, eval_every_env_steps, target):
    from rl_zerosync.config.settings import to_rllib_config

    algo = to_rllib_config(settings).build_algo()
    try:
        return _train_loop("ours", algo, settings, budget_s=budget_s, max_iters=settings.run.iterations,
                           updates_of=_ours_updates, eval_every_env_steps=eval_every_env_steps, target=target)
    finally:
        algo.stop()


# ----------------------------------------------------------------------------------------- stock
def _replay_capacity(settings) -> int:
    from rl_zerosync.learner.learner_settings import LearnerSettings

    return int(settings.learner.get("replay_capacity", LearnerSettings.replay_capacity))


def _prioritized(settings) -> bool:
    from rl_zerosync.learner.learner_settings import LearnerSettings

    return bool(settings.learner.get("prioritized", LearnerSettings.prioritized))


def training_intensity(replay_ratio: float, num_env_runners: int) -> float:
    """RLlib's ``training_intensity`` that yields ``replay_ratio`` trained transitions per sampled env
    step: ``calculate_rr_weights`` (dqn.py) divides by a native ratio that counts ``num_env_runners
    + 1`` samplers, but with remote runners only the remote ones sample."""
    return replay_ratio * max(num_env_runners, 1) / (num_env_runners + 1)


def stock_config(settings, *, fragment: int, num_env_runners: int, envs_per_runner: int, seed: int):
    """Stock DQN with ours' network, batch, replay ratio / capacity / kind, learning starts,
    lr, gamma, n-step, double Q, grad clip, target period and epsilon."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from rl_zerosync.envs.gym_twin import ENV_ID_IMPORTABLE
    from rl_zerosync.module import make_module_spec

    a, m = settings.algo, settings.model
    gpu = 1 if torch.cuda.is_available() else 0
    replay = {"type": "PrioritizedEpisodeReplayBuffer" if _prioritized(settings) else "EpisodeReplayBuffer",
              "capacity": _replay_capacity(settings)}
    spec = make_module_spec(action_mode=m.action_mode, hidden=list(m.hidden), dueling=m.dueling,
                            layernorm=getattr(m, "layernorm", False), dropout=getattr(m, "dropout", 0.0))
    return (
        DQNConfig()
        .environment(ENV_ID_IMPORTABLE, env_config={"data": settings.data, "env": settings.env,
                                                    "action_mode": m.action_mode})
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=envs_per_runner,
                     rollout_fragment_length=fragment)
        .learners(num_learners=0, num_gpus_per_learner=gpu)
        .training(lr=a.lr, gamma=a.gamma, n_step=a.n_step, train_batch_size_per_learner=a.batch_size,
                  training_intensity=training_intensity(a.replay_ratio, num_env_runners),
                  num_steps_sampled_before_learning_starts=a.learning_starts,
                  replay_buffer_config=replay,
                  # ours counts target updates in updates; stock counts env steps
                  target_network_update_freq=int(a.target_update_freq * a.batch_size / a.replay_ratio),
                  tau=a.tau, double_q=a.double_q, dueling=m.dueling, grad_clip=a.grad_clip,
                  grad_clip_by="global_norm", epsilon=[tuple(p) for p in a.epsilon])
        .rl_module(rl_module_spec=spec)
        .reporting(min_sample_timesteps_per_iteration=1000, min_time_s_per_iteration=0)
        .debugging(seed=seed)
    )


def sweep_point(settings, *, fragment, runners, envs_per_runner, budget_s) -> dict:
    """A short stock run: throughput over the iterations that start after learning has started."""
    algo = stock_config(settings, fragment=fragment, num_env_runners=runners, envs_per_runner=envs_per_runner,
                        seed=settings.run.seed).build_algo()
    updates_of = _stock_updates_of(settings.algo.batch_size)
    wall = steps = upd = 0.0
    total_s, env_steps, updates, it = 0.0, 0.0, 0.0, 0
    try:
        while total_s < budget_s:
            t0 = time.perf_counter()
            result = algo.train()
            _sync()
            dt = time.perf_counter() - t0
            total_s += dt
            it += 1
            new_steps, new_updates = _lifetime_env_steps(result), updates_of(result, updates)
            if updates > 0:  # this iteration started after learning had started
                wall, steps, upd = wall + dt, steps + new_steps - env_steps, upd + new_updates - updates
            env_steps, updates = new_steps, new_updates
    finally:
        algo.stop()
    if wall == 0.0:  # learning never started in the budget: the whole run
        wall, steps, upd = total_s, env_steps, updates
    a = settings.algo
    sps, ups = steps / wall, upd / wall
    return {"rollout_fragment_length": fragment, "num_env_runners": runners, "envs_per_runner": envs_per_runner,
            "training_intensity": training_intensity(a.replay_ratio, runners),
            "iterations": it, "train_s": total_s, "measured_s": wall, "env_steps": env_steps, "updates": updates,
            "env_steps_per_s": sps, "updates_per_s": ups,
            "replay_ratio_achieved": upd * a.batch_size / steps if steps else None,
            "sustained_env_steps_per_s": min(sps, ups * a.batch_size / a.replay_ratio)}


def stock_sweep(settings, *, fragments, runners, envs_per_runner, budget_s) -> dict:
    points = []
    for r in runners:
        for f in fragments:
            pt = sweep_point(settings, fragment=f, runners=r, envs_per_runner=envs_per_runner, budget_s=budget_s)
            print(f"[sweep] fragment {f:4d} runners {r:3d}: env steps/s {pt['env_steps_per_s']:10,.0f} updates/s "
                  f"{pt['updates_per_s']:8,.1f} replay ratio {pt['replay_ratio_achieved'] or 0:.2f} sustained "
                  f"{pt['sustained_env_steps_per_s']:10,.0f}", flush=True)
            points.append(pt)
    best = max(points, key=lambda p: p["sustained_env_steps_per_s"])
    return {"criterion": "max sustained env steps/s after learning starts = min(env steps/s, updates/s x batch "
                         "/ replay ratio); seed 0, a short run per point",
            "sweep_s_per_point": budget_s, "sweep": points,
            "chosen": {k: best[k] for k in ("rollout_fragment_length", "num_env_runners", "envs_per_runner")}}


def run_stock(settings, chosen: dict, *, seed, budget_s, eval_every_env_steps, target):
    algo = stock_config(settings, fragment=chosen["rollout_fragment_length"],
                        num_env_runners=chosen["num_env_runners"], envs_per_runner=chosen["envs_per_runner"],
                        seed=seed).build_algo()
    try:
        return _train_loop("stock", algo, settings, budget_s=budget_s, max_iters=10**9,
                           updates_of=_stock_updates_of(settings.algo.batch_size),
                           eval_every_env_steps=eval_every_env_steps, target=target)
    finally:
        algo.stop()


# --------------------------------------------------------------------------------------- summary
def spread(values) -> Optional[dict]:
    """Median and range of the non-None values (None when there are none)."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def side_summary(runs: list) -> dict:
    return {
        "env_steps_per_s": spread(r["env_steps_per_s"] for r in runs),
        "updates_per_s": spread(r["updates_per_s"] for r in runs),
        "time_to_target_s": spread(r["time_to_target_s"] for r in runs),
        "reached_target": sum(r["time_to_target_s"] is not None for r in runs),
        "best_val_sharpe": spread(r["best_val_sharpe"] for r in runs),
        "test_sharpe": spread(r["test"]["sharpe"] for r in runs),
        "train_s": spread(r["train_s"] for r in runs),
    }


def ratio(a: Optional[dict], b: Optional[dict], *, inverse: bool = False) -> Optional[float]:
    if a is None or b is None or not a["median"] or not b["median"]:
        return None
    return b["median"] / a["median"] if inverse else a["median"] / b["median"]


def _censored_times(runs: list) -> list:
    """Seconds to target per seed; a seed that never reached it counts with its whole training time
    (a lower bound)."""
    return [r["time_to_target_s"] if r["time_to_target_s"] is not None else r["train_s"] for r in runs]


def time_to_target_ratio(ours: list, stock: list) -> tuple[Optional[float], str]:
    """Stock's median seconds to target / ours, and what that number is. Unreached seeds count with
    their whole budget, so a side's median is exact only when most of its seeds reached the target:
    ours censored -> no ratio (a lower bound over a lower bound says nothing); stock censored -> the
    ratio is a lower bound."""
    def reached_most(runs):
        return 2 * sum(r["time_to_target_s"] is not None for r in runs) > len(runs)

    if not ours or not stock or not reached_most(ours):
        return None, "not comparable: ours reached the target in at most half of its seeds"
    value = ratio(spread(_censored_times(ours)), spread(_censored_times(stock)), inverse=True)
    return value, ("exact" if reached_most(stock) else "lower bound: stock reached the target in at most "
                   "half of its seeds (unreached seeds count with their whole budget)")


def summarize(ours: list, stock: list, target: float, target_rule: str) -> dict:
    o, s = side_summary(ours), side_summary(stock)
    t_ratio, t_kind = time_to_target_ratio(ours, stock)
    test = [r["test"] for r in ours]
    return {
        "ours": o, "stock": s,
        "env_steps_per_s_speedup": ratio(o["env_steps_per_s"], s["env_steps_per_s"]),
        "updates_per_s_speedup": ratio(o["updates_per_s"], s["updates_per_s"]),
        "time_to_target_speedup": t_ratio,
        "time_to_target_speedup_is": t_kind,
        "time_to_target_is_lower_bound": t_kind.startswith("lower bound"),
        "ratios_of": "medians over seeds, ours / tuned stock (time: stock / ours)",
        "target_val_sharpe": target,
        "target_rule": target_rule,
        "test_buy_and_hold_sharpe": test[0]["buy_and_hold_sharpe"] if test else None,
        "test_flat_sharpe": 0.0,
    }


def merge(paths: list, out_path: str) -> dict:
    """One e2e JSON from several runs of the same setup (e.g. one seed per call): seeds pooled,
    summary recomputed. The target and the stock point must agree."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    base = runs[0]
    for r in runs[1:]:
        if r["stock_tuned"]["chosen"] != base["stock_tuned"]["chosen"]:
            raise SystemExit(f"merge: different stock points {r['stock_tuned']['chosen']} vs "
                             f"{base['stock_tuned']['chosen']}")
        if r["summary"]["target_val_sharpe"] != base["summary"]["target_val_sharpe"]:
            raise SystemExit("merge: different targets")
    ours = sorted((x for r in runs for x in r["ours"]["per_seed"]), key=lambda x: x["seed"])
    stock = sorted((x for r in runs for x in r["stock"]["per_seed"]), key=lambda x: x["seed"])
    if len({x["seed"] for x in ours}) != len(ours):
        raise SystemExit("merge: a seed appears twice")
    out = dict(base, ours={"per_seed": ours}, stock={"per_seed": stock}, merged_from=[str(p) for p in paths])
    out["config"] = dict(base["config"], seeds=len(ours))
    out["summary"] = summarize(ours, stock, base["summary"]["target_val_sharpe"], base["summary"]["target_rule"])
    print(f"merged {len(ours)} seeds")
    write_json(out, out_path)
    return out


# ------------------------------------------------------------------------------------------ main
def _ints(text: str) -> list:
    return [int(x) for x in str(text).split(",") if x.strip()]


def main(argv: Optional[list] = None) -> dict:
    cpus = os.cpu_count() or 2
    p = parser(__doc__, out=None, full_doc=True, quick="CPU-sized smoke run (configs/smoke.yaml)",
               out_help="JSON path (default benchmarks/results/e2e.json; with --quick e2e_quick.json in the temp "
                        "folder, so a smoke run never replaces the committed results)")
    p.add_argument("--config", default="configs/local.yaml")
    p.add_argument("--set", action="append", default=[], help="override for both sides: section.key=value")
    p.add_argument("--seeds", type=int, default=3, help="seeds per side (0 .. n-1)")
    p.add_argument("--seed-list", default=None, help="run these seeds only (e.g. 1,2; for split runs)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="combine the seeds of earlier e2e JSONs (same target and stock point) and stop")
    p.add_argument("--ours-budget-s", type=float, default=240.0, help="training seconds at most (ours stops "
                   "at run.iterations first)")
    p.add_argument("--stock-budget-s", type=float, default=150.0, help="training seconds per stock seed")
    p.add_argument("--eval-every-env-steps", type=int, default=262_144, help="validation cadence, both sides")
    p.add_argument("--stock-fragments", default=None, help="rollout_fragment_length values swept (default "
                   "4,32,128; quick 4,32)")
    p.add_argument("--stock-runners", default=None, help=f"num_env_runners values swept (default 4,cpu count - 2 "
                   f"= 4,{max(1, cpus - 2)}; quick 0)")
    p.add_argument("--stock-envs-per-runner", type=int, default=None, help="default 4; quick 1")
    p.add_argument("--sweep-s", type=float, default=None, help="training seconds per sweep point (default 20; "
                   "quick 4)")
    p.add_argument("--sweep-only", action="store_true", help="run the stock sweep, write it, stop")
    p.add_argument("--sweep-from", default=None, help="reuse the stock_tuned sweep of an earlier JSON")
    p.add_argument("--ours-fresh-series", action="store_true",
                   help="keep the config's data.regenerate_every for ours (stock cannot: not the same data)")
    args = p.parse_args(argv)

    if args.out is None:
        args.out = quick_path("e2e") if args.quick else results_path("e2e")
    if args.merge:
        return merge(args.merge, args.out)

    import ray

    from rl_zerosync.config.settings import load

    overrides = list(args.set) + ["run.evaluate=false"]
    if args.quick:
        args.config = "configs/smoke.yaml"
        overrides += ["run.iterations=6"]
        args.ours_budget_s, args.stock_budget_s = 20.0, 8.0
        args.eval_every_env_steps = 1024
    quick_or = (lambda q, full: q if args.quick else full)  # noqa: E731
    args.stock_fragments = args.stock_fragments or quick_or("4,32", "4,32,128")
    args.stock_runners = args.stock_runners or quick_or("0", f"4,{max(1, cpus - 2)}")
    args.stock_envs_per_runner = args.stock_envs_per_runner or quick_or(1, 4)
    args.sweep_s = args.sweep_s or quick_or(4.0, 20.0)
    stock_settings = load(args.config, overrides + ["data.regenerate_every=0"])
    ours_settings = load(args.config, overrides + ([] if args.ours_fresh_series else ["data.regenerate_every=0"]))
    runners = sorted(set(_ints(args.stock_runners)))
    ray.init(address="local", num_cpus=max(2, max(runners) + 2), include_dashboard=False)  # own instance

    target, target_rule = rule_target(stock_settings)  # fixed before either side trains
    print(f"target validation Sharpe {target:+.3f} (best rule on validation: {target_rule})", flush=True)

    if args.sweep_from:
        tuned = json.loads(Path(args.sweep_from).read_text())["stock_tuned"]
        tuned["reused_from"] = str(args.sweep_from)
    else:
        tuned = stock_sweep(stock_settings, fragments=_ints(args.stock_fragments), runners=runners,
                            envs_per_runner=args.stock_envs_per_runner, budget_s=args.sweep_s)
    print(f"stock tuned: {tuned['chosen']}", flush=True)

    ours, stock = [], []
    if not args.sweep_only:
        for seed in (_ints(args.seed_list) if args.seed_list else range(args.seeds)):
            o_set = load(args.config, overrides + [f"run.seed={seed}"]
                         + ([] if args.ours_fresh_series else ["data.regenerate_every=0"]))
            s_set = load(args.config, overrides + [f"run.seed={seed}", "data.regenerate_every=0"])
            o = run_ours(o_set, budget_s=args.ours_budget_s, eval_every_env_steps=args.eval_every_env_steps,
                         target=target)
            s = run_stock(s_set, tuned["chosen"], seed=seed, budget_s=args.stock_budget_s,
                          eval_every_env_steps=args.eval_every_env_steps, target=target)
            ours.append({"seed": seed, **o})
            stock.append({"seed": seed, **s})
    ray.shutdown()

    summary = summarize(ours, stock, target, target_rule) if ours else {"target_val_sharpe": target,
                                                                        "target_rule": target_rule}
    if ours:
        print(f"\n{'':24s}{'env steps/s':>14s}{'updates/s':>12s}{'t to target':>13s}{'best val':>10s}{'test':>8s}"
              "   (medians over seeds)")
        for name, x in (("ours (ZeroSyncDQN)", summary["ours"]), ("stock DQN, tuned", summary["stock"])):
            tt = f"{x['time_to_target_s']['median']:.1f}s" if x["time_to_target_s"] else "not reached"
            print(f"{name:24s}{x['env_steps_per_s']['median']:14,.0f}{x['updates_per_s']['median']:12,.1f}"
                  f"{tt:>13s}{x['best_val_sharpe']['median']:10.3f}{x['test_sharpe']['median']:8.3f}")
        print_summary({k: v for k, v in summary.items() if k not in ("ours", "stock")})
    a = stock_settings.algo
    out = {
        **result_header("e2e", device="cuda" if torch.cuda.is_available() else "cpu", config={
            "config": args.config, "quick": args.quick, "overrides": overrides,
            "settings_ours": ours_settings.to_dict(), "seeds": args.seeds,
            "ours_budget_s": args.ours_budget_s, "stock_budget_s": args.stock_budget_s,
            "eval_every_env_steps": args.eval_every_env_steps,
            "same_for_both": {"network": "ZeroSyncQModule " + json.dumps(ours_settings.to_dict()["model"]),
                              "batch_size": a.batch_size, "replay_ratio": a.replay_ratio,
                              "replay_capacity": _replay_capacity(stock_settings),
                              "replay": "prioritized" if _prioritized(stock_settings) else "uniform",
                              "learning_starts": a.learning_starts, "lr": a.lr, "gamma": a.gamma,
                              "n_step": a.n_step, "grad_clip": a.grad_clip, "epsilon": a.epsilon,
                              "training_data": ("fresh series for ours" if args.ours_fresh_series
                                                else "fixed training segment (data.regenerate_every=0)")},
            "differences": ["stock optimizer: torch.optim.Adam (RLlib default); ours: AdamW (adam_step kernel), "
                            f"weight_decay {getattr(a, 'weight_decay', 0.0)}",
                            "stock env runners: SingleAgentEnvRunner on the numpy twin (CPU); ours: GPU env runner"],
        }),
        "format": FORMAT,
        "stock_tuned": tuned,
        "ours": {"per_seed": ours},
        "stock": {"per_seed": stock},
        "summary": summary,
    }
    write_json(out, args.out)
    return out


if __name__ == "__main__":
    main()
