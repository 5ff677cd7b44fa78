"""Train ZeroSyncDQN on the trading env with RLlib's Python builder API (no YAML), print metrics
and save a checkpoint.

Every YAML section has a place in the builder (``rl_zerosync.config.settings.to_rllib_config`` is the
mapping): ``data`` / ``env`` / ``runner`` go into ``env_config``, ``algo`` into ``.env_runners()``,
``.learners()`` and ``.training()``, ``model`` into ``.rl_module(model_config=...)``, and the
``learner`` section into ``learner_config_dict={"zerosync": {...}}``.

    python examples/builder_api.py            # GPU-sized: 1024 envs x 64 steps per iteration
    python examples/builder_api.py --quick    # CPU-sized, ~20 s

Restore later with ``ZeroSyncDQN.from_checkpoint(path)`` or ``algo.restore_from_path(path)``.
"""
import argparse
import tempfile

import ray
import torch

from rl_zerosync.algorithm import ZeroSyncDQNConfig

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--quick", action="store_true", help="tiny CPU run")
p.add_argument("--iterations", type=int, default=None)
p.add_argument("--out", default=None, help="checkpoint directory (default: a temporary one, removed at the end)")
args = p.parse_args()
q = args.quick
gpu = torch.cuda.is_available() and not q
iterations = args.iterations or (6 if q else 50)
envs, T, batch = (16, 32, 64) if q else (1024, 64, 1024)

config = (
    ZeroSyncDQNConfig()
    .environment(
        "rl_zerosync/Trading-v0",
        env_config={
            "data": {"source": "synthetic", "num_assets": 2 if q else 8, "num_bars": 3000 if q else 20000, "seed": 0},
            "env": {"episode_len": 32 if q else 256, "window": 8 if q else 64},  # rl_zerosync.envs.EnvParams
            "runner": {"device": "cuda" if gpu else "cpu"},  # rl_zerosync.env_runner.RunnerSettings
            "action_mode": "routed",  # Q over 5 exposures; the routing kernel picks order type + urgency
        },
    )
    .env_runners(num_env_runners=0, num_envs_per_env_runner=envs, rollout_fragment_length=T)
    .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0,
              learner_config_dict={"zerosync": {"replay_capacity": 20_000 if q else 1_000_000, "graph": gpu}})
    .training(lr=1e-3 if q else 5e-4, gamma=0.99, n_step=3, train_batch_size_per_learner=batch, replay_ratio=0.5,
              num_steps_sampled_before_learning_starts=256 if q else 20_000,
              target_network_update_freq=20 if q else 100,
              epsilon=[(0, 1.0), (2000 if q else 600_000, 0.05)])
    .rl_module(model_config={"action_mode": "routed", "hidden": [32, 32] if q else [256, 256], "layernorm": True})
    .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
    .debugging(seed=0)
)

scratch = None if args.out else tempfile.TemporaryDirectory(prefix="zerosync_ckpt_")  # removed at the end
ray.init(address="local", num_cpus=2 if q else None, include_dashboard=False)
algo = config.build_algo()
try:
    print(f"{'iter':>4} {'env_steps':>10} {'epsilon':>7} {'return_mean':>11} {'loss':>8} {'q_mean':>8}")
    for _ in range(iterations):
        r = algo.train()
        er, zs = r["env_runners"], r["learners"]["default_policy"].get("zerosync", {})
        ret = float(er.get("episode_return_mean", float("nan")))  # NaN: no episode ended this iteration
        print(f"{r['training_iteration']:4d} {int(er['num_env_steps_sampled_lifetime']):10d} "
              f"{float(er['epsilon']):7.3f} {'-' if ret != ret else f'{ret:.4f}':>11} "
              f"{float(zs.get('loss_mean', float('nan'))):8.4f} {float(zs.get('q_mean', float('nan'))):8.4f}")
    path = algo.save_to_path(args.out or scratch.name)
    print(f"checkpoint saved: {path}" + ("" if args.out else " (a temporary directory, removed now: --out DIR keeps it)"))
finally:
    algo.stop()
    ray.shutdown()
    if scratch is not None:
        scratch.cleanup()
