"""CartPole through the batched-env protocol: GPUEnvRunner throughput and time to episode length 475,
against stock RLlib on gymnasium's CartPole-v1, in the same run.

How to run::

    python -m benchmarks.cartpole            # one GPU, ~5 min: throughput, ours learning, stock learning
    python -m benchmarks.cartpole --quick    # CPU smoke run (small sizes, short budgets), ~1-2 min

1. Throughput: ``GPUEnvRunner`` on ``"rl_zerosync/CartPole-v1"`` (``--envs`` envs x ``--steps``
   steps per rollout, CUDA graph on a GPU), ``sample()`` (one packed readback to the host) and
   ``sample_device()``; the greedy Q network of a 2x64 MLP acts. Stock: ``SingleAgentEnvRunner``
   on gymnasium ``CartPole-v1`` (fragment 64). The vectorized envs per runner are swept first
   (``--stock-envs``, default 1 4 16 64 256) on one runner in this process; the count with the most
   env steps/s is then used for one runner per remaining core as Ray actors (each returns only its
   step count: the stock runners' best case). The JSON keeps the sweep (``stock_envs_sweep``) and
   the choice (``stock_envs_chosen``); the summary's stock figures are at the chosen count.
2. Learning: training seconds until RLlib's ``env_runners/episode_return_mean`` (a running mean over
   recent training episodes, the stopping criterion of RLlib's CartPole examples) reaches 475, or
   the budget runs out. Ours: ``ZeroSyncDQN`` (settings in ``OURS``). Stock: RLlib 2.60's tuned
   CartPole DQN example (``rllib/tuned_examples/dqn/cartpole_dqn.py``, which expects a return mean
   of 450 within 200k env steps), setting for setting: ``STOCK`` (prioritized episode replay 50k,
   alpha 0.6, beta 0.4; double + dueling Q; n-step drawn from 2-5; epsilon 1 -> 0.02 over 10k
   steps; lr 5e-4; batch 32; RLlib's defaults for the rest: target network update every 500 env
   steps, learning from 1,000 env steps, rollout fragment "auto" = 5 steps, one env per runner) and
   ``STOCK_MODEL`` (a 256-unit tanh encoder, 256-unit relu advantage and value heads, zero bias
   init), the learner on the GPU when there is one (as the example's script picks it). With the
   default ``--stock-runners 0`` it is exactly the example (it samples on the local env runner).
   ``--stock-runners N > 0`` is the one departure, and it keeps the example's replay ratio: DQN
   trains once per sampling round unless ``training_intensity`` is set, and a round of N remote
   runners samples N times the steps, so N runners without it train N times less per env step
   (and update the target network, counted in env steps, every 500 / (5 N) gradient steps instead
   of every 100). ``stock_training_intensity(N)`` sets ``training_intensity`` so that every round
   trains N batches: 6.4 replayed per sampled step, the example's ratio.

Writes ``benchmarks/results/cartpole.json`` (``--out``; quick: the temp folder).
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Optional

import torch

from benchmarks.common import (STOCK_ENVS, parser, print_summary, quick_path, repo_relative, result_header,
                               results_path, timed_train, write_json)

TARGET = 475.0
OURS = dict(lr=1e-3, gamma=0.99, n_step=3, train_batch_size_per_learner=256, replay_ratio=2.0,
            num_steps_sampled_before_learning_starts=4096, target_network_update_freq=250,
            epsilon=[(0, 1.0), (20_000, 0.02)])
STOCK = dict(lr=5e-4, train_batch_size_per_learner=32, n_step=(2, 5), double_q=True, dueling=True,
             epsilon=[(0, 1.0), (10_000, 0.02)],
             replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50_000,
                                   "alpha": 0.6, "beta": 0.4})
"""``DQNConfig.training`` of RLlib's tuned CartPole DQN example (``lr`` = 5e-4 x num_learners ** 0.5
there, with one local learner: 5e-4)."""
STOCK_MODEL = dict(fcnet_hiddens=[256], fcnet_activation="tanh", fcnet_bias_initializer="zeros_",
                   head_fcnet_bias_initializer="zeros_", head_fcnet_hiddens=[256])
"""The example's ``DefaultModelConfig`` (the rest: RLlib's defaults, e.g. relu heads)."""
def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ours_config(num_envs: int, steps: int, *, hidden=(64, 64), **training):
    from rl_zerosync.algorithm import ZeroSyncDQNConfig
    from rl_zerosync.envs.registry import CARTPOLE_ENV_ID

    gpu = 1 if torch.cuda.is_available() else 0
    return (ZeroSyncDQNConfig()
            .environment(CARTPOLE_ENV_ID, env_config={"runner": {"device": "auto"}})
            .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs, rollout_fragment_length=steps)
            .learners(num_learners=0, num_gpus_per_learner=gpu,
                      learner_config_dict={"zerosync": {"replay_capacity": 200_000}})
            .training(**{**OURS, **training})
            .rl_module(model_config={"hidden": list(hidden)})
            .debugging(seed=0))


def bench_ours_runner(args) -> dict:
    algo = ours_config(args.envs, args.steps).build_algo()
    runner = algo.env_runner
    try:
        for _ in range(3):  # kernels, pinned buffers, graph capture
            runner.sample()
            runner.sample_device()
        per = args.envs * args.steps
        out = {"runner": "GPUEnvRunner", "env": "rl_zerosync/CartPole-v1", "envs": args.envs, "steps": args.steps,
               "device": str(runner.device), "graph": bool(runner.rollout.graph_captured)}
        for name, fn in (("sample", runner.sample), ("sample_device", runner.sample_device)):
            times = []
            for _ in range(args.repeats):
                _sync()
                t0 = time.perf_counter()
                fn()
                _sync()
                times.append(time.perf_counter() - t0)
            out[f"{name}_median_s"] = statistics.median(times)
            out[f"{name}_env_steps_per_s"] = per / statistics.median(times)
        return out
    finally:
        algo.stop()


def _stock_base():
    from ray.rllib.algorithms.dqn import DQNConfig

    return DQNConfig().environment("CartPole-v1").debugging(seed=0)


def bench_stock_runners(args, num_runners: int, envs: int) -> dict:
    """Env steps/s of stock SingleAgentEnvRunners on gymnasium CartPole-v1 with ``envs`` vectorized envs
    each (1 in process, or N actors)."""
    import ray
    from ray.rllib.env.env_runner_group import EnvRunnerGroup
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    cfg = _stock_base().env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=64)
    n = args.stock_steps
    if num_runners == 0:
        runner = SingleAgentEnvRunner(config=cfg, worker_index=0)
        runner.sample(num_timesteps=200)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            steps = sum(len(e) for e in runner.sample(num_timesteps=n))
            times.append(time.perf_counter() - t0)
        runner.stop()
        return {"runner": "stock SingleAgentEnvRunner", "runners": 1, "envs": envs,
                "env_steps_per_s": steps / statistics.median(times)}
    group = EnvRunnerGroup(config=cfg.env_runners(num_env_runners=num_runners, num_cpus_per_env_runner=1),
                           local_env_runner=False)

    def sample(k):
        return lambda r: sum(len(e) for e in r.sample(num_timesteps=k))

    try:
        group.foreach_env_runner(sample(200), local_env_runner=False)
        rates = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            counts = group.foreach_env_runner(sample(n), local_env_runner=False)
            rates.append(sum(counts) / (time.perf_counter() - t0))
    finally:
        group.stop()
    return {"runner": "stock SingleAgentEnvRunner", "runners": num_runners, "envs": envs,
            "env_steps_per_s": statistics.median(rates)}


def _train_to_target(name: str, algo, budget_s: float) -> dict:
    curve, train_s, it = [], 0.0, 0
    best = float("-inf")
    try:
        while train_s < budget_s:
            result, seconds = timed_train(algo)
            train_s += seconds
            it += 1
            er = result.get("env_runners", {})
            ret = er.get("episode_return_mean")
            steps = float(er.get("num_env_steps_sampled_lifetime", 0.0))
            if ret is not None and ret == ret:
                best = max(best, float(ret))
                curve.append({"train_s": train_s, "env_steps": steps, "episode_return_mean": float(ret)})
            if it % 10 == 0 or (ret is not None and ret >= TARGET):
                print(f"[{name}] it {it} t {train_s:6.1f}s env steps {steps:11,.0f} return mean {ret}", flush=True)
            if ret is not None and ret >= TARGET:
                return {"reached": True, "time_to_target_s": train_s, "env_steps_to_target": steps,
                        "iterations": it, "best_return_mean": best, "curve": curve}
    finally:
        algo.stop()
    return {"reached": False, "time_to_target_s": None, "budget_s": budget_s, "iterations": it,
            "best_return_mean": best, "curve": curve}


def learn_ours(args) -> dict:
    cfg = ours_config(args.learn_envs, args.learn_steps)
    out = _train_to_target("ours", cfg.build_algo(), args.budget_s)
    out["setup"] = {"envs": args.learn_envs, "steps": args.learn_steps, "hidden": [64, 64], **{
        k: (list(v) if isinstance(v, tuple) else v) for k, v in OURS.items()}}
    return out


def stock_training_intensity(num_runners: int) -> Optional[float]:
    """``training_intensity`` that keeps the tuned example's replay ratio with ``num_runners`` remote
    env runners: None (RLlib's default, one batch per sampling round) for 0, the example itself.

    The example samples one fragment (5 steps, 1 env) per round on its local runner and trains one
    batch of 32: 6.4 replayed per sampled step. A round of N remote runners samples 5 N steps, so it
    must train N batches. ``calculate_rr_weights`` trains ``round(training_intensity / native)``
    batches per round, native = batch / (fragment x envs x (N + 1)), hence N x native."""
    if num_runners <= 0:
        return None
    from ray.rllib.algorithms.dqn import DQNConfig

    fragment = DQNConfig().training(n_step=STOCK["n_step"]).get_rollout_fragment_length()
    return num_runners * STOCK["train_batch_size_per_learner"] / (fragment * 1 * (num_runners + 1))


def stock_learning_config(num_runners: int = 0, *, gpu: Optional[bool] = None):
    """RLlib's tuned CartPole DQN example as a ``DQNConfig`` (``num_runners`` > 0: remote env runners,
    with the example's replay ratio; see the module docstring)."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    gpu = torch.cuda.is_available() if gpu is None else gpu
    training = dict(STOCK)
    if num_runners > 0:
        training["training_intensity"] = stock_training_intensity(num_runners)
    return (_stock_base()
            .env_runners(num_env_runners=num_runners)
            .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0)
            .training(**training)
            .rl_module(model_config=DefaultModelConfig(**STOCK_MODEL)))


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (tuple, list)) else v


