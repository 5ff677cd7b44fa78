"""``runner.overlap``: the iteration's updates train on the replay as it was before its rollout.

On CPU the order is the same as on CUDA, without the concurrency (the GPU test checks the streams).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl_zerosync.algorithm import updates_for
from rl_zerosync.env_runner.runner_settings import RunnerSettings
from rl_zerosync.settings import load, to_rllib_config

SMOKE = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"
EACH = ["algo.learning_starts=0", "run.evaluate=false"]


def _build(overlap: bool, extra=()):
    return to_rllib_config(load(SMOKE, EACH + [f"runner.overlap={str(overlap).lower()}", *extra])).build_algo()


def _train(algo, iterations: int):
    results = [algo.train() for _ in range(iterations)]
    learner = algo.local_learner
    return results, learner


def test_overlap_trains_on_the_replay_before_the_rollout(ray_local):
    per = 16 * 32  # smoke.yaml: 16 envs x 32 steps
    k = updates_for(per, 0.5, 64)
    plain = _build(False)
    try:
        _, learner = _train(plain, 3)
        assert learner.updates == 3 * k  # trains in every iteration, on data including its rollout
    finally:
        plain.stop()
    over = _build(True)
    try:
        results, learner = _train(over, 3)
        # Iteration 1: the replay is empty, nothing trains; then k per iteration on the older data.
        assert learner.updates == 2 * k
        assert learner.replay.size == 3 * per
        assert "num_updates_per_iteration" not in results[0] or results[0]["num_updates_per_iteration"] == 0
        assert results[-1]["num_updates_per_iteration"] == k
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 3 * per
    finally:
        over.stop()


def test_overlap_is_reproducible(ray_local):
    params = []
    for _ in range(2):
        algo = _build(True)
        try:
            _, learner = _train(algo, 3)
            params.append([p.detach().clone() for p in learner.params])
        finally:
            algo.stop()
    assert all(torch.equal(a, b) for a, b in zip(*params))


def test_overlap_needs_runner_and_learner_in_the_driver():
    with pytest.raises(ValueError, match=r"runner\.overlap.*num_env_runners=1"):
        to_rllib_config(load(SMOKE, ["runner.overlap=true", "algo.num_env_runners=1"])).validate()


def test_overlap_must_be_a_bool():
    with pytest.raises(ValueError, match=r"runner\.overlap must be a bool"):
        RunnerSettings(overlap="yes")


def test_start_and_finish_pair_up(ray_local):
    algo = _build(True)
    try:
        runner = algo.env_runner
        with pytest.raises(RuntimeError, match="no rollout in flight"):
            runner.finish_device_sample()
        runner.start_device_sample()
        with pytest.raises(RuntimeError, match="already in flight"):
            runner.start_device_sample()
        rollout = runner.finish_device_sample()
        assert rollout["obs"].shape[:2] == (32, 16)
    finally:
        algo.stop()

