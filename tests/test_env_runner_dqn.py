"""Stock RLlib DQN trains with GPUEnvRunner in episode mode (no other RLlib change)."""
from __future__ import annotations

import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

import rl_zerosync.envs  # noqa: F401  (registers "rl_zerosync/Trading-v0")
from rl_zerosync.algorithm import local_learner_of
from rl_zerosync.env_runner import GPUEnvRunner
from rl_zerosync.module import ZeroSyncQModule


RAY_INIT = {"num_cpus": 1, "ignore_reinit_error": True}  # conftest's ray_local


@pytest.mark.parametrize("mode", ["routed", "flat"])
def test_stock_dqn_trains_two_iterations(ray_local, tmp_path, mode):
    config = (
        DQNConfig()
        .environment(
            "rl_zerosync/Trading-v0",
            env_config={
                "data": {"num_assets": 2, "num_bars": 2000},
                "env": {"episode_len": 12},
                "runner": {"output": "episodes", "device": "cpu"},
            },
        )
        .env_runners(env_runner_cls=GPUEnvRunner, num_env_runners=0, num_envs_per_env_runner=8,
                     rollout_fragment_length=16)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroSyncQModule),
                   model_config={"action_mode": mode, "hidden": [32]})
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32, n_step=1)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        runner = algo.env_runner
        assert isinstance(runner, GPUEnvRunner)
        results = [algo.train() for _ in range(2)]
        assert results[-1][ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME] == 2 * 8 * 16
        learner = results[-1][LEARNER_RESULTS][DEFAULT_MODULE_ID]
        assert torch.isfinite(torch.tensor(float(learner["qf_loss"])))
        # The learner's weights reached the runner (in place, same storage).
        ptrs = [p.data_ptr() for p in runner.module.parameters()]
        learner_module = local_learner_of(algo.learner_group).module[DEFAULT_MODULE_ID]
        for a, b in zip(runner.module.q_net.parameters(), learner_module.q_net.parameters()):
            assert torch.equal(a, b.detach())
        ckpt = algo.save_to_path(tmp_path / "algo")
        algo.train()
        algo.restore_from_path(ckpt)
        assert [p.data_ptr() for p in runner.module.parameters()] == ptrs
    finally:
        algo.stop()


def test_stock_dqn_with_a_remote_runner(ray_local):
    """One remote GPUEnvRunner actor; the local runner stays lazy (no envs, CPU module)."""
    config = (
        DQNConfig()
        .environment(
            "rl_zerosync/Trading-v0",
            env_config={
                "data": {"num_assets": 2, "num_bars": 2000},
                "env": {"episode_len": 12},
                "runner": {"output": "episodes", "device": "cpu"},
            },
        )
        .env_runners(env_runner_cls=GPUEnvRunner, num_env_runners=1, num_envs_per_env_runner=8,
                     rollout_fragment_length=16, num_cpus_per_env_runner=1)
        .resources(num_cpus_for_main_process=0)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroSyncQModule),
                   model_config={"action_mode": "routed", "hidden": [32]})
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32, n_step=1)
        .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        assert algo.env_runner.env is None  # local runner: nothing built
        for _ in range(2):
            result = algo.train()
        assert result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME] == 2 * 8 * 16
        assert LEARNER_RESULTS in result
        # The remote runner saw the learner's weights and the global step count.
        remote = algo.env_runner_group.foreach_env_runner(
            lambda r: (r.num_env_steps_sampled_lifetime, r.weights_seq_no), local_env_runner=False
        )
        assert remote[0][0] >= 2 * 8 * 16 and remote[0][1] >= 1
    finally:
        algo.stop()
