"""Benchmark GPUEnvRunner against RLlib's stock SingleAgentEnvRunner on the gymnasium twin.

How to run:
    python -m benchmarks.env_runner            # one CUDA GPU, about 1-2 minutes
    python -m benchmarks.env_runner --quick    # CPU, small sizes, well under a minute

What is measured (both runners built directly from a DQNConfig, no Algorithm, same Q module
class and size, routed action mode):

* stock: ``SingleAgentEnvRunner`` on ``"rl_zerosync/Trading-v0"``, the numpy single-env twin (a
  gymnasium vector of twins, ~10 us per env step; CPU module as RLlib places it on a local runner),
  ``sample(num_timesteps=...)``. First one runner in this process at every ``--stock-envs`` count
  of vectorized twins (default 1 4 16 64 256: the sweep, ``stock_envs_sweep``); the count with the
  most env steps/s (``stock_envs_chosen``) is the one-runner figure and is used for
  ``--stock-runners`` runners (default ``os.cpu_count()``, one per core) as Ray actors of an
  ``EnvRunnerGroup`` sampling concurrently (each returns only its step count, so no episode
  transfer is timed: the stock runners' best case), throughput = all their steps / wall clock of
  the concurrent call. For reference only, one runner on the torch twin
  (``"rl_zerosync/TradingTorch-v0"``, ~1 ms per env step: what earlier versions of this script
  called the stock figure), at the chosen count;
* ours: ``GPUEnvRunner`` with N envs x T steps, eager and CUDA-graph rollouts:
  ``sample()`` (the whole rollout, obs included, copied to pinned host memory) and
  ``sample_device()`` (rollout stays on the GPU; actions/rewards/flags/metrics read back).
  Env steps per second include Q inference, epsilon-greedy selection, routing, the env step and
  the readback: wall clock around each call (each call ends with its own event wait, so the
  host clock covers the GPU work), median over repeats after warm-up samples.
* synchronizations per sample: ``torch.cuda.set_sync_debug_mode("warn")`` warnings during one
  ``sample()`` at every size, plus the explicit event waits (expected: 0 and 1;
  ``benchmarks.common.count_syncs``).

Results to expect on one H200: tens of millions of env steps/s at 64k envs (the readback of
obs dominates ``sample()``; ``sample_device()`` is faster); the graph helps most at small N where
kernel launches dominate.

Writes JSON (``--out``, default ``benchmarks/results/env_runner.json``) with date, hardware,
versions, config (``out`` relative to the repository), every row, ``stock`` (the one-runner
numpy-twin row at the chosen count), ``stock_envs_sweep`` (envs -> env steps/s of one runner),
``stock_envs_chosen``, ``stock_sweep_runs`` (the sweep's rows), ``stock_runs`` (the stock rows at the
chosen count) and ``summary`` (its stock figures at the chosen count): ``env_steps_per_s_max``,
``speedup_vs_stock`` (ours / one stock runner on the numpy twin), ``speedup_vs_stock_all_cores``
(ours / the stock runners on every core),
``stock_env_steps_per_s_numpy_twin``, ``stock_env_steps_per_s_numpy_twin_all_cores``,
``stock_runners_all_cores``, ``stock_envs_chosen``, ``stock_env_steps_per_s_torch_twin`` (reference only),
``syncs_per_sample``, ``event_waits_per_sample``, ``best_config``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Optional

import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from benchmarks.common import (STOCK_ENVS, cell, count_syncs, parser, print_summary, print_table, repo_relative,
                               result_header, results_path, write_json)
import rl_zerosync.envs  # noqa: F401  (registers the gymnasium ids)
from rl_zerosync.envs import ENV_ID_IMPORTABLE, TORCH_ENV_ID_IMPORTABLE
from rl_zerosync.env_runner import GPUEnvRunner
from rl_zerosync.module import ZeroSyncQModule


def base_config(args: argparse.Namespace) -> DQNConfig:
    return (
        DQNConfig()
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroSyncQModule),
                   model_config={"action_mode": "routed", "hidden": list(args.hidden)})
        .debugging(seed=0)
    )


def env_config(args: argparse.Namespace, runner: Optional[dict] = None) -> dict:
    cfg = {"data": {"num_assets": 4, "num_bars": args.bars}, "env": {"episode_len": args.episode_len}}
    if runner is not None:
        cfg["runner"] = runner
    return cfg


def stock_config(args: argparse.Namespace, env_id: str, envs: int) -> DQNConfig:
    """The stock runner's config: ``envs`` gymnasium twins per runner, routed (Discrete(5))."""
    return base_config(args).environment(
        env_id, env_config={**env_config(args), "action_mode": "routed"}
    ).env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=64)


