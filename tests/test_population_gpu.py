"""GPU check of a whole population iteration: members built on CUDA (GPU env runners, graphed learners)
train through one batched population update captured in a CUDA graph, their rollouts come back in one
readback, and the batched validation walk gives each member what its own validation pass gives (to
float32 rounding)."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from rl_zerosync.config.settings import load

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ray_local")]
RAY_INIT = {"num_cpus": 8, "ignore_reinit_error": True}
SMOKE = Path(__file__).resolve().parent.parent / "configs" / "smoke.yaml"


def test_a_population_iteration_on_cuda(tmp_path):
    import yaml

    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir

    base = load(SMOKE, ["runner.device=cuda", "algo.num_gpus_per_learner=1", "learner.graph=true",
                        f"run.dir={tmp_path}", "run.name=pop", "run.iterations=6", "run.eval_every=3",
                        "run.evaluate=false", "run.checkpoint_every=0"]).to_dict()
    base["population"] = {"seeds": [0, 1], "search": {"algo.lr": {"grid_search": [1e-3, 3e-3]}}, "update": "batched"}
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(base))
    settings = load(path)
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        population = Population(settings, pop, all_member_settings(settings, pop), stack)
        assert population.update_line.startswith("learner update: batched")
        while not population.done:
            population.step()
        assert population.update.graph_captured and population.rollouts_read_together
        algos = [loop.algo for loop in population.loops]
        validator = population.loops[0].validator
        together = validator.validate_population(algos, batched=True)
        for algo, ev in zip(algos, together):
            own = validator.validate(algo)
            for key, value in own.items():
                if key != "validation_time_s":
                    assert ev[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        timing = population.timing_summary()
        assert timing["iterations"] == 6 and timing["member_updates"] > 0 and timing["env_steps_per_s"] > 0


def test_pbt_steps_capture_no_new_graph_on_cuda(tmp_path):
    """4 members with PBT at every validation pass and the batched update: the population update is
    captured once for the whole run, though PBT changed learning rates (written in place into the
    update's rows and recorded in the hyperparameter table)."""
    import yaml

    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir

    base = load(SMOKE, ["runner.device=cuda", "algo.num_gpus_per_learner=1", "learner.graph=true",
                        f"run.dir={tmp_path}", "run.name=pbt", "run.iterations=8", "run.eval_every=2",
                        "run.evaluate=false", "run.checkpoint_every=0"]).to_dict()
    base["population"] = {"seeds": [0, 1, 2, 3], "pbt_every": 1, "pbt_quantile": 0.25, "update": "batched"}
    path = tmp_path / "pbt.yaml"
    path.write_text(yaml.safe_dump(base))
    settings = load(path)
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        population = Population(settings, pop, all_member_settings(settings, pop), stack)
        while not population.done:
            population.step()
        changes = population.hyperparameters.history
        assert len(changes) >= 3 and population.lineage  # a PBT step after (almost) every pass
        assert population.update.graph_captured and population.graph_captures == 1
        lr = population.update.hyperparameter_rows.lr.flatten().tolist()
        for k in range(pop.size):  # the rows the graph reads hold the table's lr
            assert lr[k] == pytest.approx(population.hyperparameters.get(k, "algo.lr"), rel=1e-6)
        assert population.timing_summary()["graph_captures"] == 1
