"""Walk-forward evaluation: fold geometry, bar boundaries on real data (no overlap, no look-ahead),
``data.window``, errors, pooling, and one tiny end-to-end run through the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from rl_zerosync.data import make_market
from rl_zerosync.data.market import SPLITS, TENSOR_FIELDS
from rl_zerosync.config.settings import SettingsError, from_dict, load
from rl_zerosync.run.walkforward import (
    RESULT_FILE, WalkForwardError, fold_line, fold_windows, pool, pooled_line, walk_forward,
)

ROOT = Path(__file__).resolve().parent.parent
GOOGL = ROOT / "benchmarks" / "data" / "STOCKS_GOOGL.csv"  # the repository's copy (gym-anytrading, MIT)
GOOGL_BARS = 2335
FEATURES = {"warmup": 32, "median_window": 126}
FRACTIONS = [(0.7, 0.15, 0.15), (0.6, 0.25, 0.15), (0.5, 0.2, 0.3), (0.8, 0.1, 0.1)]


def cfg(window=None, split=(0.7, 0.15, 0.15), path=GOOGL) -> dict:
    c = {"source": "csv", "paths": [str(path)], "features": dict(FEATURES), "split": list(split)}
    if window is not None:
        c["window"] = list(window)
    return c


def spans(data) -> tuple[tuple[int, int], tuple[int, int]]:
    """(rows, tradable) bar ranges [a, b) of asset 0 in full-series coordinates."""
    off, vs, n = data.offsets[0], int(data.valid_start[0]), int(data.length[0])
    return (off, off + n), (off + vs, off + n)


def fold_parts(window, split=(0.7, 0.15, 0.15)) -> dict:
    return {s: make_market(cfg(window, split), s) for s in SPLITS}


# ---- fold geometry (fractions) ----------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("fr", FRACTIONS)
def test_fold_windows_tile_the_series_with_adjacent_test_segments(k, fr):
    windows = fold_windows(k, fr)
    assert len(windows) == k
    assert windows[0][0] == 0.0 and windows[-1][1] == 1.0
    length = 1.0 / (1.0 + (k - 1) * fr[2])
    step = fr[2] * length
    for i, (lo, hi) in enumerate(windows):
        assert 0.0 <= lo < hi <= 1.0
        assert lo == pytest.approx(i * step) and hi - lo == pytest.approx(length)
        # train < validation < test inside the fold, in time order
        train_end, test_start = lo + fr[0] * (hi - lo), hi - fr[2] * (hi - lo)
        assert lo < train_end < test_start < hi
    for (lo0, hi0), (lo1, hi1) in zip(windows, windows[1:]):
        assert lo1 > lo0 and hi1 > hi0
        assert hi1 - fr[2] * (hi1 - lo1) == pytest.approx(hi0)  # test segments adjacent: no gap, no overlap


def test_fold_windows_accept_a_split_dict_and_tile_a_given_window():
    assert fold_windows(2, {"train": 0.7, "validation": 0.15, "test": 0.15}) == fold_windows(2, [0.7, 0.15, 0.15])
    windows = fold_windows(3, [0.6, 0.2, 0.2], within=[0.2, 0.9])
    assert windows[0][0] == pytest.approx(0.2) and windows[-1][1] == pytest.approx(0.9)
    assert fold_windows(1, None) == [(0.0, 1.0)]


@pytest.mark.parametrize("k", [0, -1, True, 2.5, "3", None])
def test_bad_k(k):
    with pytest.raises(ValueError, match=r"K \(the number of folds\) must be an int >= 1"):
        fold_windows(k, FRACTIONS[0])


def test_k_above_one_needs_a_test_fraction():
    with pytest.raises(ValueError, match="test fraction > 0"):
        fold_windows(2, [0.8, 0.2, 0.0])
    assert fold_windows(1, [0.8, 0.2, 0.0]) == [(0.0, 1.0)]
    with pytest.raises(ValueError, match="data.split"):
        fold_windows(2, [0.8, 0.3, 0.1])


# ---- fold bars on real data (GOOGL daily) -----------------------------------------------------

def test_k1_is_the_plain_split():
    (window,) = fold_windows(1, FRACTIONS[0])
    for s in SPLITS:
        a, b = make_market(cfg(), s), make_market(cfg(window), s)
        assert a.offsets == b.offsets and a.segment == b.segment == s
        assert torch.equal(a.valid_start, b.valid_start) and torch.equal(a.length, b.length)
        for f in TENSOR_FIELDS:
            assert torch.equal(getattr(a, f), getattr(b, f)), f
    full = make_market(cfg(), "all")
    whole = make_market(cfg(window), "all")
    assert whole.offsets == (0,) and torch.equal(whole.close, full.close)


@pytest.mark.parametrize("k", [2, 3, 5, 10])
@pytest.mark.parametrize("fr", FRACTIONS[:3])
def test_fold_bars_no_overlap_no_look_ahead(k, fr):
    full = make_market(cfg(split=fr), "all")
    n = int(full.length[0])
    assert n == GOOGL_BARS
    warmup = FEATURES["warmup"]
    tests = []
    for lo, hi in fold_windows(k, fr):
        parts = fold_parts((lo, hi), fr)
        rows = {s: spans(d)[0] for s, d in parts.items()}
        trade = {s: spans(d)[1] for s, d in parts.items()}
        # train < validation < test, adjacent inside the fold, inside the fold's window
        assert trade["train"][0] == max(int(np.floor(n * lo + 1e-6)), warmup)
        assert trade["train"][1] == trade["validation"][0] and trade["validation"][1] == trade["test"][0]
        assert trade["test"][1] == int(np.floor(n * hi + 1e-6))
        for s in SPLITS:
            assert trade[s][1] - trade[s][0] >= 2
            # history kept before a segment: warmup bars (fewer at the series start), never inside a later one
            assert rows[s][0] == max(0, trade[s][0] - warmup)
        # no look-ahead: every row the agent trains on (history included) is before validation and test
        assert rows["train"][1] <= trade["validation"][0] < trade["test"][0]
        assert rows["validation"][1] <= trade["test"][0]
        # the rows are the full series' rows (features computed once, causally, on the whole series)
        d = parts["test"]
        a, b = rows["test"]
        for f in ("close", "ret_norm", "obs_vol", "obs_spread"):
            assert torch.equal(getattr(d, f)[0, : b - a], getattr(full, f)[0, a:b]), f
        tests.append(trade["test"])
    # test segments of consecutive folds: adjacent, never overlapping, in time order, up to the last bar
    for (a0, b0), (a1, b1) in zip(tests, tests[1:]):
        assert b0 == a1 and a0 < b0 < b1
    assert tests[-1][1] == n
    covered = sum(b - a for a, b in tests)
    assert covered == tests[-1][1] - tests[0][0]  # no bar tested twice


@pytest.mark.parametrize("n", [401, 997, 2335, 10007])
def test_test_segments_adjacent_for_any_length(n):
    """Float rounding never shifts a shared fold boundary by a bar (any K, any fractions)."""
    from rl_zerosync.data.market import FeatureConfig, build_market

    close = 100.0 * np.exp(np.cumsum(np.random.default_rng(n).normal(0.0, 0.01, n)))
    market = build_market([close], [np.full(n, 1e-4)], features=FeatureConfig(warmup=4, median_window=8))
    for fr in FRACTIONS + [(0.34, 0.33, 0.33), (0.7, 0.2, 0.1)]:
        for k in range(2, 13):
            tests = []
            for w in fold_windows(k, fr):
                seg = {s: spans(market.split(s, fr, window=w))[1] for s in SPLITS}
                assert seg["train"][1] == seg["validation"][0] and seg["validation"][1] == seg["test"][0]
                tests.append(seg["test"])
            assert all(a[1] == b[0] for a, b in zip(tests, tests[1:])) and tests[-1][1] == n, (fr, k, tests)


def test_a_fold_does_not_see_bars_after_its_window(tmp_path):
    """Delete every bar after fold 1's window: its segments (features included) are unchanged."""
    fr = FRACTIONS[0]
    lo, hi = fold_windows(3, fr)[1]
    end = int(np.floor(GOOGL_BARS * hi + 1e-6))
    cut = tmp_path / "googl_cut.csv"
    pd.read_csv(GOOGL).iloc[:end].to_csv(cut, index=False)
    short = make_market(cfg(path=cut), "all")
    assert int(short.length[0]) == end
    for s, d in fold_parts((lo, hi), fr).items():
        a, b = spans(d)[0]
        assert b <= end
        for f in TENSOR_FIELDS:
            assert torch.equal(getattr(d, f)[0, : b - a], getattr(short, f)[0, a:b]), (s, f)
        assert list(d.timestamps[0]) == list(short.timestamps[0][a:b])


