"""Fail fast before Ray: bad configs, bad data and impossible GPU requests end ``rl-zerosync train``
with exit code 2 and one line on stderr naming the thing, in seconds, before Ray starts.

Most cases run through ``cli.main([...])`` in this process (``train()`` is replaced by a function
that fails the test, and Ray must not be initialized afterwards); a few run as real subprocesses
(``python -m rl_zerosync train --config ...``) for the wall-time claim.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

# Imported at collection, not inside a capsys test: Progress's default stream and Ray's log handlers
# bind sys.stdout / sys.stderr at import, and a test's captured streams are closed after it.
import rl_zerosync.env_runner  # noqa: F401,E402  (imports Ray and RLlib)
import rl_zerosync.run.train  # noqa: F401,E402
from rl_zerosync import cli
from rl_zerosync.run.preflight import PreflightError, _gpus_needed, check, check_gpus
from rl_zerosync.config.settings import from_dict, load

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 10.0
SUBPROCESS_LIMIT_S = 30.0
"""A fresh interpreter imports torch and the data stack first (~5 s on an idle 2-core machine, more
with the suite's other worker busy); a run that got as far as Ray or training takes minutes."""


def _write_csv(path: Path, n: int = 600, edit=None) -> Path:
    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    dates = [str(d) for d in np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-01-01") + n)]
    rows = [[d, repr(float(c))] for d, c in zip(dates, close)]
    if edit is not None:
        edit(rows)
    path.write_text("Date,Close\n" + "".join(",".join(r) + "\n" for r in rows))
    return path


def _set(rows, i, col, value):
    rows[i][col] = value


def _write_bars(path: Path, n: int = 600, row: int = 40, edit=None) -> Path:
    """Date, Open, High, Low, Close, Bid, Ask bars; ``edit(frame, row)`` breaks one row."""
    import pandas as pd

    rng = np.random.default_rng(1)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    df = pd.DataFrame({"Date": pd.date_range("2020-01-01", periods=n, freq="D").strftime("%Y-%m-%d"),
                       "Open": close, "High": close * 1.01, "Low": close * 0.99, "Close": close,
                       "Bid": close * 0.9995, "Ask": close * 1.0005})
    if edit is not None:
        edit(df, row)
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("preflight_data")
    _write_csv(d / "good.csv")
    _write_csv(d / "long.csv", n=1000)
    _write_csv(d / "short400.csv", n=400)
    _write_csv(d / "tiny.csv", n=50)
    _write_csv(d / "nan.csv", edit=lambda r: _set(r, 5, 1, "nan"))
    _write_csv(d / "zero.csv", edit=lambda r: _set(r, 7, 1, "0"))
    _write_csv(d / "unsorted.csv", edit=lambda r: r.__setitem__(slice(10, 12), [r[11], r[10]]))
    _write_csv(d / "dup.csv", edit=lambda r: _set(r, 12, 0, r[11][0]))
    _write_csv(d / "spike.csv", edit=lambda r: _set(r, 300, 1, "1e12"))
    _write_bars(d / "above_high.csv", edit=lambda f, i: f.__setitem__("Close", f["Close"].where(f.index != i, f["High"] * 1.05)))
    _write_bars(d / "bid_ask.csv", edit=lambda f, i: f.__setitem__("Bid", f["Bid"].where(f.index != i, f["Ask"] * 1.01)))
    _write_bars(d / "bool_close.csv", edit=lambda f, i: f.__setitem__("Close", f.index % 2 == 0))
    _write_bars(d / "epoch_seconds.csv", edit=lambda f, i: f.__setitem__("Date", np.arange(len(f)) + 1_600_000_000))
    (d / "other").mkdir()
    _write_csv(d / "other" / "good.csv", n=610)  # another file of stem "good"
    _write_bars(d / "hourly.csv", edit=lambda f, i: f.__setitem__(
        "Date", pd.date_range("2020-01-01", periods=len(f), freq="h").strftime("%Y-%m-%d %H:%M")))
    _write_csv(d / "y2262.csv", edit=lambda r: [row.__setitem__(0, str(np.datetime64("2261-01-01") + i))
                                               for i, row in enumerate(r)])  # past 2262-04-11 at row 466
    (d / "a_folder.csv").mkdir()
    (d / "a_file").write_text("not a folder")
    (d / "noclose.csv").write_text((d / "good.csv").read_text().replace("Date,Close", "Date,Price", 1))
    # fourth round: prices that never move or jump by a split, paths that are no file, unreadable files
    _write_csv(d / "flat.csv", edit=lambda r: [row.__setitem__(1, "100.0") for row in r])
    _write_csv(d / "split.csv", edit=lambda r: [row.__setitem__(1, repr(float(row[1]) / 1.6)) for row in r[300:]])
    _write_csv(d / "negative.csv", edit=lambda r: _set(r, 9, 1, "-3.5"))
    _write_csv(d / "inf.csv", edit=lambda r: _set(r, 11, 1, "inf"))
    _write_csv(d / "text_close.csv", edit=lambda r: _set(r, 13, 1, "n/a-price"))
    _write_csv(d / "bad_date.csv", edit=lambda r: _set(r, 20, 0, "2020-02-30"))
    (d / "loop.csv").symlink_to(d / "loop.csv")
    (d / "dangling.csv").symlink_to(d / "no_such_target.csv")
    (d / "empty.csv").write_text("")
    (d / "header_only.csv").write_text("Date,Close\n")
    (d / "semicolons.csv").write_text((d / "good.csv").read_text().replace(",", ";"))
    (d / "binary.csv").write_bytes(bytes(range(256)) * 8)
    return d


def _csv_cfg(data_dir: Path, file: str = "good.csv", **sections) -> dict:
    cfg = {
        "run": {"name": "pf", "dir": str(data_dir / "runs"), "iterations": 1},
        "algo": {"num_gpus_per_learner": 0, "num_envs_per_runner": 16, "rollout_length": 32},
        "data": {"source": "csv", "paths": [str(data_dir / file)],
                 "columns": {"timestamp": "Date", "close": "Close"}, "spread_bps": 5.0},
        "env": {"episode_len": 32, "window": 8},
        "runner": {"device": "cpu"},
    }
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def _yaml(path: Path, cfg) -> Path:
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture
def no_train(monkeypatch):
    """``train()`` must never be reached by a failing config; a passing one records its settings."""
    import rl_zerosync.run.train as train_module

    seen = []

    def fake_train(settings, *args, **kwargs):
        seen.append(settings)
        return {}

    monkeypatch.setattr(train_module, "train", fake_train)
    monkeypatch.setattr(train_module, "init_ray", lambda *a, **k: pytest.fail("Ray started"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return seen


def _main(capsys, *argv: str) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    rc = cli.main(list(argv))
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    return rc, out, err, wall


def _assert_one_line_error(rc: int, err: str, wall: float, needles) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert wall < LIMIT_S, wall
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


def _with_text(cfg: dict, text: str) -> str:
    """``cfg`` as YAML with ``text`` (more YAML lines) after it."""
    return yaml.safe_dump(cfg, sort_keys=False) + text


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """``model:`` whose ``hidden`` is ``width ** levels`` ints written in about a kilobyte of nested aliases."""
    parts = ["&l0 [" + ", ".join(["16"] * width) + "]"]
    parts += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "model:\n  hidden: [" + ", ".join(parts) + "]\n"


# (id, config (dict from data_dir, or raw YAML text), needles in the error line)
CASES = [
    ("yaml-type", lambda d: _csv_cfg(d, algo={"batch_size": "big"}), ["pf.yaml", "algo.batch_size", "expected int"]),
    ("unknown-key", lambda d: _csv_cfg(d, algo={"lrr": 0.1}), ["algo.lrr: unknown key", "lr"]),
    ("unknown-data-key", lambda d: _csv_cfg(d, data={"pathz": ["x.csv"]}), ["pathz", "allowed keys"]),
    ("not-yaml", lambda d: "algo: [1, 2\n", ["pf.yaml", "not valid YAML"]),
    ("nan-close", lambda d: _csv_cfg(d, "nan.csv"), ["nan.csv", "'Close'", "row 5", "finite price > 0"]),
    ("zero-close", lambda d: _csv_cfg(d, "zero.csv"), ["zero.csv", "'Close'", "row 7", "got 0.0"]),
    ("unsorted", lambda d: _csv_cfg(d, "unsorted.csv"), ["unsorted.csv", "'Date'", "row 11", "not sorted"]),
    ("duplicate", lambda d: _csv_cfg(d, "dup.csv"), ["dup.csv", "'Date'", "row 12", "duplicate timestamp"]),
    ("missing-column", lambda d: _csv_cfg(d, "noclose.csv"), ["noclose.csv", "missing column 'Close'"]),
    ("missing-file", lambda d: _csv_cfg(d, "nope.csv"), ["nope.csv", "not found"]),
    ("shorter-than-warmup", lambda d: _csv_cfg(d, "tiny.csv"), ["tiny.csv", "50 rows", "warmup + 2 = 66"]),
    ("short-validation", lambda d: _csv_cfg(d, "short400.csv", env={"episode_len": 64}),
     ["data split 'validation'", "short400.csv", "env.episode_len = 64 needs at least 65"]),
    ("short-test", lambda d: _csv_cfg(d, "long.csv", env={"episode_len": 64},
                                      data={"split": {"train": 0.8, "validation": 0.15, "test": 0.05}}),
     ["data split 'test'", "long.csv", "50 tradable bars", "needs at least 65"]),
    ("window-too-long", lambda d: _csv_cfg(d, "long.csv", env={"window": 200}),
     ["data split 'validation'", "long.csv", "env.window = 200", "needs at least 33"]),
    ("spike", lambda d: _csv_cfg(d, "spike.csv"),
     ["spike.csv", "'Close'", "row 300", "1000000000000.0", "data.max_abs_log_return = 0.4", "split left unadjusted"]),
    ("bad-max-abs", lambda d: _csv_cfg(d, data={"max_abs_log_return": -1}), ["data.max_abs_log_return", "-1"]),
    ("split-sum", lambda d: _csv_cfg(d, data={"split": {"train": 0.7, "validation": 0.2, "test": 0.2}}),
     ["data.split", "sum to 1"]),
    ("split-keys", lambda d: _csv_cfg(d, data={"split": {"train": 0.7, "valid": 0.3}}), ["data.split", "valid"]),
    ("bad-window", lambda d: _csv_cfg(d, data={"window": [0.6, 0.2]}), ["data.window", "0 <= lo < hi <= 1"]),
    ("gpu-learner", lambda d: _csv_cfg(d, algo={"num_gpus_per_learner": 1}),
     ["algo.num_gpus_per_learner", "1 GPU", "this machine has"]),
    ("gpu-runners", lambda d: _csv_cfg(d, algo={"num_env_runners": 3, "num_gpus_per_env_runner": 0.6}),
     ["algo.num_gpus_per_env_runner", "3 GPUs", "0.6 x 3 env runners"]),
    ("runner-cuda", lambda d: _csv_cfg(d, runner={"device": "cuda"}), ["runner.device: the config asks for 1 GPU", "runner.device = cuda"]),
    ("action-mode", lambda d: _csv_cfg(d, model={"action_mode": "hybrid"}),
     ["model.action_mode: got 'hybrid'", "routed, flat, branching"]),
    ("negative-lr", lambda d: _csv_cfg(d, algo={"lr": "-1e-3"}), ["algo.lr: must be > 0", "-0.001"]),
    ("lr-text", lambda d: _csv_cfg(d, algo={"lr": "fast"}), ["algo.lr: expected float", "'fast'"]),
    ("env-type", lambda d: _csv_cfg(d, env={"episode_len": "long"}), ["env:", "episode_len", "'long'"]),
    # second round: run names and directories, timestamps, data sanity, config bounds
    ("run-name-empty", lambda d: _csv_cfg(d, run={"name": ""}), ["run.name: got ''", "expected a non-empty name"]),
    ("run-name-dot", lambda d: _csv_cfg(d, run={"name": "."}), ["run.name: got '.'", "leading '.'"]),
    ("run-name-parent", lambda d: _csv_cfg(d, run={"name": "../x"}), ["run.name: got '../x'"]),
    ("run-name-separator", lambda d: _csv_cfg(d, run={"name": "a/b"}), ["run.name: got 'a/b'"]),
    ("run-dir-is-a-file", lambda d: _csv_cfg(d, run={"dir": str(d / "a_file")}),
     ["run.dir", "a_file is a file, expected a directory"]),
    ("data-path-is-a-folder", lambda d: _csv_cfg(d, "a_folder.csv"), ["a_folder.csv", "is a directory"]),
    ("epoch-seconds-one-per-second", lambda d: _csv_cfg(d, "epoch_seconds.csv"),
     ["data.periods_per_year", "inferred 3.15", "outside the plausible 1..1e+06", "data.timestamp_unit"]),
    ("timestamp-unit", lambda d: _csv_cfg(d, data={"timestamp_unit": "days"}), ["data.timestamp_unit", "'days'"]),
    ("bool-close", lambda d: _csv_cfg(d, "bool_close.csv"), ["bool_close.csv", "'Close'", "row 0", "dtype bool"]),
    ("close-above-high", lambda d: _csv_cfg(d, "above_high.csv"),
     ["above_high.csv", "'Close'", "row 40", "above high", "expected low <= close <= high"]),
    ("bid-above-ask", lambda d: _csv_cfg(d, "bid_ask.csv"), ["bid_ask.csv", "'Bid'", "row 40", "above ask"]),
    ("replay-capacity-1", lambda d: _csv_cfg(d, learner={"replay_capacity": 1}),
     ["learner.replay_capacity", "smaller than one batch"]),
    ("batch-over-capacity", lambda d: _csv_cfg(d, algo={"batch_size": 4096, "num_gpus_per_learner": 0},
                                               learner={"replay_capacity": 1000}),
     ["learner.replay_capacity: 1000", "algo.batch_size 4096"]),
    ("capacity-under-one-iteration", lambda d: _csv_cfg(d, learner={"replay_capacity": 2000},
                                                        algo={"num_envs_per_runner": 1024, "rollout_length": 64}),
     ["learner.replay_capacity: 2000", "one iteration's transitions per learner (65536"]),
    ("episode-len-1", lambda d: _csv_cfg(d, env={"episode_len": 1}), ["env.episode_len", ">= 2"]),
    ("exposure-50", lambda d: _csv_cfg(d, env={"exposure_levels": [-50, -1, 0, 1, 50]}),
     ["exposure_levels", "|level| <= 10", "-50"]),
    ("fee-over-one", lambda d: _csv_cfg(d, env={"fee": 1.5}), ["EnvParams.fee", "[0, 1)", "1.5"]),
    ("alpha-over-one", lambda d: _csv_cfg(d, learner={"alpha": 2.0}), ["learner.alpha", "<= 1.0", "2.0"]),
    ("replay-ratio-inf", lambda d: _csv_cfg(d, algo={"replay_ratio": float("inf")}), ["algo.replay_ratio", "finite"]),
    ("population-shape-key", lambda d: {**_csv_cfg(d), "population": {"seeds": [0, 1], "search": {
        "model.hidden": {"choice": [[8], [16]]}}}}, ["population.search", "model.hidden", "separate populations"]),
    ("population-seed-pinned", lambda d: {**_csv_cfg(d, runner={"seed": 3}), "population": {"seeds": [0, 1]}},
     ["runner.seed", "population.seeds"]),
    ("population-no-seeds", lambda d: {**_csv_cfg(d), "population": {"seeds": []}}, ["population.seeds"]),
    # third round: data files and asset names, periods per year, YAML structure, dates
    ("duplicate-stem", lambda d: _csv_cfg(d, data={"paths": [str(d / "good.csv"), str(d / "other" / "good.csv")]}),
     ["asset name 'good' (from the file stem) is given twice", "other/good.csv", "set data.names"]),
    ("same-file-twice", lambda d: _csv_cfg(d, data={"paths": [str(d / "good.csv"), str(d / "." / "good.csv")],
                                                    "names": ["a", "b"]}),
     ["data.paths: entries 0 and 1", "are the same file", "list each file once"]),
    ("periods-disagree", lambda d: _csv_cfg(d, data={"paths": [str(d / "good.csv"), str(d / "hourly.csv")]}),
     ["data.periods_per_year: 'auto' found the assets at different bar rates", "'good' 365", "'hourly' 8,76",
      "set data.periods_per_year"]),
    ("yaml-alias-bomb", lambda d: _with_text(_csv_cfg(d), _alias_bomb()),
     ["pf.yaml: line", "YAML alias *l0", "aliases are not accepted in settings"]),
    ("yaml-duplicate-key", lambda d: _with_text(_csv_cfg(d), "model:\n  hidden: [16]\n  hidden: [32]\n"),
     ["pf.yaml: line", "key 'hidden' given twice in one mapping", "keep one"]),
    ("date-after-2262", lambda d: _csv_cfg(d, "y2262.csv"),
     ["y2262.csv", "'Date'", "row 466", "'2262-04-12'", "outside the dates a timestamp holds here", "2262-04-11"]),
    ("synthetic-short", lambda d: {"run": {"dir": str(d / "runs")}, "algo": {"num_gpus_per_learner": 0},
                                   "data": {"source": "synthetic", "num_assets": 2, "num_bars": 400},
                                   "env": {"episode_len": 128}, "runner": {"device": "cpu"}},
     ["data split 'validation'", "synthetic series", "asset 'synth0'", "needs at least 129"]),
    # fourth round: names and paths that are no file, prices that never move or jump, unreadable files, bounds
    ("run-name-300-chars", lambda d: _csv_cfg(d, run={"name": "r" * 300}),
     ["run.name: got a name of 300 characters", "at most 200 bytes"]),
    ("data-path-tilde", lambda d: _csv_cfg(d, data={"paths": ["~/no_such_rl_zerosync_dir/x.csv"]}),
     ["~/no_such_rl_zerosync_dir/x.csv: not found", "'~' is not expanded", "write the full path"]),
    ("data-path-symlink-loop", lambda d: _csv_cfg(d, "loop.csv"), ["loop.csv", "a loop of symbolic links"]),
    ("data-path-dangling-link", lambda d: _csv_cfg(d, "dangling.csv"),
     ["dangling.csv", "a symbolic link to", "no_such_target.csv, which does not exist"]),
    ("constant-close", lambda d: _csv_cfg(d, "flat.csv"),
     ["flat.csv", "'Close'", "every one of the 600 closes is 100.0", "zero variance"]),
    ("unadjusted-split-x1.6", lambda d: _csv_cfg(d, "split.csv"),
     ["split.csv", "row 300", "(x0.633)", "data.max_abs_log_return = 0.4", "split left unadjusted"]),
    ("negative-close", lambda d: _csv_cfg(d, "negative.csv"), ["negative.csv", "'Close'", "row 9", "-3.5"]),
    ("inf-close", lambda d: _csv_cfg(d, "inf.csv"), ["inf.csv", "'Close'", "row 11", "finite price > 0"]),
    ("text-close", lambda d: _csv_cfg(d, "text_close.csv"), ["text_close.csv", "'Close'", "row 13", "n/a-price"]),
    ("impossible-date", lambda d: _csv_cfg(d, "bad_date.csv"), ["bad_date.csv", "'Date'", "row 20", "2020-02-30"]),
    ("empty-file", lambda d: _csv_cfg(d, "empty.csv"), ["empty.csv", "cannot be read as csv"]),
    ("header-only", lambda d: _csv_cfg(d, "header_only.csv"), ["header_only.csv", "0 rows"]),
    ("semicolon-csv", lambda d: _csv_cfg(d, "semicolons.csv"), ["semicolons.csv", "missing column"]),
    ("binary-file", lambda d: _csv_cfg(d, "binary.csv"), ["binary.csv"]),
    ("data-paths-empty", lambda d: _csv_cfg(d, data={"paths": []}), ["data.paths"]),
    ("data-source-unknown", lambda d: _csv_cfg(d, data={"source": "excel"}), ["data.source", "'excel'"]),
    ("periods-per-year-zero", lambda d: _csv_cfg(d, data={"periods_per_year": 0}), ["data.periods_per_year", "0"]),
    ("periods-per-year-text", lambda d: _csv_cfg(d, data={"periods_per_year": "daily"}),
     ["data.periods_per_year", "'daily'"]),
    ("split-negative", lambda d: _csv_cfg(d, data={"split": {"train": 1.2, "validation": -0.1, "test": -0.1}}),
     ["data.split"]),
    ("close-column-unknown", lambda d: _csv_cfg(d, data={"columns": {"timestamp": "Date", "close": "Adj Close"}}),
     ["good.csv", "missing column 'Adj Close'"]),
    ("iterations-zero", lambda d: _csv_cfg(d, run={"iterations": 0}), ["run.iterations", "> 0", "0"]),
    ("keep-checkpoints-zero", lambda d: _csv_cfg(d, run={"keep_checkpoints": 0}), ["run.keep_checkpoints", "> 0"]),
    ("eval-every-negative", lambda d: _csv_cfg(d, run={"eval_every": -1}), ["run.eval_every", ">= 0", "-1"]),
    ("checkpoint-every-negative", lambda d: _csv_cfg(d, run={"checkpoint_every": -5}),
     ["run.checkpoint_every", ">= 0", "-5"]),
    ("eval-metric-unknown", lambda d: _csv_cfg(d, run={"eval_metric": "profit"}), ["run.eval_metric", "'profit'"]),
    ("eval-checkpoint-unknown", lambda d: _csv_cfg(d, run={"eval_checkpoint": "middle"}),
     ["run.eval_checkpoint", "'middle'"]),
    ("seed-too-large", lambda d: _csv_cfg(d, run={"seed": 2 ** 40}), ["run.seed", "2**32 - 1"]),
    ("gamma-over-one", lambda d: _csv_cfg(d, algo={"gamma": 1.5}), ["algo.gamma", "1.5"]),
    ("batch-size-zero", lambda d: _csv_cfg(d, algo={"batch_size": 0}), ["algo.batch_size", "0"]),
    ("envs-per-runner-zero", lambda d: _csv_cfg(d, algo={"num_envs_per_runner": 0}), ["algo.num_envs_per_runner"]),
    ("rollout-length-zero", lambda d: _csv_cfg(d, algo={"rollout_length": 0}), ["algo.rollout_length"]),
    ("epsilon-over-one", lambda d: _csv_cfg(d, algo={"epsilon": 1.5}), ["algo.epsilon", "1.5"]),
    ("spread-source-unknown", lambda d: _csv_cfg(d, data={"spread_source": "magic"}), ["spread_source", "'magic'"]),
    ("hidden-negative", lambda d: _csv_cfg(d, model={"hidden": [16, -4]}), ["model.hidden", "-4"]),
    ("window-zero", lambda d: _csv_cfg(d, env={"window": 0}), ["EnvParams.window", "got 0"]),
    ("config-not-a-mapping", lambda d: "- algo\n- data\n", ["pf.yaml"]),
    ("num-cpus-negative", lambda d: _csv_cfg(d, run={"num_cpus": -1}), ["run.num_cpus", ">= 0", "-1"]),
    ("n-step-zero", lambda d: _csv_cfg(d, algo={"n_step": 0}), ["algo.n_step", "0"]),
    ("unknown-section", lambda d: {**_csv_cfg(d), "trainer": {"lr": 0.1}}, ["trainer"]),
]


def test_bad_inputs_fail_in_process_with_one_line(tmp_path, data_dir, capsys, no_train):
    """Every case: exit 2, one ``error:`` line naming the thing, no traceback, < 10 s, no Ray."""
    assert len(CASES) >= 15
    for name, make, needles in CASES:
        cfg = _yaml(tmp_path / "pf.yaml", make(data_dir))
        rc, out, err, wall = _main(capsys, "train", "--config", str(cfg))
        try:
            _assert_one_line_error(rc, err, wall, needles)
        except AssertionError as exc:
            raise AssertionError(f"case {name}: {exc}") from exc
    assert no_train == []


@pytest.mark.parametrize("name", ["spike", "short-validation", "gpu-learner", "yaml-type"])
def test_bad_inputs_fail_fast_as_a_subprocess(tmp_path, data_dir, name):
    """The real command line: exit 2 and one stderr line, fast (Ray never starts: no banner)."""
    make, needles = {c[0]: (c[1], c[2]) for c in CASES}[name]
    cfg = _yaml(tmp_path / "pf.yaml", make(data_dir))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rl_zerosync", "train", "--config", str(cfg)], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=60)
    wall = time.perf_counter() - t0
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr
    assert "local Ray instance" not in out.stdout + out.stderr  # ray.init's banner
    for needle in needles:
        assert needle in lines[0]
    assert wall < SUBPROCESS_LIMIT_S, wall
    assert not (data_dir / "runs").exists() and not (tmp_path / "runs").exists()


def test_debug_prints_the_traceback(tmp_path, data_dir, capsys, no_train):
    cfg = _yaml(tmp_path / "pf.yaml", _csv_cfg(data_dir, "spike.csv"))
    for argv in (["train", "--config", str(cfg), "--debug"], ["--debug", "train", "--config", str(cfg)]):
        rc, out, err, _ = _main(capsys, *argv)
        assert rc == 2
        assert "Traceback" in err and "PreflightError" in err
        assert err.strip().splitlines()[-1].startswith("error: ") and "row 300" in err


def test_numeric_strings_in_yaml_float_fields(tmp_path, data_dir, capsys, no_train):
    """PyYAML reads ``1e-3`` as a string; float fields (typed sections and dict sections) take it."""
    text = yaml.safe_dump(_csv_cfg(data_dir), sort_keys=False)
    text += "model:\n  dropout: 1e-1\n"
    text = text.replace("algo:\n", "algo:\n  lr: 1e-3\n  epsilon: [[0, 1.0], [5e4, 5e-2]]\n", 1)
    text = text.replace("env:\n", "env:\n  fee: 1e-4\n  fill_prob: [[1, 1, 1], [5e-1, 0.7, 0.85], [0.2, 0.3, 0.4]]\n", 1)
    text = text.replace("runner:\n", "runner:\n  wide: 15e-1\n", 1)
    text = text.replace("data:\n", "data:\n  max_abs_log_return: 6e-1\n  periods_per_year: 2.52e2\n", 1)
    path = _yaml(tmp_path / "pf.yaml", text)
    assert yaml.safe_load(path.read_text())["algo"]["lr"] == "1e-3"  # what PyYAML gives
    s = load(path)
    assert s.algo.lr == 0.001 and isinstance(s.algo.lr, float)
    assert s.model.dropout == 0.1
    assert s.algo.epsilon == [[0, 1.0], [50000, 0.05]]
    assert s.env["fee"] == 1e-4 and s.env["fill_prob"][1][0] == 0.5
    assert s.runner["wide"] == 1.5
    assert s.data["max_abs_log_return"] == 0.6 and s.data["periods_per_year"] == 252.0
    rc, out, err, _ = _main(capsys, "train", "--config", str(path))
    assert rc == 0, err
    assert no_train and no_train[0].algo.lr == 0.001
    with pytest.raises(ValueError, match=r"algo\.gamma: expected float, got 'nan'"):
        from_dict({"algo": {"gamma": "nan"}})


def test_max_abs_log_return_zero_or_null_turns_the_check_off(tmp_path, data_dir, capsys, no_train):
    for value in (0, None, 30):
        cfg = _yaml(tmp_path / "pf.yaml", _csv_cfg(data_dir, "spike.csv", data={"max_abs_log_return": value}))
        rc, out, err, _ = _main(capsys, "train", "--config", str(cfg))
        assert rc == 0, (value, err)
    assert len(no_train) == 3


def test_synthetic_spike_limit_applies(data_dir):
    cfg = _csv_cfg(data_dir)
    cfg["data"] = {"source": "synthetic", "num_assets": 2, "num_bars": 3000,
                   "synthetic": {"vol_mean": 0.2}, "max_abs_log_return": 0.5}
    with pytest.raises(PreflightError, match=r"data\.synthetic \(seed 0\): asset 'synth\d', column 'close', bar \d+"):
        check(from_dict(cfg, source="syn.yaml"), log=False)
    cfg["data"]["max_abs_log_return"] = 0
    report = check(from_dict(cfg, source="syn.yaml"), log=False)
    assert set(report["segments"]) == {"train", "validation", "test"}


def test_segments_checked_and_regenerate_uses_the_whole_series(data_dir):
    s = from_dict({"algo": {"num_gpus_per_learner": 0}, "runner": {"device": "cpu"},
                   "data": {"source": "synthetic", "num_assets": 2, "num_bars": 2000, "regenerate_every": 5},
                   "run": {"evaluate": False}, "env": {"episode_len": 64}}, source="r.yaml")
    report = check(s, log=False)
    assert set(report["segments"]) == {"train", "validation"}  # no test without run.evaluate
    assert report["segments"]["train"]["synth0"] == 2000 - 64  # the whole fresh series after warmup
    assert report["kernels"]["backend"] in ("cuda", "torch")


def test_gpu_requests_skip_on_a_cluster_and_pack_like_ray(monkeypatch, data_dir):
    s = from_dict(_csv_cfg(data_dir, algo={"num_gpus_per_learner": 1, "num_learners": 2}), source="c.yaml")
    monkeypatch.setattr("rl_zerosync.run.preflight._cuda_state", lambda: (1, ""))
    with pytest.raises(PreflightError, match=r"c\.yaml: algo\.num_gpus_per_learner: the config asks for 2 GPUs .* has 1"):
        check_gpus(s)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert "RAY_ADDRESS" in check_gpus(s)["skipped"]
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setattr("rl_zerosync.run.preflight._cuda_state", lambda: (2, ""))
    assert check_gpus(s) == {"needed": 2, "checked": True, "available": 2}
    assert _gpus_needed([("l", 0.4, 2), ("r", 0.6, 2)]) == 2  # two_gpu.yaml
    assert _gpus_needed([("l", 1, 2), ("r", 0.5, 4)]) == 4  # cluster.yaml
    assert _gpus_needed([("r", 0.6, 3)]) == 3
    assert _gpus_needed([("l", 2, 1)]) == 2
    with pytest.raises(PreflightError, match="fractions up to 1 or whole numbers"):
        check_gpus(from_dict(_csv_cfg(data_dir, algo={"num_gpus_per_learner": 1.5}), source="c.yaml"))


def test_backend_info_and_cupy_warning(monkeypatch, capsys):
    import torch

    from rl_zerosync.kernels import backend, backend_info

    info = backend_info()
    for key in ("backend", "device", "reason", "warning", "cupy", "cupy_cuda_runtime", "torch", "torch_cuda",
                "cuda_devices"):
        assert key in info
    if not torch.cuda.is_available():
        assert info["backend"] == "torch" and "torch twins" in info["reason"]
        # CUDA present but CuPy unusable -> the torch twins, with a warning giving the reason.
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(backend, "cupy_status", lambda: {
            "usable": False, "version": "13.0", "cuda_runtime": "12.8", "cuda_driver": None, "devices": 0,
            "error": "CUDARuntimeError: cudaErrorInsufficientDriver"})
        info = backend_info("cuda:0")
        assert info["backend"] == "torch" and "cudaErrorInsufficientDriver" in info["warning"]
        monkeypatch.setattr(backend, "_logged", False)
        backend.log_backend("cuda:0")
        out, err = capsys.readouterr()
        assert out.startswith("kernels: torch twins on cuda:0") and err.startswith("warning: kernels: CUDA is available")


def test_preflight_prints_spreads_and_execution(data_dir, capsys):
    """Closes only: the spread line beside the settings, and the execution line saying MARKET fills
    at the next close and passive orders execute as MARKET (no high/low)."""
    report = check(from_dict(_csv_cfg(data_dir), source="pf.yaml"), log=False)
    out = capsys.readouterr().out
    assert "spread: good fixed median 5.00 bps (5.00-5.00) | min_spread_bps 0.1, spread_bps 5, max_spread_bps unset" in out
    assert ("execution: env.execution_lag 1 | MARKET orders: next close (the data has no opens) | "
            "LIMIT/PASSIVE: executed as MARKET (the data has no high/low)") in out
    data = report["segments"]["data"]
    assert data["execution"]["execution_lag"] == 1 and data["spreads"]["per_asset"]["good"]["source"] == "fixed"


def test_power_check_warns_when_validation_cannot_tell_sharpe_1_from_0(data_dir, capsys):
    def settings(num_bars: int, num_assets: int):
        return from_dict({"algo": {"num_gpus_per_learner": 0}, "runner": {"device": "cpu"},
                          "data": {"source": "synthetic", "num_assets": num_assets, "num_bars": num_bars},
                          "run": {"evaluate": True}, "env": {"episode_len": 64}}, source="p.yaml")

    capsys.readouterr()
    report = check(settings(2000, 2), log=True)  # validation: 2 x ~236 bars at 252/year
    out, err = capsys.readouterr()
    power = report["power"]
    bars = sum(report["segments"]["validation"].values())
    assert power["validation"]["bars"] == bars and power["validation"]["assets"] == 2
    assert power["validation"]["standard_error"] == pytest.approx(math.sqrt(252 / bars))
    assert not power["validation"]["can_tell_sharpe_1_from_0"] and "test" in power
    assert "power: standard error of an annualized Sharpe: validation" in out
    assert power["warning"].startswith("validation cannot tell annualized Sharpe 1 from 0")
    assert "longer segments, more assets or more folds" in power["warning"]
    assert err.count("warning: validation cannot tell") == 1
    big = check(settings(2000, 8), log=False)["power"]  # 8 assets: ~1900 validation bars, 2*SE < 1
    assert big["warning"] is None and big["validation"]["can_tell_sharpe_1_from_0"]
