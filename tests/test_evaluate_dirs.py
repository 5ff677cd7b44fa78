"""Evaluations never overwrite one another (CPU): ``evaluate --data FILE`` without ``--out`` goes to
``<run>/evaluation_<stem>/`` and leaves the run's ``evaluation/`` as it was; every evaluation
directory is written whole into ``<dir>.tmp`` and swapped in (no stale file of an earlier
evaluation, a failure part way leaves the previous one intact and no ``.tmp``); an ``--out`` that is
not an evaluation directory (other files, the run directory, a checkpoint) is refused with one line.

The tiny dated-CSV run of ``test_evaluate_outputs`` (1 iteration, in process) gives the checkpoint;
every evaluation runs through the CLI's ``main`` in this process."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from rl_zerosync.rundir.lock import RunDirError
from rl_zerosync.rundir.run_dir import INVENTORY_FILE
from test_evaluate_outputs import N_ROWS, TRAIN_FRACTION, _evaluate, run  # noqa: F401 (the module fixture)


def _snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _tail_csv(run, name: str) -> Path:
    """The training file's rows after its training period, same columns, as ``name``."""
    path = run["tmp"] / name
    run["frame"].iloc[int(N_ROWS * TRAIN_FRACTION) + 5:].to_csv(path, index=False)
    return path


def test_data_without_out_goes_to_its_own_directory(run, capsys):
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]))
    assert rc == 0, err
    own = run["dir"] / "evaluation"
    before = _snapshot(own)
    assert "metrics.json" in before and "bars_test.csv" in before
    data = _tail_csv(run, "other prices (2015).csv")
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(data))
    assert rc == 0, err
    assert _snapshot(own) == before  # the run's own evaluation is untouched
    out = run["dir"] / "evaluation_other_prices__2015_"
    names = set(os.listdir(out))
    assert {"metrics.json", "report.png", "bars_all.csv", "portfolio_all.csv"} <= names
    assert not any("test" in n or "validation" in n for n in names), names
    report = json.loads((out / "metrics.json").read_text())
    assert report["outputs"]["metrics_json"] == str(out / "metrics.json")
    assert report["outputs"]["all"]["bars_csv"] == str(out / "bars_all.csv")
    lines = stdout.strip().splitlines()  # the step lines, where it went, the result line, the verdict
    assert f"{out}/" in lines[-3] and "'other prices (2015)' made safe for a directory name" in lines[-3]
    assert f"report {out / 'report.png'}" in lines[-2] and lines[-1].startswith("verdict on all ")
    assert not out.with_name(out.name + ".tmp").exists() and not out.with_name(out.name + ".old").exists()
    # the run directory's inventory has it, so --overwrite of the run removes it with the run
    inventory = json.loads((run["dir"] / INVENTORY_FILE).read_text())
    assert {out.name, out.name + ".tmp", out.name + ".old", "evaluation.tmp", "evaluation.old"} <= set(inventory)
    # another file of the same stem does not replace that evaluation
    (run["tmp"] / "elsewhere").mkdir()
    same_stem = _tail_csv(run, "elsewhere/other prices (2015).csv")
    kept = _snapshot(out)
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(same_stem))
    assert rc == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "holds the evaluation of" in err and "--out" in err
    assert _snapshot(out) == kept


def test_a_second_evaluation_leaves_no_stale_file(run, capsys):
    out = run["tmp"] / "ev_twice"
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out))
    assert rc == 0, err
    assert (out / "bars_validation.csv").is_file() and (out / "bars_test.csv").is_file()
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(_tail_csv(run, "b.csv")),
                           "--out", str(out))
    assert rc == 0, err
    names = set(os.listdir(out))
    assert "bars_all.csv" in names and not any("validation" in n or "test" in n for n in names), names
    assert json.loads((out / "metrics.json").read_text())["segments"].keys() == {"all"}
    assert not out.with_name("ev_twice.tmp").exists() and not out.with_name("ev_twice.old").exists()


