"""A population's validation pass on the CPU: one walk of P replicas (replica k = member k) gives each
member exactly its own one-member validation (member forwards), or the same to float32 rounding with
one batched forward of all members; and a population run with ``population.update: batched`` trains
and validates every member."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl_zerosync.config.settings import from_dict, to_rllib_config
from rl_zerosync.rundir.metrics_table import read_metrics
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")


def _algos(tmp_path: Path, seeds=(0, 1, 2), iterations: int = 6):
    """Tiny single runs with different seeds and learning rates, trained a few iterations (different weights)."""
    algos = []
    for k, seed in enumerate(seeds):
        raw = tiny_raw({"name": f"m{k}", "dir": str(tmp_path), "iterations": iterations, "seed": seed,
                        "eval_every": 3})
        raw["algo"]["lr"] = [1e-3, 3e-3, 5e-4][k % 3]
        settings = from_dict(raw, "m.yaml")
        algo = to_rllib_config(settings).build_algo()
        for _ in range(iterations):
            algo.train()
        algos.append(algo)
    return settings, algos


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    settings, algos = _algos(tmp_path_factory.mktemp("val"))
    yield settings, algos
    for algo in algos:
        algo.stop()


def test_member_replicas_are_each_members_own_validation(trained):
    from rl_zerosync.evaluation.validation import Validator

    settings, algos = trained
    validator = Validator(settings, algos[0], device="cpu")
    alone = [validator.validate(algo) for algo in algos]
    together = validator.validate_population(algos, batched=False)
    batched = validator.validate_population(algos, batched=True)
    for k in range(len(algos)):
        nets = "_validation_nets"  # the pass's per-asset returns (kept in the run directory), arrays
        assert all(np.array_equal(a, b) for a, b in zip(together[k][nets], alone[k][nets])), f"member {k}"
        assert all(np.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(batched[k][nets], alone[k][nets]))
        keys = [key for key in alone[k] if key not in ("validation_time_s", nets)]
        assert {key: together[k][key] for key in keys} == {key: alone[k][key] for key in keys}, f"member {k}"
        for key in keys:
            assert batched[k][key] == pytest.approx(alone[k][key], rel=1e-5, abs=1e-7), (k, key)
    sharpes = {round(a["validation_sharpe"], 9) for a in alone}
    assert len(sharpes) == len(algos), "the members must differ for this test to mean anything"


def test_batched_population_run_on_cpu(tmp_path):
    from rl_zerosync.population.drive import train_population

    raw = tiny_raw({"name": "pop", "dir": str(tmp_path), "iterations": 6, "checkpoint_every": 0, "eval_every": 3,
                    "evaluate": False})
    raw["population"] = {"seeds": [0, 1], "search": {"algo.lr": {"grid_search": [1e-3, 3e-3]}}, "update": "batched"}
    train_population(from_dict(raw, "pop.yaml"))
    report = json.loads((tmp_path / "pop" / "population.json").read_text())
    assert report["members"] == 4
    for k in range(4):
        rows = read_metrics(tmp_path / "pop" / f"member{k}")
        assert len(rows) == 6
        trained_rows = [r for r in rows if r.get("learners/default_policy/zerosync/updates", 0) > 0]
        assert trained_rows, f"member{k} never trained"
        assert all(r["learners/default_policy/zerosync/skipped"] == 0 for r in trained_rows)
        assert "eval/validation_sharpe" in rows[2] and "eval/validation_sharpe" in rows[5]


def test_one_readback_serves_every_members_rollout(trained):
    """PopulationReadback's row k holds exactly member k's rollout bytes (its own readback's)."""
    import torch

    from rl_zerosync.env_runner.population_readback import PopulationReadback

    _, algos = trained
    runners = [algo.env_runner for algo in algos]
    for runner in runners:
        runner.start_device_sample()
    reader = PopulationReadback([runner.rollout for runner in runners])
    rows = reader.read()
    for runner, row in zip(runners, rows):
        own = runner.rollout.read_back(leading_only=True)
        views = runner.rollout.leading_views(row)
        for key, value in own.items():
            assert torch.equal(views[key], value), key
        runner.finish_device_sample(host_leading=row)
    assert not torch.equal(runners[0].rollout.leading_views(rows[0])["actions"],
                           runners[1].rollout.leading_views(rows[1])["actions"])


def test_population_reads_rollouts_together(tmp_path):
    import contextlib

    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir

    raw = tiny_raw({"name": "pop", "dir": str(tmp_path), "iterations": 2, "checkpoint_every": 0, "eval_every": 0,
                    "evaluate": False})
    raw["population"] = {"seeds": [0, 1]}
    settings = from_dict(raw, "pop.yaml")
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        population = Population(settings, pop, all_member_settings(settings, pop), stack)
        assert population.update_line.startswith("learner update: per_member")
        population.step()
        assert population.rollouts_read_together
