"""GPU proofs of the population update (``learner/population_update.py``): the batched update of P
members matches their own kernels' updates to float32 rounding, runs with no host sync, is one CUDA
graph per population update equal to its eager run, and a NaN in one member's data skips that member
alone on the device."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.learner.population_update import PopulationUpdate
from rl_zerosync.module import make_module_spec

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ray_local")]
RAY_INIT = {"num_cpus": 8, "ignore_reinit_error": True}

OBS_DIM, T_LEN, N_ENVS, BATCH, UPDATES = 16, 16, 128, 256, 10
MEMBERS = [dict(seed=0, lr=1e-3, gamma=0.99, n_step=3, grad_clip=10.0, weight_decay=1e-4),
           dict(seed=1, lr=3e-4, gamma=0.98, n_step=1, grad_clip=1.0, weight_decay=0.0),
           dict(seed=2, lr=5e-4, gamma=0.99, n_step=2, grad_clip=None, weight_decay=1e-3)]


def build(member: dict, *, graph: bool, layernorm: bool = True) -> ZeroSyncDQNTorchLearner:
    torch.manual_seed(100 + member["seed"])
    cfg = (
        DQNConfig()
        .training(lr=member["lr"], gamma=member["gamma"], n_step=member["n_step"], grad_clip=member["grad_clip"],
                  train_batch_size_per_learner=BATCH, target_network_update_freq=4)
        .rl_module(rl_module_spec=make_module_spec(action_mode="routed", hidden=[256, 256], layernorm=layernorm))
        .learners(num_learners=0, num_gpus_per_learner=1, learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 4 * T_LEN * N_ENVS, "graph": graph,
                                                    "seed": member["seed"], "weight_decay": member["weight_decay"]}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(5))}
    learner = cfg.build_learner(spaces=spaces)
    assert learner.device.type == "cuda"
    return learner


def fill_member(learner, k: int, *, seed: int, reward: float | None = None) -> None:
    """One rollout into member k's replay (its own stream; ``reward``: every reward set to it)."""
    g = torch.Generator().manual_seed(1000 * seed + k)
    rewards = torch.randn(T_LEN, N_ENVS, generator=g)
    if reward is not None:
        rewards.fill_(reward)
    learner.replay.add({
        "obs": torch.randn(T_LEN, N_ENVS, OBS_DIM, generator=g),
        "next_obs": torch.randn(T_LEN, N_ENVS, OBS_DIM, generator=g),
        "actions": torch.randint(0, 5, (T_LEN, N_ENVS), generator=g),
        "rewards": rewards,
        "terminateds": torch.rand(T_LEN, N_ENVS, generator=g) < 0.02,
        "truncateds": torch.zeros(T_LEN, N_ENVS, dtype=torch.bool),
    })


def fill(learners, *, seed: int) -> None:
    for k, learner in enumerate(learners):
        fill_member(learner, k, seed=seed)


def state(learner) -> dict:
    f = learner.flat_adam
    return {"params": f.flat_params.clone(), "exp_avg": f.exp_avg.clone(), "exp_avg_sq": f.exp_avg_sq.clone(),
            "step": f.step_count.clone()}


def iterate(update, learners, *, iterations: int) -> list:
    rows = []
    for it in range(iterations):
        fill(learners, seed=it)
        update.train([UPDATES] * len(learners))
        rows.append([lr.collect_metrics(values=v) for lr, v in zip(learners, update.collect())])
    return rows


@pytest.mark.parametrize("layernorm", [True, False])
def test_batched_matches_the_members_own_kernels(layernorm):
    own = [build(m, graph=True, layernorm=layernorm) for m in MEMBERS]
    ref_update = PopulationUpdate(own, mode="per_member")
    ref_rows = iterate(ref_update, own, iterations=2)
    bat = [build(m, graph=True, layernorm=layernorm) for m in MEMBERS]
    update = PopulationUpdate(bat, mode="batched")
    assert update.mode == "batched"
    rows = iterate(update, bat, iterations=2)
    assert update.graph_captured and ref_update.graph_captured
    for k in range(len(MEMBERS)):
        a, b = state(own[k]), state(bat[k])
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=1e-3, atol=1e-4, msg=f"member {k} {key}")
        for key in ("updates", "skipped", "target_updates", "updates_lifetime"):
            assert rows[-1][k][key] == ref_rows[-1][k][key], (k, key)
        assert rows[-1][k]["loss_mean"] == pytest.approx(ref_rows[-1][k]["loss_mean"], rel=1e-3)
    assert not torch.equal(state(bat[0])["params"], state(bat[1])["params"])