def bench_stock(args: argparse.Namespace, envs: int, env_id: str = ENV_ID_IMPORTABLE,
                env: str = "numpy twin") -> dict:
    """Env steps/s of one stock runner in this process on the gymnasium twin ``env_id``, ``envs``
    vectorized twins."""
    runner = SingleAgentEnvRunner(config=stock_config(args, env_id, envs), worker_index=0)
    runner.sample(num_timesteps=min(200, args.stock_steps))  # warm-up
    times = []
    for _ in range(args.stock_repeats):
        start = time.perf_counter()
        eps = runner.sample(num_timesteps=args.stock_steps)
        times.append(time.perf_counter() - start)
    steps = sum(len(e) for e in eps)
    runner.stop()
    wall = statistics.median(times)
    return {"runner": "stock SingleAgentEnvRunner", "env": env, "env_id": env_id, "runners": 1,
            "envs": envs, "steps_per_call": steps, "median_s": wall, "env_steps_per_s": steps / wall}


def bench_stock_parallel(args: argparse.Namespace, num_runners: int, envs: int, env_id: str = ENV_ID_IMPORTABLE,
                         env: str = "numpy twin") -> dict:
    """Env steps/s of ``num_runners`` stock runners (Ray actors, one CPU each) sampling concurrently.

    Each runner returns only its step count (no episodes travel back): the stock runners' best case.
    """
    import ray
    from ray.rllib.env.env_runner_group import EnvRunnerGroup

    own_ray = not ray.is_initialized()
    if own_ray:
        ray.init(num_cpus=num_runners, include_dashboard=False, log_to_driver=False)
    cfg = stock_config(args, env_id, envs).env_runners(num_env_runners=num_runners, num_cpus_per_env_runner=1)
    group = EnvRunnerGroup(config=cfg, local_env_runner=False)

    def sample(n: int):
        return lambda runner: sum(len(e) for e in runner.sample(num_timesteps=n))

    try:
        group.foreach_env_runner(sample(min(200, args.stock_steps)), local_env_runner=False)  # warm-up
        rates, walls, steps = [], [], []
        for _ in range(args.stock_repeats):
            start = time.perf_counter()
            counts = group.foreach_env_runner(sample(args.stock_steps), local_env_runner=False)
            wall = time.perf_counter() - start
            if len(counts) != num_runners:
                raise RuntimeError(f"{num_runners - len(counts)} of {num_runners} stock runners failed")
            rates.append(sum(counts) / wall)
            walls.append(wall)
            steps.append(sum(counts))
    finally:
        group.stop()
        if own_ray:
            ray.shutdown()
    return {"runner": "stock SingleAgentEnvRunner", "env": env, "env_id": env_id, "runners": num_runners,
            "envs": envs, "steps_per_call": statistics.median(steps), "median_s": statistics.median(walls),
            "env_steps_per_s": statistics.median(rates)}


