"""The training loop with validation (CPU, in process, one Ray instance): cadence, best checkpoint,
evaluation of the best, resume, and seeds that reach the env and make runs reproducible."""
from __future__ import annotations

import json

import pytest

from rl_zerosync.config.settings import from_dict
from tiny_run import tiny_raw

pytestmark = pytest.mark.usefixtures("ray_local")  # one Ray instance (conftest) for the module
BASE = tiny_raw({"iterations": 4, "checkpoint_every": 0, "eval_every": 2}, learner={"replay_capacity": 4000})


def _settings(tmp_path, name, **sections):
    raw = json.loads(json.dumps(BASE))
    raw["run"].update(dir=str(tmp_path), name=name)
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return from_dict(raw)


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from rl_zerosync.run.train import train

    tmp = tmp_path_factory.mktemp("runs")
    out = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out[name] = train(_settings(tmp, name, run={"seed": seed}))
    return tmp, out


def test_validation_cadence_and_logged_metrics(runs):
    tmp, _ = runs
    rows = _rows(tmp / "a")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    evals = [r["iteration"] for r in rows if "eval/validation_sharpe" in r]
    assert evals == [2, 4]
    for key in ("sharpe", "total_return", "max_drawdown", "turnover_per_bar", "momentum_sharpe",
                "buy_and_hold_sharpe", "mean_reversion_sharpe", "best_rule_sharpe", "time_s"):
        assert f"eval/validation_{key}" in rows[1], key


def test_best_checkpoint_is_the_best_validation_and_is_evaluated(runs):
    tmp, results = runs
    rows = [r for r in _rows(tmp / "a") if "eval/validation_sharpe" in r]
    best = max(rows, key=lambda r: r["eval/validation_sharpe"])  # first of ties
    state = json.loads((tmp / "a" / "checkpoint_best" / "run_state.json").read_text())
    assert state["iteration"] == best["iteration"] == state["best"]["iteration"]
    assert state["best"]["value"] == pytest.approx(best["eval/validation_sharpe"])
    report = results["a"]["evaluation"]
    assert report["checkpoint"].endswith("checkpoint_best")
    s = report["summary"]
    assert s["checkpoint_iteration"] == best["iteration"]
    assert s["validation_sharpe"] == pytest.approx(best["eval/validation_sharpe"], abs=1e-6)
    assert set(s["rules"]) == {"flat", "buy_and_hold", "momentum", "mean_reversion"}
    assert s["agent_minus_best_rule"] == pytest.approx(s["sharpe"] - s["best_rule_sharpe"])
    assert "train_minus_test_sharpe" in s
    assert f"rule chosen on validation: {s['best_rule']} (test {s['best_rule_sharpe']:+.2f})" in report["summary_line"]
    assert report["verdict_line"].startswith("verdict on test (agent's Sharpe minus theirs, 95% intervals): ")
    # synthetic data: the oracle beside the rules, its variant chosen on validation and frozen for test
    oracle = {seg: report["segments"][seg]["oracle"] for seg in ("validation", "test")}
    assert oracle["validation"]["chosen_on"] == oracle["test"]["chosen_on"] == "validation"
    assert oracle["test"]["variant"] == oracle["validation"]["variant"] == s["oracle_variant"]
    assert s["oracle_sharpe"] == oracle["test"]["mean"]["sharpe"] and s["oracle_trials"] == 20
    if s["oracle_sharpe"] > 0:
        assert s["efficiency"] == pytest.approx(s["sharpe"] / s["oracle_sharpe"])
    assert f"oracle (knows the generator) {s['oracle_sharpe']:+.2f}, efficiency " in report["summary_line"]
    assert (tmp / "a" / "evaluation" / "report.png").stat().st_size > 10_000
    last = json.loads((tmp / "a" / "checkpoint" / "run_state.json").read_text())
    assert last["iteration"] == 4 and last["best"] == state["best"]


def test_same_seed_same_run_other_seed_other_run(runs):
    tmp, _ = runs
    keys = ("learners/default_policy/zerosync/loss_mean", "env_runners/episode_return_mean",
            "eval/validation_sharpe", "env_runners/trading/mix_exposure_0")
    a, b, c = (_rows(tmp / n) for n in "abc")
    pick = lambda rows: [[r.get(k) for k in keys] for r in rows]  # noqa: E731
    assert any(v is not None for row in pick(a) for v in row)
    assert pick(a) == pick(b)
    assert pick(a) != pick(c)


def test_seed_reaches_the_env_episode_schedule():
    from rl_zerosync.config.settings import to_rllib_config

    def first_episodes(seed):
        s = from_dict({**json.loads(json.dumps(BASE)), "run": {**BASE["run"], "seed": seed}})
        algo = to_rllib_config(s).build_algo()
        try:
            st = algo.env_runner.env.state
            return st.asset.tolist(), st.t.tolist()
        finally:
            algo.stop()

    assert first_episodes(0) == first_episodes(0)
    assert first_episodes(0) != first_episodes(1)


def test_resume_keeps_the_best_so_far(tmp_path):
    from rl_zerosync.run.train import train

    train(_settings(tmp_path, "r", run={"iterations": 2, "evaluate": False}))
    first = json.loads((tmp_path / "r" / "checkpoint_best" / "run_state.json").read_text())["best"]
    train(_settings(tmp_path, "r", run={"iterations": 4, "evaluate": False}), resume=str(tmp_path / "r"))
    best = json.loads((tmp_path / "r" / "checkpoint_best" / "run_state.json").read_text())["best"]
    evals = [r for r in _rows(tmp_path / "r") if "eval/validation_sharpe" in r]
    assert [r["iteration"] for r in evals] == [2, 4]
    assert best["value"] == pytest.approx(max(first["value"], evals[-1]["eval/validation_sharpe"]))
    assert evals[-1]["eval/best_validation_sharpe"] == pytest.approx(best["value"])


def test_fresh_training_series_are_drawn_every_n_rollouts(tmp_path):
    from rl_zerosync.config.settings import to_rllib_config

    s = _settings(tmp_path, "f", data={"regenerate_every": 2})
    algo = to_rllib_config(s).build_algo()
    try:
        env = algo.env_runner.env
        before = env.data.close.clone()
        algo.train()
        algo.train()
        assert env.data.close.equal(before)
        result = algo.train()  # third rollout: generation 1
        assert not env.data.close.equal(before)
        assert result["env_runners"]["data_generation"] == 1
    finally:
        algo.stop()
