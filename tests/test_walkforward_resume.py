"""``evaluate --walk-forward K --resume``: finished folds are read back (not retrained), an interrupted
fold resumes from its newest valid checkpoint or restarts without one, a changed model/env/data key
is refused before anything is written, and a walk without --resume never trains over existing folds.

The first part stands a fake fold trainer in for ``train`` (it writes what a fold run writes: its
settings, metrics rows, checkpoint/ with a manifest, evaluation/metrics.json); the second trains
tiny CPU folds for real: a walk that crashed in fold 2, resumed, gives the uninterrupted walk's
walk_forward.json; a SIGTERM mid-fold resumes that fold from its checkpoint."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import yaml

from rl_zerosync import cli
from rl_zerosync.config.settings import from_dict
from rl_zerosync.run import train as train_module
from rl_zerosync.run.resume_settings import ResumeSettingsError
from rl_zerosync.run.walkforward import RESULT_FILE, finished_fold, fold_plan, walk_forward
from rl_zerosync.rundir.checkpoints import MARKER, RUN_STATE_FILE, read_run_state, rotate, write_manifest
from rl_zerosync.rundir.lock import RunDirError
from rl_zerosync.rundir.run_dir import RunDir

ROOT = Path(__file__).resolve().parent.parent
GOOGL = ROOT / "benchmarks" / "data" / "STOCKS_GOOGL.csv"


def raw_config(tmp_path, **run) -> dict:
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())  # tiny model, CPU
    raw["run"].update({"dir": str(tmp_path), "name": "wf", "checkpoint_every": 0, "iterations": 2, **run})
    raw["data"] = {"source": "csv", "paths": [str(GOOGL)], "features": {"warmup": 32, "median_window": 126},
                   "split": [0.7, 0.15, 0.15], "periods_per_year": 252}
    return raw


def settings(tmp_path, **run):
    return from_dict(raw_config(tmp_path, **run), source="test")


def tree(path: Path) -> dict[str, int]:
    """Every file under ``path`` with its mtime (ns)."""
    return {p.relative_to(path).as_posix(): p.stat().st_mtime_ns for p in sorted(path.rglob("*")) if p.is_file()}


def iterations(run_dir: Path) -> list[int]:
    return [json.loads(x)["iteration"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def metrics_view(report: dict) -> dict:
    """walk_forward.json without its paths and resume bookkeeping: what an uninterrupted walk must equal."""
    folds = [{k: v for k, v in f.items() if k not in ("run_dir", "metrics")} for f in report["folds"]]
    return {"folds": folds, "pooled": report["pooled"], "evidence": report.get("evidence"),
            "pooled_per_seed": report.get("pooled_per_seed"), "complete": report["complete"], "k": report["k"]}


# ---- a fake fold trainer -----------------------------------------------------------------------

def fake_summary(i: int, seed) -> dict:
    return {"segment": "test", "sharpe": 0.5 + i + 0.01 * (seed or 0), "total_return": 0.1 * (i + 1),
            "max_drawdown": 0.05, "flat_sharpe": 0.0, "buy_and_hold_sharpe": 1.0, "best_rule": "momentum",
            "best_rule_sharpe": 0.25 * i, "rules": {"flat": 0.0, "momentum": 0.25 * i}}


class FakeFolds:
    """``train`` for the walk: what a fold run writes, every call recorded as (fold, how).

    ``crash[name] = (where, iteration)``: raise ``before`` anything, ``during`` an iteration (after
    the rows before it) or in the ``evaluation``; ``interrupt[name] = it``: a SIGTERM after iteration
    ``it`` (the checkpoint is written, no evaluation)."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self.crash: dict[str, tuple[str, int]] = {}
        self.interrupt: dict[str, int] = {}

    def __call__(self, s, resume=None, overwrite=False):
        name = s.run_dir.name if s.run_dir.parent.name == "wf" else f"{s.run_dir.parent.name}/{s.run_dir.name}"
        self.calls.append((name, "resume" if resume else "overwrite" if overwrite else "new"))
        where, at = self.crash.pop(name, (None, 0))
        if where == "before":
            raise RuntimeError(f"crash before {name}")
        with RunDir.claim(s.run_dir, resume=bool(resume), overwrite=overwrite) as rd:
            start = read_run_state(rd.resume_point(resume))["iteration"] if resume else 0
            rd.truncate_metrics(start)
            rd.write_settings(s)
            rd.record("metrics.jsonl")
            stop = self.interrupt.pop(name, None)
            for it in range(start + 1, s.run.iterations + 1):
                if where == "during" and it == at:
                    raise RuntimeError(f"crash in {name} at iteration {it}")
                with open(rd.path / "metrics.jsonl", "a") as f:
                    f.write(json.dumps({"iteration": it}) + "\n")
                if stop == it:
                    self._save(rd, it)
                    return {"training_iteration": it, "interrupted_by": int(signal.SIGTERM)}
            self._save(rd, max(start, s.run.iterations))
            if where == "evaluation":
                raise RuntimeError(f"crash in {name}'s evaluation")
            i = int(s.run_dir.name[len("fold"):])
            rd.record("evaluation")
            out = rd.path / "evaluation"
            out.mkdir(exist_ok=True)
            rng = np.random.default_rng(100 * s.run.seed + i)
            bench = rng.normal(0.0004, 0.01, 120)
            np.savez(out / "returns_test.npz", agent_0=bench + rng.normal(0.0002, 0.004, 120),
                     best_rule_0=rng.normal(0.0, 0.01, 120), buy_and_hold_0=bench, position_0=np.sign(bench),
                     validation_0=rng.normal(0.0003, 0.01, 120), trials=np.array([2.0, 2.0, 0.5, 0.4]),
                     trials_counted=np.array("2 candidates"), independent=np.array(False),
                     periods_per_year=np.array(252.0))
            report = {"checkpoint_iteration": s.run.iterations, "rule_choice_source": "validation", "overrides": [],
                      "summary": fake_summary(i, s.run.seed)}
            (out / "metrics.json").write_text(json.dumps(report))
            return {"training_iteration": s.run.iterations, "evaluation": report}

    @staticmethod
    def _save(rd: RunDir, iteration: int) -> None:
        rd.record("checkpoint", "checkpoint.tmp", "checkpoint.old")
        tmp = rd.path / "checkpoint.tmp"
        tmp.mkdir()
        (tmp / MARKER).write_text("{}")
        (tmp / RUN_STATE_FILE).write_text(json.dumps({"iteration": iteration, "evals_since_best": 0}))
        write_manifest(tmp)
        rotate(rd.path, "checkpoint", tmp, 1)


