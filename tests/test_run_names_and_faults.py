"""Run names stay inside ``run.dir``, ``--overwrite`` removes only what the run wrote (its inventory,
never a prefix match), a run whose directory disappears stops at its next write, unusable run / output
directories are one-line errors, and a guard halt is one picklable ``TrainingHalted`` naming the
metric, its value, the threshold and the iteration. All in-process, no training."""
from __future__ import annotations

import os
import pickle
import shutil

import pytest

from rl_zerosync.config.settings import SettingsError, from_dict
from rl_zerosync.learner.training_guard import TrainingHalted
from rl_zerosync.rundir.lock import LOCK_FILE, RunDirError, check_writable_dir
from rl_zerosync.rundir.run_dir import INVENTORY_FILE, RunDir
from rl_zerosync.run.train import _halt_in


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", " run"])
def test_run_names_outside_their_own_folder_are_refused(name):
    with pytest.raises(SettingsError, match=r"cfg\.yaml: run\.name: got .*expected a non-empty name"):
        from_dict({"run": {"name": name}, "data": {"source": "synthetic"}}, source="cfg.yaml")


def test_plain_run_names_load():
    for name in ("run", "exp-1_a", "seed0", "fold2"):
        assert from_dict({"run": {"name": name}, "data": {"source": "synthetic"}}).run.name == name


def _written(run_dir: RunDir) -> None:
    """What a run writes, through RunDir's own record calls."""
    run_dir.record("settings.yaml", "metrics.jsonl", "tensorboard", "checkpoint", "checkpoint.tmp",
                   "checkpoint.1", "checkpoint_best", "evaluation")
    for name in ("checkpoint", "checkpoint.1", "checkpoint_best", "tensorboard", "evaluation"):
        (run_dir.path / name).mkdir()
        (run_dir.path / name / "f").write_text("x")
    (run_dir.path / "settings.yaml").write_text("run: {}\n")
    (run_dir.path / "metrics.jsonl").write_text('{"iteration": 1}\n')


def test_overwrite_removes_the_inventory_only(tmp_path, capsys):
    path = tmp_path / "r"
    with RunDir.claim(path) as run_dir:
        _written(run_dir)
    for other in ("checkpoint_experiment", "checkpointing_notes"):
        (path / other).mkdir()
    (path / "notes.txt").write_text("mine")
    assert sorted(os.listdir(path)) == sorted(["checkpoint", "checkpoint.1", "checkpoint_best", "checkpoint_experiment",
                                               "checkpointing_notes", "evaluation", INVENTORY_FILE, "metrics.jsonl",
                                               "notes.txt", "settings.yaml", "tensorboard"])
    with RunDir.claim(path, overwrite=True):
        assert sorted(os.listdir(path)) == ["checkpoint_experiment", "checkpointing_notes", "notes.txt", LOCK_FILE]
    assert "overwrite: removed" in capsys.readouterr().out


def test_overwrite_without_an_inventory_removes_exact_names_never_a_prefix(tmp_path):
    path = tmp_path / "r"
    for name in ("checkpoint", "checkpoint.2", "checkpoint_best.damaged", "checkpoint_experiment", "checkpoints"):
        (path / name).mkdir(parents=True)
    (path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    removed = RunDir(path).clear()
    assert removed == ["checkpoint", "checkpoint.2", "checkpoint_best.damaged", "metrics.jsonl"]
    assert sorted(os.listdir(path)) == ["checkpoint_experiment", "checkpoints"]


def test_an_unreadable_inventory_removes_nothing(tmp_path):
    path = tmp_path / "r"
    (path / "checkpoint").mkdir(parents=True)
    (path / INVENTORY_FILE).write_text('["../other"]')
    with pytest.raises(RunDirError, match="expected a list of file names"):
        RunDir(path).clear()
    assert (path / "checkpoint").is_dir()


def test_a_vanished_run_directory_stops_the_next_write(tmp_path):
    path = tmp_path / "r"
    run_dir = RunDir.claim(path)
    run_dir.open_log()
    run_dir.log({"training_iteration": 1, "x": 1.0})
    shutil.rmtree(path)
    with pytest.raises(RunDirError, match="disappeared during the run"):
        run_dir.log({"training_iteration": 2, "x": 1.0})
    run_dir.close()
    assert not path.exists()


def test_run_dir_that_is_a_file_or_read_only_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunDirError, match=r"run\.dir .*f is a file, expected a directory"):
        check_writable_dir(tmp_path / "f" / "r", "run.dir")
    check_writable_dir(tmp_path / "new" / "deeper", "run.dir")  # created later: fine
    assert not (tmp_path / "new").exists()
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(RunDirError, match=r"ro is not writable \(Permission denied \(EACCES\)\)"):
            check_writable_dir(ro / "r", "run.dir")


