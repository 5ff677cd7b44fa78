"""End-to-end benchmark: ``configs/local.yaml`` (ZeroSyncDQN) vs stock RLlib DQN, same run.

How to run (one GPU; Ray 2.60 installed)::

    python benchmarks/e2e.py                       # full: local.yaml vs stock DQN, ~8 min on an H200
    python benchmarks/e2e.py --quick               # CPU-sized smoke version

Both sides train on the same synthetic market, the same env parameters, the same Q network
(2x256 MLP over 5 exposures, routed execution), the same replay ratio, batch size, lr, gamma and
n-step. Stock = ``DQNConfig`` + ``SingleAgentEnvRunner`` on the gymnasium twin + ``DQNTorchLearner``
(GPU learner). Ours = ``ZeroSyncDQN`` with GPU env runner + device replay + graphed updates.
Every ``--ours-eval-every-s`` / ``--stock-eval-every-s`` seconds of training, the greedy policy is evaluated on the validation
segment (out of sample); evaluation time is excluded from the training clocks.

Results to expect: env steps/s and updates/s ratios, the time each side needs to first reach the
target validation Sharpe (fixed before training: the best rule's validation Sharpe), and the
test-segment Sharpe of our final policy vs flat and buy-and-hold. JSON goes to
``benchmarks/results/e2e.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch


from rl_zerosync.evaluate import greedy_policy  # noqa: E402  (the CLI's greedy policy)


def _evaluate(policy, module_device, settings, segment: str) -> dict:
    from rl_zerosync.envs import EnvParams, make_market
    from rl_zerosync.envs.evaluate import evaluate_policy

    market = make_market(settings.data, segment)
    params = EnvParams.from_dict(settings.env)
    rules = segment == "test"  # the rules are walked once, on test (validation: the fixed target)
    res = evaluate_policy(policy, market, params, device=module_device, route_exposure=True, baselines=rules)
    out = {"sharpe": res.metrics["mean"]["sharpe"], "total_return": res.metrics["mean"]["total_return"]}
    if rules:
        out["buy_and_hold_sharpe"] = res.baselines["buy_and_hold"]["mean"]["sharpe"]
    return out


def _stock_policy(module):
    from ray.rllib.core.columns import Columns

    def policy(obs):
        with torch.no_grad():
            return module.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
    return policy


def _lifetime_env_steps(result: dict) -> float:
    return float(result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0.0))


def _train_loop(name, algo, policy_fn, settings, budget_s, eval_every_s, max_iters, updates_of):
    """Train until the budget or ``max_iters``; evaluate on validation every ``eval_every_s``."""
    curve, train_time, next_eval, it = [], 0.0, eval_every_s, 0
    env_steps = updates = 0.0
    while train_time < budget_s and it < max_iters:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = algo.train()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        train_time += time.perf_counter() - t0
        it += 1
        env_steps = _lifetime_env_steps(result)
        updates = updates_of(result, updates)
        if train_time >= next_eval or train_time >= budget_s or it >= max_iters:
            next_eval = train_time + eval_every_s
            module = algo.get_module()
            dev = next(module.parameters()).device
            ev = _evaluate(policy_fn(module), dev, settings, "validation")
            curve.append({"train_s": train_time, "iteration": it, "env_steps": env_steps,
                          "updates": updates, "val_sharpe": ev["sharpe"]})
            print(f"[{name}] it {it:4d} t {train_time:7.1f}s env_steps {env_steps:12,.0f} "
                  f"updates {updates:9,.0f} val_sharpe {ev['sharpe']:+.3f}", flush=True)
    return {"curve": curve, "train_s": train_time, "env_steps": env_steps, "updates": updates,
            "iterations": it}


def _first_time(curve, target):
    for point in curve:
        if point["val_sharpe"] >= target:
            return point["train_s"]
    return None


def run_ours(settings, budget_s, eval_every_s):
    from rl_zerosync.settings import to_rllib_config

    algo = to_rllib_config(settings).build_algo()
    batch = settings.algo.batch_size

    def updates_of(result, prev):
        k = result.get("num_updates_per_iteration")
        return prev + float(k) if k is not None else prev

    try:
        out = _train_loop("ours", algo, greedy_policy, settings, budget_s, eval_every_s,
                          settings.run.iterations, updates_of)
        module = algo.get_module()
        dev = next(module.parameters()).device
        out["test"] = _evaluate(greedy_policy(module), dev, settings, "test")
        out["batch_size"] = batch
    finally:
        algo.stop()
    return out


def stock_config(settings, num_env_runners: int, envs_per_runner: int):
    from ray.rllib.algorithms.dqn import DQNConfig

    from rl_zerosync.envs.gym_twin import ENV_ID_IMPORTABLE

    a = settings.algo
    gpu = 1 if torch.cuda.is_available() else 0
    return (
        DQNConfig()
        .environment(ENV_ID_IMPORTABLE, env_config={"data": settings.data, "env": settings.env,
                                                    "action_mode": "routed"})
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=envs_per_runner)
        .learners(num_learners=0, num_gpus_per_learner=gpu)
        .training(lr=a.lr, gamma=a.gamma, n_step=a.n_step, train_batch_size_per_learner=a.batch_size,
                  training_intensity=a.replay_ratio,
                  num_steps_sampled_before_learning_starts=min(a.learning_starts, 2000),
                  # ours counts target updates in updates; stock counts env steps
                  target_network_update_freq=int(a.target_update_freq * a.batch_size / a.replay_ratio),
                  double_q=True, dueling=False, grad_clip=a.grad_clip, grad_clip_by="global_norm",
                  epsilon=[tuple(p) for p in a.epsilon])
        .rl_module(model_config={"fcnet_hiddens": list(settings.model.hidden), "fcnet_activation": "relu"})
        .reporting(min_sample_timesteps_per_iteration=1000, min_time_s_per_iteration=0)
        .debugging(seed=settings.run.seed)
    )


def run_stock(settings, budget_s, eval_every_s, num_env_runners, envs_per_runner):
    algo = stock_config(settings, num_env_runners, envs_per_runner).build_algo()

    def updates_of(result, prev):
        lr = result.get("learners", {}).get("default_policy", {})
        n = lr.get("num_module_steps_trained_lifetime")
        return float(n) / settings.algo.batch_size if n is not None else prev

    try:
        return _train_loop("stock", algo, _stock_policy, settings, budget_s, eval_every_s, 10**9, updates_of)
    finally:
        algo.stop()


def rule_target(settings) -> tuple[float, str]:
    """The time-to-target target, fixed in advance: the best rule's validation Sharpe (the rules
    of ``rl_zerosync.envs.rules``, their variants chosen on the validation segment; flat = 0)."""
    from rl_zerosync.envs import EnvParams, make_market
    from rl_zerosync.envs.evaluate import rule_metrics
    from rl_zerosync.envs.rules import RuleWalk
    from rl_zerosync.validation import routing_thresholds

    data = make_market(settings.data, "validation")
    grid, _ = rule_metrics(RuleWalk(data, EnvParams.from_dict(settings.env), routing_thresholds(settings.runner)))
    label = max(grid, key=lambda k: grid[k]["mean"]["sharpe"])
    best = grid[label]["mean"]["sharpe"]
    return (best, label) if best > 0.0 else (0.0, "flat")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/local.yaml")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--ours-budget-s", type=float, default=240.0)
    p.add_argument("--stock-budget-s", type=float, default=180.0)
    p.add_argument("--ours-eval-every-s", type=float, default=2.0)
    p.add_argument("--stock-eval-every-s", type=float, default=20.0)
    p.add_argument("--stock-runners", type=int, default=8)
    p.add_argument("--stock-envs-per-runner", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="CPU-sized smoke run")
    p.add_argument("--out", default="benchmarks/results/e2e.json")
    args = p.parse_args()

    import ray

    from rl_zerosync.settings import load

    overrides = list(args.set) + ["run.evaluate=false"]
    if args.quick:
        args.config = "configs/smoke.yaml"
        overrides += ["run.iterations=6"]
        args.ours_budget_s = args.stock_budget_s = 20.0
        args.ours_eval_every_s = args.stock_eval_every_s = 5.0
        args.stock_runners, args.stock_envs_per_runner = 0, 1
    settings = load(args.config, overrides)
    ray.init(num_cpus=max(2, args.stock_runners + 2), include_dashboard=False)

    target, target_rule = rule_target(settings)  # fixed before either side trains
    print(f"target validation Sharpe {target:+.3f} (best rule on validation: {target_rule})", flush=True)
    ours = run_ours(settings, args.ours_budget_s, args.ours_eval_every_s)
    stock = run_stock(settings, args.stock_budget_s, args.stock_eval_every_s, args.stock_runners,
                      args.stock_envs_per_runner)
    ray.shutdown()

    best_ours = max(pt["val_sharpe"] for pt in ours["curve"])
    best_stock = max(pt["val_sharpe"] for pt in stock["curve"])
    t_ours, t_stock = _first_time(ours["curve"], target), _first_time(stock["curve"], target)
    stock_reached = t_stock is not None
    ours_sps = ours["env_steps"] / ours["train_s"]
    stock_sps = stock["env_steps"] / stock["train_s"]
    ours_ups = ours["updates"] / ours["train_s"]
    stock_ups = stock["updates"] / stock["train_s"]
    if t_ours is None:
        time_speedup = None
    elif stock_reached:
        time_speedup = t_stock / t_ours
    else:  # stock never reached the target in its budget: a lower bound
        time_speedup = stock["train_s"] / t_ours
    test = ours["test"]
    summary = {
        "env_steps_per_s_speedup": ours_sps / stock_sps if stock_sps > 0 else None,
        "updates_per_s_speedup": ours_ups / stock_ups if stock_ups > 0 else None,
        "time_to_sharpe_speedup": time_speedup,
        "time_to_sharpe_is_lower_bound": not stock_reached,
        "target_val_sharpe": target,
        "target_rule": target_rule,
        "out_of_sample_sharpe": test["sharpe"],
        "test_buy_and_hold_sharpe": test["buy_and_hold_sharpe"],
        "test_flat_sharpe": 0.0,
        "beats_flat_and_buy_and_hold": bool(test["sharpe"] > 0 and test["sharpe"] > test["buy_and_hold_sharpe"]),
    }
    rows = [("ours (ZeroSyncDQN)", ours_sps, ours_ups, t_ours, best_ours),
            ("stock RLlib DQN", stock_sps, stock_ups, t_stock, best_stock)]
    print(f"\n{'':22s}{'env steps/s':>14s}{'updates/s':>12s}{'t to target':>13s}{'best val sharpe':>17s}")
    for name, sps, ups, t, best in rows:
        tt = f"{t:.1f}s" if t is not None else "not reached"
        print(f"{name:22s}{sps:14,.0f}{ups:12,.1f}{tt:>13s}{best:17.3f}")
    print("summary:", json.dumps(summary, indent=1))
    out = {
        "name": "e2e",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "hardware": {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                     "cpu": platform.processor() or platform.machine()},
        "versions": {"torch": torch.__version__, "ray": ray.__version__, "python": platform.python_version()},
        "config": {"settings": settings.to_dict(), "stock_runners": args.stock_runners,
                   "stock_envs_per_runner": args.stock_envs_per_runner,
                   "ours_budget_s": args.ours_budget_s, "stock_budget_s": args.stock_budget_s,
                   "ours_eval_every_s": args.ours_eval_every_s,
                   "stock_eval_every_s": args.stock_eval_every_s},
        "ours": ours, "stock": stock, "summary": summary,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
