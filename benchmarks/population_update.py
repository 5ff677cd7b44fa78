"""Population learner-update benchmark: P members' updates at ``configs/local.yaml`` size, three ways.

How to run (from the repository root)::

    python -m benchmarks.population_update            # CUDA: P in {1, 8, 64}; writes benchmarks/results/population_update.json
    python -m benchmarks.population_update --quick    # CPU smoke: P in {1, 3}, small network, a temp JSON
    python -m benchmarks.population_update --profile 64   # where the batched update's time goes (eager, profiler)

Results to expect: on one H200 the batched update of 64 members takes a fraction of the time of 64
members' own graphed updates (the ``alone`` row), and 0 host syncs per population update.

What is timed (learner updates only: no env runner, no validation; every member's replay holds
random transitions of the configured shape, ``--fill`` rollouts of ``num_envs_per_runner x
rollout_length``):

* ``alone``: P learners, each ``learner.train(K)`` with its own CUDA graph, one after another: what a
  population of separate members (or P processes time-slicing the GPU) does per iteration;
* ``per_member``: :class:`~rl_zerosync.learner.population_update.PopulationUpdate` in ``per_member``
  mode: the same members' own kernels, all P captured in one CUDA graph per population update;
* ``batched``: ``PopulationUpdate`` in ``batched`` mode: batched GEMMs and member-batched ops, one CUDA
  graph per population update.

Per way and P: the median over ``--repeats`` of seconds per population update (K = the config's updates
per iteration, timed with the GPU synchronized around each K updates), ``updates_per_s`` (member
updates, P x population updates per second) and ``learner_env_steps_per_s`` = member updates/s x batch
/ replay_ratio: the env steps per second whose training this learner keeps up with at the config's
replay ratio (a learner-side capacity, not an end-to-end rate: the env runners are not in it).
``syncs_per_population_update``: one batched population update under
``torch.cuda.set_sync_debug_mode("warn")`` after capture (``benchmarks.common.count_syncs``).
"""
from __future__ import annotations

import gc
import statistics
import sys
import time

import gymnasium as gym
import numpy as np
import torch

from benchmarks.common import count_syncs, parser, print_summary, print_table, quick_path, results_path, \
    result_header, write_json

WAYS = ("alone", "per_member", "batched")


def _build(settings, k: int, device: str, capacity: int):
    from ray.rllib.algorithms.dqn import DQNConfig

    from rl_zerosync.learner import ZeroSyncDQNTorchLearner
    from rl_zerosync.module import make_module_spec

    a, m = settings.algo, settings.model
    torch.manual_seed(k)
    cfg = (
        DQNConfig()
        .training(lr=a.lr * (1.0 + 0.1 * (k % 4)), gamma=a.gamma, n_step=a.n_step, grad_clip=a.grad_clip,
                  train_batch_size_per_learner=a.batch_size, target_network_update_freq=a.target_update_freq)
        .rl_module(rl_module_spec=make_module_spec(action_mode=m.action_mode, hidden=list(m.hidden),
                                                   layernorm=bool(m.layernorm)))
        .learners(num_learners=0, num_gpus_per_learner=1 if device == "cuda" else 0,
                  learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": capacity, "seed": k,
                                                    "weight_decay": a.weight_decay}})
    )
    obs_dim = _obs_dim(settings)
    spaces = {"default_policy": (gym.spaces.Box(-10.0, 10.0, (obs_dim,), np.float32), gym.spaces.Discrete(5))}
    return cfg.build_learner(spaces=spaces)


def _obs_dim(settings) -> int:
    """The observation size of the config's env (its spaces; no env is built)."""
    from rl_zerosync.config.settings import to_rllib_config
    from rl_zerosync.envs.registry import spaces_of

    config = to_rllib_config(settings)
    return int(spaces_of(config.env, config.env_config)[0].shape[0])


def _fill(learner, k: int, *, t_len: int, n_envs: int, obs_dim: int, rollouts: int, device: str) -> None:
    g = torch.Generator(device=device).manual_seed(k)
    for _ in range(rollouts):
        learner.replay.add({
            "obs": torch.randn(t_len, n_envs, obs_dim, generator=g, device=device),
            "next_obs": torch.randn(t_len, n_envs, obs_dim, generator=g, device=device),
            "actions": torch.randint(0, 5, (t_len, n_envs), generator=g, device=device),
            "rewards": torch.randn(t_len, n_envs, generator=g, device=device),
            "terminateds": torch.rand(t_len, n_envs, generator=g, device=device) < 0.004,
            "truncateds": torch.zeros(t_len, n_envs, dtype=torch.bool, device=device),
        })


