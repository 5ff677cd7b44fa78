"""End-to-end throughput with training, against the sampler alone at the same envs x T.

How to run (one GPU; Ray 2.60 installed)::

    python -m benchmarks.throughput             # configs/fast.yaml and configs/local.yaml, overlap off and on
    python -m benchmarks.throughput --quick     # CPU-sized smoke version (writes to a temp folder)
    python -m benchmarks.throughput --configs configs/local.yaml \
        --set algo.num_env_runners=1 algo.num_gpus_per_env_runner=1 --out X.json   # a remote runner

For each config and each ``runner.overlap`` setting the run builds the algorithm from the YAML
(``run.evaluate=false``, no validation passes: this measures training), runs ``--warmup``
iterations (the replay fills past ``learning_starts``, graphs are captured), then times
``--iterations`` more with ``common.timed_train`` (device synchronized around each). Per iteration:
env steps / wall seconds; reported as the median. Then the same runner samples alone
(``sample_device``, exploration on, no learner work) for ``--sampler-rollouts`` rollouts, each
timed the same way: the median is the sampler's env steps/s at the same envs x T (a median, like
the e2e side, so that a rollout that waits for the next fresh data series counts the same on both
sides). ``fraction_of_sampler`` = e2e / sampler alone. With remote env runners (``--set
algo.num_env_runners=N``) the sampler alone is timed inside the first remote runner (its
``sample_device``, the same way) and multiplied by the number of runners.

The replay ratio actually trained is reported per run (updates x batch / env steps).
JSON -> ``benchmarks/results/throughput.json``; ``summary``: ``e2e_env_steps_per_s`` (fast.yaml,
the faster overlap setting), ``fraction_of_sampler``, ``overlap`` (the setting it came from),
``e2e_env_steps_per_s_no_overlap``, ``local_e2e_env_steps_per_s`` and ``local_fraction_of_sampler``
(local.yaml, its own overlap setting).
"""
from __future__ import annotations

import statistics
import time
from typing import List, Optional

import torch

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, timed_train
from benchmarks.common import write_json

CONFIGS = ("configs/fast.yaml", "configs/local.yaml")
QUICK = ["algo.num_envs_per_runner=64", "algo.rollout_length=8", "algo.batch_size=64",
         "algo.learning_starts=512", "learner.replay_capacity=20000", "data.num_bars=3000"]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _sampler_seconds(runner, rollouts: int) -> tuple:
    """(envs, T, seconds of each of ``rollouts`` timed ``sample_device()`` calls) of one runner."""
    runner.sample_device()
    seconds = []
    for _ in range(rollouts):
        _sync()
        t0 = time.perf_counter()
        runner.sample_device()
        _sync()
        seconds.append(time.perf_counter() - t0)
    return runner.num_envs, runner.num_steps, seconds


def run_one(path: str, overlap: bool, args) -> dict:
    """Timed iterations of one config with one overlap setting, then the sampler alone."""
    from rl_zerosync.config.settings import load, to_rllib_config

    overrides = (["run.evaluate=false", f"runner.overlap={str(overlap).lower()}"] + (QUICK if args.quick else [])
                 + list(args.set))
    settings = load(path, overrides)
    algo = to_rllib_config(settings).build_algo()
    try:
        for _ in range(args.warmup):
            algo.train()
        rows = []
        for _ in range(args.iterations):
            result, seconds = timed_train(algo)
            steps = float(result["env_runners"]["num_env_steps_sampled"])
            updates = float(result.get("num_updates_per_iteration", 0) or 0)
            rows.append({"seconds": seconds, "env_steps": steps, "updates": updates,
                         "phase_s": {k: float(v) for k, v in result.get("phase_s", {}).items()}})
        e2e = statistics.median(r["env_steps"] / r["seconds"] for r in rows)
        remote = settings.algo.num_env_runners
        if remote > 0:  # timed inside the first remote runner; every runner samples alike
            envs, t_len, seconds = algo.env_runner_group.foreach_env_runner(
                lambda r: _sampler_seconds(r, args.sampler_rollouts), remote_worker_ids=[1],
                local_env_runner=False)[0]
        else:
            envs, t_len, seconds = _sampler_seconds(algo.env_runner, args.sampler_rollouts)
        sampler = envs * t_len * max(1, remote) / statistics.median(seconds)
        batch = settings.algo.batch_size
        ratio = statistics.median(r["updates"] * batch / r["env_steps"] for r in rows)
        return {"config": path, "overlap": overlap, "num_envs": envs, "rollout_length": t_len,
                "num_env_runners": remote,
                "batch_size": batch, "replay_ratio_trained": ratio,
                "e2e_env_steps_per_s": e2e, "sampler_env_steps_per_s": sampler,
                "fraction_of_sampler": e2e / sampler, "iterations": rows}
    finally:
        algo.stop()


def summarize(runs: List[dict]) -> dict:
    def best(path: str) -> Optional[dict]:
        hits = [r for r in runs if r["config"] == path]
        return max(hits, key=lambda r: r["e2e_env_steps_per_s"]) if hits else None

    def of(path: str, overlap: bool) -> Optional[dict]:
        hits = [r for r in runs if r["config"] == path and r["overlap"] == overlap]
        return hits[0] if hits else None

    fast, local, fast_plain = best(CONFIGS[0]), best(CONFIGS[1]), of(CONFIGS[0], False)
    return {
        "e2e_env_steps_per_s": fast and fast["e2e_env_steps_per_s"],
        "fraction_of_sampler": fast and fast["fraction_of_sampler"],
        "overlap": fast and fast["overlap"],
        "replay_ratio_trained": fast and fast["replay_ratio_trained"],
        "e2e_env_steps_per_s_no_overlap": fast_plain and fast_plain["e2e_env_steps_per_s"],
        "local_e2e_env_steps_per_s": local and local["e2e_env_steps_per_s"],
        "local_fraction_of_sampler": local and local["fraction_of_sampler"],
        "local_overlap": local and local["overlap"],
    }


def main(argv: Optional[list] = None) -> dict:
    p = parser(__doc__, out=None, quick="CPU-sized smoke run (temp folder output)")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS))
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--sampler-rollouts", type=int, default=10)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="settings overrides applied to every config (e.g. algo.num_env_runners=1)")
    args = p.parse_args(argv)
    if args.quick:
        args.warmup, args.iterations, args.sampler_rollouts = 2, 2, 2
    out = args.out or (quick_path("throughput") if args.quick else results_path("throughput"))
    runs = [run_one(path, overlap, args) for path in args.configs for overlap in (False, True)]
    cols = ["config", "overlap", "num_envs", "rollout_length", "replay_ratio_trained", "e2e_env_steps_per_s",
            "sampler_env_steps_per_s", "fraction_of_sampler"]
    print_table(runs, cols, width=14, fmt=lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = result_header("throughput", device=device, config={
        "configs": args.configs, "overrides": list(args.set), "warmup": args.warmup, "iterations": args.iterations,
        "sampler_rollouts": args.sampler_rollouts, "quick": args.quick,
        "e2e": "median over timed iterations of env steps / wall seconds (device synchronized around each)",
        "sampler": "median over rollouts of sample_device() alone on the same runner, exploration on"})
    result["results"] = runs
    result["summary"] = summarize(runs)
    print_summary(result["summary"])
    write_json(result, out)
    return result


if __name__ == "__main__":
    main()