def test_graph_replay_equals_eager():
    eager = [build(m, graph=False) for m in MEMBERS]
    graphed = [build(m, graph=True) for m in MEMBERS]
    iterate(PopulationUpdate(eager, mode="batched"), eager, iterations=2)
    update = PopulationUpdate(graphed, mode="batched")
    iterate(update, graphed, iterations=2)
    assert update.graph_captured
    for a, b in zip(eager, graphed):
        sa, sb = state(a), state(b)
        for key in sa:
            torch.testing.assert_close(sb[key], sa[key], rtol=1e-6, atol=1e-7)


def test_population_update_has_no_host_sync():
    learners = [build(m, graph=True) for m in MEMBERS]
    update = PopulationUpdate(learners, mode="batched")
    iterate(update, learners, iterations=1)  # warm-up and capture
    assert update.graph_captured
    fill(learners, seed=7)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        update.train([UPDATES] * len(learners))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    packs = update.collect()  # the one readback of the iteration
    assert all(int(lr.collect_metrics(values=v)["updates"]) == UPDATES for lr, v in zip(learners, packs))


def test_nan_in_one_member_skips_it_alone_on_the_device():
    clean = [build(m, graph=True) for m in MEMBERS]
    iterate(PopulationUpdate(clean, mode="batched"), clean, iterations=2)
    hit = [build(m, graph=True) for m in MEMBERS]
    update = PopulationUpdate(hit, mode="batched")
    iterate(update, hit, iterations=1)
    before = state(hit[1])
    for k, learner in enumerate(hit):  # iteration 1: member 1's whole replay (4 rollouts) becomes NaN rewards
        for extra in range(4 if k == 1 else 1):
            fill_member(learner, k, seed=1 + 10 * extra, reward=float("nan") if k == 1 else None)
    update.train([UPDATES] * 3)
    metrics = [lr.collect_metrics(values=v) for lr, v in zip(hit, update.collect())]
    after = state(hit[1])
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert metrics[1]["skipped"] == UPDATES and metrics[0]["skipped"] == 0 and metrics[2]["skipped"] == 0
    for k in (0, 2):  # the others are bit for bit the population without the NaN
        a, b = state(clean[k]), state(hit[k])
        for key in a:
            assert torch.equal(a[key], b[key]), (k, key)


@pytest.mark.parametrize("mode", ["per_member", "batched"])
def test_a_changed_lr_reaches_the_captured_population_update(mode):
    """PBT sets a member's lr between iterations and the member trains as its own learner does after
    ``set_lr``: ``batched`` reads the lr from its hyperparameter rows, written in place (its one graph
    is kept: 1 capture); ``per_member``'s kernels bind the lr as a number, so its graph is captured again."""
    own = [build(m, graph=True) for m in MEMBERS]
    pop = [build(m, graph=True) for m in MEMBERS]
    update = PopulationUpdate(pop, mode=mode)
    for it in range(2):
        fill(own, seed=it)
        fill(pop, seed=it)
        for learner in own:
            learner.train(UPDATES)
        update.train([UPDATES] * len(pop))
        if it == 0:
            own[1].set_lr(3e-3)
            pop[1].set_lr(3e-3)
    assert update.graph_captured
    assert update.graph_captures == (1 if mode == "batched" else 2)
    torch.testing.assert_close(state(pop[1])["params"], state(own[1])["params"],
                               rtol=1e-3 if mode == "batched" else 0, atol=1e-4 if mode == "batched" else 0)
