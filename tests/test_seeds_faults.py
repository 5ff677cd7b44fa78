"""A ``--seeds`` sweep never leaves a child training alone or a stale ``seeds.json``: killing the
driver with SIGKILL sends its child SIGTERM (it writes its checkpoint and exits 143), and
``seeds.json`` is marked partial from the start of the sweep; SIGTERM to the driver passes the signal
on and ends the sweep with exit 143 and a partial ``seeds.json``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_zerosync.run.children import write_json_atomic

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "smoke.yaml"


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    return env


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _rows(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.slow
def test_the_seed_child_stops_with_its_driver(tmp_path, sig):
    cmd = [sys.executable, "-m", "rl_zerosync", "train", "--config", str(SMOKE), "--set", f"run.dir={tmp_path}",
           "--set", "run.name=s", "--set", "run.iterations=100000", "--set", "run.checkpoint_every=0", "--seeds", "3"]
    driver = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    seed_dir = tmp_path / "s" / "seed3"
    try:
        deadline = time.time() + 240
        while time.time() < deadline and _rows(seed_dir / "metrics.jsonl") < 2:
            time.sleep(0.5)
            assert driver.poll() is None, driver.stdout.read()
        report = json.loads((tmp_path / "s" / "seeds.json").read_text())
        assert report["partial"] is True and report["unfinished_seeds"] == [3]  # during the sweep
        child = [p for p in _children(driver.pid) if "rl_zerosync" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(child) == 1
        driver.send_signal(sig)
        out, _ = driver.communicate(timeout=180)
        deadline = time.time() + 120
        while time.time() < deadline and _alive(child[0]):
            time.sleep(0.5)
        assert not _alive(child[0]), "the seed child kept training after its driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        try:  # whatever is left of the sweep's session (the child on a failure)
            os.killpg(driver.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    log = (seed_dir / "train.log").read_text()
    assert "interrupt (SIGTERM)" in log and "interrupted" not in log.split("interrupt (SIGTERM)")[1], out[-2000:]
    assert "interrupt (SIGTERM)" in log and (seed_dir / "checkpoint" / "rllib_checkpoint.json").is_file(), log[-3000:]
    report = json.loads((tmp_path / "s" / "seeds.json").read_text())
    assert report["partial"] is True and report["unfinished_seeds"] == [3]
    if sig == signal.SIGTERM:
        assert driver.returncode == 143, out[-3000:]
        assert report["interrupted_by"] == signal.SIGTERM and "seeds.json marked partial" in out


def test_write_json_atomic_leaves_no_tmp(tmp_path):
    path = write_json_atomic(tmp_path / "r.json", {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and sorted(os.listdir(tmp_path)) == ["r.json"]
