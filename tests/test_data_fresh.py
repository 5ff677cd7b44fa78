"""Fresh training series built ahead in a process: generations arrive in order, each the series
of its own generator seed, whether built ahead or here; on a GPU, into the same (captured) tensors."""
from __future__ import annotations

import pytest
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


@pytest.mark.gpu
def test_generations_land_in_captured_cuda_tensors():
    """On the device: each generation (local.yaml's 8 x 20,000 bars) is copied into the same CUDA
    tensors, so a CUDA graph captured on generation 0 reads generation g after g swaps."""
    cfg = {"source": "synthetic", "num_assets": 8, "num_bars": 20000, "seed": 0, "regenerate_every": 10}
    fresh = FreshSeries(cfg, run_seed=0, runner=0, prefetch=True)
    try:
        data = fresh.first().to("cuda")
        pointers = {f: getattr(data, f).data_ptr() for f in data.present_fields}
        out = torch.empty_like(data.close)

        def read() -> None:
            out.copy_(data.close * data.ret_norm + data.obs_vol)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            read()  # warm-up before capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            read()
        for generation in range(1, PREFETCH + 2):
            assert fresh.advance(data) == generation
            graph.replay()
            want = build_training_market(cfg, fresh.seed_of(generation))
            for f in data.present_fields:
                assert getattr(data, f).data_ptr() == pointers[f], f
                assert torch.equal(getattr(data, f).cpu(), getattr(want, f)), (generation, f)
            assert torch.equal(out.cpu(), want.close * want.ret_norm + want.obs_vol), generation
    finally:
        fresh.close()
