"""Scaling benchmark: one GPU vs two GPUs in the same run (weak scaling: the same work per GPU).

How to run (a machine with two GPUs; Ray 2.60 installed)::

    python -m benchmarks.scaling            # ~5 min on two H200s
    python -m benchmarks.scaling --quick    # small sizes (also runs on a CPU: gloo instead of NCCL)

Two sections, each timed the same way for 1 and 2 GPUs:

* ``learner``: the learner alone. Each learner fills its replay shard with its own random
  rollout (generator seed ``1000 + rank``; the learner's replay sampler is seeded ``seed + rank``),
  warms up (graph capture), then times ``--k`` updates with CUDA events; every rank is timed and
  the slowest counts. Every rank records its device and GPU (``per_rank``: ``device``,
  ``cuda_index``, ``gpu_ids``, ``gpu_name``, ``gpu_uuid``), and the ranks must hold distinct GPUs (Ray GPU ids and UUIDs; inside a Ray actor the local device is always cuda:0). Per-learner batch fixed, so 2 learners train twice the transitions per update
  (global batch ``2 x B``). Variants: ours graphed (1 learner; 2 DDP learners over NCCL), ours
  eager DDP (2), and stock RLlib ``DQNTorchLearner.update`` on a device batch (1; 2 DDP learners),
  the baseline. Synchronizing CUDA calls per update are counted per rank (``warn`` mode).
* ``e2e``: ``ZeroSyncDQN`` as ``configs/two_gpu.yaml`` lays it out: per GPU one GPU env runner
  (0.6 GPU) and one learner (0.4 GPU). 1 GPU = 1 runner + 1 learner in a Ray instance given one
  GPU; 2 GPUs = 2 runners + 2 DDP learners. Same envs per runner, rollout length, per-learner
  batch and replay ratio, so an iteration does the same work per GPU. After ``--warm`` iterations,
  ``--iters`` iterations are timed: env steps/s, updates/s, trained transitions/s, the median
  seconds per phase (``phase_s``: sample, add, train, sync_weights, rollout fetch, replay add; the
  runners' enqueue, device-wait-and-copy and object-store put), and where Ray placed each actor.

``scaling efficiency`` = throughput with 2 GPUs / (2 x throughput with 1 GPU). ``summary``:
``scaling_efficiency_2gpu`` (end to end, env steps/s; trained transitions/s is the same ratio
since the replay ratio is fixed), ``learner_scaling_efficiency_2gpu`` (ours graphed, trained
transitions/s), ``stock_learner_scaling_efficiency_2gpu``, ``syncs_per_update_ddp`` (max over
ranks). JSON goes to ``benchmarks/results/scaling.json``.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import ray
import ray.cloudpickle
import torch

from benchmarks import common
from benchmarks import learner as learner_bench
from benchmarks.common import parser, print_summary, result_header, results_path, write_json
from rl_zerosync.learner import ZeroSyncDQNTorchLearner

ROOT = Path(__file__).resolve().parent.parent
RUNNER_TIMERS = ("rollout_enqueue_timer", "rollout_readback_timer", "rollout_put_timer")
# The learner actors cannot import the benchmark scripts: ship these modules' functions by value.
for _mod in (common, learner_bench):
    ray.cloudpickle.register_pickle_by_value(_mod)


# ---------------------------------------------------------------- learner section (runs in actors)
def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _rank_rollout(t_len: int, n_envs: int, rank: int) -> dict:
    """Random transitions shaped like ``learner_bench.random_rollout``, drawn from generator seed
    ``1000 + rank``: every rank trains on a distinct rollout."""
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    d, a = learner_bench.OBS_DIM, learner_bench.NUM_ACTIONS
    return {
        "obs": torch.randn(t_len, n_envs, d, generator=g),
        "next_obs": torch.randn(t_len, n_envs, d, generator=g),
        "actions": torch.randint(0, a, (t_len, n_envs), generator=g),
        "rewards": torch.randn(t_len, n_envs, generator=g),
        "terminateds": torch.rand(t_len, n_envs, generator=g) < 0.01,
        "truncateds": torch.zeros(t_len, n_envs, dtype=torch.bool),
    }


def _device_record(learner) -> dict:
    """Where this rank runs: its torch device, CUDA index, Ray GPU ids and the GPU's name / UUID."""
    dev = learner.device
    rec = {"rank": _rank(), "device": str(dev), "cuda_index": None,
           "gpu_ids": [str(i) for i in ray.get_gpu_ids()]}
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        rec.update(cuda_index=idx, gpu_name=props.name, gpu_uuid=str(getattr(props, "uuid", "")) or None,
                   current_device=torch.cuda.current_device())
    return rec