@pytest.fixture
def fake(monkeypatch):
    trainer = FakeFolds()
    monkeypatch.setattr(train_module, "train", trainer)
    return trainer


def test_resume_reuses_finished_folds_resumes_the_interrupted_one_and_trains_the_rest(tmp_path, fake, capsys):
    reference = walk_forward(settings(tmp_path / "ref"), 3)
    assert fake.calls == [("fold0", "new"), ("fold1", "new"), ("fold2", "new")]
    fake.calls.clear()
    s = settings(tmp_path)
    fake.interrupt["fold1"] = 1
    first = walk_forward(s, 3)
    assert not first["complete"] and first["interrupted_by"] == signal.SIGTERM and len(first["folds"]) == 1
    assert json.loads((tmp_path / "wf" / RESULT_FILE).read_text())["pooled"]["folds"] == 1
    fold0 = tree(tmp_path / "wf" / "fold0")
    capsys.readouterr()
    fake.calls.clear()
    report = walk_forward(s, 3, resume=True)
    out = capsys.readouterr().out
    assert fake.calls == [("fold1", "resume"), ("fold2", "new")]  # fold 0 is not retrained
    assert tree(tmp_path / "wf" / "fold0") == fold0  # nor touched
    assert iterations(tmp_path / "wf" / "fold1") == [1, 2]
    assert report["resume"] == {"reused": ["fold 1/3"], "resumed": ["fold 2/3"], "restarted": [],
                                "trained": ["fold 3/3"]}
    assert "walk-forward resume: reused fold 1/3; resumed fold 2/3; restarted -; trained fold 3/3" in out
    lines = [x for x in out.splitlines() if x.startswith("walk-forward: fold ")]
    assert ": reused finished: evaluation/metrics.json after checkpoint/ at iteration 2 of 2" in lines[0]
    assert ": resumed from its newest valid checkpoint (newest: checkpoint/ at iteration 1 of 2" in lines[1]
    assert ": trained from scratch: no run in its directory" in lines[2]
    assert report["complete"] and "interrupted_by" not in report
    on_disk = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert metrics_view(on_disk) == metrics_view(json.loads((tmp_path / "ref" / "wf" / RESULT_FILE).read_text()))
    assert metrics_view(report) == metrics_view(reference)


