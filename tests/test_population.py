"""A population on the CPU: member k is bit-identical to the single run with its seed and
hyperparameters; a NaN in one member's data skips that member alone; selection reads validation only;
PBT copies weights and Adam state from top to bottom; outputs and named errors."""
from __future__ import annotations

import contextlib
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from rl_zerosync.config.settings import SettingsError, from_dict
from rl_zerosync.rundir.metrics_table import read_metrics
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")  # one Ray for the module, stopped after it

ITERATIONS = 20
SPACE = {"seeds": [0, 1], "search": {"algo.lr": {"grid_search": [1e-3, 3e-4]},
                                     "algo.gamma": {"grid_search": [0.99]}}}


def _raw(tmp_path: Path, iterations: int = ITERATIONS, population: dict | None = SPACE, **run) -> dict:
    raw = tiny_raw({"name": "pop", "dir": str(tmp_path), "iterations": iterations, "checkpoint_every": 0,
                    "eval_every": 5, "evaluate": False, **run})
    if population is not None:
        raw["population"] = population
    return raw


def _arrays(ckpt: Path) -> dict[str, np.ndarray]:
    """Every array of a checkpoint's module weights and Adam state, by path."""
    out: dict[str, np.ndarray] = {}

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, np.ndarray):
            out[path] = node
        elif isinstance(node, torch.Tensor):
            out[path] = node.detach().cpu().numpy()

    module = ckpt / "learner_group" / "learner" / "rl_module" / "default_policy"
    for f in sorted(module.rglob("*.pkl")):
        with open(f, "rb") as fh:
            walk(pickle.load(fh), f"module/{f.name}")
    with open(ckpt / "learner_group" / "learner" / "state.pkl", "rb") as fh:
        walk(pickle.load(fh)["optimizer"], "optimizer")
    assert out, f"no arrays in {ckpt}"
    return out


def _rows(run_dir: Path) -> list[dict]:
    """A run's metrics rows (a single run's metrics.jsonl, a member's rows of the population's table)
    without the wall-clock numbers (everything else must match bit for bit)."""
    def keep(key: str) -> bool:
        return not (key.startswith(("phase_s/", "timers/", "perf/", "time")) or key.endswith(("_s", "_timer"))
                    or "throughput" in key or key in ("env_runners/sample", "pid", "hostname", "node_ip"))

    return [{k: v for k, v in r.items() if keep(k)} for r in read_metrics(run_dir)]


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def _population(raw: dict):
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population
    from rl_zerosync.population.lockstep import Population
    from rl_zerosync.rundir.run_dir import RunDir
    from rl_zerosync.run.train import init_ray

    settings = from_dict(raw, "pop.yaml")
    pop = parse_population(settings.population, settings.source)
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(RunDir.claim(settings.run_dir))
        init_ray(settings)
        return Population(settings, pop, all_member_settings(settings, pop), stack), stack
    except BaseException:
        stack.close()
        raise


def _run_population(raw: dict, inject=None) -> Path:
    population, stack = _population(raw)
    with stack:
        while not population.done:
            population.step()
            if inject is not None:
                inject(population)
        population.save()
    return Path(raw["run"]["dir"]) / "pop"


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return _run_population(_raw(tmp_path_factory.mktemp("clean")))


def test_every_member_is_bit_identical_to_its_single_run(clean, tmp_path):
    from rl_zerosync.run.train import train

    members = [(0, 0, 1e-3), (1, 1, 1e-3), (2, 0, 3e-4), (3, 1, 3e-4)]  # index = point * seeds + seed
    for k, seed, lr in members:
        raw = _raw(tmp_path, population=None, seed=seed, name=f"single{k}")
        raw["algo"]["lr"], raw["algo"]["gamma"] = lr, 0.99
        train(from_dict(raw, "single.yaml"))
        single, member = tmp_path / f"single{k}", clean / f"member{k}"
        _same(_arrays(single / "checkpoint"), _arrays(member / "checkpoint"))
        assert _rows(single) == _rows(member), f"member{k}"
        assert len(_rows(member)) == ITERATIONS
    # the members differ from each other (a test of equality between identical agents proves nothing)
    assert not np.array_equal(*[_arrays(clean / f"member{k}" / "checkpoint")["optimizer/default_policy_"
                                "default_optimizer/state/state/0/exp_avg"] for k in (0, 1)])