def test_training_halted_names_metric_value_threshold_iteration_and_pickles():
    err = TrainingHalted(check="divergence", update_index=4, loss=1.5, grad_norm=2.0, q_min=-3e12, q_max=5e12,
                         threshold=1e4)
    halted = pickle.loads(pickle.dumps(err)).at_iteration(7)
    msg = str(halted)
    assert msg.startswith("training halted by the divergence check at update 4: loss=1.5")
    assert "max |Q| = 5e+12 above the threshold 10000 (learner.divergence_threshold)" in msg
    assert msg.endswith("; iteration 7") and "\n" not in msg
    assert (halted.check, halted.iteration, halted.threshold) == ("divergence", 7, 1e4)
    wrapped = RuntimeError("rllib")
    wrapped.__cause__ = err
    assert _halt_in(wrapped) is err and _halt_in(ValueError("x")) is None


class _FakeAlgo:
    """What RunDir.save asks of an algorithm: an iteration and save_to_path."""

    def __init__(self, iteration: int):
        self.iteration = iteration

    def save_to_path(self, path, state=None):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "rllib_checkpoint.json"), "w") as f:
            f.write('{"it": %d}' % self.iteration)


def test_disk_full_in_a_checkpoint_write_names_the_path_and_keeps_the_previous(tmp_path, monkeypatch):
    import errno

    from rl_zerosync.rundir import checkpoints

    settings = from_dict({"data": {"source": "synthetic"}})
    with RunDir.claim(tmp_path / "r") as run_dir:
        run_dir.save(_FakeAlgo(1), settings)
        before = (tmp_path / "r" / "checkpoint" / "rllib_checkpoint.json").read_text()

        def full(path):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(checkpoints, "write_manifest", full)
        with pytest.raises(OSError, match=r"cannot write .*checkpoint\.tmp: No space left on device \(ENOSPC\); the previous "
                                          r".*checkpoint is intact") as err:
            run_dir.save(_FakeAlgo(2), settings)
        assert err.value.errno == errno.ENOSPC
    assert (tmp_path / "r" / "checkpoint" / "rllib_checkpoint.json").read_text() == before
    assert not (tmp_path / "r" / "checkpoint.tmp").exists()
    checkpoints.verify_checkpoint(tmp_path / "r" / "checkpoint")


def test_a_failed_write_is_one_line_with_exit_4(tmp_path, capsys, monkeypatch):
    import errno

    from rl_zerosync import cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, f"cannot write {tmp_path}/x: No space left on device")

    monkeypatch.setattr(cli, "_command", full)
    assert cli.main(["export", "--checkpoint", str(tmp_path)]) == cli.EXIT_WRITE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: write failed:") and "No space left" in err
    assert "(ENOSPC)" in err and f"{tmp_path}/x" in err and "[Errno" not in err


def test_os_errors_say_the_path_the_errno_name_and_the_systems_words(tmp_path, capsys, monkeypatch):
    """A raw OSError reaching the command line (no message of ours around it) and the wrapped write of a
    metrics table both name the path, the errno's symbol and its strerror."""
    import errno

    from rl_zerosync import cli
    from rl_zerosync.rundir.metrics_table import MetricsTable
    from rl_zerosync.rundir.os_errors import os_error_text

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "locked.csv"))

    monkeypatch.setattr(cli, "_command", denied)
    assert cli.main(["export", "--checkpoint", str(tmp_path)]) == cli.EXIT_WRITE
    err = capsys.readouterr().err
    assert err == f"error: write failed: {tmp_path / 'locked.csv'}: Permission denied (EACCES)\n"
    moved = OSError(errno.EXDEV, "Invalid cross-device link", "a", None, "b")
    assert os_error_text(moved) == "a -> b: Invalid cross-device link (EXDEV)"
    assert os_error_text(OSError("no errno")) == "no errno"

    table = MetricsTable(tmp_path / "pop").open()

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    table._jsonl = Full()
    with pytest.raises(OSError, match=r"cannot write .*metrics\.jsonl: No space left on device \(ENOSPC\); rows "
                                      r"before iteration 3 are kept") as raised:
        table.write([{"member": 0, "iteration": 3, "x": 1.0}])
    assert raised.value.errno == errno.ENOSPC
    table.close()


def test_evaluate_out_that_is_a_file_is_one_line_before_loading(tmp_path, capsys):
    from rl_zerosync import cli

    (tmp_path / "out.txt").write_text("x")
    rc = cli.main(["evaluate", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "out.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "evaluate --out" in err and "is a file, expected a directory" in err


def test_negative_seeds_reach_their_own_check():
    from rl_zerosync import cli

    assert cli._joined_values(["train", "--seeds", "-1,2"]) == ["train", "--seeds=-1,2"]
    from rl_zerosync.run.seeds import parse_seeds

    with pytest.raises(ValueError, match=r"--seeds: expected distinct comma-separated ints >= 0, got '-1,2'"):
        parse_seeds("-1,2")
