"""The envs of P population members stepped as one batch (``envs/population_env.py``): member k's
rows of the batch are bit for bit its own env, through episode resets, stochastic fills, staggered
starts and fresh series swapped in by the member's own env; named errors. CPU."""
from __future__ import annotations

import pytest
import torch

from rl_zerosync.data.fresh import FreshSeries
from rl_zerosync.envs.batched import BatchedTradingEnv
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.envs.population_env import PopulationTradingEnv

DATA = {"source": "synthetic", "num_assets": 3, "num_bars": 700, "seed": 4, "regenerate_every": 2,
        "features": {"warmup": 32}}
ENV = {"episode_len": 24, "window": 8, "stagger_start": True, "fill_mode": "stochastic", "stop_drawdown": 0.02}


def _envs(seeds, num_envs=6, env=ENV, data=DATA):
    """The trading envs a runner of each seed builds (``from_env_config``'s data and parameters), their
    fresh series generated in this process (no prefetch process: the same series, faster here)."""
    params = EnvParams.from_dict(env)
    out = []
    for seed in seeds:
        fresh = FreshSeries(data, seed, 0, prefetch=False)
        out.append(BatchedTradingEnv(fresh.first(), params, num_envs, "cpu", seed=seed,
                                     stagger=params.stagger_start, fresh=fresh))
    return out


def _close(envs):
    for e in envs:
        e.close()


@pytest.mark.parametrize("lag", [0, 1])
def test_member_rows_are_its_own_env_bit_for_bit(lag):
    seeds, n, steps = (3, 11, 5), 6, 70
    env = {**ENV, "execution_lag": lag}
    alone, members = _envs(seeds, n, env), _envs(seeds, n, env)
    try:
        pop = PopulationTradingEnv(members)
        assert pop.num_envs == len(seeds) * n and pop.metrics_vector().shape[0] == len(seeds)
        gen = torch.Generator().manual_seed(0)
        rows = lambda k: slice(k * n, (k + 1) * n)  # noqa: E731
        assert torch.equal(pop.final_obs, torch.cat([e.final_obs for e in alone]))
        total_done = 0
        for i in range(steps):
            if i and i % 20 == 0:  # fresh series, by each member's own env (into the batch's rows)
                for e, m in zip(alone, members):
                    assert e.before_rollout(i // 10) == m.before_rollout(i // 10)
            for e, k in zip(alone, range(len(seeds))):
                for got, want in zip(pop.route_inputs(), e.route_inputs()):
                    assert torch.equal(got[rows(k)], want)
            actions = torch.randint(0, 45, (pop.num_envs,), generator=gen)
            out = pop.step(actions)
            for k, e in enumerate(alone):
                own = e.step(actions[rows(k)])
                for got, want in zip(out, own):
                    assert torch.equal(got[rows(k)], want), (i, k)
                total_done += int((own[2] | own[3]).sum())
        assert total_done > 20  # episodes ended and were reset (assets drawn among the member's own)
        for k, e in enumerate(alone):
            assert torch.equal(pop.metrics_vector()[k], e.metrics_vector())  # the per-member sums too
            assert torch.equal(pop.state.asset[rows(k)] - k * 3, e.state.asset)
        pop.reset_metrics()
        assert not pop.metrics_vector().any()
    finally:
        _close(alone + members)


def test_members_differ_and_share_nothing_but_shapes():
    members = _envs((1, 2))
    try:
        pop = PopulationTradingEnv(members)
        a = pop.data.close
        assert a.shape[0] == 6 and not torch.equal(a[:3], a[3:])
        assert members[1].data.close.data_ptr() == a[3:].data_ptr()  # member views of the batch's rows
        assert pop.tables.seed_keys[0] != pop.tables.seed_keys[-1]
    finally:
        _close(members)


def test_named_errors():
    a, b = _envs((1,)), _envs((2,), num_envs=4)
    c = _envs((3,), env={**ENV, "episode_len": 30})
    try:
        with pytest.raises(ValueError, match="member 1's num_envs"):
            PopulationTradingEnv(a + b)
        with pytest.raises(ValueError, match="env parameters"):
            PopulationTradingEnv(a + c)
        with pytest.raises(ValueError, match="no member envs"):
            PopulationTradingEnv([])
        pop = PopulationTradingEnv(a)
        with pytest.raises(NotImplementedError, match="reset the members' envs"):
            pop.reset()
        d = _envs((4,))
        d[0].step(torch.zeros(6, dtype=torch.int64))
        with pytest.raises(ValueError, match="env counters differ"):
            PopulationTradingEnv(_envs((5,)) + d)
    finally:
        _close(a + b + c)
