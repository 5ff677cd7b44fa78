"""Write your own batched env and train ZeroSyncDQN on it (action_mode "flat": Q over Discrete(n)).

``ReachTarget``: a 1-D walk on 0..size from a random start to a random target; actions 0/1/2 =
left/stay/right; +1 on reaching it (episode ends), -0.02 per other step, truncated after
``max_steps``. Random play mostly times out (return < 0); trained, it walks straight there (~ +0.86).
Prints the greedy policy's mean return on fixed evaluation episodes before and after training.
Contract (``rl_zerosync/envs/protocol.py``): device tensors in and out, auto-reset inside ``step``,
no host reads or Python branches on tensor values (CUDA-graph safe), counter-based randomness.

    python examples/own_env.py            # GPU-sized: 4096 envs
    python examples/own_env.py --quick    # CPU-sized, ~30 s
"""
import argparse

import gymnasium as gym
import numpy as np
import ray
import torch

from rl_zerosync.algorithm import ZeroSyncDQNConfig
from rl_zerosync.envs import BatchedEnv, register_batched_env
from rl_zerosync.kernels.rng import uniform24


class ReachTarget(BatchedEnv):
    def __init__(self, env_config, num_envs, device, seed):
        self.size, self.max_steps = int(env_config.get("size", 20)), int(env_config.get("max_steps", 40))
        self.num_envs, self.device, self.seed = num_envs, torch.device(device), int(seed or 0)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)  # pos, target, delta, time
        self.action_space = gym.spaces.Discrete(3)
        z = lambda dtype, *shape: torch.zeros(num_envs, *shape, dtype=dtype, device=self.device)  # noqa: E731
        self.idx = torch.arange(num_envs, device=self.device)
        self.pos, self.target, self.t, self.episode = (z(torch.int64) for _ in range(4))
        self.obs, self.final_obs = z(torch.float32, 4), z(torch.float32, 4)
        self.reset()

    def _new_episodes(self, mask):  # draws of (seed, episode count, stream 0/1, env index)
        start = (uniform24(self.seed, self.episode, 0, self.idx) * (self.size + 1)).long()
        target = (start + 1 + (uniform24(self.seed, self.episode, 1, self.idx) * self.size).long()) % (self.size + 1)
        self.pos.copy_(torch.where(mask, start, self.pos))
        self.target.copy_(torch.where(mask, target, self.target))
        self.t.mul_((~mask).long())

    def _observe(self, out):
        out.copy_(torch.stack([self.pos / self.size, self.target / self.size,
                               (self.target - self.pos) / self.size, self.t / self.max_steps], 1))

    def reset(self, seed=None):
        self.seed = self.seed if seed is None else int(seed)
        self.episode.zero_()
        self._new_episodes(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self._observe(self.obs)
        return self.obs

    def step(self, actions):
        self.pos.copy_((self.pos + actions.to(self.device) - 1).clamp(0, self.size))
        self.t.add_(1)
        terminated = self.pos == self.target
        truncated = (self.t >= self.max_steps) & ~terminated
        reward, done = torch.where(terminated, 1.0, -0.02).float(), terminated | truncated
        self._observe(self.final_obs)  # where each transition ended
        self.episode.add_(done.long())
        self._new_episodes(done)  # auto-reset the finished envs
        self._observe(self.obs)
        return self.obs, reward, terminated, truncated, self.final_obs


@torch.no_grad()
def greedy_return(module, env_config, n=512):
    """Mean return of the greedy policy on n fixed evaluation episodes."""
    env, dev = ReachTarget(env_config, n, "cpu", seed=12345), next(module.parameters()).device
    obs, total, alive = env.reset(), torch.zeros(n), torch.ones(n, dtype=torch.bool)
    for _ in range(env.max_steps):
        obs, reward, term, trunc, _ = env.step(module.greedy_actions(module.q_values(obs.to(dev))).cpu())
        total, alive = total + reward * alive, alive & ~(term | trunc)
    return float(total.mean())


p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--quick", action="store_true", help="tiny CPU run")
q = p.parse_args().quick
gpu = torch.cuda.is_available() and not q
register_batched_env("my/ReachTarget-v0", ReachTarget)  # or pass the class: .environment(ReachTarget)
env_config = {"size": 20, "max_steps": 40, "runner": {"device": "cuda" if gpu else "cpu"}}
config = (
    ZeroSyncDQNConfig()
    .environment("my/ReachTarget-v0", env_config=env_config)
    .env_runners(num_env_runners=0, num_envs_per_env_runner=32 if q else 4096, rollout_fragment_length=16)
    .learners(num_learners=0, num_gpus_per_learner=1 if gpu else 0,
              learner_config_dict={"zerosync": {"replay_capacity": 50_000 if q else 1_000_000, "graph": gpu}})
    .training(lr=1e-3, n_step=3, train_batch_size_per_learner=128 if q else 1024, replay_ratio=8.0 if q else 2.0,
              num_steps_sampled_before_learning_starts=1000 if q else 50_000,
              target_network_update_freq=50 if q else 200, epsilon=[(0, 1.0), (6000 if q else 1_000_000, 0.02)])
    .rl_module(model_config={"action_mode": "flat", "hidden": [64, 64] if q else [256, 256]})
    .debugging(seed=0)
)
ray.init(address="local", num_cpus=2 if q else None, include_dashboard=False)
algo = config.build_algo()
try:
    before = greedy_return(algo.get_module(), env_config)
    for i in range(25 if q else 40):
        er = algo.train()["env_runners"]
        print(f"iter {i + 1:3d}  env steps {int(er['num_env_steps_sampled_lifetime']):7d}  epsilon "
              f"{float(er['epsilon']):.3f}  episode return {float(er.get('episode_return_mean', float('nan'))):+.3f}")
    print(f"greedy return: before training {before:+.3f} -> after {greedy_return(algo.get_module(), env_config):+.3f}")
finally:
    algo.stop()
    ray.shutdown()