def test_window_all_keeps_history_and_full_series_offsets():
    w = make_market(cfg((0.5, 0.75)), "all")
    lo, hi = int(GOOGL_BARS * 0.5), int(GOOGL_BARS * 0.75)
    assert spans(w) == ((lo - FEATURES["warmup"], hi), (lo, hi))
    first = make_market(cfg((0.0, 0.25)), "all")
    assert spans(first) == ((0, int(GOOGL_BARS * 0.25)), (FEATURES["warmup"], int(GOOGL_BARS * 0.25)))


@pytest.mark.parametrize("window", [[0.5, 0.5], [0.6, 0.4], [-0.1, 0.5], [0.2, 1.2], "0-1", [0.1],
                                    [0.1, 0.2, 0.3], [float("nan"), 1.0], [True, 1], {"lo": 0, "hi": 1}])
def test_bad_window(window):
    with pytest.raises(ValueError, match=r"data\.window: expected \[lo, hi\].*0 <= lo < hi <= 1"):
        make_market(cfg(window), "train")


def test_bad_window_in_a_settings_file_names_the_file(tmp_path):
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["data"] = cfg([0.9, 0.1])
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SettingsError, match=r"w\.yaml.*data\.window"):
        load(path)


def test_a_window_too_small_names_data_window():
    with pytest.raises(ValueError, match=r"data\.window.*tradable bars"):
        make_market(cfg((0.5, 0.5005)), "test")


