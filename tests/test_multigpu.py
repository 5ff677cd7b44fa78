"""Two GPUs (marker ``multigpu``; skipped with fewer): NCCL DDP learners and GPU env runners.

* 2 learners, one GPU each, 100 updates with NaN rewards on rank 1 for one update, under
  ``set_sync_debug_mode("error")``: both ranks skip that update, the weights stay bit-identical,
  the combined guard metrics agree (graph-captured and eager).
* ``configs/two_gpu.yaml``: 2 GPU env runners + 2 learners share the two GPUs (one of each per
  GPU), train a few iterations; the learners hold identical weights.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import ray
import torch

from ddp_helpers import SPACES, check_nan_run, ddp_learner_config, run_with_nan_on_one_rank

pytestmark = pytest.mark.multigpu
ROOT = Path(__file__).resolve().parent.parent
RAY_INIT = {"num_cpus": 8, "num_gpus": 2, "ignore_reinit_error": True}  # conftest's ray_local


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "eager"])
def test_nccl_ddp_nan_on_one_rank(ray_local, graph):
    group = ddp_learner_config(num_gpus_per_learner=1, graph=graph).build_learner_group(spaces=SPACES)
    try:
        results = [r.get() for r in group.foreach_learner(run_with_nan_on_one_rank)]
    finally:
        group.shutdown()
    for r in results:
        assert not isinstance(r, Exception), r
        assert r["device"].startswith("cuda")
        assert r["graph_captured"] is graph
    assert results[0]["gpu_ids"] != results[1]["gpu_ids"], "both learners on one GPU"
    check_nan_run(results)


def _placement(algo) -> dict:
    runners = algo.env_runner_group.foreach_env_runner(
        lambda r: ray.get_gpu_ids(), local_env_runner=False)
    learners = [r.get() for r in algo.learner_group.foreach_learner(lambda l: ray.get_gpu_ids())]
    return {"runners": [sorted(map(str, g)) for g in runners], "learners": [sorted(map(str, g)) for g in learners]}


def test_two_runners_two_learners_share_two_gpus(ray_local):
    from rl_zerosync.config.settings import load, to_rllib_config

    settings = load(ROOT / "configs" / "two_gpu.yaml", [
        "algo.learning_starts=0", "algo.num_envs_per_runner=256", "algo.rollout_length=16", "algo.batch_size=128"])
    algo = to_rllib_config(settings).build_algo()
    try:
        place = _placement(algo)
        assert sorted(g[0] for g in place["runners"]) == ["0", "1"], place
        assert sorted(g[0] for g in place["learners"]) == ["0", "1"], place
        for _ in range(4):
            result = algo.train()
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
        assert steps == 4 * 2 * 256 * 16
        params = [r.get() for r in algo.learner_group.foreach_learner(
            lambda l: torch.cat([p.detach().reshape(-1) for p in l.params]).cpu())]
        assert torch.equal(params[0], params[1])
        zs = result["learners"]["default_policy"]["zerosync"]
        assert zs["updates"] == 2 * 256 * 16 // (128 * 2) and zs["skipped"] == 0
    finally:
        algo.stop()
