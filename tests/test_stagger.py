"""Staggered first episodes of the trading env (``env.stagger_start``): envs do not all end in the
same iteration; later episodes are whole; off by default."""
from __future__ import annotations

import torch

from rl_zerosync.envs import BatchedTradingEnv, EnvParams
from rl_zerosync.data import make_market


def _env(stagger: bool, n: int = 64):
    data = make_market({"source": "synthetic", "num_assets": 2, "num_bars": 2000, "seed": 0}, "train")
    return BatchedTradingEnv(data, EnvParams(episode_len=32, window=8), n, "cpu", seed=3, stagger=stagger)


def test_stagger_spreads_the_first_episode_ends_and_later_episodes_are_whole():
    env = _env(True)
    start = env.state.step.clone()
    assert int(start.min()) >= 0 and int(start.max()) < 32 and len(torch.unique(start)) > 20
    first_end = torch.full((64,), -1)
    ends = torch.zeros(64, dtype=torch.int64)
    flat = torch.full((64,), 2 * 9, dtype=torch.int64)  # exposure 0 (flat), market order
    for t in range(1, 3 * 32 + 1):
        _, _, term, trunc, _ = env.step(flat)
        done = term | trunc
        first_end = torch.where(done & (first_end < 0), torch.full_like(first_end, t), first_end)
        ends += done.long()
    assert torch.equal(first_end, 32 - start)  # each first episode ends after episode_len - start steps
    assert int(ends.min()) >= 3  # then whole 32-step episodes
    plain = _env(False)
    assert int(plain.state.step.abs().sum()) == 0
    assert EnvParams().stagger_start is False