def test_the_same_population_twice_is_bit_identical(clean, tmp_path):
    again = _run_population(_raw(tmp_path))
    for k in range(4):
        _same(_arrays(clean / f"member{k}" / "checkpoint"), _arrays(again / f"member{k}" / "checkpoint"))
        assert _rows(clean / f"member{k}") == _rows(again / f"member{k}")


def test_the_members_rows_are_one_table_and_one_tensorboard_writer(clean):
    from test_metrics_table import tb_scalars

    rows = [json.loads(x) for x in (clean / "metrics.jsonl").read_text().splitlines()]
    assert [(r["member"], r["iteration"]) for r in rows] == [(k, it) for it in range(1, ITERATIONS + 1)
                                                             for k in range(4)]
    for k in range(4):  # a member's directory: its settings and checkpoints, no log of its own
        assert not (clean / f"member{k}" / "metrics.jsonl").exists()
        assert not (clean / f"member{k}" / "tensorboard").exists()
    assert len(list((clean / "tensorboard").iterdir())) == 1
    scalars = tb_scalars(clean / "tensorboard")
    for r in rows[-4:]:
        for key, value in r.items():
            if key not in ("member", "iteration"):
                assert scalars[(f"member{r['member']}/{key}", r["iteration"])] == pytest.approx(value, rel=1e-6)


def _learner(loop):
    return loop.algo.local_learner


def test_a_nan_in_one_members_data_skips_that_member_alone(clean, tmp_path):
    frozen = {}

    def poison(population):
        loop = population.loops[1]
        if loop.algo.iteration == 12 and not frozen:
            learner = _learner(loop)
            learner.replay.storage["rewards"].fill_(float("nan"))  # every later batch of member 1 is NaN
            flat = learner.flat_adam
            frozen.update(params=flat.flat_params.clone(), m=flat.exp_avg.clone(), v=flat.exp_avg_sq.clone(),
                          step=flat.step_count.clone())
        elif frozen and loop.algo.iteration > 12:
            flat = _learner(loop).flat_adam
            assert torch.equal(flat.flat_params, frozen["params"]) and torch.equal(flat.exp_avg, frozen["m"])
            assert torch.equal(flat.exp_avg_sq, frozen["v"]) and torch.equal(flat.step_count, frozen["step"])

    poisoned = _run_population(_raw(tmp_path), inject=poison)
    assert frozen, "the NaN was never injected"
    skipped = [r.get("learners/default_policy/zerosync/skipped", 0) for r in _rows(poisoned / "member1")]
    assert all(s > 0 for s in skipped[12:]) and not any(skipped[:12]), skipped  # every update after the NaN
    for k in (0, 2, 3):  # the others as in a population without the NaN
        _same(_arrays(clean / f"member{k}" / "checkpoint"), _arrays(poisoned / f"member{k}" / "checkpoint"))
        assert _rows(clean / f"member{k}") == _rows(poisoned / f"member{k}")


def test_a_destructive_learning_rate_is_never_selected(tmp_path):
    from rl_zerosync.population.report import read_report
    from rl_zerosync.population.drive import train_population

    space = {"seeds": [0], "search": {"algo.lr": {"grid_search": [1e-3, 5.0, 3e-4]}}}
    settings = from_dict(_raw(tmp_path, iterations=10, population=space), "pop.yaml")
    report = train_population(settings)
    assert report == read_report(tmp_path / "pop")
    rows = report["per_member"]
    assert rows[1]["hyperparameters"] == {"algo.lr": 5.0}
    assert report["selection"]["member"] in (0, 2) and report["leaderboard"][-1] == 1, report["leaderboard"]
    best = max(rows, key=lambda r: r["best_validation_sharpe"])
    assert best["member"] == report["selection"]["member"]
    # Selection reads validation only: with every member's test numbers reversed it picks the same member.
    from rl_zerosync.population.report import select

    reversed_test = [{**r, "test": {k: -v if isinstance(v, (int, float)) else v for k, v in r.get("test", {}).items()}}
                     for r in rows]
    assert select(reversed_test, "sharpe") == report["selection"]["member"]


