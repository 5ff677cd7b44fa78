"""The ``replay_add`` kernel: its twin writes exactly what the replay's torch path writes (CPU, bit for
bit, wraparound and overflow included), its bind-time checks, and on the GPU the kernel against the
torch path (bit for bit, no host sync)."""
from __future__ import annotations

import pytest
import torch

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.replay_add import nstep_tables
from rl_zerosync.learner import DeviceReplayBuffer

OBS = (3, 2)


def _rollout(t_len: int, n_envs: int, seed: int, dev, *, n_actions: int = 45) -> dict:
    g = torch.Generator().manual_seed(seed)
    ro = {
        "obs": torch.randn(t_len, n_envs, *OBS, generator=g),
        "next_obs": torch.randn(t_len, n_envs, *OBS, generator=g),
        "actions": torch.randint(0, n_actions, (t_len, n_envs), generator=g),
        "rewards": torch.randn(t_len, n_envs, generator=g),
        "terminateds": torch.rand(t_len, n_envs, generator=g) < 0.15,
        "truncateds": torch.rand(t_len, n_envs, generator=g) < 0.1,
    }
    return {k: v.to(dev) for k, v in ro.items()}


def _pair(dev, kernels, *, capacity: int, n_step: int, prioritized: bool):
    kw = dict(capacity=capacity, obs_shape=OBS, device=dev, gamma=0.97, n_step=n_step, prioritized=prioritized)
    return DeviceReplayBuffer(**kw), DeviceReplayBuffer(**kw, kernels=kernels)


def _assert_same(a: DeviceReplayBuffer, b: DeviceReplayBuffer) -> None:
    assert torch.equal(a.packed, b.packed)
    assert (a.size, a.ptr, a.num_added) == (b.size, b.ptr, b.num_added)
    if a.priorities is not None:
        assert torch.equal(a.priorities, b.priorities)


@pytest.mark.parametrize("n_step", (1, 3, 5))
@pytest.mark.parametrize("prioritized", (False, True))
def test_twin_writes_what_the_torch_path_writes(n_step, prioritized):
    plain, twin = _pair("cpu", get_kernels("cpu"), capacity=50, n_step=n_step, prioritized=prioritized)
    # 4 x 7 = 28 rows, then 28 more (wraps at 50), then 9 x 7 = 63 > capacity (keeps the newest 50).
    for seed, t_len in ((0, 4), (1, 4), (2, 9), (3, 2)):
        ro = _rollout(t_len, 7, seed, "cpu")
        plain.add(ro)
        twin.add(ro)
        _assert_same(plain, twin)


def test_tables_are_the_torch_factors():
    scales, table = nstep_tables(0.97, 4, torch.device("cpu"))
    assert scales.tolist() == [float(torch.tensor(0.97**j, dtype=torch.float32)) for j in range(4)]
    assert torch.equal(table, torch.pow(torch.full((5,), 0.97), torch.arange(5, dtype=torch.float32)))


def _args(t_len=4, n_envs=3, d=6, capacity=20, words=20, n=3):
    ro = _rollout(t_len, n_envs, 0, "cpu")
    scales, table = nstep_tables(0.9, n, torch.device("cpu"))
    return {"obs": ro["obs"].reshape(t_len, n_envs, -1), "next_obs": ro["next_obs"].reshape(t_len, n_envs, -1),
            "actions": ro["actions"], "rewards": ro["rewards"], "terminateds": ro["terminateds"],
            "truncateds": ro["truncateds"], "packed": torch.zeros(capacity, words, dtype=torch.int32),
            "return_scales": scales, "discount_table": table, "priorities": None,
            "max_priority": torch.ones(1, dtype=torch.float64), "start": 0, "first_row": 0, "obs_at": 0,
            "next_obs_at": 8, "actions_at": 14, "rewards_at": 16, "discounts_at": 17, "terminateds_at": 18}


@pytest.mark.parametrize("change, match", [
    ({"rewards": torch.zeros(4, 3, dtype=torch.float64)}, "rewards must have dtype torch.float32"),
    ({"obs": torch.zeros(4, 3, 5)}, r"next_obs must have shape \[4, 3, 5\]"),
    ({"actions": torch.zeros(4, 3, dtype=torch.int32)}, "actions must have dtype torch.int64"),
    ({"truncateds": torch.zeros(4, 2, dtype=torch.bool)}, r"truncateds must have shape \[4, 3\]"),
    ({"discount_table": torch.zeros(3)}, r"discount_table must have shape \[4\]"),
    ({"priorities": torch.zeros(19, dtype=torch.float64)}, r"priorities must have shape \[20\]"),
    ({"start": 20}, r"start must be an int in \[0, 20\)"),
    ({"first_row": 12}, r"first_row must be an int in \[0, 12\)"),
    ({"packed": torch.zeros(5, 20, dtype=torch.int32)}, "first_row must leave at most capacity = 5 rows"),
    ({"next_obs_at": 15}, r"next_obs_at must be an int word offset in \[0, 14\]"),
    ({"actions_at": 15}, "actions_at must be even"),
    ({"rewards_at": 8}, "overlap in the row"),
])
def test_bind_rejects_bad_arguments(change, match):
    args = {**_args(), **change}
    with pytest.raises(ValueError, match=match):
        get_kernels("cpu").bind_replay_add(**args)


@pytest.mark.gpu
@pytest.mark.parametrize("n_step", (1, 3))
@pytest.mark.parametrize("prioritized", (False, True))
def test_kernel_writes_what_the_torch_path_writes(n_step, prioritized):
    dev = torch.device("cuda", torch.cuda.current_device())
    kc = get_kernels(dev, backend="cuda")
    assert kc.backend == "cuda"
    plain, fused = _pair(dev, kc, capacity=5000, n_step=n_step, prioritized=prioritized)
    torch.cuda.synchronize()
    for seed, (t_len, n_envs) in enumerate(((16, 128), (16, 128), (40, 100), (3, 1))):
        ro = _rollout(t_len, n_envs, seed, dev)
        plain.add(ro)
        if seed == 1:
            torch.cuda.set_sync_debug_mode("error")
        try:
            fused.add(ro)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        _assert_same(plain, fused)
