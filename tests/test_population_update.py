"""The member dimension in the learner (``learner/population_update.py``) on the CPU: P learners'
state stacked into ``[P, ...]`` buffers. ``per_member`` is bit for bit the members' own updates;
``batched`` (the GPU path: batched GEMMs and the member-batched ops of ``kernels/member_ops.py``) matches
them to float32 rounding; a NaN in one member's data skips that member alone."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.learner.population_update import PopulationUpdate, batched_blocker
from rl_zerosync.module import make_module_spec

from learner_helpers import OBS_DIM, rollout  # noqa: E402

# Three members that differ in every per-member hyperparameter the update reads.
MEMBERS = [
    dict(seed=0, lr=1e-3, gamma=0.9, n_step=1, grad_clip=40.0, weight_decay=0.0),
    dict(seed=1, lr=3e-3, gamma=0.99, n_step=3, grad_clip=0.5, weight_decay=1e-2),
    dict(seed=2, lr=5e-4, gamma=0.95, n_step=2, grad_clip=None, weight_decay=0.0),
]
UPDATES = 12


def build(member: dict, *, mode: str = "routed", layernorm: bool = True, batch: int = 16,
          prioritized: bool = False, target_freq: int = 5) -> ZeroSyncDQNTorchLearner:
    torch.manual_seed(100 + member["seed"])  # network init
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=member["lr"], gamma=member["gamma"], n_step=member["n_step"], grad_clip=member["grad_clip"],
                  train_batch_size_per_learner=batch, target_network_update_freq=target_freq)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[16, 8], layernorm=layernorm))
        .learners(learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": 64, "seed": member["seed"],
                                                    "weight_decay": member["weight_decay"],
                                                    "prioritized": prioritized}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(n))}
    return cfg.build_learner(spaces=spaces)


def fill(learners, *, seed: int = 0, bad: dict | None = None) -> None:
    """One rollout into every learner's replay (member k's from its own stream; ``bad``: k -> reward)."""
    n_actions = int(learners[0].q_module.action_space.n)
    for k, learner in enumerate(learners):
        reward = None if bad is None else bad.get(k)
        learner.replay.add(rollout(t_len=8, n_envs=4, seed=10 * seed + k, reward=reward, n_actions=n_actions))


def state(learner) -> dict:
    """Every tensor an update writes: parameters, target network, Adam moments and step."""
    f = learner.flat_adam
    out = {"params": f.flat_params.clone(), "exp_avg": f.exp_avg.clone(), "exp_avg_sq": f.exp_avg_sq.clone(),
           "step": f.step_count.clone()}
    for i, (_, target) in enumerate(learner.target_pairs()):
        out[f"target{i}"] = target.detach().clone()
    return out


def run(learners, *, population: str | None, iterations: int = 3, bad_at: int | None = None, bad=None):
    """``iterations`` x (a rollout each, ``UPDATES`` updates, one metrics read); returns the metrics rows."""
    update = PopulationUpdate(learners, mode=population) if population else None
    rows = []
    for it in range(iterations):
        fill(learners, seed=it, bad=bad if it == bad_at else None)
        if update is None:
            for learner in learners:
                learner.train(UPDATES)
            rows.append([learner.collect_metrics() for learner in learners])
        else:
            update.train([UPDATES] * len(learners))
            packs = update.collect()
            rows.append([learner.collect_metrics(values=v) for learner, v in zip(learners, packs)])
    return rows


def same_metrics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


@pytest.mark.parametrize("layernorm", [True, False])
def test_per_member_is_bit_identical_to_the_members_alone(layernorm):
    alone = [build(m, layernorm=layernorm) for m in MEMBERS]
    ref_rows = run(alone, population=None)
    together = [build(m, layernorm=layernorm) for m in MEMBERS]
    rows = run(together, population="per_member")
    for k in range(len(MEMBERS)):
        a, b = state(alone[k]), state(together[k])
        for key in a:
            assert torch.equal(a[key], b[key]), (k, key)
        for r_ref, r in zip(ref_rows, rows):
            assert same_metrics(r_ref[k], r[k]), (k, r_ref[k], r[k])
    # the members differ (a test of equality between identical agents proves nothing)
    assert not torch.equal(state(alone[0])["params"], state(alone[1])["params"])
    # the stacked buffers are the members' own: row k is member k's flat parameters
    assert together[1].flat_adam.flat_params.data_ptr() == together[0].flat_adam.flat_params.data_ptr() + \
        together[0].flat_adam.numel * 4


@pytest.mark.parametrize("mode,layernorm,prioritized", [("routed", True, False), ("routed", False, False),
                                                         ("flat", True, True)])
def test_batched_matches_per_member_to_float32_rounding(mode, layernorm, prioritized):
    ref = [build(m, mode=mode, layernorm=layernorm, prioritized=prioritized) for m in MEMBERS]
    ref_rows = run(ref, population="per_member")
    bat = [build(m, mode=mode, layernorm=layernorm, prioritized=prioritized) for m in MEMBERS]
    assert batched_blocker(bat) is None
    rows = run(bat, population="batched")
    for k in range(len(MEMBERS)):
        a, b = state(ref[k]), state(bat[k])
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=2e-5, msg=f"member {k} {key}")
        for r_ref, r in zip(ref_rows, rows):
            for key, value in r_ref[k].items():
                if key in ("updates", "skipped", "clip_events", "collapse_events", "updates_lifetime",
                           "target_updates", "divergence_count", "divergence_flag"):
                    assert r[k][key] == value, (k, key)
                else:
                    assert r[k][key] == pytest.approx(value, rel=1e-4, abs=1e-5, nan_ok=True), (k, key)
    # moved: the updates trained every member (not a no-op compared with a no-op)
    assert all(r["updates"] == UPDATES for r in rows[-1])
    assert not torch.equal(state(bat[2])["params"], build(MEMBERS[2], mode=mode, layernorm=layernorm)
                           .flat_adam.flat_params)


def test_batched_nan_in_one_member_skips_that_member_alone():
    clean = [build(m) for m in MEMBERS]
    run(clean, population="batched", iterations=2)
    hit = [build(m) for m in MEMBERS]
    update = PopulationUpdate(hit, mode="batched")
    fill(hit, seed=0)
    update.train([UPDATES] * 3)
    [learner.collect_metrics(values=v) for learner, v in zip(hit, update.collect())]
    before = state(hit[1])
    # Iteration 1: member 1's rollout carries NaN rewards (its 64-row replay: 32 bad rows of 64, so some
    # of its batches are bad); the others get the clean data.
    fill(hit, seed=1, bad={1: float("nan")})
    hit[1].replay.add(rollout(t_len=8, n_envs=4, seed=99, reward=float("nan"),
                              n_actions=int(hit[1].q_module.action_space.n)))  # now every row is bad
    update.train([UPDATES] * 3)
    metrics = [learner.collect_metrics(values=v) for learner, v in zip(hit, update.collect())]
    after = state(hit[1])
    for key in ("params", "exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(before[key], after[key]), key
    assert metrics[1]["skipped"] == UPDATES and metrics[0]["skipped"] == metrics[2]["skipped"] == 0
    for k in (0, 2):
        a, b = state(clean[k]), state(hit[k])
        for key in a:
            assert torch.equal(a[key], b[key]), (k, key)


def test_per_member_hyperparameters_follow_a_changed_lr():
    """PBT sets a member's lr between iterations: the batched update reads it from then on."""
    ref = [build(m) for m in MEMBERS]
    bat = [build(m) for m in MEMBERS]
    for learners, mode in ((ref, "per_member"), (bat, "batched")):
        update = PopulationUpdate(learners, mode=mode)
        fill(learners, seed=0)
        update.train([UPDATES] * 3)
        learners[0].set_lr(7e-3)
        fill(learners, seed=1)
        update.train([UPDATES] * 3)
    torch.testing.assert_close(state(bat[0])["params"], state(ref[0])["params"], rtol=1e-4, atol=2e-5)