def test_pbt_copies_weights_and_adam_state_from_top_to_bottom(tmp_path):
    from rl_zerosync.population.pbt import PERTURB, LocalMembers

    space = {"seeds": [0, 1, 2, 3], "pbt_every": 1, "pbt_quantile": 0.25}
    population, stack = _population(_raw(tmp_path, iterations=5, population=space))
    with stack:
        for _ in range(4):
            population.step()
        loops = population.loops
        for k, loop in enumerate(loops):  # known values: member k's buffers hold k + 1 (Adam step 10k)
            flat = _learner(loop).flat_adam
            for buf in (flat.flat_params, flat.exp_avg, flat.exp_avg_sq):
                buf.fill_(float(k + 1))
            flat.step_count.fill_(10.0 * k)
            loop.result["eval"] = {"validation_sharpe": [0.5, 2.0, -1.0, 1.0][k]}  # top: 1, bottom: 2
        lr_top = float(_learner(loops[1]).optimizer.param_groups[0]["lr"])
        lines = population.pbt.exploit_explore(LocalMembers(population.members), population.values(), passes=1,
                                               iteration=4)
        dst = _learner(loops[2]).flat_adam
        assert torch.all(dst.flat_params == 2.0) and torch.all(dst.exp_avg == 2.0) and torch.all(dst.exp_avg_sq == 2.0)
        assert float(dst.step_count) == 10.0
        lr = float(_learner(loops[2]).optimizer.param_groups[0]["lr"])
        assert any(math.isclose(lr, lr_top * f) for f in PERTURB), lr
        for k in (0, 1, 3):  # the others untouched
            assert torch.all(_learner(loops[k]).flat_adam.flat_params == float(k + 1))
        assert population.lineage == {2: [{"pass": 1, "iteration": 4, "copied_from": 1, "validation": -1.0,
                                           "source_validation": 2.0, "lr_before": pytest.approx(1e-3),
                                           "lr_after": pytest.approx(lr)}]}
        assert lines and "member2" in lines[0] and "member1" in lines[0]
        # the table holds the new lr, its history the change (the member's optimizer carries it too)
        assert population.hyperparameters.get(2, "algo.lr") == lr == population.members[2].lr
        assert population.hyperparameters.history == [{"member": 2, "key": "algo.lr", "before": pytest.approx(1e-3),
                                                       "after": lr, "copied_from": 1, "reason": "pbt",
                                                       "pbt_pass": 1, "iteration": 4}]
        population.step()  # the copied member trains on with its new lr (the kernel was rebound)
        assert torch.isfinite(dst.flat_params).all()


def test_population_errors_are_named(tmp_path, monkeypatch):
    from rl_zerosync.population import memory
    from rl_zerosync.population.members import all_member_settings
    from rl_zerosync.population.space import parse_population

    raw = _raw(tmp_path, population={"seeds": [0, 1], "search": {"model.hidden": {"choice": [[8], [16]]}}})
    with pytest.raises(SettingsError, match="model.hidden"):
        parse_population(from_dict(raw, "pop.yaml").population, "pop.yaml")
    raw = _raw(tmp_path)
    raw["runner"]["seed"] = 3
    settings = from_dict(raw, "pop.yaml")
    with pytest.raises(SettingsError, match="runner.seed"):
        all_member_settings(settings, parse_population(settings.population, settings.source))
    monkeypatch.setattr(memory, "free_bytes", lambda device: 10 * 2**20)  # 10 MiB free
    space = {"seeds": list(range(64))}
    with pytest.raises(SettingsError, match=r"64 members .* at most \d+ member\(s\) fit"):
        _population(_raw(tmp_path, population=space, name="big"))


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> tuple[Path, dict, str]:
    """A 3-member population trained, evaluated and with its top-2 ensemble, through the CLI."""
    import yaml

    from rl_zerosync.cli import main

    root = tmp_path_factory.mktemp("evaluated")
    raw = _raw(root, iterations=6, population={"seeds": [0, 1, 2], "ensemble_top_k": 2}, evaluate=True,
               eval_every=3)
    (root / "pop.yaml").write_text(yaml.safe_dump(raw))
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["train", "--config", str(root / "pop.yaml")]) == 0
    return root / "pop", json.loads((root / "pop" / "population.json").read_text()), out.getvalue()