def _check_devices(per_rank: list, cuda: bool) -> None:
    """Every rank answered once, and on CUDA each rank has its own physical GPU: one Ray GPU id
    each, all distinct, and distinct GPU UUIDs (inside a Ray actor CUDA_VISIBLE_DEVICES holds only that GPU,
    so the local device is cuda:0 on every rank: the physical GPU is the Ray id / UUID)."""
    ranks = sorted(r["rank"] for r in per_rank)
    assert ranks == list(range(len(per_rank))), f"learner ranks {ranks}"
    if cuda:
        ids = [tuple(str(g) for g in r["gpu_ids"]) for r in per_rank]
        assert all(len(i) == 1 for i in ids) and len(set(ids)) == len(ids), f"learner Ray GPU ids {ids}"
        uuids = [r["gpu_uuid"] for r in per_rank]
        assert len(set(uuids)) == len(uuids), f"learner ranks share a GPU: {uuids}"


def _ours_in_actor(learner, *, k: int, repeats: int, capacity: int) -> dict:
    dev = learner.device
    rank = _rank()
    rollout = _rank_rollout(max(1, capacity // 1000), 1000, rank)
    learner.replay.add(rollout)
    learner.train(k)  # warm-up (and graph capture: DDP needs 11 eager updates first)
    learner.collect_metrics()
    us = learner_bench.time_updates(lambda: learner.train(k), k, repeats=repeats, warmup=0, device=dev)
    syncs = learner_bench.syncs_per_update(lambda: learner.train(k), k, dev)
    metrics = learner.collect_metrics()
    return {**_device_record(learner), "sec_per_update": us * 1e-6, "syncs_per_update": syncs,
            "skipped": metrics["skipped"],
            "captured": learner.graph_captured,
            "rollout_seed": 1000 + rank, "rollout_reward_sum": float(rollout["rewards"].sum()),
            "replay_seed": learner.replay.seed}


def _stock_in_actor(learner, *, k: int, repeats: int, batch: int) -> dict:
    dev = learner.device
    run_k = learner_bench.stock_updates(learner.update, batch, k, dev)
    us = learner_bench.time_updates(run_k, k, repeats=repeats, warmup=1, device=dev)
    syncs = learner_bench.syncs_per_update(run_k, k, dev)
    return {**_device_record(learner), "sec_per_update": us * 1e-6, "syncs_per_update": syncs}


def _learner_group(*, num_learners: int, batch: int, hidden, cuda: bool, ours: bool, graph: bool, capacity: int):
    cfg = learner_bench.make_config(
        batch=batch, hidden=hidden, cuda=cuda,
        learner_class=ZeroSyncDQNTorchLearner if ours else None,
        zerosync={"replay_capacity": capacity, "graph": graph} if ours else None,
    )
    cfg = cfg.learners(num_learners=num_learners, num_gpus_per_learner=1 if cuda else 0,
                       num_cpus_per_learner=1)
    return cfg.build_learner_group(spaces=learner_bench.spaces())


def bench_learners(args, cuda: bool) -> list:
    rows = []
    variants = [("ours_graph", True, True), ("ours_eager", True, False), ("stock", False, False)]
    for name, ours, graph in variants:
        for n in (1, 2):
            if name == "ours_eager" and n == 1:
                continue  # the single-learner eager update is in benchmarks/learner.py
            group = _learner_group(num_learners=n, batch=args.batch, hidden=args.hidden, cuda=cuda, ours=ours,
                                   graph=graph, capacity=args.capacity)
            try:
                if ours:
                    fn = lambda lr, _k=args.k, _r=args.repeats, _c=args.capacity: _ours_in_actor(  # noqa: E731
                        lr, k=_k, repeats=_r, capacity=_c)
                else:
                    fn = lambda lr, _k=args.stock_k, _r=args.repeats, _b=args.batch: _stock_in_actor(  # noqa: E731
                        lr, k=_k, repeats=_r, batch=_b)
                per_rank = [r.get() for r in group.foreach_learner(fn)]
            finally:
                group.shutdown()
            for r in per_rank:
                if isinstance(r, Exception):
                    raise r
            _check_devices(per_rank, cuda)
            if ours and n > 1:  # distinct rollouts and replay sampler seeds per rank
                assert len({r["rollout_reward_sum"] for r in per_rank}) == n, per_rank
                assert len({r["replay_seed"] for r in per_rank}) == n, per_rank
            sec = max(r["sec_per_update"] for r in per_rank)
            syncs = [r["syncs_per_update"] for r in per_rank]
            row = {
                "variant": name, "gpus": n, "batch_per_learner": args.batch, "us_per_update": sec * 1e6,
                "updates_per_s": 1.0 / sec, "trained_per_s": n * args.batch / sec,
                "syncs_per_update": max(syncs) if None not in syncs else None, "per_rank": per_rank,
            }
            rows.append(row)
            print(f"learner {name:<10} gpus={n} {row['us_per_update']:9.1f} us/update "
                  f"{row['trained_per_s']:14,.0f} trained/s syncs/update={row['syncs_per_update']} "
                  f"devices={[(r['rank'], r['device'], r['gpu_ids']) for r in sorted(per_rank, key=lambda x: x['rank'])]}",
                  flush=True)
    return rows


# ---------------------------------------------------------------- end-to-end section
def _e2e_settings(args, gpus: int, cuda: bool):
    from rl_zerosync.config.settings import load

    frac_runner, frac_learner = (0.6, 0.4) if cuda else (0, 0)
    return load(ROOT / "configs" / "two_gpu.yaml", [
        "run.seed=0",
        f"algo.num_env_runners={gpus}",
        f"algo.num_learners={gpus}",
        f"algo.num_gpus_per_env_runner={frac_runner}",
        f"algo.num_gpus_per_learner={frac_learner}",
        f"algo.num_envs_per_runner={args.envs}",
        f"algo.rollout_length={args.rollout}",
        f"algo.batch_size={args.batch}",
        f"algo.replay_ratio={args.replay_ratio}",
        "algo.learning_starts=0",
        f"learner.replay_capacity={args.capacity}",
    ])


def _placement(algo) -> dict:
    runners = algo.env_runner_group.foreach_env_runner(lambda r: ray.get_gpu_ids(), local_env_runner=False)
    learners = [r.get() for r in algo.learner_group.foreach_learner(lambda lr: ray.get_gpu_ids())]
    return {"runners": [[str(i) for i in g] for g in runners], "learners": [[str(i) for i in g] for g in learners]}


def bench_e2e(args, gpus: int, cuda: bool) -> dict:
    from rl_zerosync.config.settings import to_rllib_config

    ray.init(num_cpus=args.cpus, num_gpus=gpus if cuda else 0, include_dashboard=False)
    try:
        algo = to_rllib_config(_e2e_settings(args, gpus, cuda)).build_algo()
        try:
            place = _placement(algo)
            for _ in range(args.warm):
                algo.train()
            first = algo.train()
            steps0 = first["env_runners"]["num_env_steps_sampled_lifetime"]
            t0 = time.perf_counter()
            iters, updates, timers = 0, 0, []
            while iters < args.iters:
                result = algo.train()
                iters += 1
                updates += int(result.get("num_updates_per_iteration", 0))
                runner = result.get("env_runners", {})
                timers.append({**result.get("phase_s", {}),
                               **{f"runner_{k}": float(runner[k]) for k in RUNNER_TIMERS if k in runner}})
            wall = time.perf_counter() - t0
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"] - steps0
            zs = result["learners"]["default_policy"]["zerosync"]
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    phase = {k: statistics.median(t[k] for t in timers if k in t) for k in sorted({k for t in timers for k in t})}
    row = {
        "gpus": gpus, "env_runners": gpus, "learners": gpus, "iterations": iters, "wall_s": wall,
        "env_steps": steps, "env_steps_per_s": steps / wall, "updates": updates, "updates_per_s": updates / wall,
        "trained_per_s": updates * args.batch * gpus / wall, "phase_median_s": phase, "placement": place,
        "skipped_last_iteration": float(zs["skipped"]),
    }
    print(f"e2e gpus={gpus}: {row['env_steps_per_s']:14,.0f} env steps/s {row['updates_per_s']:9,.1f} updates/s "
          f"{row['trained_per_s']:14,.0f} trained/s placement={place} phases={ {k: round(v, 4) for k, v in phase.items()} }",
          flush=True)
    return row


def main(argv=None) -> dict:
    p = parser(__doc__, out=results_path("scaling"), quick="small sizes (CPU smoke run)")
    p.add_argument("--skip-learner", action="store_true")
    p.add_argument("--skip-e2e", action="store_true")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    if cuda and torch.cuda.device_count() < 2:
        raise SystemExit(f"scaling.py needs two GPUs, found {torch.cuda.device_count()}")
    q = args.quick
    args.batch = 64 if q else 1024
    args.hidden = [64, 64] if q else [256, 256]
    args.capacity = 20_000 if q else 500_000
    args.k, args.stock_k, args.repeats = (5, 3, 2) if q else (200, 50, 5)
    args.envs, args.rollout = (128, 16) if q else (4096, 64)
    args.replay_ratio = 0.5
    args.warm, args.iters = (1, 3) if q else (5, 20)
    args.cpus = 6 if q else 16

    result = {**result_header("scaling", device="cuda" if cuda else "cpu", key="benchmark",
                              config={k: v for k, v in vars(args).items() if k not in ("out",)}),
              "gpu_count": torch.cuda.device_count() if cuda else 0}
    if cuda:
        result["hardware"]["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    learner_rows = []
    if not args.skip_learner:
        ray.init(num_cpus=args.cpus, num_gpus=2 if cuda else 0, include_dashboard=False)
        try:
            learner_rows = bench_learners(args, cuda)
        finally:
            ray.shutdown()
    e2e_rows = [] if args.skip_e2e else [bench_e2e(args, g, cuda) for g in (1, 2)]

    def eff(rows, key, **match):
        hits = {r["gpus"]: r[key] for r in rows if all(r.get(k) == v for k, v in match.items())}
        return hits[2] / (2 * hits[1]) if 1 in hits and 2 in hits else None

    summary = {
        "scaling_efficiency_2gpu": eff(e2e_rows, "env_steps_per_s"),
        "e2e_env_steps_per_s_1gpu": e2e_rows[0]["env_steps_per_s"] if e2e_rows else None,
        "e2e_env_steps_per_s_2gpu": e2e_rows[1]["env_steps_per_s"] if e2e_rows else None,
        "trained_scaling_efficiency_2gpu": eff(e2e_rows, "trained_per_s"),
        "learner_scaling_efficiency_2gpu": eff(learner_rows, "trained_per_s", variant="ours_graph"),
        "stock_learner_scaling_efficiency_2gpu": eff(learner_rows, "trained_per_s", variant="stock"),
        "syncs_per_update_ddp": max((r["syncs_per_update"] for r in learner_rows
                                     if r["variant"] == "ours_graph" and r["gpus"] == 2
                                     and r["syncs_per_update"] is not None), default=None),
    }
    ours2 = [r for r in learner_rows if r["variant"] == "ours_graph" and r["gpus"] == 2]
    stock2 = [r for r in learner_rows if r["variant"] == "stock" and r["gpus"] == 2]
    if ours2 and stock2:
        summary["ddp_update_speedup_vs_stock"] = stock2[0]["us_per_update"] / ours2[0]["us_per_update"]
    print_summary(summary)
    result.update({"learner": learner_rows, "e2e": e2e_rows, "summary": summary})
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