def test_a_failure_while_writing_leaves_the_previous_evaluation(run, capsys, monkeypatch):
    out = run["tmp"] / "ev_fail"
    rc, _, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out))
    assert rc == 0, err
    before = _snapshot(out)

    def full_disk(*args, **kwargs):  # after the per-bar series are written
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "report.png"))

    monkeypatch.setattr("rl_zerosync.evaluation.report_plot.plot_report", full_disk)
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--data", str(_tail_csv(run, "c.csv")),
                                "--out", str(out))
    assert rc == 4 and "No space left on device" in err
    assert _snapshot(out) == before
    assert not (run["tmp"] / "ev_fail.tmp").exists() and not (run["tmp"] / "ev_fail.old").exists()


@pytest.mark.parametrize("where", ["foreign", "run_dir", "checkpoint", "foreign_tmp"])
def test_out_that_is_not_an_evaluation_directory_is_refused(run, capsys, where):
    if where == "foreign":
        out = run["tmp"] / "mine"
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("keep me")
        (out / "metrics.json").write_text('{"loss": 1}')
    elif where == "foreign_tmp":
        out = run["tmp"] / "ev_new"
        (run["tmp"] / "ev_new.tmp").mkdir(exist_ok=True)
        (run["tmp"] / "ev_new.tmp" / "draft.csv").write_text("x")
    elif where == "run_dir":
        out = run["dir"]
    else:
        out = run["dir"] / "checkpoint"
    watched = out.with_name(out.name + ".tmp") if where == "foreign_tmp" else out
    before = _snapshot(watched)
    rc, stdout, err = _evaluate(capsys, "--checkpoint", str(run["dir"]), "--out", str(out))
    lines = err.strip().splitlines()
    assert rc == 2 and stdout == "" and len(lines) == 1, err
    assert lines[0].startswith(f"error: evaluate --out {out}:") and "expected an evaluation directory" in lines[0]
    assert {"foreign": "notes.txt", "run_dir": "run directory", "checkpoint": "checkpoint directory",
            "foreign_tmp": "draft.csv"}[where] in lines[0]
    assert _snapshot(watched) == before
    assert not (where == "foreign_tmp" and out.exists())


def test_written_whole_replaces_a_killed_evaluations_leftovers(tmp_path):
    from rl_zerosync.evaluation.eval_dir import MARKER, check_out_dir, written_whole

    out = tmp_path / "ev"
    for name, files in (("ev", ["metrics.json", "bars_test.csv"]), ("ev.tmp", ["bars_test.csv"]),
                        ("ev.old", ["report.png"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / MARKER).write_text("{}")
        for f in files:
            (tmp_path / name / f).write_text("old")
    check_out_dir(out, tmp_path / "run")  # all three are an evaluation's: accepted
    with written_whole(out, {"checkpoint": "c", "data": None}) as tmp:
        assert tmp == tmp_path / "ev.tmp" and os.listdir(tmp) == [MARKER]
        (tmp / "bars_all.csv").write_text("new")
    assert sorted(os.listdir(tmp_path)) == ["ev"] and sorted(os.listdir(out)) == [MARKER, "bars_all.csv"]
    with pytest.raises(RuntimeError):
        with written_whole(out, {}) as tmp:
            (tmp / "bars_x.csv").write_text("partial")
            raise RuntimeError("walk failed")
    assert sorted(os.listdir(tmp_path)) == ["ev"] and (out / "bars_all.csv").read_text() == "new"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match=r"notes\.txt.*expected an evaluation directory"):
        check_out_dir(out, tmp_path / "run")


def test_safe_stem():
    from rl_zerosync.evaluation.eval_dir import safe_stem

    assert safe_stem("data/prices.csv") == "prices"
    assert safe_stem("a b/x y (1).parquet") == "x_y__1_"
    assert safe_stem("GOOGL-1d.v2.csv") == "GOOGL-1d.v2"
    assert safe_stem("zürich.csv") == "z_rich"
    assert len(safe_stem("x" * 300 + ".csv")) == 200
