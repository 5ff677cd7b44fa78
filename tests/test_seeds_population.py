"""``train --seeds`` as one population process: where the seeds fit one device the sweep runs them as
the members of one population (header line, ``<name>/population/member<k>``), and each seed's numbers
are exactly those of its own process (``--processes``); a trained one is refused without ``--overwrite``;
what keeps processes is named."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rl_zerosync.config.settings import from_dict, load
from rl_zerosync.run.seeds import together_blocker

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "configs" / "smoke.yaml"


def _train(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "rl_zerosync", "train", "--config", str(SMOKE), "--set", f"run.dir={tmp_path}",
           "--set", f"run.name={name}", "--set", "run.checkpoint_every=0", *args]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)


def _weights(run_dir: Path) -> dict:
    import pickle

    out = {}
    module = run_dir / "checkpoint" / "learner_group" / "learner" / "rl_module" / "default_policy"
    for f in sorted(module.rglob("*.pkl")):
        with open(f, "rb") as fh:
            state = pickle.load(fh)
        out.update({f"{f.name}/{k}": np.asarray(v) for k, v in state.items() if hasattr(v, "shape")})
    assert out
    return out


@pytest.mark.slow
def test_seeds_as_one_population_equal_their_own_processes(tmp_path):
    pop = _train(tmp_path, "t", "--seeds", "0,1")
    assert pop.returncode == 0, pop.stdout[-3000:] + pop.stderr[-3000:]
    assert "seeds 0,1: one population process on cpu (2 members x" in pop.stdout
    report = json.loads((tmp_path / "t" / "seeds.json").read_text())
    assert report["run_as"] == "one population process"
    assert report["member_dirs"] == {"0": "population/member0", "1": "population/member1"}
    procs = _train(tmp_path, "p", "--seeds", "0,1", "--processes")
    assert procs.returncode == 0, procs.stdout[-3000:] + procs.stderr[-3000:]
    assert "seeds 0,1: one process per seed, 1 at a time (--processes given)" in procs.stdout
    ref = json.loads((tmp_path / "p" / "seeds.json").read_text())
    assert ref["run_as"] == "one process per seed"
    for seed in ("0", "1"):
        a, b = report["per_seed"][seed], ref["per_seed"][seed]
        for key in ("test_sharpe", "best_validation_sharpe", "checkpoint_iteration", "agent_minus_best_rule",
                    "validation_curve"):
            assert a[key] == b[key], (seed, key)
        wa, wb = _weights(tmp_path / "t" / "population" / f"member{seed}"), _weights(tmp_path / "p" / f"seed{seed}")
        assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa), seed
    assert report["per_seed"]["0"]["test_sharpe"] != report["per_seed"]["1"]["test_sharpe"]
    assert report["summary"]["test_sharpe_mean"] == ref["summary"]["test_sharpe_mean"]
    again = _train(tmp_path, "t", "--seeds", "0,1")
    assert again.returncode == 2 and "already holds a population" in again.stderr and "--overwrite" in again.stderr


def test_what_keeps_one_process_per_seed_is_named():
    base = load(str(SMOKE), [])
    assert together_blocker(base, [0, 1]) is None
    assert together_blocker(base, [0]) == "one seed"
    raw = base.to_dict()
    raw["algo"]["num_env_runners"] = 2
    assert "num_env_runners 2" in together_blocker(from_dict(raw, "x.yaml"), [0, 1])
    big = load(str(SMOKE), ["learner.replay_capacity=2000000000"])
    assert "exceed" in together_blocker(big, list(range(64)))
