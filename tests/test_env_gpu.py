"""GPU: the env step has no host sync, matches the CPU env, and replays from a CUDA graph."""
from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from rl_zerosync.envs import BatchedTradingEnv, EnvParams
from rl_zerosync.data import make_market
from rl_zerosync.evaluation.backtest import evaluate_policy

pytestmark = pytest.mark.gpu

DATA = {"num_assets": 4, "num_bars": 3000, "seed": 2, "features": {"warmup": 32, "median_window": 128}}


@pytest.fixture(scope="module")
def market():
    return make_market(DATA, "train")


def policy(env: BatchedTradingEnv) -> torch.Tensor:
    """Deterministic device-side actions from the env state (no host read)."""
    s = env.state
    return (s.counter * 7 + s.env_id * 13 + s.t) % 45


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_fifty_steps_without_host_sync(market, fill_mode):
    params = EnvParams(episode_len=20, window=16, fill_mode=fill_mode, risk_penalty=0.1, stop_drawdown=0.3)
    env = BatchedTradingEnv(market, params, num_envs=1000, device="cuda", seed=1)
    env.reset()
    for _ in range(3):  # warm-up outside the checked region
        env.step(policy(env))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(50):
            obs, reward, terminated, truncated, _ = env.step(policy(env))
            routing = (env.spread, env.median_spread, env.vol, env.median_vol)
        vec = env.metrics_vector().clone()
        env.reset_metrics()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
    assert all(torch.isfinite(r).all() for r in routing)
    assert float(vec[0]) > 0  # episodes completed inside the checked region
    assert float(env.metrics_vector().abs().sum()) == 0.0


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_cpu_and_gpu_trajectories_match(market, fill_mode):
    params = EnvParams(episode_len=25, window=16, fill_mode=fill_mode, seed=9)
    cpu = BatchedTradingEnv(market, params, num_envs=257, device="cpu")
    gpu = BatchedTradingEnv(market, params, num_envs=257, device="cuda")
    oc, og = cpu.reset(), gpu.reset()
    assert torch.allclose(og.cpu(), oc, rtol=1e-5, atol=1e-5)
    for _ in range(120):
        a = policy(cpu)
        assert torch.equal(policy(gpu).cpu(), a)
        oc, rc, tc, uc, _ = cpu.step(a)
        og, rg, tg, ug, _ = gpu.step(a.cuda())
        assert torch.equal(gpu.state.t.cpu(), cpu.state.t) and torch.equal(gpu.state.asset.cpu(), cpu.state.asset)
        assert torch.equal(tg.cpu(), tc) and torch.equal(ug.cpu(), uc)
        assert torch.allclose(og.cpu(), oc, rtol=1e-4, atol=1e-5)
        assert torch.allclose(gpu.final_obs.cpu(), cpu.final_obs, rtol=1e-4, atol=1e-5)
        assert torch.allclose(rg.cpu(), rc, rtol=1e-4, atol=1e-5)
    assert torch.allclose(gpu.metrics_vector().cpu(), cpu.metrics_vector(), rtol=1e-4, atol=1e-4)


def test_graph_replay_equals_eager(market):
    params = EnvParams(episode_len=10, window=16, fill_mode="stochastic")
    eager = BatchedTradingEnv(market, params, num_envs=512, device="cuda", seed=4)
    graphed = BatchedTradingEnv(market, params, num_envs=512, device="cuda", seed=4)
    warm, steps, replays = 3, 7, 4
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm):
            graphed.step(policy(graphed))
    torch.cuda.current_stream().wait_stream(side)
    state0 = graphed.state
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            graphed.step(policy(graphed))
        final = graphed.state
        for f in fields(state0):
            first, last = getattr(state0, f.name), getattr(final, f.name)
            if first is not last:
                first.copy_(last)
    graphed.state = state0
    for _ in range(replays):
        graph.replay()
    for _ in range(warm + steps * replays):
        eager.step(policy(eager))
    torch.cuda.synchronize()
    for f in fields(state0):
        a, b = getattr(eager.state, f.name), getattr(graphed.state, f.name)
        assert torch.allclose(a.double(), b.double(), rtol=1e-6, atol=1e-6), f.name


def test_evaluate_policy_on_gpu_matches_cpu():
    data = make_market(DATA, "test")
    params = EnvParams(episode_len=50, window=16)

    def momentum(obs):
        return torch.where(obs[:, :16].mean(1) > 0, 4, 0) * 9 + 4

    cpu = evaluate_policy(momentum, data, params, device="cpu")
    gpu = evaluate_policy(momentum, data, params, device="cuda")
    for name in data.asset_names:
        for k, v in cpu.metrics[name].items():
            assert gpu.metrics[name][k] == pytest.approx(v, rel=1e-3, abs=1e-5), (name, k)


BARS = {**DATA, "synthetic": {"ohlc": True}}


@pytest.mark.parametrize("fill_mode", ["expected", "stochastic"])
def test_next_bar_execution_on_bars_matches_cpu_without_host_sync(fill_mode):
    """``execution_lag: 1`` with open/high/low (passive orders through the range, a maker rebate):
    no host sync in the step, CPU and GPU trajectories equal."""
    bars = make_market(BARS, "train")
    params = EnvParams(episode_len=25, window=16, fill_mode=fill_mode, seed=9, maker_rebate_bps=0.2)
    cpu = BatchedTradingEnv(bars, params, num_envs=257, device="cpu")
    gpu = BatchedTradingEnv(bars, params, num_envs=257, device="cuda")
    cpu.reset(), gpu.reset()
    for _ in range(3):
        a = policy(cpu)
        cpu.step(a), gpu.step(a.cuda())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = []
        for _ in range(60):
            a = policy(gpu)
            outs.append(gpu.step(a)[:4])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for og, rg, tg, ug in outs:
        oc, rc, tc, uc, _ = cpu.step(policy(cpu))
        assert torch.equal(tg.cpu(), tc) and torch.equal(ug.cpu(), uc)
        assert torch.allclose(og.cpu(), oc, rtol=1e-4, atol=1e-5)
        assert torch.allclose(rg.cpu(), rc, rtol=1e-4, atol=1e-5)
    assert torch.allclose(gpu.metrics_vector().cpu(), cpu.metrics_vector(), rtol=1e-4, atol=1e-4)
