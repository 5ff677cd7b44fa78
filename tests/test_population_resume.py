"""``train --resume`` of a population (``rl_zerosync/population/resume.py``) on the CPU: a population
stopped by SIGTERM and resumed ends with every member's rows 1..N once, those before the stop kept and
the counters (env steps, epsilon, updates) continued as in the uninterrupted population; after a kill
between the members' checkpoint writes it continues from the last common iteration; a member stopped early is read back; a finished population
is left as it is; changed settings, another directory and a changed data file are refused naming them
before anything is written."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from rl_zerosync.config.settings import from_dict
from rl_zerosync.rundir.checkpoints import CHECKPOINT_DIR, checkpoint_iteration
from rl_zerosync.rundir.metrics_table import read_metrics
from tensorboardX.proto import event_pb2

from test_population import _rows
from test_run_ownership import _tb_events
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")

ITERATIONS = 6
STOP_AFTER = 4
SPACE = {"seeds": [0, 1]}


def _settings(root: Path, iterations: int = ITERATIONS, population: dict | None = None, run: dict | None = None):
    raw = tiny_raw({"name": "pop", "dir": str(root), "iterations": iterations, "checkpoint_every": 2,
                    "eval_every": 3, "evaluate": False, **(run or {})})
    raw["population"] = population or SPACE
    (root / "pop.yaml").write_text(json.dumps(raw))
    return from_dict(raw, str(root / "pop.yaml"))


def _train(root: Path, *, resume: bool = False, stop_after: int | None = None, **kwargs) -> dict:
    """``train_population`` of the tiny population in ``root``; ``stop_after``: SIGTERM this process after
    that iteration (the real signal through the population's handler)."""
    from rl_zerosync.population import lockstep
    from rl_zerosync.population.drive import train_population

    real = lockstep.Population.step

    def step(self):
        lines = real(self)
        if stop_after is not None and self.iteration == stop_after:
            os.kill(os.getpid(), signal.SIGTERM)
        return lines

    lockstep.Population.step = step
    try:
        return train_population(_settings(root, **kwargs), resume=resume)
    finally:
        lockstep.Population.step = real


def _table(root: Path) -> list[tuple[int, int]]:
    """The population table's (member, iteration) of every row, in the order written."""
    lines = (root / "pop" / "metrics.jsonl").read_text().splitlines()
    return [(json.loads(x)["member"], json.loads(x)["iteration"]) for x in lines if x.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """An uninterrupted population and one stopped by SIGTERM after iteration ``STOP_AFTER``."""
    clean, stopped = tmp_path_factory.mktemp("clean"), tmp_path_factory.mktemp("stopped")
    _train(clean)
    report = _train(stopped, stop_after=STOP_AFTER)
    assert report["interrupted_by"] == signal.SIGTERM and report["partial"] is True
    return clean, stopped


COUNTERS = ("training_iteration", "env_runners/num_env_steps_sampled_lifetime", "env_runners/epsilon",
            "learners/default_policy/zerosync/updates_lifetime")
"""Row columns a resume continues exactly (a single run's resume: env steps and the epsilon schedule go
on from the checkpoint; the episodes in flight at the checkpoint are not in it, so returns differ)."""


def _assert_resumed(clean: Path, root: Path, kept: int) -> None:
    """Rows 1..N once per member in the uninterrupted order, the rows up to the resumed iteration
    ``kept`` untouched, the counters continued, the final checkpoints at N, population.json complete."""
    assert _table(root) == [(k, i) for i in range(1, ITERATIONS + 1) for k in range(2)]
    for k in range(2):
        member, ref = root / "pop" / f"member{k}", clean / "pop" / f"member{k}"
        assert checkpoint_iteration(member / CHECKPOINT_DIR) == ITERATIONS
        rows, clean_rows = _rows(member), _rows(ref)
        assert rows[:kept] == clean_rows[:kept], f"member{k}"
        for key in COUNTERS:
            assert [r.get(key) for r in rows] == [r.get(key) for r in clean_rows], (k, key)
        assert clean_rows[0].get(COUNTERS[-1]) is not None
    report = json.loads((root / "pop" / "population.json").read_text())
    assert report["partial"] is False and report["members"] == 2


def test_a_sigterm_then_resume_gives_the_uninterrupted_population(runs, tmp_path, capsys):
    clean, stopped = runs
    assert [len(read_metrics(stopped / "pop" / f"member{k}")) for k in range(2)] == [STOP_AFTER] * 2
    root = tmp_path / "r"
    shutil.copytree(stopped, root)
    (root / "pop.yaml").write_text((root / "pop.yaml").read_text().replace(str(stopped), str(root)))
    with open(root / "pop" / "metrics.jsonl", "a") as f:
        f.write('{"member": 1, "itera')  # a torn last line, as a kill leaves it
    before = set((root / "pop" / "tensorboard").iterdir())
    _train(root, resume=True)
    out = capsys.readouterr()
    assert f"resume: the population continues from iteration {STOP_AFTER}" in out.out
    assert "dropped 1 damaged line" in out.err
    _assert_resumed(clean, root, STOP_AFTER)
    # TensorBoard: the new event file starts a session at the first iteration trained again
    (events,) = set((root / "pop" / "tensorboard").iterdir()) - before
    starts = [e.step for e in _tb_events(events) if e.HasField("session_log")
              and e.session_log.status == event_pb2.SessionLog.START]
    assert starts == [STOP_AFTER + 1]
    assert {e.step for e in _tb_events(events) if e.HasField("summary")} == set(range(STOP_AFTER + 1, ITERATIONS + 1))


def test_a_kill_between_the_members_checkpoints_resumes_from_the_last_common_one(runs, tmp_path, capsys):
    """member1's newest checkpoint is one step behind member0's (a kill after member0's save, before
    member1's): the population continues from member1's, member0 from its older checkpoint."""
    clean, stopped = runs
    root = tmp_path / "k"
    shutil.copytree(stopped, root)
    member1 = root / "pop" / "member1"
    shutil.rmtree(member1 / CHECKPOINT_DIR)
    os.replace(member1 / (CHECKPOINT_DIR + ".1"), member1 / CHECKPOINT_DIR)
    _train(root, resume=True)
    assert "continues from iteration 2 (dropped 4 metrics.jsonl rows after it)" in capsys.readouterr().out
    _assert_resumed(clean, root, 2)


def test_a_member_without_a_checkpoint_makes_the_population_start_again(runs, tmp_path, capsys):
    """member1 never wrote a checkpoint (a kill before its first): the last common iteration is 0, every
    member trains from the start, every row is written again once."""
    clean, stopped = runs
    root = tmp_path / "z"
    shutil.copytree(stopped, root)
    for ckpt in (root / "pop" / "member1").glob(CHECKPOINT_DIR + "*"):
        shutil.rmtree(ckpt)
    _train(root, resume=True)
    assert "continues from iteration 0 (dropped 8 metrics.jsonl rows after it)" in capsys.readouterr().out
    _assert_resumed(clean, root, 0)


def test_a_member_that_stopped_early_is_read_back_not_retrained(runs, tmp_path, capsys):
    """member1's checkpoint says it had stopped early (patience used up): the resume restores it, trains
    member0 alone to the end and leaves member1's checkpoint and rows as they were."""
    from rl_zerosync.rundir.checkpoints import RUN_STATE_FILE, write_manifest

    _, stopped = runs
    root = tmp_path / "e"
    shutil.copytree(stopped, root)
    ckpt = root / "pop" / "member1" / CHECKPOINT_DIR
    state = json.loads((ckpt / RUN_STATE_FILE).read_text())
    (ckpt / RUN_STATE_FILE).write_text(json.dumps({**state, "evals_since_best": 2}))
    write_manifest(ckpt)
    before = {p: p.read_bytes() for p in ckpt.rglob("*") if p.is_file()}
    _train(root, resume=True, run={"early_stop_patience": 2})
    assert "read back (finished): member1" in capsys.readouterr().out
    assert _table(root) == [(k, i) for i in range(1, STOP_AFTER + 1) for k in range(2)] + [
        (0, i) for i in range(STOP_AFTER + 1, ITERATIONS + 1)]
    assert checkpoint_iteration(root / "pop" / "member0" / CHECKPOINT_DIR) == ITERATIONS
    assert {p: p.read_bytes() for p in ckpt.rglob("*") if p.is_file()} == before


def test_a_finished_population_is_left_as_it_is(runs, capsys):
    clean, _ = runs
    before = {p: p.stat().st_mtime_ns for p in (clean / "pop").rglob("*") if p.is_file()}
    report = _train(clean, resume=True)
    assert "is finished (every member trained, population.json complete): nothing to resume" in capsys.readouterr().out
    assert report["partial"] is False
    assert {p: p.stat().st_mtime_ns for p in (clean / "pop").rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("change, needle", [
    (["--set", "model.hidden=[8]"], "model.hidden: [16, 16] in the run, [8] now"),
    (["--set", "population.seeds=[0,2]"], "population.seeds: [0, 1] in the run, [0, 2] now"),
    (["--set", "population.pbt_every=1"], "population.pbt_every is 1: a population with population.pbt_every "
                                          "cannot be resumed"),
    (["--resume-elsewhere"], "expected the population's directory"),
])
def test_changed_settings_are_refused_naming_the_key(runs, tmp_path, capsys, change, needle):
    from rl_zerosync.cli import main

    _, stopped = runs
    root = tmp_path / "c"
    shutil.copytree(stopped, root)
    (root / "pop.yaml").write_text((root / "pop.yaml").read_text().replace(str(stopped), str(root)))
    before = {p: p.read_bytes() for p in (root / "pop").rglob("*") if p.is_file()}
    where = str(root / "pop" / "member0") if change == ["--resume-elsewhere"] else str(root / "pop")
    args = [] if change == ["--resume-elsewhere"] else change
    assert main(["train", "--config", str(root / "pop.yaml"), *args, "--resume", where]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ") and needle in line], err
    assert "Traceback" not in err
    assert {p: p.read_bytes() for p in (root / "pop").rglob("*") if p.is_file()} == before


def test_a_changed_data_file_is_refused_by_name_before_anything_is_written(tmp_path, capsys):
    """A population on file data records its files (``data_record.json`` of the population's directory);
    a resume after the file changed is refused naming it, as a single run's is."""
    import yaml

    from rl_zerosync.cli import main
    from rl_zerosync.rundir.run_dir import RunDir
    from test_data_record import CUT, FEATURES, _drop_last, _write_csv

    csv = _write_csv(tmp_path / "bars.csv")
    raw = tiny_raw({"name": "pop", "dir": str(tmp_path), "iterations": 2, "evaluate": False})
    raw["data"] = {"source": "csv", "paths": [str(csv)], "features": FEATURES,
                   "columns": {"timestamp": "Date", "close": "Close", "high": "High", "low": "Low"}}
    raw["population"] = SPACE
    (tmp_path / "pop.yaml").write_text(yaml.safe_dump(raw))
    parent = tmp_path / "pop"
    parent.mkdir()
    RunDir(parent).write_settings(from_dict(raw, str(tmp_path / "pop.yaml")))  # as train_population writes it
    _drop_last(csv, CUT)
    before = {p.name: p.read_bytes() for p in parent.iterdir() if p.is_file()}
    assert main(["train", "--config", str(tmp_path / "pop.yaml"), "--resume", str(parent)]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and f"data file {csv} changed since the run recorded it" in lines[0], lines
    assert {p.name: p.read_bytes() for p in parent.iterdir() if p.is_file()} == before
    assert not any((parent / f"member{k}").exists() for k in range(2))
