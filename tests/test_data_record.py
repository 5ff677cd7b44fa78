"""A data file changed under its path is noticed (CPU, no training, no Ray).

A run on file data records each file's size and SHA-256 and each segment's bars with their first and
last timestamps (``data_record.json``, in the run directory and in every checkpoint). ``train
--resume``, ``evaluate --walk-forward --resume`` and ``evaluate`` of the run's own segments refuse a
changed file by name (exit 2); ``evaluate --data FILE`` of the changed file checks its overlap with
the recorded training period, not one re-derived from the file as it is now.

The checkpoint here is made directly (a fresh Q module saved where ``evaluate`` loads it, the run's
settings, its data record and a manifest), as ``tests/test_export.py`` makes its flat checkpoints.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from rl_zerosync import cli
from rl_zerosync.config.settings import from_dict
from rl_zerosync.data.identity import (
    DATA_RECORD_FILE, DataChangedError, changed_files, check_unchanged, data_record, read_record, training_period,
)
from rl_zerosync.rundir.run_dir import RunDir
from tiny_run import tiny_raw

BARS = 1200
CUT = 300
FEATURES = {"warmup": 32, "median_window": 64}


def _write_csv(path: Path, n: int = BARS) -> Path:
    rng = np.random.default_rng(5)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    pd.DataFrame({"Date": pd.bdate_range("2010-01-04", periods=n).strftime("%Y-%m-%d"), "Close": close,
                  "High": close * 1.004, "Low": close * 0.996}).to_csv(path, index=False)
    return path


def _drop_last(path: Path, rows: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-rows]))


def _raw(tmp: Path, csv: Path, **run) -> dict:
    raw = tiny_raw({"dir": str(tmp), "name": "r", "iterations": 2, "evaluate": False, **run})
    raw["data"] = {"source": "csv", "paths": [str(csv)], "features": FEATURES,
                   "columns": {"timestamp": "Date", "close": "Close", "high": "High", "low": "Low"}}
    return raw


def _fabricate_run(raw: dict) -> Path:
    """A run directory as ``train`` leaves it: settings.yaml and data_record.json (through
    ``RunDir.write_settings``), and ``checkpoint/`` holding a fresh module, the settings, the data
    record, a run state and the manifest."""
    from rl_zerosync.data import make_market
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.envs.gym_twin import observation_space_for
    from rl_zerosync.rundir.checkpoints import MODULE_PATH
    from rl_zerosync.module import make_module_spec
    from rl_zerosync.rundir.checkpoints import write_manifest
    from rl_zerosync.rundir.lock import LOCK_FILE

    settings = from_dict(raw)
    with RunDir.claim(settings.run_dir) as run_dir:
        run_dir.write_settings(settings)
    assert not (settings.run_dir / LOCK_FILE).exists()
    plain = settings.to_dict()
    space = observation_space_for(make_market(plain["data"], "train"), EnvParams.from_dict(plain["env"]))
    torch.manual_seed(3)
    module = make_module_spec(action_mode="routed", hidden=[16, 16], observation_space=space).build()
    ckpt = settings.run_dir / "checkpoint"
    module.save_to_path(str(ckpt / MODULE_PATH))
    (ckpt / "rllib_checkpoint.json").write_text("{}")
    (ckpt / "settings.yaml").write_text(yaml.safe_dump(plain, sort_keys=False))
    shutil.copy(settings.run_dir / DATA_RECORD_FILE, ckpt / DATA_RECORD_FILE)
    (ckpt / "run_state.json").write_text(json.dumps({"iteration": 2}))
    write_manifest(ckpt)
    return settings.run_dir


@pytest.fixture
def run(tmp_path):
    csv = _write_csv(tmp_path / "bars.csv")
    raw = _raw(tmp_path, csv)
    return {"raw": raw, "csv": csv, "dir": _fabricate_run(raw), "tmp": tmp_path}


def test_the_record_holds_files_segments_and_the_training_period(tmp_path):
    csv = _write_csv(tmp_path / "bars.csv")
    cfg = _raw(tmp_path, csv)["data"]
    record = data_record(cfg)
    (f,) = record["files"]
    assert f["path"] == str(csv) and f["size"] == csv.stat().st_size and len(f["sha256"]) == 64
    assert set(record["segments"]) == {"train", "validation", "test"}
    train, test = record["segments"]["train"][0], record["segments"]["test"][0]
    assert train["asset"] == "bars" and train["count"] == train["bars"][1] - train["bars"][0] > 0
    assert test["bars"][1] == BARS and test["last"] == pd.Timestamp(pd.bdate_range("2010-01-04", periods=BARS)[-1])\
        .isoformat()
    assert record["training_period"] == [train["first"], train["last"]]
    assert training_period(record) == (pd.Timestamp(train["first"]), pd.Timestamp(train["last"]))
    assert data_record({"source": "synthetic"}) is None
    assert changed_files(record) == []
    check_unchanged(record, "never")


@pytest.mark.parametrize("how, says", [
    ("truncate", "changed since the run recorded it"),
    ("same size", "changed since the run recorded it"),
    ("remove", "is missing"),
])
def test_a_changed_same_size_or_missing_file_is_named(tmp_path, how, says):
    csv = _write_csv(tmp_path / "bars.csv")
    record = data_record(_raw(tmp_path, csv)["data"])
    if how == "truncate":
        _drop_last(csv, CUT)
    elif how == "same size":  # one digit of one price: the size alone would not tell
        text = csv.read_text()
        i = text.index(".", len(text) // 2) + 1
        csv.write_text(text[:i] + ("1" if text[i] != "1" else "2") + text[i + 1:])
        assert csv.stat().st_size == record["files"][0]["size"]
    else:
        csv.unlink()
    with pytest.raises(DataChangedError) as err:
        check_unchanged(record, "do something")
    msg = str(err.value)
    assert msg.startswith(f"data file {csv} ") and says in msg and msg.endswith(": do something") and "\n" not in msg


def test_train_resume_refuses_a_changed_file_before_anything_is_written(run, capsys):
    cfg = run["tmp"] / "c.yaml"
    cfg.write_text(yaml.safe_dump(run["raw"]))
    _drop_last(run["csv"], CUT)
    before = {p.name: p.stat().st_mtime_ns for p in run["dir"].iterdir()}
    rc = cli.main(["train", "--config", str(cfg), "--resume", str(run["dir"])])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert rc == cli.EXIT_INPUT and len(lines) == 1, err
    assert f"data file {run['csv']} changed since the run recorded it" in lines[0] and "--resume" in lines[0]
    assert {p.name: p.stat().st_mtime_ns for p in run["dir"].iterdir()} == before
    ray = __import__("sys").modules.get("ray")
    assert ray is None or not ray.is_initialized()


def test_evaluate_refuses_the_runs_own_segments_of_a_changed_file(run, capsys):
    out = run["tmp"] / "ev"
    assert cli.main(["evaluate", "--checkpoint", str(run["dir"]), "--which", "last", "--out", str(out)]) == 0
    report = json.loads((out / "metrics.json").read_text())
    assert report["overlap"]["training_period_source"] == "recorded by the run"
    assert report["overlap"]["overlapping_bars"] == 0
    test_sharpe = report["summary"]["sharpe"]
    _drop_last(run["csv"], CUT)  # the repro: 1,200 bars trained on, the last 300 removed
    capsys.readouterr()
    again = run["tmp"] / "ev_again"
    rc = cli.main(["evaluate", "--checkpoint", str(run["dir"]), "--which", "last", "--out", str(again)])
    err = capsys.readouterr().err
    assert rc == cli.EXIT_INPUT and err.count("\n") == 1, err
    assert err.startswith(f"error: data file {run['csv']} changed since the run recorded it") and "--data FILE" in err
    assert not again.exists()  # refused before anything is walked or written
    assert json.loads((out / "metrics.json").read_text())["summary"]["sharpe"] == test_sharpe


def test_evaluate_data_of_the_changed_file_counts_bars_inside_the_recorded_training_period(run, capsys):
    _drop_last(run["csv"], CUT)
    out = run["tmp"] / "ev_data"
    rc = cli.main(["evaluate", "--checkpoint", str(run["dir"]), "--which", "last", "--data", str(run["csv"]),
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    overlap = json.loads((out / "metrics.json").read_text())["overlap"]
    record = read_record(run["dir"] / "checkpoint")
    assert overlap["training_period"][1] == pd.Timestamp(record["training_period"][1]).strftime("%Y-%m-%d")
    assert overlap["training_period_source"] == "recorded by the run"
    # the training bars of the 1,200-bar file are all in the 900-bar file: every one of them overlaps
    trained = record["segments"]["train"][0]["count"]
    assert overlap["overlapping_bars"] >= trained - 1 and "overlaps the run's training period" in err


def test_walk_forward_resume_refuses_a_changed_file(tmp_path, monkeypatch, capsys):
    from rl_zerosync.run import train as train_module
    from rl_zerosync.run.walkforward import _fold_settings, fold_windows

    csv = _write_csv(tmp_path / "bars.csv")
    raw = _raw(tmp_path, csv, name="wf")
    s = from_dict(raw)
    fold0 = _fold_settings(s, 0, fold_windows(2, s.data.typed.split)[0])
    with RunDir.claim(fold0.run_dir) as rd:  # fold 0 began: its settings and data record written
        rd.write_settings(fold0)
    assert read_record(fold0.run_dir)["segments"]["train"][0]["bars"][1] < BARS
    monkeypatch.setattr(train_module, "train", lambda *a, **k: pytest.fail("a fold trained"))
    _drop_last(csv, 50)
    cfg = tmp_path / "wf.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    rc = cli.main(["evaluate", "--walk-forward", "2", "--config", str(cfg), "--resume"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert rc == cli.EXIT_INPUT and len(lines) == 1, err
    assert f"data file {csv} changed since the run recorded it" in lines[0]
    assert not (tmp_path / "wf" / "walk_forward.json").exists()
