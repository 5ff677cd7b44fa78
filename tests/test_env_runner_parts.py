"""CPU tests of the env runner's standalone parts: settings, epsilon schedule, packed columns,
episode statistics and bulk episode building. Each is checked against a plain reference."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_zerosync.env_runner.episode_tracker import STAT_NAMES, EpisodeStatsTracker
from rl_zerosync.env_runner.episodes import EpisodeBuilder
from rl_zerosync.env_runner.epsilon import DeviceEpsilonSchedule
from rl_zerosync.env_runner.packed import Column, PackedColumns
from rl_zerosync.env_runner.runner_settings import (
    RunnerSettings,
    action_mode_from_model_config,
    normalize_epsilon_schedule,
)
from rl_zerosync.kernels.route import ROUTING_DEFAULTS, route, routing_thresholds


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------
def test_settings_defaults_and_from_env_config():
    s = RunnerSettings.from_env_config({"data": {}, "env": {}})
    assert (s.output, s.device, s.graph, s.seed, s.epsilon) == ("columnar", "auto", True, None, None)
    assert (s.wide, s.high_vol, s.low_vol) == (1.5, 1.5, 0.75)
    s = RunnerSettings.from_env_config({"runner": {"output": "episodes", "epsilon": 0.1, "seed": 3}})
    assert s.output == "episodes" and s.epsilon == ((0, 0.1),) and s.seed == 3


def test_routing_thresholds_are_declared_once():
    """The runner's routing keys and defaults are the route kernel's, and a runner section's thresholds
    reach the kernel by those names (other runner keys left out, absent thresholds left to the defaults)."""
    defaults = RunnerSettings()
    assert {name: getattr(defaults, name) for name in ROUTING_DEFAULTS} == dict(ROUTING_DEFAULTS)
    assert {v.name: v.default for v in route.args if v.name in ROUTING_DEFAULTS} == dict(ROUTING_DEFAULTS)
    assert routing_thresholds({"wide": 2, "seed": 3, "graph": False}) == {"wide": 2.0}
    assert routing_thresholds(None) == {}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"output": "list"}, "runner.output"),
        ({"device": "tpu"}, "runner.device"),
        ({"graph": 1}, "runner.graph"),
        ({"seed": -1}, "runner.seed"),
        ({"seed": 1.5}, "runner.seed"),
        ({"epsilon": 1.5}, "runner.epsilon"),
        ({"epsilon": [(0, 1.0), (0, 0.5)]}, "runner.epsilon"),
        ({"epsilon": [(5, 1.0), (10, 0.5)]}, "runner.epsilon[0]"),
        ({"epsilon": [(0, 1.0, 2)]}, "runner.epsilon[0]"),
        ({"epsilon": []}, "runner.epsilon"),
        ({"wide": 0.0}, "runner.wide"),
        ({"high_vol": float("nan")}, "runner.high_vol"),
        ({"low_vol": 2.0}, "runner.low_vol"),
    ],
)
def test_settings_reject_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        RunnerSettings(**kwargs)


def test_settings_reject_unknown_key_and_bad_mode():
    with pytest.raises(ValueError, match="unknown keys.*'colour'"):
        RunnerSettings.from_env_config({"runner": {"colour": 1}})
    with pytest.raises(ValueError, match="action_mode"):
        action_mode_from_model_config({"action_mode": "tabular"})
    assert action_mode_from_model_config({}) == "routed"


# ---------------------------------------------------------------------------------------------
# Epsilon schedule
# ---------------------------------------------------------------------------------------------
def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    """CleanRL's linear schedule: anneal from start_e to end_e over duration steps, then hold."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def piecewise(points, t):
    """Plain-Python piecewise-linear interpolation through the points, holding the last value."""
    for (t0, v0), (t1, v1) in zip(points[:-1], points[1:]):
        if t0 <= t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]


def test_epsilon_matches_linear_schedule_including_past_the_end():
    sched = DeviceEpsilonSchedule([(0, 1.0), (10000, 0.05)], "cpu")
    step = torch.zeros(1, dtype=torch.int64)
    out = torch.empty(1, dtype=torch.float32)
    points = list(range(0, 10001, 137)) + [9999, 10000, 10001, 12345, 10**6, 10**9, 2**40]
    for t in points:
        step.fill_(t)
        sched.evaluate(step, out)
        assert out.item() == pytest.approx(linear_schedule(1.0, 0.05, 10000, t), abs=1e-6), t
    # It keeps annealing until the last breakpoint (no early stop), then holds.
    step.fill_(9990)
    sched.evaluate(step, out)
    assert out.item() > 0.05 + 1e-5


