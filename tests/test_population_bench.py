"""The committed results of ``benchmarks/population.py`` (read, never re-run): the summary keys, finite
positive numbers, and numbers that agree with each other (agents per hour = P * 3600 / wall, env steps/s
= env steps / wall, the ratios and the summary from the per-configuration rows)."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
FILES = [name for name in ("population_cpu_quick.json", "population.json") if (RESULTS / name).is_file()]
REL = 1e-9


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def test_the_quick_results_are_committed():
    assert "population_cpu_quick.json" in FILES


@pytest.fixture(params=FILES)
def result(request) -> dict:
    return json.loads((RESULTS / request.param).read_text())


def test_header_names_repository_files_and_the_scratch_folder_as_tmp(result):
    for key in ("date", "hardware", "versions", "config", "settings", "commands", "configs", "definitions"):
        assert key in result, key
    assert (REPO / result["config"]).is_file(), result["config"]
    absolute = [s for s in _strings(result) if s.startswith("/")]
    assert not absolute, absolute
    assert all(c.startswith("python -m rl_zerosync train --config <tmp>/") for c in result["commands"])
    assert len(result["commands"]) == len(result["summary"]["p"]) + 1  # every P, then the processes


def test_summary_keys_are_finite_and_positive(result):
    s = result["summary"]
    big = max(s["p"])
    assert 1 in s["p"] and s["p"] == sorted(s["p"])
    for key in (f"aggregate_env_steps_per_s_p{big}", f"speedup_vs_one_member_p{big}", f"wall_s_p{big}",
                "agents_per_hour_vs_processes", f"aggregate_env_steps_per_s_p{big}_steady",
                f"speedup_vs_one_member_p{big}_steady", "wall_ratio_vs_processes"):
        assert _positive(s[key]), (key, s[key])
    assert "syncs_per_population_update" in s
    if result["hardware"]["device"] == "cpu":
        assert s["syncs_per_population_update"] is None and "no CUDA device" in s["syncs_per_population_update_reason"]
    else:
        v = s["syncs_per_population_update"]
        assert isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def test_every_row_is_consistent_with_its_wall_and_counts(result):
    for row in result["runs"]:
        assert row["exit_code"] == 0, row
        p, wall = row["p"], row["wall_s"]
        for key in ("wall_s", "env_steps", "updates", "env_steps_per_s", "updates_per_s", "agents_per_hour",
                    "steady_env_steps_per_s", "steady_updates_per_s", "iteration_s_median"):
            assert _positive(row[key]), (row["side"], p, key)
        assert row["agents_per_hour"] == pytest.approx(p * 3600.0 / wall, rel=REL)
        assert row["env_steps_per_s"] == pytest.approx(row["env_steps"] / wall, rel=REL)
        assert row["updates_per_s"] == pytest.approx(row["updates"] / wall, rel=REL)
        assert len(row["iteration_s"]) == row["iterations"]
        assert row["iteration_s_median"] == pytest.approx(statistics.median(row["iteration_s"]), rel=REL)
        # every member samples the same env steps each iteration (a fixed rollout), so the steady state is
        # the median of (all members' steps per iteration) / T_i
        per_iteration = row["env_steps"] / row["iterations"]
        assert row["steady_env_steps_per_s"] == pytest.approx(
            statistics.median(per_iteration / t for t in row["iteration_s"]), rel=1e-6)
        if row["side"] == "processes":
            assert row["parallel"] == min(p, result["cores"]) and row["waves"] == math.ceil(p / row["parallel"])


def test_summary_and_ratios_come_from_the_rows(result):
    s, c = result["summary"], result["comparison"]
    ours = {r["p"]: r for r in result["runs"] if r["side"] == "population"}
    (procs,) = [r for r in result["runs"] if r["side"] == "processes"]
    big = max(s["p"])
    assert sorted(ours) == s["p"] and c["p"] == procs["p"] == s["agents_per_hour_vs_processes_p"]
    assert s[f"wall_s_p{big}"] == ours[big]["wall_s"]
    assert s[f"aggregate_env_steps_per_s_p{big}"] == ours[big]["env_steps_per_s"]
    assert s[f"aggregate_env_steps_per_s_p{big}_steady"] == ours[big]["steady_env_steps_per_s"]
    assert s[f"speedup_vs_one_member_p{big}"] == pytest.approx(
        ours[big]["env_steps_per_s"] / ours[1]["env_steps_per_s"], rel=REL)
    assert s[f"speedup_vs_one_member_p{big}_steady"] == pytest.approx(
        ours[big]["steady_env_steps_per_s"] / ours[1]["steady_env_steps_per_s"], rel=REL)
    mine = ours[procs["p"]]
    assert s["agents_per_hour_vs_processes"] == c["agents_per_hour_vs_processes"] == pytest.approx(
        mine["agents_per_hour"] / procs["agents_per_hour"], rel=REL)
    assert s["agents_per_hour_vs_processes"] == pytest.approx(procs["wall_s"] / mine["wall_s"], rel=REL)
    assert s["wall_ratio_vs_processes"] == pytest.approx(mine["wall_s"] / procs["wall_s"], rel=REL)
    # the same members on both sides: as many env steps and updates
    assert mine["env_steps"] == procs["env_steps"] and mine["updates"] == procs["updates"]
