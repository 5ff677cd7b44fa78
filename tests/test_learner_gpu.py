"""GPU proofs of the zero-sync learner: no host sync, graph replay == eager, NaN skipped on device."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import DeviceReplayBuffer, ZeroSyncDQNTorchLearner
from rl_zerosync.module import make_module_spec

# RLlib's get_device() consults the Ray runtime context for the learner's GPU: Ray runs for the whole
# module (conftest's ray_local with these ray.init arguments).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ray_local")]
RAY_INIT = {"num_cpus": 8, "ignore_reinit_error": True}

OBS_DIM = 16
T_LEN, N_ENVS = 16, 256  # 4096 transitions per rollout


def build(mode: str, *, graph: bool, prioritized: bool = False, seed: int = 0, batch: int = 256,
          capacity: int = T_LEN * N_ENVS, **zs) -> ZeroSyncDQNTorchLearner:
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.99, n_step=3, train_batch_size_per_learner=batch, target_network_update_freq=50)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[256, 256]))
        .learners(num_learners=0, num_gpus_per_learner=1, learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": capacity, "graph": graph,
                                                    "prioritized": prioritized, "seed": seed, **zs}})
        .debugging(seed=seed)
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(n))}
    learner = cfg.build_learner(spaces=spaces)
    assert learner.device.type == "cuda"
    assert learner.use_graph == graph
    return learner


def device_rollout(n_actions: int, *, seed: int, reward: float = None, next_obs: float = None):
    g = torch.Generator().manual_seed(seed)
    ro = {
        "obs": torch.randn(T_LEN, N_ENVS, OBS_DIM, generator=g),
        "next_obs": torch.randn(T_LEN, N_ENVS, OBS_DIM, generator=g),
        "actions": torch.randint(0, n_actions, (T_LEN, N_ENVS), generator=g),
        "factored_actions": torch.randint(0, 45, (T_LEN, N_ENVS), generator=g),
        "rewards": torch.randn(T_LEN, N_ENVS, generator=g),
        "terminateds": torch.rand(T_LEN, N_ENVS, generator=g) < 0.02,
        "truncateds": torch.rand(T_LEN, N_ENVS, generator=g) < 0.01,
    }
    if reward is not None:
        ro["rewards"].fill_(reward)
    if next_obs is not None:
        ro["next_obs"].fill_(next_obs)
    return {k: v.cuda() for k, v in ro.items()}


def n_actions(mode: str) -> int:
    return 5 if mode == "routed" else 45


def test_cuda_kernels_backend_in_use():
    learner = build("flat", graph=True)
    assert learner.guard.kernels.backend == "cuda"


@pytest.mark.parametrize(
    "graph,mode,prioritized",
    [(True, "flat", False), (True, "branching", True), (True, "routed", True), (False, "flat", True),
     (False, "branching", False)],
)
def test_200_updates_without_host_sync(graph, mode, prioritized):
    learner = build(mode, graph=graph, prioritized=prioritized)
    learner.replay.add(device_rollout(n_actions(mode), seed=0))
    learner.train(learner.settings.graph_warmup + 1)  # lazy state, warm-up and capture happen here
    learner.collect_metrics()
    second = device_rollout(n_actions(mode), seed=1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        learner.replay.add(second)  # device-resident rollout: no host read either
        learner.train(200)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (200.0, 0.0)
    assert np.isfinite(m["loss_mean"]) and np.isfinite(m["q_mean"])
    assert m["target_updates"] == float((learner.settings.graph_warmup + 1 + 200) // 50)
    if graph:
        assert learner.graph_captured


@pytest.mark.parametrize("mode,prioritized", [("flat", True), ("branching", False)])
def test_graph_replay_equals_eager(mode, prioritized):
    graphed = build(mode, graph=True, prioritized=prioritized, seed=3)
    eager = build(mode, graph=False, prioritized=prioritized, seed=3)
    for a, b in zip(graphed.params, eager.params):
        assert torch.equal(a, b)
    ro = device_rollout(n_actions(mode), seed=5)
    for learner in (graphed, eager):
        learner.replay.add(ro)
        learner.train(20)
    assert graphed.graph_captured
    for a, b in zip(graphed.params, eager.params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert torch.equal(graphed.replay.rng_step, eager.replay.rng_step)
    if prioritized:
        torch.testing.assert_close(graphed.replay.priorities, eager.replay.priorities, rtol=1e-5, atol=1e-8)
    mg, me = graphed.collect_metrics(), eager.collect_metrics()
    for key in ("updates", "skipped", "clip_events", "target_updates"):
        assert mg[key] == me[key]
    for key in ("loss_mean", "grad_norm_mean", "q_min", "q_max", "q_mean"):
        assert mg[key] == pytest.approx(me[key], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("bad", [{"reward": float("nan")}, {"next_obs": float("inf")}])
def test_nan_injection_on_gpu_is_skipped_and_counted(graph, bad):
    learner = build("branching", graph=graph)
    learner.replay.add(device_rollout(45, seed=0))
    learner.train(5)
    learner.collect_metrics()
    params = [p.detach().clone() for p in learner.params]
    opt = copy.deepcopy(learner.optimizer.state_dict()["state"])
    learner.replay.add(device_rollout(45, seed=1, **bad))  # overwrites every stored row
    learner.train(3)
    for before, p in zip(params, learner.params):
        assert torch.equal(before, p.detach())
    state = learner.optimizer.state_dict()["state"]
    for k in opt:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt[k][name], state[k][name]), (k, name)
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (3.0, 3.0)
    learner.replay.add(device_rollout(45, seed=2))
    learner.train(2)
    m = learner.collect_metrics()
    assert (m["updates"], m["skipped"]) == (2.0, 0.0)
    assert any(not torch.equal(b, p.detach()) for b, p in zip(params, learner.params))


def test_host_rollout_goes_through_pinned_staging():
    """Host tensors -> one pinned H2D copy; the stored transitions equal a CPU buffer's."""
    host = {k: v.cpu() for k, v in device_rollout(45, seed=3).items()}
    bufs = [DeviceReplayBuffer(capacity=3 * T_LEN * N_ENVS, obs_shape=(OBS_DIM,), device=torch.device(dev),
                               gamma=0.9, n_step=3) for dev in ("cuda", "cpu")]
    for buf in bufs:
        buf.add(host)
        buf.add(host)  # reuses the staging buffer once the previous copy has landed
    gpu, cpu = bufs
    assert gpu.storage["obs"].is_cuda and gpu.size == cpu.size == 2 * T_LEN * N_ENVS
    for k in cpu.storage:
        torch.testing.assert_close(gpu.storage[k].cpu(), cpu.storage[k])


