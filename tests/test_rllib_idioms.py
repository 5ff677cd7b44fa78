"""RLlib idioms with the GPU env runner: ``config.evaluation(...)`` in both duration units,
``on_sample_end`` callbacks (counted), the per-episode-hook warning, GPU-sized defaults."""
from __future__ import annotations

import warnings

import pytest
from ray.rllib.callbacks.callbacks import RLlibCallback

from rl_zerosync.algorithm import DEFAULT_NUM_ENVS, DEFAULT_ROLLOUT_LENGTH, ZeroSyncDQNConfig
from rl_zerosync.envs.registry import CARTPOLE_ENV_ID


class CountSamples(RLlibCallback):

    def on_sample_end(self, *, env_runner, metrics_logger, samples, **kwargs):
        metrics_logger.log_value("sample_end_calls", 1, reduce="sum")


class PerEpisode(RLlibCallback):
    def on_episode_end(self, **kwargs):
        pass


def _config(**evaluation):
    config = (ZeroSyncDQNConfig()
              .environment(CARTPOLE_ENV_ID, env_config={"runner": {"device": "cpu"}})
              .env_runners(num_envs_per_env_runner=16, rollout_fragment_length=8)
              .learners(num_gpus_per_learner=0, learner_config_dict={"zerosync": {"graph": False}})
              .training(train_batch_size_per_learner=32, num_steps_sampled_before_learning_starts=64)
              .rl_module(model_config={"hidden": [16]})
              .callbacks(CountSamples))
    if evaluation:
        config = config.evaluation(evaluation_interval=1, **evaluation)
    return config


def test_defaults_are_gpu_sized():
    c = ZeroSyncDQNConfig()
    assert (c.num_envs_per_env_runner, c.rollout_fragment_length) == (DEFAULT_NUM_ENVS, DEFAULT_ROLLOUT_LENGTH)
    assert c.min_sample_timesteps_per_iteration == 0


@pytest.mark.parametrize("unit,duration", [("episodes", 20), ("timesteps", 300)])
def test_evaluation_returns_metrics(ray_local, unit, duration):
    algo = _config(evaluation_duration_unit=unit, evaluation_duration=duration,
                   evaluation_num_env_runners=0).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
    finally:
        algo.stop()
    ev = result["evaluation"]["env_runners"]
    steps = ev["num_env_steps_sampled"]
    assert steps % (16 * 8) == 0 and steps > 0
    if unit == "episodes":
        assert ev["num_episodes"] >= duration
        assert ev["episode_len_mean"] > 0
    else:
        # 300 rounded up to whole rollouts of 16 envs x 8 steps, then until the episodes started in
        # that window have ended (so long episodes count as often as short ones)
        assert steps >= 384 and ev["num_episodes"] >= 1
    assert result["env_runners"]["sample_end_calls"] >= 1  # training runner: on_sample_end fired


def test_on_sample_end_fires_once_per_sample_and_per_episode_hooks_warn(ray_local):
    algo = _config().build_algo()
    try:
        runner = algo.env_runner
        before = runner.metrics.peek("sample_end_calls", default=0)
        for _ in range(3):
            runner.sample()
        assert runner.metrics.peek("sample_end_calls") - before == 3
    finally:
        algo.stop()
    with pytest.warns(UserWarning, match=r"does not fire \['on_episode_end'\]"):
        algo = _config().callbacks(PerEpisode).build_algo()
    algo.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _config().build_algo().stop()  # on_sample_end only: no warning
