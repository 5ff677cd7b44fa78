"""The panel sweep (benchmarks/panel_sweep.py): its variants, and a choice made on validation only."""
from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import panel_sweep as ps
from rl_zerosync.config.settings import load

ROOT = Path(__file__).resolve().parents[1]
BARS, ASSETS = 300, 4


def test_variants_one_factor_at_a_time_and_full():
    oat = ps.variants(ps.FACTORS, full=False)
    assert oat[0] == {} and len(oat) == 1 + sum(len(v) - 1 for v in ps.FACTORS.values())
    assert len(ps.variants(ps.FACTORS, full=True)) == int(np.prod([len(v) for v in ps.FACTORS.values()]))
    only = ps.parse_factors(["turnover=0,2e-3", "budget=1", "hidden=64x64", "reward=plain", "replay=1"])
    assert ps.variants(only, full=True) == [{}, {"turnover": "2e-3"}]
    with pytest.raises(SystemExit, match="turnover: unknown level"):
        ps.parse_factors(["turnover=1"])
    with pytest.raises(SystemExit, match="NAME=L1"):
        ps.parse_factors(["depth=2"])


def test_overrides_scale_the_schedule_with_the_budget():
    base = load(ROOT / "configs/panel.yaml")
    sets = ps.overrides({"budget": "5", "turnover": "5e-4", "reward": "vol", "hidden": "32"}, base, None)
    assert sets[:4] == ["run.iterations=300", "algo.epsilon=[[0, 1.0], [300000, 0.05]]", "run.eval_every=25",
                        "run.checkpoint_every=50"]
    assert {"env.turnover_penalty=0.0005", "env.reward_vol_scaled=true", "env.reward_scale=1.0",
            "model.hidden=[32]"} <= set(sets)
    # a CPU-sized 1x of 20 iterations: the schedule keeps its fraction of the run and its 12 passes
    assert ps.overrides({}, base, 20)[:3] == ["run.iterations=20", "algo.epsilon=[[0, 1.0], [20000, 0.05]]",
                                              "run.eval_every=2"]
    load(ROOT / "configs/panel.yaml", sets)  # every item is a valid --set


def _fake_run(path: Path, drift: float, test_drift: float, seed: int) -> None:
    """A run directory as training leaves it (metrics.jsonl, validation_returns/) with the best pass at
    iteration 10, plus an evaluation/ whose test returns rank the variants the other way round."""
    g = np.random.default_rng(seed)
    (path / "validation_returns").mkdir(parents=True)
    rows = []
    for it, d in ((5, drift - 0.002), (10, drift)):
        nets = {f"asset_{i}": (d + 0.01 * g.standard_normal(BARS)).astype(np.float32) for i in range(ASSETS)}
        np.savez(path / "validation_returns" / f"{it:08d}.npz", **nets)
        rows.append({"iteration": it, "eval/validation_sharpe": 1.0, "eval/validation_turnover_per_bar": 0.1,
                     "eval/best_iteration": 10})
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ev = path / "evaluation"
    ev.mkdir()
    test = {f"agent_{i}": test_drift + 0.01 * g.standard_normal(BARS) for i in range(ASSETS)}
    np.savez(ev / "returns_test.npz", **test)
    (ev / "metrics.json").write_text(json.dumps({"summary": {"sharpe": 100 * test_drift}}))


def _select(tmp: Path):
    designed = [{}, {"turnover": "2e-3"}]
    done = [{"variant": ps.variant_name(v), "run_dir": str(tmp / f"{ps.variant_name(v)}_s{s}"), "exit_code": 0}
            for v in designed for s in (0, 1)]
    bench = [1e-4 + 0.01 * np.random.default_rng(9).standard_normal(BARS) for _ in range(ASSETS)]
    return ps.select(designed, done, bench, 252.0)


def test_choice_reads_validation_only(tmp_path, monkeypatch):
    for s in (0, 1):  # the turnover variant is better on validation and far worse on test
        _fake_run(tmp_path / f"config_s{s}", drift=0.0, test_drift=0.01, seed=s)
        _fake_run(tmp_path / f"turnover2em3_s{s}", drift=0.002, test_drift=-0.01, seed=10 + s)
    summaries, chosen = _select(tmp_path)
    assert chosen["variant"] == "turnover2em3" and chosen["runs"] == 4 and chosen["trials"]["passes"] == 8
    assert summaries[1]["validation_sharpe"]["estimate"] > summaries[0]["validation_sharpe"]["estimate"]
    assert 1.0 <= chosen["trials"]["effective"] <= 8 and 0.0 <= chosen["deflated_sharpe"]["value"] <= 1.0

    # poison every test output: garbage files, reversed returns; record every file opened
    for run in tmp_path.iterdir():
        (run / "evaluation" / "returns_test.npz").write_bytes(b"not an npz")
        (run / "evaluation" / "metrics.json").write_text("{not json")
    opened = []
    real_open, real_load = builtins.open, np.load
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    monkeypatch.setattr(np, "load", lambda f, *a, **k: (opened.append(str(f)), real_load(f, *a, **k))[1])
    real_text = Path.read_text
    monkeypatch.setattr(Path, "read_text",
                        lambda self, *a, **k: (opened.append(str(self)), real_text(self, *a, **k))[1])
    again, chosen_again = _select(tmp_path)
    assert chosen_again == chosen and again == summaries
    assert any(f.endswith("metrics.jsonl") for f in opened)
    assert all("validation_returns" in f or f.endswith("metrics.jsonl") for f in opened), opened
    inside = [Path(f).relative_to(tmp_path).parts for f in opened]
    assert not any("evaluation" in parts or any("test" in x for x in parts) for parts in inside), inside


def test_final_test_is_read_once(tmp_path):
    out = tmp_path / "sweep.json"
    out.write_text(json.dumps({"chosen": {"variant": "config"}, "runs": [],
                               "final_test": {"variant": "config", "date": "2026-01-01"}}))
    with pytest.raises(SystemExit, match="already read"):
        ps.final_test(out, 1, tmp_path)
