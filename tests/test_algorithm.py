"""ZeroSyncDQN in-process: replay-ratio arithmetic, Ray Tune, checkpoint round trip of the replay."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl_zerosync.algorithm import ZeroSyncDQN, updates_for
from rl_zerosync.config.settings import load, to_rllib_config

SMOKE = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"


def test_updates_for_replay_ratio():
    assert updates_for(32768, 1.0, 512) == 64
    assert updates_for(32768, 0.25, 1024) == 8
    assert updates_for(10, 1.0, 512) == 1  # at least one update per iteration


def test_runs_under_ray_tune(ray_local, tmp_path):
    from ray import tune

    config = to_rllib_config(load(SMOKE))
    tuner = tune.Tuner(
        ZeroSyncDQN,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path), name="t"),
    )
    results = tuner.fit()
    assert not results.errors
    result = results.get_best_result(metric="training_iteration", mode="max")
    assert result.metrics["training_iteration"] == 2
    assert result.metrics["env_runners"]["num_env_steps_sampled_lifetime"] == 2 * 16 * 32


def test_checkpoint_restores_learner_replay(ray_local, tmp_path):
    algo = to_rllib_config(load(SMOKE)).build_algo()
    try:
        for _ in range(2):
            algo.train()
        size = algo.local_learner.replay.size
        updates = algo.local_learner.collect_metrics()["updates_lifetime"]
        assert size > 0 and updates > 0
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    fresh = to_rllib_config(load(SMOKE)).build_algo()
    try:
        assert fresh.local_learner.replay.size == 0
        fresh.restore_from_path(str(tmp_path / "ckpt"))
        learner = fresh.local_learner
        assert learner.replay.size == size
        assert learner.collect_metrics()["updates_lifetime"] == updates
        assert fresh.iteration == 2
    finally:
        fresh.stop()


def _replay_fingerprints(algo) -> dict:
    def fingerprint(learner):
        r = learner.replay
        rows = r.packed[: r.size].to(torch.int64)
        return torch.distributed.get_rank(), (r.size, r.ptr, int(rows.sum()), int((rows * rows).sum()))

    return dict(res.get() for res in algo.learner_group.foreach_learner(fingerprint))


@pytest.mark.slow
def test_checkpoint_keeps_every_ddp_learners_replay_shard(ray_local, tmp_path):
    """2 remote runners feed 2 DDP learners different shards; a checkpoint restores each shard to its rank."""
    def config():
        cfg = to_rllib_config(load(SMOKE, ["algo.num_env_runners=2", "algo.num_learners=2"]))
        return cfg.env_runners(num_cpus_per_env_runner=0).learners(num_cpus_per_learner=1)

    algo = config().build_algo()
    try:
        for _ in range(2):
            algo.train()
        before = _replay_fingerprints(algo)
        assert sorted(before) == [0, 1] and before[0] != before[1]  # different shards
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    fresh = config().build_algo()
    try:
        assert all(fp[0] == 0 for fp in _replay_fingerprints(fresh).values())
        fresh.restore_from_path(str(tmp_path / "ckpt"))
        assert _replay_fingerprints(fresh) == before
        assert fresh.iteration == 2
    finally:
        fresh.stop()
