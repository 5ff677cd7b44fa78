"""The members' envs stepped as one batch (``population.rollout: together``,
``env_runner/population_rollout.py``) on the CPU: every member ends bit for bit where it ends with
its own runner (``apart``, itself bit for bit the single run: ``tests/test_population.py``), with
fresh series, stochastic fills, staggered starts and a different epsilon schedule per member; the
batched Q forward and member-batched selection agree with each member's own; named errors."""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch

from rl_zerosync.config.settings import from_dict
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")

SPACE = {"seeds": [0, 1], "search": {"algo.epsilon": {"grid_search": [[[0, 1.0], [600, 0.1]],
                                                                      [[0, 0.5], [300, 0.3], [900, 0.0]]]}}}


def _raw(tmp_path: Path, rollout: str, iterations: int = 12, **population) -> dict:
    raw = tiny_raw({"name": f"pop_{rollout}", "dir": str(tmp_path), "iterations": iterations, "checkpoint_every": 0,
                    "eval_every": 4, "evaluate": False},
                   data={"regenerate_every": 3}, env={"fill_mode": "stochastic", "stagger_start": True})
    raw["population"] = {**SPACE, "rollout": rollout, **population}
    return raw


@contextlib.contextmanager
def _population(raw: dict):
    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir
    from rl_zerosync.run.train import init_ray

    settings = from_dict(raw, "pop.yaml")
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        init_ray(settings)
        yield Population(settings, pop, all_member_settings(settings, pop), stack)


def _train(raw: dict) -> tuple[list, list, str]:
    """Every member's final weights and per-iteration sampling metrics, and the rollout line."""
    with _population(raw) as population:
        line = population.rollout_line
        metrics = [[] for _ in population.loops]
        while not population.done:
            population.step()
            for k, loop in enumerate(population.loops):
                r = loop.result.get("env_runners", {})
                metrics[k].append({key: r.get(key) for key in ("episode_return_mean", "episode_len_mean",
                                                                "num_episodes", "epsilon", "trading")})
        weights = [{n: p.detach().clone() for n, p in loop.algo.local_learner.module["default_policy"].named_parameters()}
                   for loop in population.loops]
    return weights, metrics, line


@pytest.mark.slow
def test_together_is_bit_for_bit_each_members_own_runner(tmp_path):
    w_apart, m_apart, line_apart = _train(_raw(tmp_path, "apart"))
    w_together, m_together, line = _train(_raw(tmp_path, "together"))
    assert line_apart.startswith("rollouts: each member's runner alone (population.rollout apart)")
    assert line == "rollouts: together, 4 member(s) x 8 envs as one batch", line
    for k in range(4):
        assert m_together[k] == m_apart[k], f"member{k}"
        for name, value in w_apart[k].items():
            assert torch.equal(value, w_together[k][name]), (k, name)
    # the members differ (equality between identical agents would prove nothing)
    assert m_together[0] != m_together[1] and m_together[0] != m_together[2]
    assert any(row["num_episodes"] for row in m_together[0])


def _rollouts(tmp_path: Path):
    """Four members' built rollouts (routed actions), not yet stepped."""
    raw = _raw(tmp_path, "apart", iterations=1)
    return _population(raw)


def test_batched_forward_and_selection_match_each_members_own(tmp_path):
    from rl_zerosync.env_runner.population_rollout import PopulationRollout
    from rl_zerosync.learner.stacked_q import StackedQ

    with _rollouts(tmp_path / "a") as pa, _rollouts(tmp_path / "b") as pb:
        own = [loop.algo.env_runner.rollout for loop in pa.loops]
        bat = [loop.algo.env_runner.rollout for loop in pb.loops]
        for a, b in zip(own, bat):  # the same members: random weights of the same seeds
            for (n, x), (_, y) in zip(a.module.named_parameters(), b.module.named_parameters()):
                assert torch.equal(x, y), n
        ref = PopulationRollout(own)
        fast = PopulationRollout(bat, stacked=StackedQ([ro.module for ro in bat]))
        assert fast.batched and not ref.batched
        for mode, rng_step in (("random", 0), ("explore", 16), ("greedy", 32)):
            for ro in own + bat:
                ro.run(env_steps=rng_step * 8, rng_step=rng_step, mode=mode, graph=False)
            ref.launch()
            fast.launch()
            q_ref = torch.stack([ro.module.q_values(ro.views["obs"][0]) for ro in own])
            q_fast = fast._stacked.q_values(fast.views["obs"][:, 0])
            torch.testing.assert_close(q_fast, q_ref, rtol=1e-5, atol=1e-6)
            same = ref.views["actions"] == fast.views["actions"]
            if mode == "random":  # epsilon 1: the actions are the members' RNG streams alone, exactly
                assert bool(same.all())
                assert not torch.equal(own[0].views["actions"], own[1].views["actions"])
            else:  # greedy picks agree but where Q values tie to float32 rounding
                assert same.float().mean() > 0.99, mode
            torch.testing.assert_close(fast.views["epsilon"], ref.views["epsilon"], rtol=0, atol=0)


def test_named_errors(tmp_path):
    from rl_zerosync.env_runner.population_rollout import PopulationRollout

    with _rollouts(tmp_path) as population:
        rollouts = [loop.algo.env_runner.rollout for loop in population.loops]
        pr = PopulationRollout(rollouts)
        with pytest.raises(RuntimeError, match="no member asked"):
            pr.launch()
        rollouts[0].run(env_steps=0, rng_step=0, mode="explore", graph=False)
        rollouts[1].run(env_steps=0, rng_step=16, mode="explore", graph=False)
        with pytest.raises(RuntimeError, match="not in lockstep"):
            pr.launch()
        with pytest.raises(RuntimeError, match="not reset alone"):
            rollouts[2].reset()
    from rl_zerosync.config.settings import SettingsError
    from rl_zerosync.population.space import parse_population

    settings = from_dict(_raw(tmp_path, "sideways"), "pop.yaml")
    with pytest.raises(SettingsError, match="population.rollout.*together, apart.*'sideways'"):
        parse_population(settings.population, settings.source)