def test_population_json_selects_on_validation_and_counts_every_member_as_trials(evaluated):
    parent, report, printed = evaluated
    rows = report["per_member"]
    assert report["members"] == 3 and [r["seed"] for r in rows] == [0, 1, 2]
    chosen = report["selection"]["member"]
    assert chosen == max(range(3), key=lambda k: rows[k]["best_validation_sharpe"])
    sel = report["selection"]
    assert sel["test"]["test_sharpe"] == rows[chosen]["test"]["test_sharpe"]
    lo, hi = sel["test"]["test_sharpe_ci95"]
    assert lo < sel["test"]["test_sharpe"] < hi
    # trials: the rule variants once + every member's validated checkpoints + the ensemble
    one = json.loads((parent / f"member{chosen}" / "evaluation" / "metrics.json").read_text())["summary"]["trials"]
    assert sel["trials"] > one and 0.0 <= sel["deflated_sharpe"] <= 1.0
    over = report["per_point"][0]["over_seeds"]
    assert over["seeds"] == 3 and "test_sharpe_seed_range" in over and "test_sharpe_ci95" in over
    ens = report["ensemble"]
    assert ens["members"] == report["leaderboard"][:2] and ens["chosen_on"] == "validation"
    assert (parent / "ensemble_top2" / "evaluation" / "metrics.json").is_file()
    assert "leaderboard (by validation sharpe" in printed and f"selected: member{chosen}" in printed
    assert "ensemble of the top 2" in printed


def test_member_evaluations_print_one_progress_line(evaluated):
    parent, report, printed = evaluated
    # the members' evaluations are one pass: one progress line naming the member evaluated whole (the
    # one selected on validation); the members' own steps stay quiet; each member's summary line follows
    chosen = report["selection"]["member"]
    steps = [line for line in printed.splitlines() if line.startswith("evaluate members ")]
    assert [s.split(" | ")[0] for s in steps] == ["evaluate members 1/1"]
    assert f"3 in one pass (whole: [{chosen}])" in steps[0]
    assert not any(line.startswith("evaluate 1/") for line in printed.splitlines())
    assert sum(line.startswith(f"member{k}: test") for k in range(3) for line in printed.splitlines()) == 3
    assert any(line.startswith("evaluate ensemble 1/1 | ") for line in printed.splitlines())
    for k in range(3):
        written = json.loads((parent / f"member{k}" / "evaluation" / "metrics.json").read_text())
        assert ("lean" in written) == (k != chosen)
        assert (parent / f"member{k}" / "evaluation" / "report.png").is_file() == (k == chosen)


def test_the_leaderboard_ends_with_the_selected_members_verdict(evaluated):
    _, report, printed = evaluated
    chosen = report["selection"]["member"]
    rule = report["selection"]["test"]["best_rule"]
    line = next(x for x in printed.splitlines() if x.startswith(f"member{chosen}: verdict on test"))
    assert line.startswith(f"member{chosen}: verdict on test (agent's Sharpe minus theirs, 95% intervals): ")
    assert f"the rule chosen on validation ({rule}), interval [" in line and "buy-and-hold, interval [" in line


def test_population_png_marks_the_selected_member_and_the_ensemble(evaluated, tmp_path):
    from rl_zerosync.population.leaderboard_plot import plot_population, validation_curve

    parent, report, printed = evaluated
    chosen = report["selection"]["member"]
    assert (parent / "population.png").stat().st_size > 20_000 and report["plot"] == str(parent / "population.png")
    assert f"population report: {parent / 'population.json'} | {parent / 'population.png'}" in printed
    texts = plot_population(report, parent, tmp_path / "again.png")
    assert texts["order"] == report["leaderboard"] + ["ensemble"]
    assert f"selected: member{chosen}, test Sharpe" in texts["leaderboard_title"]
    assert {f"member{chosen} (selected on validation)", "ensemble member",
            "test Sharpe (read once for the report, not used to select)"} <= set(texts["legend"])
    its, values, _ = validation_curve(parent / f"member{chosen}")
    assert its == [3, 6] and max(values) == pytest.approx(report["per_member"][chosen]["best_validation_sharpe"])


