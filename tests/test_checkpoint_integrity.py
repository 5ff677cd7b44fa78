"""Checkpoint integrity (CPU, in process, one Ray instance): the manifest written with every
checkpoint, the last KEEP_LAST kept, and every damage -- a truncated file, random bytes in the
weights, a missing file -- named at evaluate and at resume, resume falling back to the previous
good checkpoint."""
from __future__ import annotations

import json
import shutil

import pytest

from rl_zerosync.rundir.checkpoints import (
    BEST_DIR, CHECKPOINT_DIR, KEEP_LAST, MANIFEST_FILE, CheckpointError, NoBestCheckpointError, checkpoint_candidates,
    find_checkpoint, read_run_state, verified_checkpoint, verify_checkpoint, write_manifest,
)
from rl_zerosync.config.settings import from_dict
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")  # one Ray instance (conftest) for the module
BASE = tiny_raw({"iterations": 3, "checkpoint_every": 1, "eval_every": 3, "evaluate": False})
WEIGHTS = "learner_group/learner/rl_module/default_policy/module_state.pkl"


def settings(tmp, name, **run):
    raw = json.loads(json.dumps(BASE))
    raw["run"].update(dir=str(tmp), name=name, **run)
    return from_dict(raw)


def iterations(run_dir):
    return [json.loads(x)["iteration"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run of 3 iterations, a checkpoint after each: checkpoint/ (3), checkpoint.1/ (2)."""
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("ckpt")
    train(settings(tmp, "run"))
    return tmp / "run"


@pytest.fixture
def run_copy(trained, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(trained, dst)
    return dst


def test_the_last_checkpoints_are_kept_each_with_a_manifest(trained):
    assert KEEP_LAST == 2
    assert read_run_state(trained / CHECKPOINT_DIR)["iteration"] == 3
    assert read_run_state(trained / (CHECKPOINT_DIR + ".1"))["iteration"] == 2
    assert not (trained / (CHECKPOINT_DIR + ".2")).exists()
    assert not list(trained.glob("*.tmp")) and not list(trained.glob("*.old"))
    assert [p.name for p in checkpoint_candidates(trained)] == ["checkpoint", "checkpoint.1"]
    assert not (trained / (BEST_DIR + ".1")).exists()  # one best checkpoint
    for ckpt in (trained / CHECKPOINT_DIR, trained / (CHECKPOINT_DIR + ".1"), trained / BEST_DIR):
        manifest = json.loads((ckpt / MANIFEST_FILE).read_text())["files"]
        on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()} - {MANIFEST_FILE}
        assert set(manifest) == on_disk and WEIGHTS in manifest and "run_state.json" in manifest
        assert all(len(v["sha256"]) == 64 and v["size"] == (ckpt / k).stat().st_size for k, v in manifest.items())
        assert verify_checkpoint(ckpt) is True
    assert not (trained / "run.lock").exists()  # released at the end of the run


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _scribble(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = bytes(range(7, 23))  # same size, other bytes
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": (_truncate, "algorithm_state.pkl", "has .* bytes, the manifest says"),
    "random bytes": (_scribble, WEIGHTS, "does not match its SHA-256"),
    "missing": (lambda p: p.unlink(), "learner_group/learner/state.pkl", "is missing"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_is_named_at_evaluate(run_copy, kind, capsys):
    from rl_zerosync.cli import main
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

    damage, rel, what = DAMAGE[kind]
    damage(run_copy / CHECKPOINT_DIR / rel)
    with pytest.raises(CheckpointError, match=f"checkpoint: damaged checkpoint: {rel} {what}") as err:
        evaluate_checkpoint(run_copy, which="last", out_dir=run_copy / "ev")
    assert "\n" not in str(err.value)
    assert not (run_copy / "ev").exists()  # nothing loaded, nothing written
    # Through the command line: one line, exit 2.
    assert main(["evaluate", "--checkpoint", str(run_copy / CHECKPOINT_DIR), "--out", str(run_copy / "ev")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and rel in lines[0]


@pytest.mark.parametrize("kind", DAMAGE)
def test_resume_falls_back_to_the_previous_good_checkpoint(run_copy, kind, capsys):
    from rl_zerosync.run.train import train

    damage, rel, _ = DAMAGE[kind]
    damage(run_copy / CHECKPOINT_DIR / rel)
    result = train(settings(run_copy.parent, "run", iterations=5), resume=str(run_copy))
    out = capsys.readouterr()
    assert rel in out.err and "falling back to the previous good checkpoint" in out.err
    assert f"resumed from {run_copy / 'checkpoint.1'} at iteration 2" in out.out
    assert result["training_iteration"] == 5
    assert iterations(run_copy) == [1, 2, 3, 4, 5]  # iteration 3's row dropped, then run again
    assert read_run_state(run_copy / CHECKPOINT_DIR)["iteration"] == 5
    assert read_run_state(run_copy / "checkpoint.1")["iteration"] == 4
    assert verify_checkpoint(run_copy / CHECKPOINT_DIR) and verify_checkpoint(run_copy / "checkpoint.1")
    # The damaged one is kept aside, out of the rotation.
    assert (run_copy / "checkpoint.damaged").is_dir() and "moved the damaged" in out.err
    with pytest.raises(CheckpointError, match=rel):
        verify_checkpoint(run_copy / "checkpoint.damaged")


def test_resume_refuses_when_every_checkpoint_is_damaged(run_copy, capsys):
    from rl_zerosync.run.train import train

    _scribble(run_copy / CHECKPOINT_DIR / WEIGHTS)
    (run_copy / "checkpoint.1" / "run_state.json").unlink()
    with pytest.raises(CheckpointError, match=f"{run_copy / CHECKPOINT_DIR}: damaged checkpoint: {WEIGHTS}"):
        train(settings(run_copy.parent, "run", iterations=5), resume=str(run_copy))
    assert "run_state.json is missing" in capsys.readouterr().err
    assert iterations(run_copy) == [1, 2, 3]  # untouched
    assert not (run_copy / "run.lock").exists()
    # A checkpoint directory named directly is verified alone (no fallback).
    with pytest.raises(CheckpointError, match="run_state.json is missing"):
        verified_checkpoint(run_copy / "checkpoint.1", fallback=True)


def test_a_checkpoint_without_a_manifest_loads_with_a_warning(run_copy, capsys):
    from rl_zerosync.rundir.checkpoints import load_module

    ckpt = run_copy / CHECKPOINT_DIR
    (ckpt / MANIFEST_FILE).unlink()
    assert verified_checkpoint(run_copy) == ckpt
    assert f"{ckpt}: no {MANIFEST_FILE}" in capsys.readouterr().err
    assert load_module(ckpt) is not None
    assert verify_checkpoint(ckpt) is False
    write_manifest(ckpt)
    assert verify_checkpoint(ckpt) is True
    (ckpt / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{MANIFEST_FILE} is unreadable"):
        verify_checkpoint(ckpt)


def test_a_half_written_checkpoint_and_legacy_layouts_are_handled(tmp_path):
    run = tmp_path / "r"
    for name in ("checkpoint.tmp", "checkpoint.old", "checkpoint.1", "checkpoint.10", "checkpoint.2"):
        (run / name).mkdir(parents=True)
    for name in ("checkpoint.old", "checkpoint.1", "checkpoint.10", "checkpoint.2"):
        (run / name / "rllib_checkpoint.json").write_text("{}")
    # Newest first; a partial write (checkpoint.tmp) is never a candidate.
    assert [p.name for p in checkpoint_candidates(run)] == ["checkpoint.old", "checkpoint.1", "checkpoint.2",
                                                           "checkpoint.10"]
    assert find_checkpoint(run, "last") == run / "checkpoint.old"
    with pytest.raises(NoBestCheckpointError, match="no checkpoint_best/: the run saved no best validation pass"):
        find_checkpoint(run, "best")  # asked for the best: never the last instead


def test_a_damaged_best_checkpoint_is_set_aside_at_resume(run_copy, capsys):
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint
    from rl_zerosync.run.train import train

    _truncate(run_copy / BEST_DIR / WEIGHTS)
    with pytest.raises(CheckpointError, match=f"{BEST_DIR}: damaged checkpoint: {WEIGHTS} has"):
        evaluate_checkpoint(run_copy, which="best")
    train(settings(run_copy.parent, "run", iterations=4, eval_every=10), resume=str(run_copy))
    err = capsys.readouterr().err
    assert f"{BEST_DIR}: damaged checkpoint: {WEIGHTS}" in err and "moved the damaged" in err
    assert (run_copy / (BEST_DIR + ".damaged")).is_dir()
    assert iterations(run_copy) == [1, 2, 3, 4]
    # Iteration 4 (validated as the last) replaced it if better; else there is no best to evaluate.
    if (run_copy / BEST_DIR).exists():
        best = verified_checkpoint(run_copy, "best")
        assert best == run_copy / BEST_DIR and read_run_state(best)["iteration"] == 4 and verify_checkpoint(best)
    else:
        with pytest.raises(NoBestCheckpointError):
            verified_checkpoint(run_copy, "best")


def test_the_best_checkpoint_holds_the_policy_not_the_replay(trained, tmp_path):
    """checkpoint_best/ leaves the learner's replay and counters out (evaluation and export read the
    policy from it); checkpoint/ keeps them for resume. Both load into a fresh algorithm."""
    import pickle

    from rl_zerosync.config.settings import to_rllib_config

    def learner_state(ckpt):
        return pickle.loads((ckpt / "learner_group" / "learner" / "state.pkl").read_bytes())

    assert "zerosync" in learner_state(trained / CHECKPOINT_DIR)
    assert "zerosync" not in learner_state(trained / BEST_DIR)
    best_weights = (trained / BEST_DIR / WEIGHTS).read_bytes()
    assert best_weights  # the policy is there
    algo = to_rllib_config(settings(tmp_path, "fresh")).build_algo()
    try:
        algo.restore_from_path(str((trained / BEST_DIR).resolve()))
        assert algo.local_learner.replay.size == 0 and algo.local_learner.updates == 0
    finally:
        algo.stop()
