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