def time_calls(fn: Callable[[], object], *, repeats: int, cuda: bool) -> float:
    """Median wall seconds per call (each call ends with its readback's event wait)."""
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_ours(args: argparse.Namespace, n: int, graph: bool, device: str) -> dict:
    cfg = (
        base_config(args)
        .environment("rl_zerosync/Trading-v0", env_config=env_config(args, {"device": device, "graph": graph}))
        .env_runners(env_runner_cls=GPUEnvRunner, num_envs_per_env_runner=n, rollout_fragment_length=args.steps)
    )
    runner = GPUEnvRunner(config=cfg, worker_index=1)
    cuda = runner.device.type == "cuda"
    for _ in range(args.warmup):  # compile kernels, pinned buffers, graph capture
        runner.sample()
        runner.sample_device()
    per_call = n * args.steps
    host_s = time_calls(runner.sample, repeats=args.repeats, cuda=cuda)
    dev_s = time_calls(runner.sample_device, repeats=args.repeats, cuda=cuda)
    syncs, waits, _ = count_syncs(runner.sample) if cuda else (None, None, None)
    row = {
        "runner": "GPUEnvRunner", "envs": n, "steps": args.steps, "graph": graph and cuda,
        "env_steps_per_call": per_call,
        "sample_median_s": host_s, "sample_env_steps_per_s": per_call / host_s,
        "sample_device_median_s": dev_s, "sample_device_env_steps_per_s": per_call / dev_s,
        "readback_bytes_sample": runner.rollout.packed.nbytes,
        "readback_bytes_sample_device": runner.rollout.leading_nbytes,
        "syncs_per_sample": syncs, "event_waits_per_sample": waits,
    }
    runner.stop()
    del runner
    if cuda:
        torch.cuda.empty_cache()
    return row


def run(args: argparse.Namespace) -> dict:
    cuda = not args.quick
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --quick for the CPU path")
    device = "cuda" if cuda else "cpu"
    sweep_runs = []
    for envs in args.stock_envs:
        sweep_runs.append(bench_stock(args, envs))
        print(f"  stock, numpy twin, 1 runner, {envs:>4} envs: {sweep_runs[-1]['env_steps_per_s']:.3e} env steps/s",
              flush=True)
    stock = max(sweep_runs, key=lambda r: r["env_steps_per_s"])
    chosen = stock["envs"]
    print(f"  stock: {chosen} envs per runner chosen", flush=True)
    stock_all = bench_stock_parallel(args, args.stock_runners, chosen)
    print(f"  stock, numpy twin, {args.stock_runners} runners x {chosen} envs: "
          f"{stock_all['env_steps_per_s']:.3e} env steps/s", flush=True)
    stock_runs = [stock, stock_all]
    stock_torch = None
    if not args.skip_torch_twin:
        stock_torch = bench_stock(args, chosen, TORCH_ENV_ID_IMPORTABLE, "torch twin")
        stock_runs.append(stock_torch)
        print(f"  stock, torch twin (reference), 1 runner: {stock_torch['env_steps_per_s']:.3e} env steps/s",
              flush=True)
    rows = []
    for n in args.envs:
        for graph in ((False, True) if cuda else (False,)):
            rows.append(bench_ours(args, n, graph, device))
            r = rows[-1]
            print(f"  N={n:>6} graph={str(r['graph']):5}  sample {r['sample_env_steps_per_s']:.3e} steps/s"
                  f"  sample_device {r['sample_device_env_steps_per_s']:.3e} steps/s", flush=True)
    best = max(rows, key=lambda r: r["sample_env_steps_per_s"])
    best_dev = max(rows, key=lambda r: r["sample_device_env_steps_per_s"])
    syncs = [r["syncs_per_sample"] for r in rows if r["syncs_per_sample"] is not None]
    waits = [r["event_waits_per_sample"] for r in rows if r["event_waits_per_sample"] is not None]
    by_size = {}
    for r in rows:
        by_size.setdefault(r["envs"], {})[r["graph"]] = r["sample_env_steps_per_s"]
    ours = best["sample_env_steps_per_s"]
    summary = {
        "env_steps_per_s_max": ours,
        "speedup_vs_stock": ours / stock["env_steps_per_s"],
        "speedup_vs_stock_all_cores": ours / stock_all["env_steps_per_s"],
        "syncs_per_sample": max(syncs) if syncs else None,
        "event_waits_per_sample": max(waits) if waits else None,
        "stock_envs_chosen": chosen,
        "stock_env_steps_per_s_numpy_twin": stock["env_steps_per_s"],
        "stock_env_steps_per_s_numpy_twin_all_cores": stock_all["env_steps_per_s"],
        "stock_runners_all_cores": stock_all["runners"],
        "stock_env_steps_per_s_torch_twin": stock_torch["env_steps_per_s"] if stock_torch else None,
        "device_env_steps_per_s_max": best_dev["sample_device_env_steps_per_s"],
        "device_speedup_vs_stock": best_dev["sample_device_env_steps_per_s"] / stock["env_steps_per_s"],
        "device_speedup_vs_stock_all_cores": best_dev["sample_device_env_steps_per_s"] / stock_all["env_steps_per_s"],
        "best_config": {"envs": best["envs"], "steps": best["steps"], "graph": best["graph"]},
        "graph_speedup_by_envs": {n: v[True] / v[False] for n, v in by_size.items() if True in v and False in v},
        "goal_met": ours >= 20e6 and ours / stock["env_steps_per_s"] >= 1000,
        "goal_met_all_cores": ours >= 20e6 and ours / stock_all["env_steps_per_s"] >= 1000,
    }
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()}
    config["out"] = repo_relative(args.out)
    return {**result_header("env_runner", device="cuda" if cuda else "cpu", config=config),
            "stock": stock, "stock_envs_sweep": {r["envs"]: r["env_steps_per_s"] for r in sweep_runs},
            "stock_envs_chosen": chosen, "stock_sweep_runs": sweep_runs, "stock_runs": stock_runs, "rows": rows,
            "summary": summary}