def test_epsilon_piecewise_multi_segment_and_constant():
    points = [(0, 1.0), (100, 0.5), (250, 0.5), (1000, 0.01)]
    sched = DeviceEpsilonSchedule(points, "cpu")
    for t in [0, 1, 50, 99, 100, 101, 249, 250, 251, 600, 999, 1000, 1001, 50_000]:
        assert sched.value_at(t) == pytest.approx(piecewise(points, t), abs=1e-6), t
    const = DeviceEpsilonSchedule(0.2, "cpu")
    assert [const.value_at(t) for t in (0, 10, 10**7)] == pytest.approx([0.2, 0.2, 0.2])
    assert normalize_epsilon_schedule(0.2) == ((0, 0.2),)


def test_epsilon_advancing_device_counter():
    """The runner's pattern: a device counter advanced by N per env step, evaluated each step."""
    sched = DeviceEpsilonSchedule([(0, 1.0), (1000, 0.1)], "cpu")
    counter = torch.zeros(1, dtype=torch.int64)
    out = torch.empty(1, dtype=torch.float32)
    for k in range(40):
        sched.evaluate(counter, out)
        assert out.item() == pytest.approx(linear_schedule(1.0, 0.1, 1000, 37 * k), abs=1e-6)
        counter.add_(37)


# ---------------------------------------------------------------------------------------------
# Packed columns
# ---------------------------------------------------------------------------------------------
def test_packed_columns_views_are_disjoint_and_round_trip():
    cols = [
        Column("stats", torch.float64, (7,)),
        Column("actions", torch.int64, (3, 5)),
        Column("rewards", torch.float32, (3, 5)),
        Column("flags", torch.bool, (3, 5)),
        Column("obs", torch.float32, (3, 5, 4)),
    ]
    packed = PackedColumns(cols, "cpu")
    g = torch.Generator().manual_seed(0)
    ref = {
        "stats": torch.randn(7, dtype=torch.float64, generator=g),
        "actions": torch.randint(0, 45, (3, 5), generator=g),
        "rewards": torch.randn(3, 5, generator=g),
        "flags": torch.rand(3, 5, generator=g) < 0.5,
        "obs": torch.randn(3, 5, 4, generator=g),
    }
    for k, v in ref.items():
        packed.views[k].copy_(v)
    host = packed.flat.clone()
    back = packed.views_of(host)
    for k, v in ref.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    for c in cols:
        assert packed.offsets[c.name] % 256 == 0
    prefix = packed.views_of(host[: packed.end_of("flags")], names=["stats", "actions", "rewards", "flags"])
    assert torch.equal(prefix["flags"], ref["flags"])
    with pytest.raises(ValueError, match="column 'obs'"):
        packed.views_of(host[: packed.end_of("flags")])
    with pytest.raises(ValueError, match="unique"):
        PackedColumns([Column("a", torch.float32, (1,))] * 2, "cpu")


# ---------------------------------------------------------------------------------------------
# Episode statistics
# ---------------------------------------------------------------------------------------------
def _reference_stats(rollouts, num_envs):
    """Per-rollout completed-episode (returns, lengths) by walking each env step by step."""
    run_ret = [0.0] * num_envs
    run_len = [0] * num_envs
    out = []
    for rewards, dones in rollouts:
        rets, lens = [], []
        for t in range(rewards.shape[0]):
            for i in range(num_envs):
                run_ret[i] += float(rewards[t, i])
                run_len[i] += 1
                if dones[t, i]:
                    rets.append(run_ret[i])
                    lens.append(run_len[i])
                    run_ret[i], run_len[i] = 0.0, 0
        out.append((rets, lens))
    return out