class CountingGraph:
    """Stands in for the CUDA graph of a population update on the CPU: runs the update eagerly and counts
    captures as ``GraphedUpdate`` makes them (the first call, and the first call after a ``reset``)."""

    def __init__(self, fn) -> None:
        self.fn, self.captures, self.captured = fn, 0, False

    def reset(self) -> None:
        self.captured = False

    def __call__(self) -> None:
        if not self.captured:
            self.captures, self.captured = self.captures + 1, True
        self.fn()


@pytest.mark.parametrize("mode", ["batched", "per_member"])
def test_a_pbt_lr_change_captures_no_new_graph_in_batched_mode(mode):
    """The batched update reads the members' hyperparameters from ``[P, 1]`` rows written in place: a
    changed lr keeps the captured graph (1 capture) and still reaches the update (its parameters follow
    the per-member reference); per_member's kernels bind the lr as a number, so it is captured again."""
    ref = [build(m) for m in MEMBERS]
    learners = [build(m) for m in MEMBERS]
    runs = [(ref, "per_member", False), (learners, mode, True)]
    graphs = []

    def counting(fn):  # the CPU has no CUDA graph: count what would be captured
        graphs.append(CountingGraph(fn))
        return graphs[-1]

    for group, way, counted in runs:
        update = PopulationUpdate(group, mode=way, graph=counting if counted else None)
        fill(group, seed=0)
        update.train([UPDATES] * 3)
        rows_before = update.hyperparameter_rows.lr if way == "batched" else None
        group[0].set_lr(7e-3)
        fill(group, seed=1)
        update.train([UPDATES] * 3)
    (graph,) = graphs
    assert graph.captures == (1 if mode == "batched" else 2)
    assert update.graph_captures == graph.captures
    if mode == "batched":
        rows = update.hyperparameter_rows
        assert rows.lr is rows_before and float(rows.lr[0]) == pytest.approx(7e-3)
    tol = {"rtol": 1e-4, "atol": 2e-5} if mode == "batched" else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(state(learners[0])["params"], state(ref[0])["params"], **tol)
    assert not torch.equal(state(learners[0])["params"], state(learners[1])["params"])