def test_a_crash_restarts_a_fold_without_a_checkpoint_and_evaluates_a_trained_one(tmp_path, fake, capsys):
    s = settings(tmp_path)
    fake.crash["fold1"] = ("during", 2)  # rows of iteration 1 written, no checkpoint (checkpoint_every 0)
    with pytest.raises(RuntimeError, match="crash in fold1 at iteration 2"):
        walk_forward(s, 3)
    assert not (tmp_path / "wf" / "run.lock").exists()  # the parent's lock is released on a crash
    assert fold_plan(settings_of(s, 1))[0] == "restarted"
    fake.crash["fold1"] = ("evaluation", 0)  # trained to the end, then the evaluation failed
    with pytest.raises(RuntimeError, match="evaluation"):
        walk_forward(s, 3, resume=True)
    plan, detail, _ = fold_plan(settings_of(s, 1))
    assert plan == "resumed" and "training done: evaluating" in detail
    fake.crash["fold2"] = ("before", 0)
    with pytest.raises(RuntimeError, match="crash before fold2"):
        walk_forward(s, 3, resume=True)
    fake.calls.clear()
    report = walk_forward(s, 3, resume=True)
    assert fake.calls == [("fold2", "new")] and report["complete"]  # fold 2 was evaluated by the resume before
    assert report["resume"]["reused"] == ["fold 1/3", "fold 2/3"]
    assert capsys.readouterr().out.count(": restarted from scratch: interrupted before its first checkpoint") == 1


def settings_of(s, i: int, k: int = 3):
    """Fold ``i``'s settings of the rolling walk ``s`` of ``k`` folds."""
    from rl_zerosync.run.walkforward import _fold_settings, fold_windows

    return _fold_settings(s, i, fold_windows(k, s.data["split"])[i])


