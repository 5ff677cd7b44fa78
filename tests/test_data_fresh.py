"""Fresh training series built ahead in a process: generations arrive in order, each the series
of its own generator seed, whether built ahead or here."""
from __future__ import annotations

import torch

from rl_zerosync.data.fresh import PREFETCH, FreshSeries, build_training_market

CFG = {"source": "synthetic", "num_assets": 2, "num_bars": 300, "seed": 3, "regenerate_every": 2,
       "features": {"warmup": 16}, "synthetic": {"ohlc": True}}


def test_generations_built_ahead_arrive_in_order():
    ahead = FreshSeries(CFG, run_seed=5, runner=1, prefetch=True)
    here = FreshSeries(CFG, run_seed=5, runner=1, prefetch=False)
    try:
        data, same = ahead.first(), here.first()
        assert torch.equal(data.close, same.close)
        for generation in range(1, PREFETCH + 3):  # past the generations submitted by first()
            assert ahead.advance(data) == here.advance(same) == generation
            want = build_training_market(CFG, ahead.seed_of(generation))
            for f in data.present_fields:
                assert torch.equal(getattr(data, f), getattr(want, f)), (generation, f)
                assert torch.equal(getattr(data, f), getattr(same, f)), (generation, f)
    finally:
        ahead.close()
