"""Faults and bad input, round three, without training: one writer per evaluation directory (a second
is refused by name, replacing another checkpoint's evaluation is warned), a damaged metrics row on
resume (refused when it would leave a gap, named when it is dropped), messages that say what is true
(a deleted run directory, a deleted lock, a failed checkpoint write), a run name too long for a
directory, ``export --out <a directory>``, data paths that are no file (``~``, a symbolic link loop, a
link to nothing), a constant price, ISO timestamps of several spellings, the split threshold."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rl_zerosync.config.settings import SettingsError, from_dict
from rl_zerosync.data.loaders import load_market
from rl_zerosync.data.market import DEFAULT_MAX_ABS_LOG_RETURN, check_log_returns
from rl_zerosync.evaluation.eval_dir import MARKER, EvaluationBusyError, lock_path, written_whole
from rl_zerosync.rundir.checkpoints import MARKER as CKPT_MARKER
from rl_zerosync.rundir.lock import RunDirError
from rl_zerosync.rundir.run_dir import METRICS_FILE, RunDir
from rl_zerosync.serving.export import export_policy


# ---- one writer per evaluation directory -------------------------------------------------------------

def test_a_second_evaluation_of_one_directory_is_refused_by_name_and_the_first_completes(tmp_path):
    out = tmp_path / "ev"
    with written_whole(out, {"checkpoint": "a", "data": None}) as tmp:
        (tmp / "metrics.json").write_text("{}")
        assert lock_path(out).read_text().strip() == str(os.getpid())
        with pytest.raises(EvaluationBusyError, match=rf"{out}: another evaluation \(pid {os.getpid()}\) is "
                                                      r"writing this directory now .*--out DIR"):
            with written_whole(out, {"checkpoint": "b", "data": None}):
                pytest.fail("a second writer got in")
        assert (tmp / "metrics.json").is_file()  # the refused one removed nothing of the first's
    assert json.loads((out / MARKER).read_text())["checkpoint"] == "a"
    assert sorted(os.listdir(tmp_path)) == ["ev"]  # lock file removed, no .tmp / .old


def test_a_killed_writers_lock_file_is_taken_over(tmp_path):
    out = tmp_path / "ev"
    lock_path(out).write_text("12345\n")  # left by a killed evaluation: no flock held on it
    with written_whole(out, {"checkpoint": "a", "data": None}) as tmp:
        (tmp / "metrics.json").write_text("{}")
    assert (out / "metrics.json").is_file() and not lock_path(out).exists()


def test_replacing_an_evaluation_of_another_checkpoint_is_warned(tmp_path, capsys):
    out = tmp_path / "ev"
    for ckpt in ("run/checkpoint_best", "run/checkpoint_best", "run/checkpoint"):
        with written_whole(out, {"checkpoint": ckpt, "data": None}) as tmp:
            (tmp / "metrics.json").write_text("{}")
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert f"{out}: replacing the evaluation of another checkpoint" in err
    assert "run/checkpoint_best -> run/checkpoint" in err


# ---- a damaged metrics row on resume ------------------------------------------------------------------

def _metrics(path: Path, lines: list[str]) -> RunDir:
    path.mkdir(parents=True, exist_ok=True)
    (path / METRICS_FILE).write_text("".join(line + "\n" for line in lines))
    return RunDir(path)


def _row(i: int) -> str:
    return json.dumps({"iteration": i, "x": float(i)})


def test_a_damaged_row_among_the_kept_ones_is_refused_naming_line_and_iteration(tmp_path):
    lines = [_row(1), _row(2), '{"iteration": 3, "x": 3.0', _row(4), _row(5)]
    run_dir = _metrics(tmp_path / "r", lines)
    before = (run_dir.path / METRICS_FILE).read_text()
    with pytest.raises(RunDirError, match=r"metrics\.jsonl, line 3: a damaged row .* resumed iteration 4; resuming "
                                          r"would leave iteration 3 without a row"):
        run_dir.truncate_metrics(4)
    assert (run_dir.path / METRICS_FILE).read_text() == before  # nothing changed


def test_a_torn_row_after_the_checkpoint_is_dropped_and_named(tmp_path, capsys):
    run_dir = _metrics(tmp_path / "r", [_row(1), _row(2), _row(3), '{"iterat'])
    assert run_dir.truncate_metrics(2) == 2  # row 3 and the torn line
    assert "dropped 1 damaged line(s) (line 4; every iteration up to 2 keeps its row)" in capsys.readouterr().err
    its = [json.loads(x)["iteration"] for x in (run_dir.path / METRICS_FILE).read_text().splitlines()]
    assert its == [1, 2]


def test_a_damaged_duplicate_whose_iteration_has_a_row_is_dropped(tmp_path, capsys):
    run_dir = _metrics(tmp_path / "r", [_row(1), "garbage", _row(2)])
    run_dir.truncate_metrics(2)
    assert "line 2" in capsys.readouterr().err
    assert [json.loads(x)["iteration"] for x in (run_dir.path / METRICS_FILE).read_text().splitlines()] == [1, 2]


# ---- messages that say what is true --------------------------------------------------------------------

def test_a_deleted_lock_keeps_the_files_and_says_so(tmp_path):
    path = tmp_path / "r"
    run_dir = RunDir.claim(path)
    run_dir.open_log()
    run_dir.log({"training_iteration": 1, "x": 1.0})
    (path / "run.lock").unlink()
    with pytest.raises(RunDirError) as err:
        run_dir.log({"training_iteration": 2, "x": 1.0})
    text = str(err.value)
    assert "run.lock was deleted during the run" in text and "the files written so far stay" in text
    assert "gone" not in text
    run_dir.close()
    assert (path / METRICS_FILE).is_file()


def test_a_deleted_run_directory_is_named_as_gone(tmp_path):
    path = tmp_path / "r"
    run_dir = RunDir.claim(path)
    shutil.rmtree(path)
    with pytest.raises(RunDirError, match="the run directory disappeared during the run"):
        run_dir.check_present()
    assert "is gone" in run_dir._kept("checkpoint") and "intact" not in run_dir._kept("checkpoint")
    run_dir.close()


def test_a_failed_checkpoint_write_says_intact_only_when_a_previous_one_is_there(tmp_path):
    run_dir = RunDir(tmp_path)
    assert run_dir._kept("checkpoint") == "no earlier checkpoint/ was written"
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / CKPT_MARKER).write_text("{}")
    assert run_dir._kept("checkpoint") == f"the previous {tmp_path / 'checkpoint'} is intact"


def test_a_run_name_too_long_for_a_directory_is_a_named_error():
    with pytest.raises(SettingsError, match=r"run\.name: got a name of 300 characters \(300 bytes, starting "
                                            r"'aaaa.*expected at most 200 bytes"):
        from_dict({"run": {"name": "a" * 300}}, source="c.yaml")
    from_dict({"run": {"name": "a" * 200}}, source="c.yaml")


def test_export_out_that_is_a_directory_is_named_before_loading(tmp_path):
    with pytest.raises(ValueError, match=rf"export --out {tmp_path}: is a directory; expected a model file name, "
                                         rf"e\.g\. {tmp_path}/policy\.pt"):
        export_policy(tmp_path / "no-such-run", out=tmp_path)


# ---- data paths and prices -----------------------------------------------------------------------------

def _csv(path: Path, close, dates=None) -> Path:
    n = len(close)
    dates = dates if dates is not None else pd.bdate_range("2015-01-05", periods=n).strftime("%Y-%m-%d")
    pd.DataFrame({"Date": dates, "Close": close}).to_csv(path, index=False)
    return path


def _walk(n: int, seed: int = 0) -> np.ndarray:
    return 100.0 * np.exp(np.cumsum(np.random.default_rng(seed).normal(0.0, 0.01, n)))


def test_a_symlink_loop_a_dangling_link_and_tilde_are_named_as_what_they_are(tmp_path):
    loop = tmp_path / "loop.csv"
    os.symlink(loop, loop)
    with pytest.raises(ValueError, match=r"loop\.csv: a loop of symbolic links \(ELOOP\)"):
        load_market([str(loop)])
    dangling = tmp_path / "gone.csv"
    os.symlink(tmp_path / "nothing.csv", dangling)
    with pytest.raises(ValueError, match=r"gone\.csv: a symbolic link to .*nothing\.csv, which does not exist"):
        load_market([str(dangling)])
    home = os.path.expanduser("~")
    with pytest.raises(ValueError, match=r"~/no_such_dir_x/a\.csv: not found \('~' is not expanded in data\.paths; "
                                         rf"write the full path, e\.g\. {home}/no_such_dir_x/a\.csv\)"):
        load_market(["~/no_such_dir_x/a.csv"])


def test_a_constant_price_is_refused(tmp_path):
    path = _csv(tmp_path / "flat.csv", np.full(300, 100.0))
    with pytest.raises(ValueError, match=r"flat\.csv.*column 'Close': every one of the 300 closes is 100\.0 "
                                         r"\(zero variance\)"):
        load_market([str(path)])


def test_iso_timestamps_of_several_spellings_in_one_column_are_read(tmp_path):
    n = 300
    days = pd.bdate_range("2015-01-05", periods=n)
    dates = [d.strftime("%Y-%m-%d") if i % 3 == 0 else d.strftime("%Y-%m-%dT00:00:00Z") if i % 3 == 1
             else d.strftime("%Y-%m-%d 00:00:00+00:00") for i, d in enumerate(days)]
    market = load_market([str(_csv(tmp_path / "iso.csv", _walk(n), dates))], spread_bps=5.0)
    assert (np.asarray(market.timestamps[0]) == days.to_numpy().astype("datetime64[ns]")).all()
    mixed = [d.strftime("%Y-%m-%d") if i != 50 else d.strftime("%d/%m/%Y") for i, d in enumerate(days)]
    with pytest.raises(ValueError, match=r"row 50: cannot parse timestamp"):
        load_market([str(_csv(tmp_path / "mixed.csv", _walk(n), mixed))], spread_bps=5.0)


def test_an_unadjusted_split_of_x1_6_is_caught_by_the_default_threshold(tmp_path):
    assert DEFAULT_MAX_ABS_LOG_RETURN == 0.4 and np.log(1.5) > DEFAULT_MAX_ABS_LOG_RETURN > np.log(1.25)
    close = _walk(300)
    close[150:] = close[150:] / 1.6  # an 8:5 split left unadjusted
    path = _csv(tmp_path / "split.csv", close)
    with pytest.raises(ValueError, match=r"row 150: .*\(x0\.62[0-9]*\), beyond data\.max_abs_log_return = 0\.4 "
                                         r"per bar: a spike or a split left unadjusted\?"):
        load_market([str(path)], spread_bps=5.0, max_abs_log_return=DEFAULT_MAX_ABS_LOG_RETURN)
    check_log_returns("x", np.array([100.0, 125.0]), DEFAULT_MAX_ABS_LOG_RETURN)  # 5:4 passes


def test_a_full_disk_during_an_evaluation_names_the_path_and_keeps_the_previous(tmp_path):
    import errno

    out = tmp_path / "ev"
    with pytest.raises(OSError, match=rf"cannot write the evaluation into {tmp_path}/ev\.tmp: No space left on "
                                      rf"device \(ENOSPC\); nothing of it was left \({out} not made\)"):
        with written_whole(out, {"checkpoint": "a", "data": None}):
            raise OSError(errno.ENOSPC, "No space left on device")
    with written_whole(out, {"checkpoint": "a", "data": None}) as tmp:
        (tmp / "metrics.json").write_text("{}")
    with pytest.raises(OSError, match=rf"into {tmp_path}/ev\.tmp/bars_test\.csv: No space left on device \(ENOSPC\); the "
                                      rf"previous {out} is as it was"):
        with written_whole(out, {"checkpoint": "a", "data": None}) as tmp:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "bars_test.csv"))
    assert sorted(os.listdir(tmp_path)) == ["ev"] and (out / "metrics.json").is_file()