def learn_stock(args) -> dict:
    cfg = stock_learning_config(args.stock_runners)
    out = _train_to_target("stock", cfg.build_algo(), args.stock_budget_s)
    out["setup"] = {"env_runners": args.stock_runners, "hidden": [256], "settings": "RLlib's tuned CartPole DQN "
                    "example", **{k: _plain(v) for k, v in STOCK.items()}, "model": _plain(STOCK_MODEL),
                    "training_intensity": cfg.training_intensity,
                    "rollout_fragment_length": cfg.get_rollout_fragment_length(),
                    "target_network_update_freq": cfg.target_network_update_freq,
                    "num_steps_sampled_before_learning_starts": cfg.num_steps_sampled_before_learning_starts}
    return out


def sweep_stock_envs(args) -> tuple[dict, dict]:
    """One stock runner at every ``--stock-envs`` count: ``({envs: env steps/s}, the fastest row)``."""
    rows = [bench_stock_runners(args, 0, n) for n in args.stock_envs]
    for r in rows:
        print(f"stock: 1 runner, {r['envs']:>4} envs: {r['env_steps_per_s']:,.0f} env steps/s", flush=True)
    return {r["envs"]: r["env_steps_per_s"] for r in rows}, max(rows, key=lambda r: r["env_steps_per_s"])