def test_named_errors():
    learners = [build(m) for m in MEMBERS[:2]]
    with pytest.raises(ValueError, match="population.update must be one of"):
        PopulationUpdate(learners, mode="fast")
    odd = [build(MEMBERS[0]), build(MEMBERS[1], batch=8)]
    with pytest.raises(ValueError, match="shapes differ"):
        PopulationUpdate(odd)
    branching = [build(m, mode="branching") for m in MEMBERS[:2]]
    with pytest.raises(ValueError, match="batched cannot run these members: member 0: action_mode 'branching'"):
        PopulationUpdate(branching, mode="batched")
    assert PopulationUpdate(branching).mode == "per_member"
    update = PopulationUpdate(learners)
    assert update.mode == "per_member"  # auto on the CPU: the exact reference
    with pytest.raises(ValueError, match="expected 2 update counts"):
        update.train([1])
    with pytest.raises(ValueError, match="member 1's replay buffer is empty"):
        fill(learners[:1])
        update.train([1, 1])


def test_moving_state_into_rows_checks_each_buffer():
    from rl_zerosync.learner import flat_adam, training_guard

    learner = build(MEMBERS[0])
    g = learner.guard
    bad = {name: torch.zeros(3) for name in flat_adam.STACKED}
    with pytest.raises(ValueError, match=r"FlatAdam.adopt: flat_params must be torch.float32 \[\d+\] on cpu, got "
                                         r"torch.float32 \[3\]"):
        learner.flat_adam.adopt(bad, found_inf=g.found_inf, loss_scale=g.loss_scale, grad_norm=g.grad_norm)
    with pytest.raises(ValueError, match="TrainingGuard.adopt: expected rows for"):
        g.adopt({"loss": torch.zeros(1)})
    rows = {name: torch.zeros_like(getattr(g, name)) for name in training_guard.STACKED}
    rows["flags"] = torch.zeros(6, dtype=torch.int32)[::2]  # right shape, not contiguous
    with pytest.raises(ValueError, match="TrainingGuard.adopt: flags must be contiguous"):
        g.adopt(rows)