def print_tables(result: dict) -> None:
    print()
    for s in result["stock_runs"]:
        print(f"stock SingleAgentEnvRunner x {s['runners']} ({s['envs']} {s['env']} envs each): "
              f"{s['env_steps_per_s']:.1f} env steps/s")
    cols = ("envs", "steps", "graph", "sample_env_steps_per_s", "sample_device_env_steps_per_s",
            "sample_median_s", "syncs_per_sample", "event_waits_per_sample")
    print_table(result["rows"], cols, width=30, fmt=lambda v: cell(v, digits=3, sci_at=1e4, sci_below=1e-2))
    print_summary(result["summary"])


def main(argv: Optional[list[str]] = None) -> dict:
    p = parser(__doc__, out=results_path("env_runner"), quick="CPU, small sizes")
    p.add_argument("--envs", type=int, nargs="+", default=[1024, 16384, 65536], help="N values")
    p.add_argument("--steps", type=int, default=128, help="T, steps per rollout")
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256], help="Q network hidden sizes")
    p.add_argument("--bars", type=int, default=20000, help="synthetic bars per asset")
    p.add_argument("--episode-len", type=int, default=256, help="env episode length")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per measurement (median)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up sample + sample_device pairs")
    p.add_argument("--stock-envs", type=int, nargs="+", default=STOCK_ENVS,
                   help="vectorized twins per stock runner, swept on one runner; the fastest is used on all cores")
    p.add_argument("--stock-steps", type=int, default=4000, help="env steps per stock sample call")
    p.add_argument("--stock-repeats", type=int, default=3, help="timed stock sample calls (median)")
    p.add_argument("--stock-runners", type=int, default=os.cpu_count() or 1,
                   help="stock runners sampling concurrently for the all-cores figure (default: os.cpu_count())")
    p.add_argument("--skip-torch-twin", action="store_true",
                   help="skip the reference figure of one stock runner on the torch twin")
    args = p.parse_args(argv)
    if args.quick:
        args.envs = [n for n in args.envs if n <= 256] or [64, 256]
        args.steps = min(args.steps, 16)
        args.bars = min(args.bars, 3000)
        args.episode_len = min(args.episode_len, 64)
        args.repeats = min(args.repeats, 3)
        args.warmup = min(args.warmup, 1)
        args.stock_steps = min(args.stock_steps, 300)
        args.stock_repeats = min(args.stock_repeats, 2)
    result = run(args)
    print_tables(result)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
