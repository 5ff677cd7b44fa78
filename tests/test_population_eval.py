"""The members' end-of-run evaluations: in several processes (``population.eval_processes``), every
member's evaluation files are those of the one pass in the population's own process (whole for every
member); a lean member of the pass has the same numbers. CPU."""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rl_zerosync.config.settings import SettingsError, from_dict
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")


def _train_and_evaluate(tmp_path: Path, procs, full=frozenset({0, 1})) -> tuple[Path, list[str]]:
    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.rundir.run_dir import RunDir

    raw = tiny_raw({"name": "pop", "dir": str(tmp_path), "iterations": 3, "checkpoint_every": 0, "eval_every": 3,
                    "evaluate": True})
    raw["population"] = {"seeds": [0, 1], "eval_processes": procs}
    settings = from_dict(raw, "pop.yaml")
    pop = parse_population(settings.population, settings.source)
    with contextlib.ExitStack() as stack:
        stack.enter_context(RunDir.claim(settings.run_dir))
        population = Population(settings, pop, all_member_settings(settings, pop), stack)
        while not population.done:
            population.step()
        population.save()
        lines = population.evaluate_members(full)
    return tmp_path / "pop", lines


def _metrics(member: Path) -> dict:
    """The evaluation report, the run's own folder written as ``<root>``."""
    text = (member / "evaluation" / "metrics.json").read_text().replace(str(member.parent.parent), "<root>")
    return json.loads(text)


@pytest.mark.slow
def test_evaluations_in_processes_equal_in_process(tmp_path):
    here, lines_here = _train_and_evaluate(tmp_path / "here", 1)
    apart, lines_apart = _train_and_evaluate(tmp_path / "apart", 2)
    assert [line.split(":")[0] for line in lines_apart] == ["member0", "member1"]
    for k in range(2):
        a, b = here / f"member{k}", apart / f"member{k}"
        assert _metrics(a) == _metrics(b), f"member{k}"
        ra, rb = (np.load(m / "evaluation" / "returns_test.npz") for m in (a, b))
        assert sorted(ra.files) == sorted(rb.files) and all(np.array_equal(ra[f], rb[f]) for f in ra.files)
        assert (b / "evaluation" / "report.png").is_file()
    assert _metrics(here / "member0") != _metrics(here / "member1")
    # the pass again over a copy of the same members, member 1 whole and member 0 lean
    from rl_zerosync.evaluation.population_pass import evaluate_members

    lean = tmp_path / "lean" / "pop"
    shutil.copytree(here, lean)
    for k in range(2):
        shutil.rmtree(lean / f"member{k}" / "evaluation")
    evaluate_members([lean / "member0", lean / "member1"], ["best", "best"], full=[False, True])
    for k in range(2):
        whole, mine = _metrics(here / f"member{k}"), _metrics(lean / f"member{k}")
        assert mine["segments"]["test"] == whole["segments"]["test"] and mine["evidence"] == whole["evidence"]
        assert ("lean" in mine) == (k == 0) and (lean / f"member{k}" / "evaluation" / "report.png").is_file() == (k == 1)


def test_eval_processes_is_checked():
    from rl_zerosync.population.space import eval_processes, parse_population

    raw = tiny_raw({"name": "pop", "dir": "runs"})
    for bad in (0, -1, "many", 1.5):
        raw["population"] = {"seeds": [0, 1], "eval_processes": bad}
        settings = from_dict(raw, "pop.yaml")
        with pytest.raises(SettingsError, match="population.eval_processes"):
            parse_population(settings.population, settings.source)
    assert eval_processes(4, 2) == 2 and eval_processes(1, 64) == 1
    assert eval_processes("auto", 64) == 1
