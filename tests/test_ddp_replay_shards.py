"""Two DDP learners (gloo on CPU): distinct replay sampling per rank, no duplicated transitions.

* every rank seeds its replay sampler with ``seed + rank``, so two ranks holding the same rows draw
  different indices;
* ``ZeroSyncDQN._add_to_replay`` with fewer rollouts than learners splits each rollout's env
  columns (learner r takes envs ``r::num_learners``): each learner holds a distinct half; with as
  many rollouts as learners rollout i goes to learner i; a rollout with fewer envs than learners is
  refused with an error naming the settings.
"""
from __future__ import annotations

import sys

import pytest
import ray
import ray.cloudpickle
import torch

from rl_zerosync.algorithm import PHASE_TIMES, ZeroSyncDQN, _env_shard

# The learner actors cannot import the tests folder: ship this module's functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

T, N, MARK = 6, 8, 4242.0
# conftest's ray_local: 2 CPUs for the group's learners, 3 more for the algorithm test (logical CPUs)
RAY_INIT = {"num_cpus": 6, "ignore_reinit_error": True}


@pytest.fixture(scope="module")
def group(ray_local):
    from ddp_helpers import SPACES, ddp_learner_config

    g = ddp_learner_config(num_gpus_per_learner=0, graph=False).build_learner_group(spaces=SPACES)
    yield g
    g.shutdown()


def marked_rollout(tag: float, n: int = N) -> dict:
    """A rollout whose obs say where they came from: (tag, env column, time step, MARK, 0)."""
    obs = torch.zeros(T, n, 5)
    obs[..., 0] = tag
    obs[..., 1] = torch.arange(n, dtype=torch.float32)[None, :]
    obs[..., 2] = torch.arange(T, dtype=torch.float32)[:, None]
    obs[..., 3] = MARK
    return {
        "obs": obs, "next_obs": obs.clone(), "actions": torch.zeros(T, n, dtype=torch.int64),
        "rewards": torch.zeros(T, n), "terminateds": torch.zeros(T, n, dtype=torch.bool),
        "truncateds": torch.zeros(T, n, dtype=torch.bool),
    }


class _Algo:
    """The parts of ZeroSyncDQN that ``_add_to_replay`` uses."""

    def __init__(self, learner_group):
        self.learner_group = learner_group
        self.logged = {}

    @property
    def metrics(self):
        return self

    def log_value(self, key, value, window=None):
        self.logged[key] = value


def _rows_with_tag(tag: float):
    def rows(learner):
        r = learner.replay
        obs = r.storage["obs"][: r.size]
        mine = obs[(obs[:, 3] == MARK) & (obs[:, 0] == tag)]
        return torch.distributed.get_rank(), sorted({(int(o[1]), int(o[2])) for o in mine})

    return rows


def _per_rank(group, fn) -> dict:
    out = {}
    results = group.foreach_learner(fn)
    assert len(results) == 2, results
    for res in results:
        value = res.get()
        if not res.ok:
            raise value
        rank, payload = value
        out[rank] = payload
    return out


def test_env_shard_views():
    ro = marked_rollout(1.0)
    a, b = _env_shard(ro, 0, 2, 1), _env_shard(ro, 1, 2, 1)
    assert a["obs"].shape == (T, N // 2, 5) and a["rewards"].shape == (T, N // 2)
    assert a["obs"][0, :, 1].tolist() == [0, 2, 4, 6] and b["obs"][0, :, 1].tolist() == [1, 3, 5, 7]
    with pytest.raises(ValueError, match="num_envs_per_env_runner >= num_learners"):
        _env_shard(marked_rollout(1.0, n=1), 0, 2, 1)


def test_one_rollout_two_learners_each_holds_a_distinct_half(group):
    algo = _Algo(group)
    ZeroSyncDQN._add_to_replay(algo, [marked_rollout(1.0)])
    held = _per_rank(group, _rows_with_tag(1.0))
    assert sorted(held) == [0, 1]
    for rank in (0, 1):
        assert held[rank] == [(n, t) for n in range(rank, N, 2) for t in range(T)]  # envs rank::2, every step
    assert not set(held[0]) & set(held[1])
    assert len(held[0]) + len(held[1]) == T * N  # together: the whole rollout, once
    assert (PHASE_TIMES, "replay_add_timer") in algo.logged


def test_as_many_rollouts_as_learners_go_round_robin(group):
    ZeroSyncDQN._add_to_replay(_Algo(group), [marked_rollout(2.0), marked_rollout(3.0)])
    two, three = _per_rank(group, _rows_with_tag(2.0)), _per_rank(group, _rows_with_tag(3.0))
    whole = [(n, t) for n in range(N) for t in range(T)]
    assert two == {0: whole, 1: []} and three == {0: [], 1: whole}


def test_rollout_with_fewer_envs_than_learners_is_refused(group):
    try:
        with pytest.raises(Exception, match="num_env_runners < num_learners.*num_envs_per_env_runner"):
            ZeroSyncDQN._add_to_replay(_Algo(group), [marked_rollout(4.0, n=1)])
    finally:  # RLlib takes learners that raised out of service: bring them back for the other tests
        group.foreach_learner(lambda learner: None, healthy_only=False, mark_healthy=True)
    assert _per_rank(group, _rows_with_tag(4.0)) == {0: [], 1: []}  # nothing was added


def test_two_ranks_draw_different_replay_indices(group):
    def draw(learner):
        rank = torch.distributed.get_rank()
        r = learner.replay
        r.add(marked_rollout(5.0))  # the same rows on both ranks
        batch = r.sample(64)
        return rank, (r.seed, r.size, batch["indices"].tolist(), learner.settings.seed)

    got = _per_rank(group, draw)
    (seed0, size0, idx0, base0), (seed1, size1, idx1, base1) = got[0], got[1]
    assert base0 == base1 and seed0 == base0 and seed1 == base1 + 1  # seed offset by the rank
    assert size0 == size1  # same number of rows: identical seeds would give identical indices
    assert idx0 != idx1


def test_algorithm_one_runner_two_learners_splits_the_rollout(group):
    """End to end (remote runner -> object store -> 2 DDP learners): each rank stores half of every
    rollout, different halves, and samples with its own seed."""
    from pathlib import Path

    from rl_zerosync.config.settings import load, to_rllib_config

    smoke = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"
    cfg = to_rllib_config(load(smoke, ["algo.num_env_runners=1", "algo.num_learners=2"]))
    algo = cfg.env_runners(num_cpus_per_env_runner=0).learners(num_cpus_per_learner=1).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        sampled = result["env_runners"]["num_env_steps_sampled_lifetime"]

        def shard(learner):
            r = learner.replay
            rows = r.packed[: r.size].to(torch.int64)
            return torch.distributed.get_rank(), (r.size, r.seed, int(rows.sum()), int((rows * rows).sum()))

        got = _per_rank(algo.learner_group, shard)
    finally:
        algo.stop()
    assert sorted(got) == [0, 1]
    assert got[0][0] == got[1][0] == sampled // 2  # half of every rollout each, nothing twice
    assert got[1][1] == got[0][1] + 1
    assert got[0][2:] != got[1][2:]  # different halves