def _time(fn, *, repeats: int, device: str) -> list[float]:
    out = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def measure(settings, p: int, way: str, *, k: int, repeats: int, fill: int, device: str, capacity: int) -> dict:
    from rl_zerosync.learner.population_update import PopulationUpdate

    a = settings.algo
    obs_dim = _obs_dim(settings)
    learners = [_build(settings, i, device, capacity) for i in range(p)]
    for i, learner in enumerate(learners):
        _fill(learner, i, t_len=a.rollout_length, n_envs=a.num_envs_per_runner, obs_dim=obs_dim, rollouts=fill,
              device=device)
    update = None
    if way == "alone":
        def run():
            for learner in learners:
                learner.train(k)
    else:
        update = PopulationUpdate(learners, mode=way)

        def run():
            update.train([k] * p)
    t0 = time.perf_counter()
    run()  # warm-up, NVRTC compiles, graph capture
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    times = _time(run, repeats=repeats, device=device)
    per_update = statistics.median(times) / k
    row = {"p": p, "way": way, "s_per_population_update": per_update, "ms_per_population_update": 1e3 * per_update,
           "updates_per_s": p / per_update,
           "learner_env_steps_per_s": p * a.batch_size / a.replay_ratio / per_update,
           "first_call_s": first, "repeats_s": times,
           "graph_captured": (update.graph_captured if update is not None else
                              all(learner.graph_captured for learner in learners))}
    if update is not None and way == "batched" and device == "cuda":
        count = count_syncs(lambda: update.train([1] * p))
        row["syncs_per_population_update"] = count.syncs
    if update is not None:
        packs = update.collect()
        row["updates_counted"] = sum(int(lr.collect_metrics(values=v)["updates"]) for lr, v in zip(learners, packs))
    del learners, update
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def profile(settings, p: int, *, device: str, capacity: int) -> dict:
    """Print torch.profiler's table (by device time) of 5 eager batched population updates of ``p``
    members (after 3 warm-up updates); the graph is off so that every op shows."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from rl_zerosync.learner.population_update import PopulationUpdate

    a = settings.algo
    learners = [_build(settings, i, device, capacity) for i in range(p)]
    for i, learner in enumerate(learners):
        _fill(learner, i, t_len=a.rollout_length, n_envs=a.num_envs_per_runner, obs_dim=_obs_dim(settings),
              rollouts=1, device=device)
    update = PopulationUpdate(learners, mode="batched")
    update.disable_graph()
    update.train([3] * p)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        update.train([5] * p)
        if device == "cuda":
            torch.cuda.synchronize()
    key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=60))
    return {}


def main(argv=None) -> dict:
    from rl_zerosync.config.settings import load as load_settings

    ap = parser(__doc__, out=None, quick="CPU smoke run: P in {1, 3}, small network")
    ap.add_argument("--config", default="configs/local.yaml")
    ap.add_argument("--p", type=int, nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fill", type=int, default=2, help="rollouts added to every member's replay")
    ap.add_argument("--capacity", type=int, default=200_000, help="replay rows per member (population.yaml's)")
    ap.add_argument("--profile", type=int, default=None, metavar="P",
                    help="instead: torch.profiler table of 5 eager batched population updates of P members")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    overrides = []
    if args.quick:
        overrides = ["model.hidden=[32, 32]", "algo.batch_size=64", "algo.num_envs_per_runner=64",
                     "algo.rollout_length=8"]
    settings = load_settings(args.config, overrides)
    if args.profile is not None:
        return profile(settings, args.profile, device=device, capacity=args.capacity)
    p_list = args.p or ([1, 3] if args.quick else [1, 8, 64])
    k = max(1, int(round(settings.algo.replay_ratio * settings.algo.num_envs_per_runner
                         * settings.algo.rollout_length / settings.algo.batch_size)))
    repeats = 2 if args.quick else args.repeats
    rows = []
    for p in p_list:
        for way in WAYS:
            row = measure(settings, p, way, k=k, repeats=repeats, fill=1 if args.quick else args.fill,
                          device=device, capacity=args.capacity)
            rows.append(row)
            print(f"P={p:3d} {way:>10}: {row['ms_per_population_update']:.3f} ms per population update, "
                  f"{row['learner_env_steps_per_s']:.3e} learner env steps/s", flush=True)
    by = {(r["p"], r["way"]): r for r in rows}
    top = max(p_list)
    summary = {
        "p": p_list,
        f"batched_vs_alone_p{top}": by[(top, "alone")]["s_per_population_update"]
        / by[(top, "batched")]["s_per_population_update"],
        f"batched_vs_per_member_p{top}": by[(top, "per_member")]["s_per_population_update"]
        / by[(top, "batched")]["s_per_population_update"],
        f"learner_env_steps_per_s_batched_p{top}": by[(top, "batched")]["learner_env_steps_per_s"],
        f"batched_speedup_vs_one_member_p{top}": by[(top, "batched")]["learner_env_steps_per_s"]
        / by[(1, "batched")]["learner_env_steps_per_s"] if 1 in p_list else None,
        "syncs_per_population_update": by[(top, "batched")].get("syncs_per_population_update"),
    }
    print_table(rows, ["p", "way", "ms_per_population_update", "updates_per_s", "learner_env_steps_per_s"],
                width=14, title="\npopulation learner update")
    print_summary(summary)
    config = {"config": args.config, "overrides": overrides, "updates_per_iteration_k": k, "repeats": repeats,
              "fill_rollouts": 1 if args.quick else args.fill, "replay_capacity": args.capacity,
              "batch_size": settings.algo.batch_size, "hidden": list(settings.model.hidden),
              "layernorm": bool(settings.model.layernorm), "obs_dim": _obs_dim(settings),
              "member_lr": "config lr x (1 + 0.1 (k mod 4))", "argv": sys.argv[1:]}
    result = {**result_header("population_update", device=device, config=config), "rows": rows, "summary": summary}
    out = args.out or (quick_path("population_update") if args.quick else results_path("population_update"))
    write_json(result, out)
    return result


if __name__ == "__main__":
    main()