def test_episode_stats_match_step_by_step_reference():
    T, N = 9, 6
    g = torch.Generator().manual_seed(1)
    tracker = EpisodeStatsTracker(T, N, "cpu")
    rollouts = []
    for _ in range(4):
        rewards = torch.randn(T, N, generator=g)
        term = torch.rand(T, N, generator=g) < 0.12
        trunc = torch.rand(T, N, generator=g) < 0.08
        rollouts.append((rewards, term, trunc))
    refs = _reference_stats([(r, te | tr) for r, te, tr in rollouts], N)
    out = torch.empty(len(STAT_NAMES), dtype=torch.float64)
    for (rewards, term, trunc), (rets, lens) in zip(rollouts, refs):
        tracker.update(rewards, term, trunc, out)
        got = EpisodeStatsTracker.to_dict(out)
        assert got["count"] == len(rets)
        assert got["return_sum"] == pytest.approx(sum(rets), abs=1e-9)
        assert got["len_sum"] == sum(lens)
        if rets:
            assert got["return_min"] == pytest.approx(min(rets))
            assert got["return_max"] == pytest.approx(max(rets))
            assert (got["len_min"], got["len_max"]) == (min(lens), max(lens))
        else:
            assert got["return_min"] == float("inf") and got["len_max"] == float("-inf")


# ---------------------------------------------------------------------------------------------
# Bulk episode building
# ---------------------------------------------------------------------------------------------
def _fake_rollout(T, N, D, rng, start_obs):
    """A consistent rollout: obs[t+1] == next_obs[t] except after a done (fresh reset obs)."""
    obs = np.empty((T, N, D), np.float32)
    next_obs = rng.normal(size=(T, N, D)).astype(np.float32)
    term = rng.random((T, N)) < 0.15
    trunc = (rng.random((T, N)) < 0.1) & ~term
    obs[0] = start_obs
    for t in range(1, T):
        reset = rng.normal(size=(N, D)).astype(np.float32)
        done = (term[t - 1] | trunc[t - 1])[:, None]
        obs[t] = np.where(done, reset, next_obs[t - 1])
    actions = rng.integers(0, 45, size=(T, N))
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    return obs, next_obs, actions, rewards, term, trunc


def test_episode_builder_cuts_and_continues():
    T, N, D = 12, 5, 3
    rng = np.random.default_rng(2)
    space = gym.spaces.Box(-np.inf, np.inf, (D,), np.float32)
    builder = EpisodeBuilder(N, space, gym.spaces.Discrete(45))
    start = rng.normal(size=(N, D)).astype(np.float32)
    by_id, continued = {}, 0
    for _ in range(3):
        obs, next_obs, actions, rewards, term, trunc = _fake_rollout(T, N, D, rng, start)
        # Envs continue from their last next obs, or from a fresh reset obs after a done.
        reset = rng.normal(size=(N, D))
        start = np.where((term[-1] | trunc[-1])[:, None], reset, next_obs[-1]).astype(np.float32)
        episodes = builder.build(obs, next_obs, actions, rewards, term, trunc)
        assert sum(len(e) for e in episodes) == T * N
        num_done = int((term | trunc).sum())
        assert sum(e.is_done for e in episodes) == num_done
        assert sum(e.is_terminated for e in episodes) == int(term.sum())
        for e in episodes:
            e.validate()
            if e.id_ in by_id:
                assert e.t_started == by_id[e.id_].t and e.t_started > 0
                by_id[e.id_].concat_episode(e)  # RLlib asserts id, t_started and first obs
                continued += 1
            else:
                by_id[e.id_] = e
    assert continued > 0
    for e in by_id.values():
        assert len(e.observations) == len(e) + 1
        assert e.t == e.t_started + len(e)


def test_episode_builder_data_per_env():
    T, N, D = 7, 3, 2
    rng = np.random.default_rng(3)
    builder = EpisodeBuilder(N, gym.spaces.Box(-np.inf, np.inf, (D,), np.float32), gym.spaces.Discrete(5))
    obs, next_obs, actions, rewards, term, trunc = _fake_rollout(T, N, D, rng, rng.normal(size=(N, D)))
    episodes = builder.build(obs, next_obs, actions, rewards, term, trunc)
    # Chunks come env by env, in time order: concatenating them rebuilds each column.
    k = 0
    for i in range(N):
        acts, rews, steps = [], [], 0
        while steps < T:
            e = episodes[k]
            k += 1
            np.testing.assert_array_equal(e.get_observations(0), obs[steps, i])
            np.testing.assert_array_equal(e.get_observations(-1), next_obs[steps + len(e) - 1, i])
            acts.append(e.get_actions()), rews.append(e.get_rewards())
            steps += len(e)
        np.testing.assert_array_equal(np.concatenate(acts), actions[:, i])
        np.testing.assert_array_equal(np.concatenate(rews), rewards[:, i])
    assert k == len(episodes)
    with pytest.raises(ValueError, match="envs"):
        builder.build(obs[:, :2], next_obs[:, :2], actions[:, :2], rewards[:, :2], term[:, :2], trunc[:, :2])