# ---- walk_forward: errors, pooling (training stubbed), end to end -----------------------------

def settings_for(tmp_path, data=None, **env) -> object:
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["run"].update({"dir": str(tmp_path), "name": "wf"})
    raw["data"] = data or {**cfg(), "periods_per_year": 252}
    raw["env"].update(env)
    return from_dict(raw, source="test")


def test_synthetic_data_is_rejected(tmp_path):
    s = from_dict(yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()), source="smoke")
    with pytest.raises(WalkForwardError, match="synthetic.*file source"):
        walk_forward(s, 2, tmp_path)


def test_every_fold_is_checked_before_training(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    monkeypatch.setattr(train_module, "train", lambda *a, **k: pytest.fail("trained before checking"))
    with pytest.raises(WalkForwardError, match=r"fold 0 of 12 .*episode_len=400"):
        walk_forward(settings_for(tmp_path, episode_len=400), 12)
    with pytest.raises(WalkForwardError, match="K"):
        walk_forward(settings_for(tmp_path), 0)


def _fake_summary(i: int) -> dict:
    return {"segment": "test", "sharpe": 0.5 + i, "total_return": 0.1, "max_drawdown": 0.05,
            "flat_sharpe": 0.0, "buy_and_hold_sharpe": 1.0, "best_rule": f"momentum({i})",
            "best_rule_sharpe": 0.25 * i, "rules": {"flat": 0.0, "momentum": 0.25 * i}}


def test_walk_forward_collects_folds_and_pools(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    seen = []

    def fake_train(s, **kw):
        seen.append(s)
        return {"evaluation": {"summary": _fake_summary(len(seen) - 1)}}

    monkeypatch.setattr(train_module, "train", fake_train)
    base = settings_for(tmp_path)
    report = walk_forward(base, 3)
    assert [s.run.name for s in seen] == ["fold0", "fold1", "fold2"]  # run.dir is <run.dir>/wf
    assert [s.data["window"] for s in seen] == [list(w) for w in fold_windows(3, base.data["split"])]
    assert all(s.run.evaluate and s.run_dir == tmp_path / "wf" / f"fold{i}" for i, s in enumerate(seen))
    assert base.data.get("window") is None  # the caller's settings are not touched
    on_disk = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert on_disk["complete"] and len(on_disk["folds"]) == 3 and on_disk["k"] == 3
    p = on_disk["pooled"]
    assert p["mean_sharpe"] == pytest.approx(1.5) and p["mean_buy_and_hold_sharpe"] == pytest.approx(1.0)
    assert p["mean_best_rule_sharpe"] == pytest.approx(0.25)
    assert p["mean_rule_sharpe"] == {"flat": 0.0, "momentum": pytest.approx(0.25)}
    assert p["chained_total_return"] == pytest.approx(1.1 ** 3 - 1)
    assert p["folds_beating_buy_and_hold"] == 2
    tests = [f["segments"]["test"][0] for f in on_disk["folds"]]
    assert [t["bars"][1] for t in tests[:-1]] == [t["bars"][0] for t in tests[1:]]
    assert tests[-1]["last"].startswith("2018-08-29")
    assert len(report["lines"]) >= 4 and report["lines"][1].startswith("fold 1 [")
    assert "rule chosen on validation: momentum(1) (test +0.25)" in report["lines"][1]
    assert "test 20" in report["lines"][1]
    assert report["lines"][3].startswith("walk-forward pooled over 3 folds: mean test sharpe +1.50")
    # no per-bar returns behind these folds: no intervals, so the verdict says why; the picture still comes
    assert report["verdict"].startswith("verdict on the test segments of 3 fold(s): none (")
    assert report["verdict"] == on_disk["verdict"]
    assert (tmp_path / "wf" / "walk_forward.png").stat().st_size > 10_000 and on_disk["plot"].endswith(".png")


def test_walk_forward_tiles_a_configured_window(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    seen = []
    monkeypatch.setattr(train_module, "train",
                        lambda s, **kw: seen.append(s.data["window"]) or {"evaluation": {"summary": _fake_summary(0)}})
    report = walk_forward(settings_for(tmp_path, data={**cfg((0.2, 0.9)), "periods_per_year": 252}), 2)
    assert report["within"] == [0.2, 0.9] and seen[0][0] == 0.2 and seen[-1][1] == pytest.approx(0.9)
    tests = [f["segments"]["test"][0]["bars"] for f in report["folds"]]
    assert tests[0][1] == tests[1][0] and tests[1][1] == int(GOOGL_BARS * 0.9)


def test_walk_forward_stops_at_an_interrupted_fold(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    results = iter([{"evaluation": {"summary": _fake_summary(0)}}, {}])
    monkeypatch.setattr(train_module, "train", lambda s, **kw: next(results))
    report = walk_forward(settings_for(tmp_path), 3, tmp_path / "out")
    assert not report["complete"] and len(report["folds"]) == 1
    assert json.loads((tmp_path / "out" / RESULT_FILE).read_text())["pooled"]["folds"] == 1


def test_pool_and_lines_without_the_newer_summary_keys():
    old = [{"segment": "test", "sharpe": 1.0, "total_return": 0.2, "max_drawdown": 0.1, "buy_and_hold_sharpe": 2.0}]
    p = pool(old)
    assert p["mean_sharpe"] == 1.0 and "mean_best_rule_sharpe" not in p and "mean_rule_sharpe" not in p
    line = fold_line({"fold": 0, "window": [0.0, 1.0], "summary": old[0], "segments": {}})
    assert "best rule" not in line and "sharpe +1.00 (buy&hold +2.00)" in line
    assert "beats buy&hold in 0/1 folds" in pooled_line(p)


def test_cli_argument_errors(tmp_path, capsys):
    from rl_zerosync.cli import main

    assert main(["evaluate"]) == 2
    assert main(["evaluate", "--walk-forward", "2"]) == 2
    assert main(["evaluate", "--walk-forward", "2", "--config", str(ROOT / "configs" / "smoke.yaml"),
                 "--checkpoint", str(tmp_path)]) == 2
    assert main(["evaluate", "--walk-forward", "2", "--config", str(ROOT / "configs" / "smoke.yaml")]) == 2
    err = capsys.readouterr().err
    assert "needs --checkpoint" in err and "synthetic" in err


def test_googl_config_fits_every_fold_up_to_30():
    from rl_zerosync.run.walkforward import _fold_settings, fold_segments

    s = load(ROOT / "configs" / "walkforward_googl.yaml")
    assert Path(s.data["paths"][0]) == Path("benchmarks/data/STOCKS_GOOGL.csv")
    for k in (1, 5, 30):
        for i, w in enumerate(fold_windows(k, s.data["split"])):
            f = _fold_settings(s, i, w)
            old = os.getcwd()
            os.chdir(ROOT)  # the config's path is relative to the repository root
            try:
                fold_segments(f.data, f.env)
            finally:
                os.chdir(old)


@pytest.mark.slow
def test_walk_forward_end_to_end_cli(tmp_path):
    """K=2 through `rl-zerosync evaluate --walk-forward`: two tiny CPU folds -> walk_forward.json."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())  # tiny model, CPU
    raw["run"].update({"dir": str(tmp_path), "name": "wf", "checkpoint_every": 0})
    raw["data"] = {**cfg(), "periods_per_year": 252}
    config = tmp_path / "smoke_googl.yaml"
    config.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "rl_zerosync", "evaluate", "--walk-forward", "2", "--config", str(config),
           "--set", "run.iterations=1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert report["complete"] and [f["fold"] for f in report["folds"]] == [0, 1]
    for f in report["folds"]:
        assert (Path(f["run_dir"]) / "checkpoint").is_dir()
        assert np.isfinite(f["summary"]["sharpe"]) and f["summary"]["segment"] == "test"
        rows = (Path(f["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["iteration"] for x in rows] == [1]
    t0, t1 = (f["segments"]["test"][0]["bars"] for f in report["folds"])
    assert t0[1] == t1[0] and t1[1] == GOOGL_BARS
    assert np.isfinite(report["pooled"]["mean_sharpe"])
    lo, hi = report["pooled"]["test_sharpe_ci95"]  # each fold's test returns stitched, bars resampled
    assert lo <= report["pooled"]["pooled_test_sharpe"] <= hi
    assert report["evidence"]["trials"]["selections"] == 2  # each fold's checkpoint selection on its validation
    assert report["evidence"]["deflated_sharpe"]["segment"] == "validation"
    lines = [x for x in out.stdout.splitlines() if x.startswith(("fold ", "walk-forward pooled"))]
    assert len(lines) == 3, out.stdout[-3000:]


# ---- anchored (expanding) windows and seeds x folds ------------------------------------------

@pytest.mark.parametrize("n", [401, 2335, 10007])
def test_anchored_folds_share_the_rolling_validation_and_test_bars_and_train_from_the_start(n):
    """Anchored fold i: train from the series' first tradable bar, then exactly the rolling fold's
    validation and test bars; test segments tile the series' end; no overlap, no look-ahead."""
    from rl_zerosync.data.market import FeatureConfig, build_market
    from rl_zerosync.run.walkforward import fold_split

    close = 100.0 * np.exp(np.cumsum(np.random.default_rng(n).normal(0.0, 0.01, n)))
    market = build_market([close], [np.full(n, 1e-4)], features=FeatureConfig(warmup=4, median_window=8))
    for fr in FRACTIONS + [(0.34, 0.33, 0.33), (0.7, 0.2, 0.1)]:
        for k in range(2, 13):
            tests = []
            anchored = fold_windows(k, fr, anchored=True)
            assert all(lo == 0.0 for lo, _ in anchored)
            assert [hi for _, hi in anchored] == [hi for _, hi in fold_windows(k, fr)]
            for i, (rolling, window) in enumerate(zip(fold_windows(k, fr), anchored)):
                split = fold_split(i, k, fr, anchored=True)
                seg = {s: spans(market.split(s, split, window=window))[1] for s in SPLITS}
                rows = {s: spans(market.split(s, split, window=window))[0] for s in SPLITS}
                same = {s: spans(market.split(s, fr, window=rolling))[1] for s in ("validation", "test")}
                assert seg["validation"] == same["validation"] and seg["test"] == same["test"], (fr, k, i)
                assert seg["train"][0] == 4 and seg["train"][1] == seg["validation"][0]
                assert rows["train"][1] <= seg["validation"][0] < seg["test"][0]  # no look-ahead
                assert rows["validation"][1] <= seg["test"][0]
                tests.append(seg["test"])
            assert all(a[1] == b[0] for a, b in zip(tests, tests[1:])) and tests[-1][1] == n, (fr, k)
    assert fold_split(0, 3, (0.7, 0.15, 0.15)) == (0.7, 0.15, 0.15)  # rolling: the run's own split
    with pytest.raises(ValueError, match=r"fold index must be an int in \[0, 3\)"):
        fold_split(3, 3, (0.7, 0.15, 0.15), anchored=True)


def _fake_returns(run_dir: Path, i: int, seed: int) -> None:
    """What evaluate writes beside metrics.json: the fold's per-bar test returns (one asset)."""
    rng = np.random.default_rng(100 * seed + i)
    out = Path(run_dir) / "evaluation"
    out.mkdir(parents=True, exist_ok=True)
    bench = rng.normal(0.0004, 0.01, 120)
    np.savez(out / "returns_test.npz", agent_0=bench + rng.normal(0.0002, 0.004, 120),
             best_rule_0=rng.normal(0.0, 0.01, 120), buy_and_hold_0=bench, position_0=np.sign(bench),
             validation_0=rng.normal(0.0003, 0.01, 120),
             trials=np.array([2.0, 2.0, 0.5 + 0.1 * i, 0.4]),  # n, candidates, selected validation Sharpe, se
             trials_counted=np.array("2 candidates, effective 2.0"), independent=np.array(False),
             periods_per_year=np.array(252.0))


def test_walk_forward_seeds_x_folds_anchored_pools_with_intervals(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    seen = []

    def fake_train(s, **kw):
        seen.append(s)
        _fake_returns(s.run_dir, len(seen) % 3, s.run.seed)
        return {"evaluation": {"summary": _fake_summary(len(seen) % 3)}}

    monkeypatch.setattr(train_module, "train", fake_train)
    report = walk_forward(settings_for(tmp_path), 3, anchored=True, seeds=[0, 1])
    assert [s.run_dir.relative_to(tmp_path).as_posix() for s in seen] == [
        f"wf/seed{k}/fold{i}" for k in (0, 1) for i in range(3)]
    assert [s.run.name for s in seen] == [f"fold{i}" for _ in (0, 1) for i in range(3)]  # plain names
    assert [s.run.seed for s in seen] == [0, 0, 0, 1, 1, 1]
    assert all(s.data["window"][0] == 0.0 for s in seen)  # anchored: every fold trains from the start
    assert report["complete"] and report["anchored"] and report["seeds"] == [0, 1]
    assert len(report["folds"]) == 6 and set(report["pooled_per_seed"]) == {"0", "1"}
    p, ev = report["pooled"], report["evidence"]
    assert p["folds"] == 6
    lo, hi = p["test_sharpe_ci95"]
    assert lo <= p["pooled_test_sharpe"] <= hi
    dlo, dhi = p["agent_minus_best_rule_ci95"]
    assert dlo <= p["agent_minus_best_rule"] <= dhi
    # The DSR: 6 selections (seeds x folds) of 2 effective trials each, on their validation Sharpes.
    assert ev["trials"]["n"] == p["trials"] == 2.0 and ev["trials"]["selections"] == 6
    dsr = ev["deflated_sharpe"]
    assert dsr["segment"] == "validation" and dsr["sharpe"] == pytest.approx(np.mean([0.5, 0.6, 0.7] * 2))
    assert 0.0 <= p["deflated_sharpe"] <= 1.0 and 0.0 <= p["psr"] <= 1.0
    # Folds stitched per asset: 3 x 120 bars, 2 seeds; one calendar, so bars in blocks, seeds drawn.
    assert ev["intervals"]["agent"]["bars"] == 3 * 120 and ev["intervals"]["agent"]["seeds"] == 2
    assert ev["ci_method"].startswith("stationary block bootstrap over bars (series share a calendar")
    assert "seeds drawn with replacement (2)" in ev["ci_method"]
    assert "seeds_note" in ev and "2 seed(s) x 1 asset(s)" in ev["series"]
    assert "95% CI [" in report["lines"][6]
    on_disk = json.loads((tmp_path / "wf" / RESULT_FILE).read_text())
    assert on_disk["pooled"]["test_sharpe_ci95"] == [lo, hi]
    # the verdict reads the pooled intervals, the rules named as chosen on each fold's validation
    d, b = ev["intervals"]["agent_minus_best_rule"], ev["intervals"]["agent_minus_buy_and_hold"]
    from rl_zerosync.evaluation.verdict import compare

    assert report["verdict"] == (
        "verdict on the test segments of 6 fold(s) (agent's Sharpe minus theirs, 95% intervals): "
        f"{compare(d, 'the rule chosen on validation (per fold)')}; {compare(b, 'buy-and-hold')}")


def test_walk_forward_png_shows_each_fold_and_the_chained_equity(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module
    from rl_zerosync.evaluation.walkforward_plot import chained, plot_walk_forward

    seen = []

    def fake_train(s, **kw):
        seen.append(s)
        _fake_returns(s.run_dir, len(seen) - 1, 0)
        iv = {"agent": _interval(0.2 * len(seen)), "buy_and_hold": _interval(1.0), "momentum": _interval(0.4),
              "agent_minus_best_rule": {"best_rule": "momentum", **_interval(-0.1)}}
        return {"evaluation": {"summary": _fake_summary(len(seen) - 1), "evidence": {"intervals": iv}}}

    monkeypatch.setattr(train_module, "train", fake_train)
    report = walk_forward(settings_for(tmp_path), 3)
    iv = report["folds"][1]["intervals"]
    assert iv["rule_name"] == "momentum" and set(iv) == {"agent", "buy_and_hold", "rule", "rule_name"}
    assert np.allclose([iv["agent"], iv["buy_and_hold"], iv["rule"]], [[0.1, 0.7], [0.7, 1.3], [0.1, 0.7]])
    c = chained(report["folds"])
    assert c["per_bar"] and c["bounds"] == [0, 120, 240]  # 3 folds of 120 test bars, stitched
    x, eq = c["agent"][None]
    nets = np.concatenate([np.load(Path(f["run_dir"]) / "evaluation" / "returns_test.npz")["agent_0"]
                           for f in report["folds"]])
    assert len(eq) == 361 and eq[-1] == pytest.approx(np.prod(1.0 + nets))
    texts = plot_walk_forward(report, tmp_path / "again.png")
    assert texts["sharpe_title"].startswith("per fold: test Sharpe (mean over assets) with 95% interval | pooled")
    assert {"agent", "buy & hold", "rule chosen on the fold's validation",
            "rules chosen on each fold's validation"} <= set(texts["legend"])
    assert "test equity chained over the folds" in texts["equity_title"]
    assert (tmp_path / "wf" / "walk_forward.png").is_file()


def _interval(mid: float) -> dict:
    return {"estimate": mid, "low": mid - 0.3, "high": mid + 0.3}


def test_walk_forward_without_fold_returns_says_why(tmp_path, monkeypatch):
    import rl_zerosync.run.train as train_module

    monkeypatch.setattr(train_module, "train", lambda s, **kw: {"evaluation": {"summary": _fake_summary(0)}})
    report = walk_forward(settings_for(tmp_path), 2)
    assert report["evidence"]["value"] is None and "returns_test.npz" in report["evidence"]["reason"]
    assert "test_sharpe_ci95" not in report["pooled"]


def test_cli_passes_anchored_and_seeds_to_the_walk(tmp_path, monkeypatch, capsys):
    import rl_zerosync.run.walkforward as wf
    from rl_zerosync.cli import main

    seen = {}

    def fake_walk(settings, k, **kw):
        seen.update(k=k, **kw)
        return {"lines": ["walk-forward pooled over 0 folds"], "path": str(tmp_path / RESULT_FILE), "complete": True}

    monkeypatch.setattr(wf, "walk_forward", fake_walk)
    config = tmp_path / "wf.yaml"
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["run"].update({"dir": str(tmp_path), "name": "wf"})
    raw["data"] = cfg()
    config.write_text(yaml.safe_dump(raw))
    args = ["evaluate", "--walk-forward", "3", "--config", str(config)]
    assert main(args + ["--anchored", "--seeds", "0,2"]) == 0
    assert seen["k"] == 3 and seen["anchored"] is True and seen["seeds"] == [0, 2]
    assert main(args) == 0 and seen["anchored"] is False and seen["seeds"] is None
    assert main(args + ["--seeds", "1,1"]) == 2
    assert "--seeds: expected distinct" in capsys.readouterr().err
