"""Sealed held-out series for synthetic data (``data.heldout_validation_series`` /
``data.heldout_test_series``): validation and test are whole series of their own generator seeds,
never trained on; selection (checkpoint, rule variant) reads validation only and the test set is
read once, for the report. An instrument on the data access (every segment built, whatever the
caller) fails the test if training or selection touches a test segment."""
from __future__ import annotations

import json

import pytest
import torch

from rl_zerosync.data import make_market
from rl_zerosync.data.data_settings import DataSettings, heldout_seed
from tiny_run import tiny_raw

HELDOUT = {"heldout_validation_series": 3, "heldout_test_series": 5, "heldout_bars": 400}


def test_heldout_series_are_their_own_seeds_and_whole():
    cfg = {"source": "synthetic", "num_assets": 2, "num_bars": 600, "seed": 7, **HELDOUT}
    train, val, test = (make_market(cfg, s) for s in ("train", "validation", "test"))
    assert train.asset_names == ("synth0", "synth1") and tuple(train.close.shape) == (2, 600)
    assert val.asset_names == ("validation0", "validation1", "validation2") and val.segment == "validation"
    assert tuple(test.close.shape) == (5, 400) and test.segment == "test"
    seeds = {7, heldout_seed(7, "validation"), heldout_seed(7, "test")}
    assert len(seeds) == 3  # no held-out series is the training series or the other set's
    assert not torch.equal(val.close[0], test.close[0])
    assert not torch.equal(train.close[0, :400], val.close[0])
    old = make_market({k: v for k, v in cfg.items() if k not in HELDOUT}, "validation")
    assert old.asset_names == ("synth0", "synth1")  # keys absent (old settings): time segments of seed 7


@pytest.mark.parametrize("bad, match", [
    ({"heldout_validation_series": 3}, r"data\.heldout_validation_series, data\.heldout_test_series: expected both 0"),
    ({"heldout_validation_series": -1, "heldout_test_series": 2}, r"data\.heldout_validation_series: expected an int >= 0"),
    ({"heldout_validation_series": 2, "heldout_test_series": 2, "heldout_bars": 1}, r"data\.heldout_bars: expected an int >= 2"),
])
def test_bad_heldout_settings_name_the_key(bad, match):
    with pytest.raises(ValueError, match=match):
        DataSettings.from_dict({"source": "synthetic", **bad})


def test_heldout_keys_are_synthetic_only():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['heldout_test_series', 'heldout_validation_series'\]"):
        DataSettings.from_dict({"source": "csv", "paths": ["x.csv"], "heldout_validation_series": 2,
                                "heldout_test_series": 2})


@pytest.fixture()
def reads(monkeypatch):
    """Every segment built from now on, in order (time segments and held-out series alike)."""
    import rl_zerosync.data.data_settings as ds
    from rl_zerosync.data.market import MarketData

    seen: list[str] = []
    split, heldout = MarketData.split, ds.heldout_market

    def record_split(self, name, *a, **k):
        seen.append(name)
        return split(self, name, *a, **k)

    def record_heldout(d, segment):
        seen.append(segment)
        return heldout(d, segment)

    monkeypatch.setattr(MarketData, "split", record_split)
    monkeypatch.setattr(ds, "heldout_market", record_heldout)
    return seen


@pytest.mark.parametrize("layout", ["heldout", "time_segments"])
def test_selection_never_reads_test(tmp_path, reads, ray_local, layout):
    """Training with validation passes and checkpoint selection reads no test segment; the
    evaluation chooses the rules on validation, then reads test once."""
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint
    from rl_zerosync.run.train import train

    raw = tiny_raw({"iterations": 2, "checkpoint_every": 1, "eval_every": 1, "evaluate": False,
                    "dir": str(tmp_path), "name": "r"})
    if layout == "heldout":
        raw["data"].update(HELDOUT)
    train(from_dict(raw))  # one Ray instance for the module (ray_local)
    assert "validation" in reads and "test" not in reads, reads  # selection saw validation only
    reads.clear()
    report = evaluate_checkpoint(tmp_path / "r", out_dir=tmp_path / "eval", device="cpu")
    assert reads.count("test") == 1 and reads.index("validation") < reads.index("test"), reads
    test = report["segments"]["test"]
    assert test["rule_choice"] == report["segments"]["validation"]["rule_choice"]  # frozen from validation
    assert report["evidence"]["chosen_on"] == "validation"
    if layout == "heldout":
        assert test["assets"] == [f"test{i}" for i in range(5)]
        assert report["summary"]["heldout_test_series"] == 5
        assert "train_minus_test_sharpe" in report["summary"]  # trained on series seed: a real gap
    on_disk = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert on_disk["evidence"]["intervals"]["agent"]["assets"] == (5 if layout == "heldout" else 2)