def test_finished_is_exactly_an_evaluation_after_the_last_checkpoint_of_a_whole_run(tmp_path, fake):
    s = settings(tmp_path)
    walk_forward(s, 3)
    f0 = settings_of(s, 0)
    report, detail = finished_fold(f0)
    assert report is not None and report["summary"]["segment"] == "test"
    assert detail == "evaluation/metrics.json after checkpoint/ at iteration 2 of 2"
    metrics = f0.run_dir / "evaluation" / "metrics.json"
    manifest = f0.run_dir / "checkpoint" / "manifest.json"
    # More iterations asked for now: the fold trains on (resumed), it is not finished.
    assert finished_fold(settings_of(settings(tmp_path, iterations=3), 0)) == (
        None, "checkpoint/ at iteration 2 of 3")
    assert fold_plan(settings_of(settings(tmp_path, iterations=3), 0))[0] == "resumed"
    # Stopped early: finished below run.iterations.
    state = json.loads((f0.run_dir / "checkpoint" / RUN_STATE_FILE).read_text())
    (f0.run_dir / "checkpoint" / RUN_STATE_FILE).write_text(json.dumps({**state, "evals_since_best": 2}))
    os.utime(metrics)  # written after the checkpoint, as at the end of a run
    assert finished_fold(settings_of(settings(tmp_path, iterations=3, early_stop_patience=2), 0))[1].endswith(
        "stopped early")
    (f0.run_dir / "checkpoint" / RUN_STATE_FILE).write_text(json.dumps(state))
    # The checkpoint written after the evaluation (a later session trained it): not finished.
    t = manifest.stat().st_mtime_ns
    os.utime(metrics, ns=(t - 10**9, t - 10**9))
    assert finished_fold(f0) == (None, "evaluation/metrics.json is older than checkpoint/ (trained again since)")
    os.utime(metrics)
    good = metrics.read_text()
    for text, why in [("{\"summ", "unreadable"), ("[]", "holds no test summary"),
                      (json.dumps({**json.loads(good), "rule_choice_source": "in_sample"}), "other data"),
                      (json.dumps({**json.loads(good), "overrides": ["data.spread_bps=5"]}), "other data")]:
        metrics.write_text(text)
        assert finished_fold(f0)[0] is None and why in finished_fold(f0)[1], text
    metrics.write_text(good)
    assert finished_fold(f0)[0] is not None
    os.replace(f0.run_dir / "checkpoint", f0.run_dir / "moved")
    assert finished_fold(f0) == (None, "no checkpoint")
    assert fold_plan(f0)[0] == "restarted"


def test_without_resume_existing_folds_are_refused_or_overwritten(tmp_path, fake, capsys):
    s = settings(tmp_path)
    walk_forward(s, 3)
    before = tree(tmp_path / "wf")
    fake.calls.clear()
    with pytest.raises(RunDirError) as err:
        walk_forward(s, 3)
    msg = str(err.value)
    assert "folds holding a run" in msg and str(tmp_path / "wf" / "fold2") in msg and "\n" not in msg
    assert "pass --resume" in msg and "--overwrite" in msg and RESULT_FILE in msg
    assert fake.calls == [] and tree(tmp_path / "wf") == before
    with pytest.raises(RunDirError, match="cannot be combined"):
        walk_forward(s, 3, resume=True, overwrite=True)
    # Only the report left (the folds deleted by hand): still refused, the report is not overwritten.
    only = settings(tmp_path / "only")
    (tmp_path / "only" / "wf").mkdir(parents=True)
    (tmp_path / "only" / "wf" / RESULT_FILE).write_text("{}")
    with pytest.raises(RunDirError, match=r"walk_forward\.json exists"):
        walk_forward(only, 3)
    # --overwrite: every fold and the report cleared before the first fold trains.
    fake.crash["fold0"] = ("before", 0)
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        walk_forward(s, 3, overwrite=True)
    out = capsys.readouterr().out
    assert out.count("overwrite: removed") == 4 and not (tmp_path / "wf" / RESULT_FILE).exists()
    assert all(not RunDir(tmp_path / "wf" / f"fold{i}").outputs() for i in range(3))
    fake.calls.clear()
    assert walk_forward(s, 3, overwrite=True)["complete"]
    assert fake.calls == [("fold0", "overwrite"), ("fold1", "overwrite"), ("fold2", "overwrite")]


@pytest.mark.parametrize("change, key", [
    ({"env": {"window": 4}}, "env.window"),
    ({"model": {"hidden": [16]}}, "model.hidden"),
    ({"data": {"split": [0.6, 0.2, 0.2]}}, "data.split"),
])
def test_resume_with_a_changed_fixed_key_is_refused_before_anything_is_written(tmp_path, fake, change, key):
    fake.interrupt["fold1"] = 1
    walk_forward(settings(tmp_path), 3)
    before = tree(tmp_path)
    raw = raw_config(tmp_path)
    for section, values in change.items():
        raw[section].update(values)
    fake.calls.clear()
    with pytest.raises(ResumeSettingsError) as err:
        walk_forward(from_dict(raw, source="test"), 3, resume=True)
    assert f"{key}: " in str(err.value) and "in the run" in str(err.value) and "\n" not in str(err.value)
    assert fake.calls == [] and tree(tmp_path) == before and not (tmp_path / "wf" / "run.lock").exists()