def main(argv: Optional[list] = None) -> dict:
    import ray

    cpus = os.cpu_count() or 2
    p = parser(__doc__, out=None, quick="CPU smoke run: small sizes, short budgets (default --out: the temp folder)")
    p.add_argument("--envs", type=int, default=65_536)
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--stock-envs", type=int, nargs="+", default=STOCK_ENVS,
                   help="vectorized envs per stock runner to sweep on one runner; the fastest is used on all cores")
    p.add_argument("--stock-steps", type=int, default=16_384)
    p.add_argument("--learn-envs", type=int, default=256)
    p.add_argument("--learn-steps", type=int, default=16)
    p.add_argument("--budget-s", type=float, default=120.0, help="ours: training seconds at most")
    p.add_argument("--stock-budget-s", type=float, default=150.0)
    p.add_argument("--stock-runners", type=int, default=0,
                   help="stock learning: remote env runners (0, the default: the local one, as RLlib's example)")
    args = p.parse_args(argv)
    if args.quick:
        args.envs, args.steps, args.repeats, args.stock_steps = 256, 16, 3, 2048
        args.budget_s, args.stock_budget_s = 20.0, 10.0
    args.out = args.out or (quick_path("cartpole") if args.quick else results_path("cartpole"))
    ray.init(address="local", num_cpus=max(2, cpus), include_dashboard=False, log_to_driver=False)
    try:
        ours = bench_ours_runner(args)
        print(f"ours: sample {ours['sample_env_steps_per_s']:,.0f} env steps/s, sample_device "
              f"{ours['sample_device_env_steps_per_s']:,.0f}", flush=True)
        sweep, stock1 = sweep_stock_envs(args)
        stock_all = bench_stock_runners(args, max(1, cpus - 1), stock1["envs"])
        print(f"stock: 1 runner {stock1['env_steps_per_s']:,.0f}, {stock_all['runners']} runners "
              f"{stock_all['env_steps_per_s']:,.0f} env steps/s ({stock1['envs']} envs each)", flush=True)
        learning = {"target_episode_return_mean": TARGET, "ours": learn_ours(args), "stock": learn_stock(args)}
    finally:
        ray.shutdown()
    o, s = learning["ours"], learning["stock"]
    summary = {
        "ours_env_steps_per_s": ours["sample_env_steps_per_s"],
        "ours_env_steps_per_s_device": ours["sample_device_env_steps_per_s"],
        "stock_envs_chosen": stock1["envs"],
        "stock_env_steps_per_s_1_runner": stock1["env_steps_per_s"],
        "stock_env_steps_per_s_all_cores": stock_all["env_steps_per_s"],
        "speedup_vs_stock_all_cores": ours["sample_env_steps_per_s"] / stock_all["env_steps_per_s"],
        "ours_time_to_475_s": o["time_to_target_s"], "stock_time_to_475_s": s["time_to_target_s"],
        "stock_budget_s": args.stock_budget_s,
    }
    result = {**result_header("cartpole", device="cuda" if torch.cuda.is_available() else "cpu", key="benchmark",
                              config={**vars(args), "out": repo_relative(args.out)}),
              "throughput": {"ours": ours, "stock_envs_sweep": sweep, "stock_envs_chosen": stock1["envs"],
                             "stock_1_runner": stock1, "stock_all_cores": stock_all},
              "learning": learning, "summary": summary}
    print_summary(summary)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
