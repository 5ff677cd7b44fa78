"""Ray Tune sweep of ZeroSyncDQN over lr x replay_ratio on the batched CartPole, best trial by
``env_runners/episode_return_mean``.

A ``ZeroSyncDQNConfig`` is the ``param_space`` as is; ``tune.grid_search`` values go where plain
values would (``.training(lr=tune.grid_search([...]))``). Each trial is one ZeroSyncDQN in its own
process; on a GPU, ``num_gpus_per_learner`` < 1 lets several trials share it (the env runner samples
in the trial process, on the same device).

    python examples/tune_sweep.py            # GPU-sized: 3 x 3 trials, 1024 envs each
    python examples/tune_sweep.py --quick    # CPU-sized: 2 x 2 trials, ~40 s on 2 cores
"""
import argparse
import tempfile

import ray
import torch
from ray import tune

from rl_zerosync.algorithm import ZeroSyncDQN, ZeroSyncDQNConfig

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--quick", action="store_true", help="tiny CPU sweep")
p.add_argument("--storage", default=None, help="Tune results directory (default: a temporary one, removed at the end)")
args = p.parse_args()
q = args.quick
gpu = torch.cuda.is_available() and not q
metric = "env_runners/episode_return_mean"

config = (
    ZeroSyncDQNConfig()
    .environment("rl_zerosync/CartPole-v1", env_config={"runner": {"device": "cuda" if gpu else "cpu"}})
    .env_runners(num_env_runners=0, num_envs_per_env_runner=16 if q else 1024, rollout_fragment_length=16 if q else 64)
    .learners(num_learners=0, num_gpus_per_learner=0.25 if gpu else 0,
              learner_config_dict={"zerosync": {"replay_capacity": 20_000 if q else 1_000_000, "graph": gpu}})
    .training(lr=tune.grid_search([5e-4, 2e-3] if q else [1e-4, 5e-4, 1e-3]),
              replay_ratio=tune.grid_search([1.0, 4.0] if q else [0.5, 1.0, 2.0]),
              train_batch_size_per_learner=64 if q else 1024, n_step=3,
              num_steps_sampled_before_learning_starts=256 if q else 20_000,
              target_network_update_freq=50 if q else 500, epsilon=[(0, 1.0), (2000 if q else 500_000, 0.02)])
    .rl_module(model_config={"action_mode": "flat", "hidden": [32, 32] if q else [256, 256]})
    .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
    .debugging(seed=0)
)

scratch = None if args.storage else tempfile.TemporaryDirectory(prefix="zerosync_tune_")  # removed at the end
ray.init(address="local", num_cpus=2 if q else None, include_dashboard=False)
try:
    tuner = tune.Tuner(
        ZeroSyncDQN,
        param_space=config,
        run_config=tune.RunConfig(
            name="zerosync_sweep", storage_path=args.storage or scratch.name,
            stop={"training_iteration": 8 if q else 60}, verbose=0),
    )
    results = tuner.fit()
    assert not results.errors, results.errors
    for r in sorted(results, key=lambda r: (r.config["lr"], r.config["replay_ratio"])):
        print(f"lr {r.config['lr']:<8g} replay_ratio {r.config['replay_ratio']:<4g} "
              f"episode_return_mean {r.metrics['env_runners']['episode_return_mean']:8.2f}")
    best = results.get_best_result(metric=metric, mode="max")
    print(f"best trial: lr={best.config['lr']:g} replay_ratio={best.config['replay_ratio']:g} "
          f"{metric}={best.metrics['env_runners']['episode_return_mean']:.2f} ({best.path})")
finally:
    ray.shutdown()
    if scratch is not None:
        scratch.cleanup()