def test_resume_with_another_k_or_anchoring_is_refused_naming_the_window(tmp_path, fake):
    fake.interrupt["fold1"] = 1
    walk_forward(settings(tmp_path), 3)
    before = tree(tmp_path)
    window = r"fold0: .*data\.window: \[0\.0, 0\.769\d*\] in the run, \[0\.0, 0\.689\d*\] now"
    with pytest.raises(ResumeSettingsError, match=window):
        walk_forward(settings(tmp_path), 4, resume=True)
    with pytest.raises(ResumeSettingsError, match=r"fold1: .*data\.window"):
        walk_forward(settings(tmp_path), 3, resume=True, anchored=True)  # fold 0 is the same either way
    assert tree(tmp_path) == before


def test_allowed_changes_are_printed_per_fold(tmp_path, fake, capsys):
    walk_forward(settings(tmp_path), 3)
    capsys.readouterr()
    raw = raw_config(tmp_path)
    raw["algo"]["lr"] = 0.002
    report = walk_forward(from_dict(raw, source="test"), 3, resume=True)
    out = capsys.readouterr().out
    assert report["resume"]["reused"] == ["fold 1/3", "fold 2/3", "fold 3/3"]
    assert out.count("| settings changed since it ran: algo.lr 0.001 -> 0.002") == 3


def test_resume_with_seeds(tmp_path, fake):
    s = settings(tmp_path)
    fake.crash["seed1/fold1"] = ("before", 0)
    with pytest.raises(RuntimeError):
        walk_forward(s, 3, seeds=[0, 1])
    fake.calls.clear()
    report = walk_forward(s, 3, seeds=[0, 1], resume=True)
    assert fake.calls == [("seed1/fold1", "new"), ("seed1/fold2", "new")]
    assert report["resume"]["reused"] == [f"fold {i}/3, seed 0" for i in (1, 2, 3)] + ["fold 1/3, seed 1"]
    ref = walk_forward(settings(tmp_path / "ref"), 3, seeds=[0, 1])
    assert metrics_view(report) == metrics_view(ref)


def _cli_config(tmp_path, **run) -> Path:
    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path, **run)))
    return path


