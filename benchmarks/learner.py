"""Learner update benchmark: stock RLlib DQN update vs the zero-sync learner (eager and graphed).

How to run:
    python -m benchmarks.learner                 # one GPU, batch sizes 256, 1024, 8192
    python -m benchmarks.learner --quick         # small, runs on CPU too

Variants (same network: the flat ZeroSyncQModule, obs 32 -> 2x256 ReLU -> 45 Q-values, Adam,
grad clip 40, double DQN, Huber):

* ``stock``: RLlib's ``DQNTorchLearner`` driven the way ``DQN.training_step`` drives it, one
  ``learner_group.update(batch=..., timesteps=...)`` call per update. The batch is already a
  device-resident ``MultiAgentBatch``, so the learner connector and the host->device copy are
  *not* timed (stock's best case).
* ``ours_eager``: ``ZeroSyncDQNTorchLearner.train(K)`` with ``graph: false`` (device replay
  sampling, guard, the adam_step optimizer kernel, Q stats, priorities-free uniform replay).
* ``ours_graph``: the same, captured once in a CUDA graph and replayed (the default learner; the Q
  network's forward and backward run as the ``linear_forward`` / ``linear_backward`` kernels).
* ``ours_graph_torch_mlp``: ``ours_graph`` with ``learner.mlp_kernel = False``: torch's forward and
  autograd's backward (cuBLAS GEMMs), the default before the linear kernels.
* ``ours_graph_x8``: ``learner.updates_per_graph: 8``: blocks of 8 updates per graph launch.
* ``ours_compiled``: ``learner.compile: true`` (torch.compile of the update's torch ops, inside the
  graph). ``ours_compiled_tf32``: plus ``learner.tf32: true`` (the learner of ``configs/fast.yaml``).

Measured per variant and batch size: median microseconds per update over repeats of K updates
(CUDA events around the K updates; host clock after synchronize on CPU), updates/s, and
synchronizing CUDA calls per update (``torch.cuda.set_sync_debug_mode("warn")`` + counted
warnings: ``benchmarks.common.count_syncs``); for ours on CUDA also device activities per update
(kernels, memcpys, memsets, counted by the torch profiler) and the host's microseconds to enqueue
one update (``train(K)`` without waiting; far below the device time means launches are not the
limit). Writes JSON (``--out``, default
``benchmarks/results/learner.json``) with a top-level
``summary``: ``syncs_per_update`` (ours, graphed; max over batch sizes), ``speedup_vs_stock_b256``,
``speedup_vs_stock_b8192`` (stock us / graphed us), ``kernels_per_update`` and ``us_per_update_b512``
(ours_graph at batch 512), their ``_fast`` twins (ours_compiled_tf32) and ``speedup_vs_stock_b256_fast``.

Results to expect on one H200: 0 syncs per update for ours (graphed and eager), tens of syncs for
stock; graphed >= 30x faster than stock at batch 256 and >= 10x at 8192.
"""
from __future__ import annotations

import logging
import statistics
import time
from typing import Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

import ray
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import NUM_AGENT_STEPS_SAMPLED_LIFETIME, NUM_ENV_STEPS_SAMPLED_LIFETIME

from benchmarks.common import (count_syncs, cuda_kernels_per_call, parser, print_summary, print_table, result_header,
                               results_path, write_json)
from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec

OBS_DIM = 32
NUM_ACTIONS = 45
MID = "default_policy"


def make_config(*, batch: int, hidden: List[int], cuda: bool, learner_class=None, zerosync=None,
                layernorm: bool = False) -> DQNConfig:
    cfg = (
        DQNConfig()
        .training(lr=1e-4, gamma=0.99, n_step=1, grad_clip=40.0, train_batch_size_per_learner=batch,
                  target_network_update_freq=500)
        .rl_module(rl_module_spec=make_module_spec(action_mode="flat", hidden=hidden, layernorm=layernorm))
        .learners(num_learners=0, num_gpus_per_learner=1 if cuda else 0)
        .debugging(seed=0)
    )
    if learner_class is not None:
        cfg = cfg.learners(learner_class=learner_class, learner_config_dict={"zerosync": zerosync or {}})
    return cfg


def spaces():
    return {MID: (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(NUM_ACTIONS))}


