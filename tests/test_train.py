"""Train-loop helpers: where a run's checkpoint is found."""
from __future__ import annotations

import pytest


def test_find_checkpoint_falls_back_to_the_previous_complete_one(tmp_path):
    from rl_zerosync.rundir.checkpoints import find_checkpoint

    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "rllib_checkpoint.json").write_text("{}")
    (tmp_path / "checkpoint.tmp").mkdir()  # a partial write is never used
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint.old"
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "rllib_checkpoint.json").write_text("{}")
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint"
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        find_checkpoint(tmp_path / "nothing")


def test_find_checkpoint_prefers_best_when_asked(tmp_path):
    from rl_zerosync.rundir.checkpoints import find_checkpoint

    for name in ("checkpoint", "checkpoint_best"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rllib_checkpoint.json").write_text("{}")
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint"  # resume takes the last
    assert find_checkpoint(tmp_path, "best") == tmp_path / "checkpoint_best"
    with pytest.raises(ValueError, match="best"):
        find_checkpoint(tmp_path, "first")


def test_best_is_an_error_without_a_best_checkpoint_and_the_end_of_run_warns(tmp_path, capsys):
    """``--which best`` of a run without ``checkpoint_best/`` is refused (it used to give the last
    silently); the end-of-run evaluation evaluates the last with a warning; a checkpoint directory
    given directly is itself."""
    from rl_zerosync import cli
    from rl_zerosync.rundir.checkpoints import (
        NoBestCheckpointError, best_or_last, find_checkpoint, verified_checkpoint,
    )

    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "rllib_checkpoint.json").write_text("{}")
    for find in (find_checkpoint, verified_checkpoint):
        with pytest.raises(NoBestCheckpointError) as err:
            find(tmp_path, "best")
        assert str(err.value) == (f"{tmp_path}: no checkpoint_best/: the run saved no best validation pass (it "
                                  "stopped before its first validation, or no pass scored a number); use --which last "
                                  "(which='last') for its newest checkpoint checkpoint/")
    assert find_checkpoint(tmp_path / "checkpoint", "best") == tmp_path / "checkpoint"  # a checkpoint: itself
    capsys.readouterr()
    for command in ("evaluate", "export"):
        assert cli.main([command, "--checkpoint", str(tmp_path), "--out", str(tmp_path / "out")]) == cli.EXIT_INPUT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path}: no checkpoint_best/"), err
    assert not (tmp_path / "out").exists()
    assert best_or_last(tmp_path, "best") == "last"
    assert capsys.readouterr().err == (f"warning: run.eval_checkpoint best: {tmp_path} has no checkpoint_best/ (no "
                                       "validation pass was saved as a best); evaluating the last checkpoint instead\n")
    assert best_or_last(tmp_path, "last") == "last" and capsys.readouterr().err == ""
    (tmp_path / "checkpoint_best").mkdir()
    (tmp_path / "checkpoint_best" / "rllib_checkpoint.json").write_text("{}")
    assert best_or_last(tmp_path, "best") == "best" and capsys.readouterr().err == ""