def test_cli_resume(tmp_path, fake, capsys):
    config = _cli_config(tmp_path)
    args = ["evaluate", "--walk-forward", "3", "--config", str(config)]
    fake.interrupt["fold1"] = 1
    assert cli.main(args) == 128 + signal.SIGTERM  # a fold stopped by SIGTERM: the walk exits 143
    capsys.readouterr()
    assert cli.main(args) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]  # warnings may come first
    assert line.startswith("error: walk-forward: folds holding a run") and "pass --resume" in line
    assert cli.main(args + ["--resume", "--overwrite"]) == 2
    assert "--resume and --overwrite cannot be combined" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "wf" / "fold0"), "--resume"]) == 2
    assert "needs --walk-forward K --config FILE" in capsys.readouterr().err
    before = tree(tmp_path / "wf")
    assert cli.main(args + ["--resume", "--set", "env.window=4"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: --resume") and "env.window: 8 in the run, 4 now" in line
    assert tree(tmp_path / "wf") == before
    assert cli.main(args + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "walk-forward resume: reused fold 1/3; resumed fold 2/3; restarted -; trained fold 3/3" in out
    assert json.loads((tmp_path / "wf" / RESULT_FILE).read_text())["complete"]


# ---- tiny CPU folds, trained for real ------------------------------------------------------------

@pytest.fixture(scope="module")
def uninterrupted(ray_local, tmp_path_factory):
    """An uninterrupted K = 2 walk (2 iterations per fold): the reference walk_forward.json."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    walk_forward(settings(tmp), 2)
    return json.loads((tmp / "wf" / RESULT_FILE).read_text()), tmp


def _counting(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = train_module.train

    def train(s, **kw):
        calls.append(s.run_dir.name)
        return real(s, **kw)

    monkeypatch.setattr(train_module, "train", train)
    return calls


def _stop_fold1_at_its_first_iteration(monkeypatch, how: str) -> None:
    """Fold 1's first iteration raises (``"crash"``) or ends with a SIGTERM to this process."""
    real_iteration, real_train = train_module._train_iteration, train_module.train
    armed = {"on": False}

    def iteration(algo):
        if armed["on"] and how == "crash":
            armed["on"] = False
            raise RuntimeError("crash in fold 1")
        result = real_iteration(algo)
        if armed["on"]:
            armed["on"] = False
            os.kill(os.getpid(), signal.SIGTERM)  # the run's handler: finish the iteration, checkpoint, stop
        return result

    def train(s, **kw):
        armed["on"] = s.run_dir.name == "fold1"
        return real_train(s, **kw)

    monkeypatch.setattr(train_module, "_train_iteration", iteration)
    monkeypatch.setattr(train_module, "train", train)


def test_a_crash_in_fold_2_then_resume_gives_the_uninterrupted_walk(uninterrupted, tmp_path, monkeypatch, capsys):
    reference, _ = uninterrupted
    s = settings(tmp_path)
    with monkeypatch.context() as m:
        _stop_fold1_at_its_first_iteration(m, "crash")
        with pytest.raises(RuntimeError, match="crash in fold 1"):
            walk_forward(s, 2)
    partial = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert not partial["complete"] and [f["fold"] for f in partial["folds"]] == [0]
    fold0 = tree(tmp_path / "wf" / "fold0")
    calls = _counting(monkeypatch)
    capsys.readouterr()
    report = walk_forward(s, 2, resume=True)
    out = capsys.readouterr().out
    assert calls == ["fold1"]  # fold 1 of 2 is read back, not retrained
    assert tree(tmp_path / "wf" / "fold0") == fold0
    assert "walk-forward resume: reused fold 1/2; resumed -; restarted fold 2/2; trained -" in out
    assert report["complete"]
    assert metrics_view(json.loads((tmp_path / "wf" / RESULT_FILE).read_text())) == metrics_view(reference)


def test_a_sigterm_mid_fold_then_resume_continues_that_fold_from_its_checkpoint(uninterrupted, tmp_path, monkeypatch,
                                                                                capsys):
    reference, _ = uninterrupted
    s = settings(tmp_path)
    with monkeypatch.context() as m:
        _stop_fold1_at_its_first_iteration(m, "sigterm")
        first = walk_forward(s, 2)
    assert first["interrupted_by"] == signal.SIGTERM and not first["complete"] and len(first["folds"]) == 1
    fold1 = tmp_path / "wf" / "fold1"
    assert read_run_state(fold1 / "checkpoint")["iteration"] == 1
    assert not (fold1 / "evaluation" / "metrics.json").exists()
    fold0 = tree(tmp_path / "wf" / "fold0")
    calls = _counting(monkeypatch)
    capsys.readouterr()
    report = walk_forward(s, 2, resume=True)
    out = capsys.readouterr().out
    assert calls == ["fold1"] and tree(tmp_path / "wf" / "fold0") == fold0
    assert "resumed from its newest valid checkpoint (newest: checkpoint/ at iteration 1 of 2" in out
    assert f"resumed from {fold1 / 'checkpoint'} at iteration 1" in out
    assert iterations(fold1) == [1, 2]
    assert report["complete"] and finished_fold(settings_of(s, 1, k=2))[0] is not None
    assert report["folds"][0]["summary"] == reference["folds"][0]["summary"]
    assert np.isfinite(report["folds"][1]["summary"]["sharpe"]) and np.isfinite(report["pooled"]["mean_sharpe"])