def test_evaluate_and_export_take_a_member_or_the_selected_one(evaluated, tmp_path, capsys):
    from rl_zerosync.cli import main

    parent, report, _ = evaluated
    assert main(["evaluate", "--checkpoint", str(parent), "--member", "3"]) == 2
    assert "--member: 3 is out of range" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(parent), "--out", str(tmp_path / "p.pt")]) == 0
    out = capsys.readouterr().out
    chosen = report["selection"]["member"]
    assert f"member{chosen}, selected on validation" in out and f"member{chosen}" in out.splitlines()[-1]
    assert main(["export", "--checkpoint", str(tmp_path), "--member", "0"]) == 2
    assert "not a population directory" in capsys.readouterr().err


def test_ensemble_policy_acts_on_the_mean_q():
    from rl_zerosync.evaluation.evaluate import ensemble_policy, greedy_policy

    class Q:
        def __init__(self, q):
            self.q = torch.tensor(q)

        def q_values(self, obs):
            return self.q.expand(obs.shape[0], -1)

        def greedy_actions(self, q):
            return q.argmax(dim=-1)

    a, b = Q([1.0, 0.0, 0.9]), Q([0.0, 1.0, 0.9])
    obs = torch.zeros(4, 3)
    assert torch.equal(ensemble_policy([a, a])(obs), greedy_policy(a)(obs))
    assert ensemble_policy([a, b])(obs).tolist() == [2, 2, 2, 2]  # mean 0.5, 0.5, 0.9


def _pbt_space(shards: int) -> dict:
    return {"seeds": [0, 1, 2, 3], "pbt_every": 1, "pbt_quantile": 0.5, "shards": shards,
            "search": {"algo.lr": {"grid_search": [1e-3]}}}


@pytest.mark.slow
def test_two_shards_give_the_members_of_one_shard_with_pbt_between_them(tmp_path):
    from rl_zerosync.population.drive import train_population
    from rl_zerosync.population.shards import shard_members

    reports = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a shard's actor (Ray gives a 1-CPU actor one thread): the same sums
    try:
        raw = _raw(tmp_path / "s1", iterations=10, population=_pbt_space(1))
        reports[1] = train_population(from_dict(raw, "pop.yaml"))
    finally:
        torch.set_num_threads(threads)
    raw = _raw(tmp_path / "s2", iterations=10, population=_pbt_space(2))
    reports[2] = train_population(from_dict(raw, "pop.yaml"))
    settings = from_dict(_raw(tmp_path, population=_pbt_space(2)), "pop.yaml")
    from rl_zerosync.population.space import parse_population

    assert shard_members(parse_population(settings.population, "pop.yaml")) == [[0, 1], [2, 3]]
    one, two = reports[1]["per_member"], reports[2]["per_member"]
    copies = [(k, e["copied_from"]) for r in two for k, e in [(r["member"], e) for e in r["lineage"]]]
    assert any((dst < 2) != (src < 2) for dst, src in copies), copies  # at least one copy between the shards
    assert [r["lineage"] for r in one] == [r["lineage"] for r in two]
    for k in range(4):
        a, b = tmp_path / "s1" / "pop" / f"member{k}", tmp_path / "s2" / "pop" / f"member{k}"
        _same(_arrays(a / "checkpoint"), _arrays(b / "checkpoint"))
        assert _rows(a) == _rows(b), f"member{k}"


def test_a_trained_population_is_refused_without_overwrite(evaluated, capsys):
    from rl_zerosync.cli import main

    parent, _, _ = evaluated
    config = parent.parent / "pop.yaml"
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "already holds a population" in err and "--overwrite" in err
    assert f"  continue it:                        rl-zerosync train --config {config} --resume {parent}\n" in err
    report = (parent / "population.json").read_text()
    assert main(["train", "--config", str(config), "--resume", str(parent)]) == 0  # finished: left as it is
    assert "nothing to resume" in capsys.readouterr().out
    assert (parent / "population.json").read_text() == report
    assert main(["train", "--config", str(config), "--seeds", "0,1"]) == 2  # population.seeds lists them
    assert "--seeds cannot be combined with a population config" in capsys.readouterr().err
    assert (parent / "population.json").read_text() == report
