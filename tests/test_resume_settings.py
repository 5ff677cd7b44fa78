"""``--resume`` is checked against the run's own ``settings.yaml`` before anything is written: a
change of the network, env or data is refused naming every differing key with both values; other
changes are allowed and listed."""
from __future__ import annotations

import yaml
import pytest

from rl_zerosync import cli
from rl_zerosync.config.settings import from_dict
from rl_zerosync.run.resume_settings import ResumeSettingsError, compare
from tiny_run import tiny_raw


def _run(tmp_path, **run):
    raw = tiny_raw({"dir": str(tmp_path), "name": "r", "iterations": 3, **run})
    s = from_dict(raw)
    s.run_dir.mkdir(parents=True)
    (s.run_dir / "settings.yaml").write_text(yaml.safe_dump(s.to_dict(), sort_keys=False))
    return raw


def _changed(raw, section, **values):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    raw[section] = {**raw.get(section, {}), **values}
    return from_dict(raw)


@pytest.mark.parametrize("section, values, keys", [
    ("model", {"hidden": [32, 32]}, ["model.hidden"]),
    ("model", {"action_mode": "flat"}, ["model.action_mode"]),
    ("env", {"window": 4}, ["env.window"]),
    ("data", {"seed": 5, "num_bars": 1700}, ["data.num_bars", "data.seed"]),
])
def test_shape_or_data_changes_are_refused_naming_the_keys(tmp_path, section, values, keys):
    raw = _run(tmp_path)
    before = (tmp_path / "r" / "settings.yaml").read_text()
    with pytest.raises(ResumeSettingsError) as err:
        compare(_changed(raw, section, **values), tmp_path / "r")
    msg = str(err.value)
    assert all(f"{k}: " in msg for k in keys) and "in the run" in msg and "\n" not in msg
    assert (tmp_path / "r" / "settings.yaml").read_text() == before


def test_allowed_changes_are_listed(tmp_path):
    raw = _run(tmp_path)
    assert compare(from_dict(raw), tmp_path / "r") == []
    changes = compare(_changed(raw, "run", iterations=6, eval_every=2), tmp_path / "r")
    assert changes == ["run.eval_every 0 -> 2", "run.iterations 3 -> 6"]


def test_the_cli_refuses_before_the_run_is_touched(tmp_path, capsys):
    raw = _run(tmp_path)
    raw["model"]["hidden"] = [8]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    before = sorted(p.name for p in (tmp_path / "r").iterdir())
    rc = cli.main(["train", "--config", str(cfg), "--resume", str(tmp_path / "r")])
    err = capsys.readouterr().err
    error = [line for line in err.splitlines() if line.startswith("error:")]  # warnings may come first
    assert rc == 2 and len(error) == 1 and error[0].startswith("error: --resume")
    assert "model.hidden: [16, 16] in the run, [8] now" in error[0]
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == before