def random_rollout(t_len: int, n_envs: int, device: torch.device) -> Dict[str, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(0)
    ro = {
        "obs": torch.randn(t_len, n_envs, OBS_DIM, generator=g),
        "next_obs": torch.randn(t_len, n_envs, OBS_DIM, generator=g),
        "actions": torch.randint(0, NUM_ACTIONS, (t_len, n_envs), generator=g),
        "factored_actions": torch.randint(0, NUM_ACTIONS, (t_len, n_envs), generator=g),
        "rewards": torch.randn(t_len, n_envs, generator=g),
        "terminateds": torch.rand(t_len, n_envs, generator=g) < 0.01,
        "truncateds": torch.zeros(t_len, n_envs, dtype=torch.bool),
    }
    return {k: v.to(device) for k, v in ro.items()}


def time_updates(run_k: Callable[[], None], k: int, *, repeats: int, warmup: int, device: torch.device) -> float:
    """Median microseconds per update over ``repeats`` runs of ``k`` updates."""
    for _ in range(warmup):
        run_k()
    cuda = device.type == "cuda"
    samples = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            run_k()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / k)
        else:
            t0 = time.perf_counter()
            run_k()
            samples.append((time.perf_counter() - t0) * 1e6 / k)
    return statistics.median(samples)


def syncs_per_update(run_k: Callable[[], None], k: int, device: torch.device) -> Optional[float]:
    """Synchronizing CUDA calls per update over one ``run_k()`` of ``k`` updates (None on CPU)."""
    if device.type != "cuda":
        return None
    return count_syncs(run_k).syncs / k


def stock_updates(update: Callable[..., object], batch: int, k: int, device: torch.device) -> Callable[[], None]:
    """``run_k()`` calling stock ``update(batch=..., timesteps=...)`` ``k`` times on one device-resident
    MultiAgentBatch of ``batch`` random transitions, as ``DQN.training_step`` drives it."""
    ro = random_rollout(1, batch, device)
    cols = {
        "obs": ro["obs"][0], "new_obs": ro["next_obs"][0], "actions": ro["actions"][0],
        "rewards": ro["rewards"][0], "terminateds": ro["terminateds"][0],
        "weights": torch.ones(batch, device=device), "n_step": torch.ones(batch, dtype=torch.int64, device=device),
    }
    mab = MultiAgentBatch({MID: SampleBatch(cols)}, env_steps=batch)
    step = [0]

    def run_k() -> None:
        for _ in range(k):
            step[0] += batch
            update(batch=mab, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: step[0],
                                         NUM_AGENT_STEPS_SAMPLED_LIFETIME: step[0]})

    return run_k


def bench_stock(batch: int, args, device: torch.device) -> Dict[str, float]:
    cuda = device.type == "cuda"
    group = make_config(batch=batch, hidden=args.hidden, cuda=cuda).build_learner_group(spaces=spaces())
    run_k = stock_updates(group.update, batch, args.k, device)
    us = time_updates(run_k, args.k, repeats=args.repeats, warmup=1, device=device)
    syncs = syncs_per_update(run_k, args.k, device)
    group.shutdown()
    return {"median_us": us, "syncs_per_update": syncs}


