"""GPU check of the members' envs stepped as one batch (``env_runner/population_rollout.py``): the
population's rollout is one CUDA graph replay with no host read (``set_sync_debug_mode("error")``);
with each member's own Q forward it is bit for bit each member's own graphed rollout; with the batched
forward and ``epsilon_greedy_members`` the random actions are exactly the members' RNG streams and the
greedy ones agree up to float32 ties; a population iteration runs with it."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from rl_zerosync.config.settings import load

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ray_local")]
SMOKE = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"


@contextlib.contextmanager
def _population(tmp_path: Path, name: str, *, rollout: str, update: str = "batched", iterations: int = 4):
    import yaml

    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir

    base = load(SMOKE, ["runner.device=cuda", "algo.num_gpus_per_learner=1", "learner.graph=true",
                        f"run.dir={tmp_path}", f"run.name={name}", f"run.iterations={iterations}",
                        "run.eval_every=0", "run.evaluate=false", "run.checkpoint_every=0",
                        "data.regenerate_every=2", "env.fill_mode=stochastic"]).to_dict()
    base["population"] = {"seeds": [0, 1], "update": update, "rollout": rollout,
                          "search": {"algo.epsilon": {"grid_search": [[[0, 1.0], [2000, 0.1]], 0.3]}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base))
    settings = load(path)
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        yield Population(settings, pop, all_member_settings(settings, pop), stack)


def _launch_all(rollouts, population_rollout, *, mode: str, step: int) -> None:
    for ro in rollouts:
        ro.run(env_steps=step * ro.num_envs, rng_step=step, mode=mode, graph=True)
    if population_rollout is not None:
        population_rollout.launch()


def test_one_graph_no_host_read_and_bit_for_bit_each_members_own_rollout(tmp_path):
    from rl_zerosync.env_runner.population_rollout import PopulationRollout

    with _population(tmp_path, "a", rollout="apart", update="per_member") as pa, \
            _population(tmp_path, "b", rollout="apart", update="per_member") as pb:
        own = [loop.algo.env_runner.rollout for loop in pa.loops]
        together = [loop.algo.env_runner.rollout for loop in pb.loops]
        pr = PopulationRollout(together)
        t = own[0].num_steps
        for i, mode in enumerate(("explore", "explore", "greedy", "explore")):
            if i == 2:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                _launch_all(own, None, mode=mode, step=i * t)
                _launch_all(together, pr, mode=mode, step=i * t)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            for a, b in zip(own, together):
                for key in ("obs", "next_obs", "actions", "factored_actions", "rewards", "terminateds",
                            "truncateds", "epsilon", "stats", "env_metrics"):
                    assert torch.equal(a.views[key], b.views[key]), (i, key)
        assert pr.graph_captured
        assert not torch.equal(own[0].views["actions"], own[1].views["actions"])


def test_batched_forward_on_cuda(tmp_path):
    from rl_zerosync.env_runner.population_rollout import PopulationRollout
    from rl_zerosync.learner.stacked_q import StackedQ

    with _population(tmp_path, "a", rollout="apart") as pa, _population(tmp_path, "b", rollout="apart") as pb:
        own = [loop.algo.env_runner.rollout for loop in pa.loops]
        bat = [loop.algo.env_runner.rollout for loop in pb.loops]
        ref, fast = PopulationRollout(own), PopulationRollout(bat, stacked=StackedQ([ro.module for ro in bat]))
        t = own[0].num_steps
        for i, mode in enumerate(("random", "random", "greedy")):
            _launch_all(own, ref, mode=mode, step=i * t)
            _launch_all(bat, fast, mode=mode, step=i * t)
            torch.cuda.synchronize()
            same = (ref.views["actions"] == fast.views["actions"]).float().mean().item()
            assert same == 1.0 if mode == "random" else same > 0.99, (mode, same)
        assert fast.graph_captured


def test_a_population_iteration_with_its_envs_together(tmp_path):
    with _population(tmp_path, "p", rollout="together", iterations=4) as population:
        assert population.rollout_line.startswith("rollouts: together, 4 member(s)"), population.rollout_line
        assert population.rollout.batched
        while not population.done:
            population.step()
        assert population.rollout.graph_captured and population.rollouts_read_together
        assert population.timing_summary()["env_steps_per_s"] > 0