def test_packed_sampling_matches_cpu():
    """Packed rows + the pipelined step hash draw the same indices and rows on CUDA as on CPU."""
    host = {k: v.cpu() for k, v in device_rollout(45, seed=7).items()}
    bufs = [DeviceReplayBuffer(capacity=T_LEN * N_ENVS + 123, obs_shape=(OBS_DIM,), device=torch.device(dev),
                               gamma=0.9, n_step=3, seed=12) for dev in ("cuda", "cpu")]
    for buf in bufs:
        buf.add(host)
    gpu, cpu = bufs
    assert gpu.storage["next_obs"].data_ptr() % 16 == 0 and gpu.row_words % 4 == 0
    outs = [buf.make_sample_buffers(257) for buf in bufs]
    for step in range(5):
        if step == 3:  # a restored counter past 2**32 (its low 32 bits drive the draw)
            for buf in bufs:
                state = buf.state_dict()
                state["rng_step"] = 2**32 + 17
                buf.load_state_dict(state)
        for buf, out in zip(bufs, outs):
            buf.sample_into(out)
        assert torch.equal(outs[0].indices.cpu(), outs[1].indices)
        for buf, out in zip(bufs, outs):  # the packed gather equals a per-column gather of the storage
            for key in ("obs", "next_obs", "actions", "rewards", "discounts", "terminateds"):
                assert torch.equal(getattr(out, key), buf.storage[key][out.indices]), key
        for key, col in outs[1].as_batch().items():  # n-step sums may round differently on the GPU
            torch.testing.assert_close(outs[0].as_batch()[key].cpu(), col, msg=key)
    assert torch.equal(gpu.rng_step.cpu(), cpu.rng_step)


def _graph_launches(fn) -> int:
    """cudaGraphLaunch calls made by ``fn`` (torch profiler, CPU-side runtime events)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.name.startswith("cudaGraphLaunch"))


@pytest.mark.parametrize("mode,prioritized", [("flat", False), ("routed", True)])
def test_updates_per_graph_is_the_same_updates_in_fewer_launches(mode, prioritized):
    """8 updates per graph launch: bit-identical to one per launch (target updates every 50 and the
    collapse-warmup switch fall inside blocks, which then run as single updates), without host syncs."""
    one = build(mode, graph=True, prioritized=prioritized, seed=5, collapse_warmup_fraction=0.5)
    eight = build(mode, graph=True, prioritized=prioritized, seed=5, collapse_warmup_fraction=0.5,
                  updates_per_graph=8)
    eight.module.set_state(one.module.get_state())
    for learner in (one, eight):
        learner.replay.add(device_rollout(n_actions(mode), seed=7))
        learner.train(learner.settings.graph_warmup + 1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        eight.train(3)  # fewer than a block: one-update launches
        eight.train(117)  # crosses target updates at 50 and 100 and the warmup switch at update 8
    finally:
        torch.cuda.set_sync_debug_mode("default")
    one.train(3)
    one.train(117)
    assert eight.updates == one.updates == 124
    for a, b in zip(one.params, eight.params):
        assert torch.equal(a, b)
    m1, m8 = one.collect_metrics(), eight.collect_metrics()
    assert m1 == m8
    assert _graph_launches(lambda: one.train(64)) == 64
    launches = _graph_launches(lambda: eight.train(64))
    assert launches < 64 // 4, launches  # mostly blocks of 8
    for a, b in zip(one.params, eight.params):
        assert torch.equal(a, b)