def bench_ours(batch: int, graph: bool, args, device: torch.device, mlp_kernel: Optional[bool] = None,
               **zerosync) -> Dict[str, float]:
    cuda = device.type == "cuda"
    cfg = make_config(batch=batch, hidden=args.hidden, cuda=cuda, learner_class=ZeroSyncDQNTorchLearner,
                      zerosync={"replay_capacity": args.capacity, "graph": graph, **zerosync})
    learner = cfg.build_learner(spaces=spaces())
    if mlp_kernel is not None:
        learner.mlp_kernel = mlp_kernel
    learner.replay.add(random_rollout(max(1, args.capacity // 1000), 1000, device))

    def run_k() -> None:
        learner.train(args.k)

    us = time_updates(run_k, args.k, repeats=args.repeats, warmup=1, device=device)
    syncs = syncs_per_update(run_k, args.k, device)
    kernels = cuda_kernels_per_call(run_k, calls=args.k) if cuda else None
    host_us = None
    if cuda:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run_k()  # enqueue only: the host clock stops before the device is done
        host_us = (time.perf_counter() - t0) * 1e6 / args.k
        torch.cuda.synchronize()
    metrics = learner.collect_metrics()  # the per-iteration boundary read, outside the timing
    return {"median_us": us, "syncs_per_update": syncs, "skipped": metrics["skipped"], "mlp_kernel": learner.mlp_kernel,
            "captured": learner.graph_captured, "kernels_per_update": kernels, "host_enqueue_us": host_us}


def main(argv: Optional[List[str]] = None) -> Dict:
    p = parser(__doc__, out=results_path("learner"), quick="small sizes; runs on CPU")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = p.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    logging.getLogger("ray").setLevel(logging.ERROR)
    if device.type == "cuda":
        # RLlib's get_device() consults the Ray runtime context to place the learner on the GPU.
        ray.init(num_cpus=8, include_dashboard=False, ignore_reinit_error=True, logging_level=logging.ERROR)
    if args.quick:
        args.batch_sizes, args.k, args.repeats, args.capacity, args.hidden = [32, 128], 5, 3, 2000, [64, 64]
    else:
        args.batch_sizes, args.k, args.repeats, args.capacity, args.hidden = [256, 512, 1024, 8192], 50, 5, 100_000, [256, 256]

    rows = []
    for b in args.batch_sizes:
        stock = bench_stock(b, args, device)
        eager = bench_ours(b, False, args, device)
        cuda = device.type == "cuda"
        graphed = bench_ours(b, True, args, device) if cuda else None
        torch_mlp = bench_ours(b, True, args, device, mlp_kernel=False) if cuda else None
        blocks = bench_ours(b, True, args, device, updates_per_graph=8) if cuda else None
        compiled = bench_ours(b, True, args, device, compile=True) if cuda else None
        fast = bench_ours(b, True, args, device, compile=True, tf32=True) if cuda else None
        for name, r in (("stock", stock), ("ours_eager", eager), ("ours_graph", graphed),
                        ("ours_graph_torch_mlp", torch_mlp), ("ours_graph_x8", blocks), ("ours_compiled", compiled),
                        ("ours_compiled_tf32", fast)):
            if r is None:
                continue
            rows.append({"variant": name, "batch_size": b, **r, "updates_per_s": 1e6 / r["median_us"],
                         "speedup_vs_stock": stock["median_us"] / r["median_us"]})

    print_table(rows, ["variant", "batch_size", "median_us", "updates_per_s", "syncs_per_update",
                       "kernels_per_update", "host_enqueue_us", "speedup_vs_stock"], width=12)

    def pick(variant: str, b: int, key: str) -> Optional[float]:
        hits = [r for r in rows if r["variant"] == variant and r["batch_size"] == b]
        return hits[0].get(key) if hits else None

    def speedup(b: int) -> Optional[float]:
        return pick("ours_graph", b, "speedup_vs_stock")

    graph_syncs = [r["syncs_per_update"] for r in rows if r["variant"] == "ours_graph"]
    summary = {
        "syncs_per_update": max(graph_syncs) if graph_syncs and None not in graph_syncs else None,
        "speedup_vs_stock_b256": speedup(256),
        "speedup_vs_stock_b8192": speedup(8192),
        "kernels_per_update": pick("ours_graph", 512, "kernels_per_update"),
        "us_per_update_b512": pick("ours_graph", 512, "median_us"),
        "kernels_per_update_fast": pick("ours_compiled_tf32", 512, "kernels_per_update"),
        "us_per_update_b512_fast": pick("ours_compiled_tf32", 512, "median_us"),
        "speedup_vs_stock_b256_fast": pick("ours_compiled_tf32", 256, "speedup_vs_stock"),
        "kernels_per_update_torch_mlp": pick("ours_graph_torch_mlp", 512, "kernels_per_update"),
        "us_per_update_b512_torch_mlp": pick("ours_graph_torch_mlp", 512, "median_us"),
    }
    summary["targets_met"] = (
        summary["syncs_per_update"] == 0
        and (summary["speedup_vs_stock_b256"] or 0) >= 30
        and (summary["speedup_vs_stock_b8192"] or 0) >= 10
    )
    config = {"device": str(device), "quick": args.quick, "batch_sizes": args.batch_sizes,
              "updates_per_repeat": args.k, "repeats": args.repeats, "obs_dim": OBS_DIM,
              "num_actions": NUM_ACTIONS, "hidden": args.hidden, "replay_capacity": args.capacity,
              "stock_input": "device-resident MultiAgentBatch (learner connector not timed)"}
    result = {**result_header("learner", device=device, config=config), "results": rows, "summary": summary}
    print_summary(summary)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
