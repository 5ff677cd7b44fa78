"""``runner.overlap``: the iteration's updates train on the replay as it was before its rollout.

On CPU the order is the same as on CUDA, without the concurrency (the GPU test checks the streams).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl_zerosync.algorithm import updates_for
from rl_zerosync.env_runner.runner_settings import RunnerSettings
from rl_zerosync.config.settings import load, to_rllib_config

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


def test_overlap_refuses_a_local_runner_with_remote_learners():
    with pytest.raises(ValueError, match=r"runner\.overlap.*num_env_runners=0, num_learners=2"):
        to_rllib_config(load(SMOKE, ["runner.overlap=true", "algo.num_learners=2"])).validate()
    to_rllib_config(load(SMOKE, ["runner.overlap=true", "algo.num_env_runners=1"])).validate()  # accepted


def _remote(overlap: bool):
    algo = to_rllib_config(load(SMOKE, EACH + [f"runner.overlap={str(overlap).lower()}", "algo.num_env_runners=1"]))
    return algo.env_runners(num_cpus_per_env_runner=0).build_algo()


@pytest.mark.slow
def test_overlap_with_a_remote_runner_trains_while_it_samples(ray_local):
    """A remote runner samples (an asynchronous Ray call) while the local learner trains on the
    replay as it was before that rollout: iteration 1 trains nothing, later ones K updates sized by
    the previous iteration's env steps; two runs end with identical parameters."""
    per = 16 * 32
    k = updates_for(per, 0.5, 64)
    plain = _remote(False)
    try:
        _, learner = _train(plain, 3)
        assert learner.updates == 3 * k
    finally:
        plain.stop()
    params = []
    for _ in range(2):
        over = _remote(True)
        try:
            results, learner = _train(over, 3)
            assert learner.updates == 2 * k and learner.replay.size == 3 * per
            assert results[0].get("num_updates_per_iteration", 0) == 0
            assert results[-1]["num_updates_per_iteration"] == k
            assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] == 3 * per
            params.append([p.detach().clone() for p in learner.params])
        finally:
            over.stop()
    assert all(torch.equal(a, b) for a, b in zip(*params))


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



@pytest.mark.slow
def test_overlap_with_remote_runners_and_ddp_learners(ray_local):
    """Two remote runners sample while two DDP learners train: K per learner from the previous
    iteration's env steps, every rollout stored once (half on each rank)."""
    cfg = to_rllib_config(load(SMOKE, EACH + ["runner.overlap=true", "algo.num_env_runners=2", "algo.num_learners=2"]))
    algo = cfg.env_runners(num_cpus_per_env_runner=0).learners(num_cpus_per_learner=1).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        k = updates_for(2 * 16 * 32, 0.5, 2 * 64)
        assert [r.get("num_updates_per_iteration", 0) for r in results] == [0, k, k]
        per_rank = sorted(r.get() for r in algo.learner_group.foreach_learner(
            lambda learner: (torch.distributed.get_rank(), learner.updates, learner.replay.size)))
    finally:
        algo.stop()
    assert per_rank == [(0, 2 * k, 3 * 16 * 32), (1, 2 * k, 3 * 16 * 32)]


def test_overlap_survives_a_killed_remote_runner(ray_local):
    """kill -9 of the remote runner between overlapped iterations: its rollout is dropped, Ray
    restarts it and the overlapped iterations sample and train again."""
    import os
    import signal
    import time

    algo = _remote(True)
    try:
        _train(algo, 2)
        [pid] = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)
        os.kill(pid, signal.SIGKILL)
        steps = algo.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"))
        deadline = time.monotonic() + 90
        results = []

        def sampled() -> float:
            return algo.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"))

        # The next iteration still trains (K from the previous iteration's rollout) but its rollout
        # is dropped; the runner is restarted and samples again ...
        while sampled() == steps:
            assert time.monotonic() < deadline, f"the runner did not come back: {results[-1:]}"
            results.append(algo.train())
        assert sampled() == steps + 16 * 32 and len(results) >= 2
        # ... and the iteration after that trains on its rollout.
        updates = algo.local_learner.updates
        results.append(algo.train())
        assert algo.local_learner.updates > updates
        [new_pid] = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)
        assert new_pid != pid
        assert results[-1]["fault_tolerance"]["num_remote_worker_restarts"] >= 1
    finally:
        algo.stop()
