"""Validation building blocks on the CPU: the batched segment walk, rule baselines against
hand-computed positions, choice on validation, best-checkpoint bookkeeping, fresh training series,
seed statistics."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rl_zerosync.actions import OrderType, Urgency, encode
from rl_zerosync.envs import EnvParams
from rl_zerosync.data import make_market
from rl_zerosync.evaluation.backtest import evaluate_policy
from rl_zerosync.envs.core import init_state, make_tables, observe, transition
from rl_zerosync.evaluation.backtest import best_rule, rule_metrics
from rl_zerosync.data.data_settings import regenerate_every
from rl_zerosync.data.fresh import FreshSeries, build_training_market, training_seed
from rl_zerosync.evaluation.rules import LOOKBACKS, THRESHOLDS, RuleWalk, choose, parse_label, variants
from rl_zerosync.evaluation.walk import SegmentWalk
from rl_zerosync.run.seeds import mean_ci95, parse_seeds

PARAMS = EnvParams(episode_len=40, window=8, fill_mode="stochastic")


@pytest.fixture(scope="module")
def segment():
    return make_market({"num_assets": 3, "num_bars": 1500, "seed": 11, "features": {"warmup": 70}}, "validation")


def _reference_walk(policy, data, params):
    """The walk written plainly with the env's own transition (one step at a time)."""
    tables = make_tables(data, params)
    a = data.num_assets
    first, last = tables.start_lo, data.length - 2
    state = init_state(data, tables, torch.arange(a))
    state = replace(state, asset=torch.arange(a), t=first.clone())
    nets = []
    for _ in range(int((last - first + 1).max())):
        actions = policy(observe(data, tables, state))
        state, info = transition(data, tables, state, actions)
        state = replace(state, t=torch.minimum(state.t, last), step=state.step % params.episode_len)
        nets.append(info.net)
    return torch.stack(nets, 1).numpy()


def test_walk_matches_the_env_transition_step_by_step(segment):
    gen = torch.Generator().manual_seed(0)
    table = torch.randint(0, 45, (5000, segment.num_assets), generator=gen)
    calls = {"i": 0}

    def policy(obs):
        i = calls["i"]
        calls["i"] += 1
        return table[i]

    want = _reference_walk(policy, segment, PARAMS)
    calls["i"] = 0
    walk = SegmentWalk(segment, PARAMS, chunk=7)  # a chunk that does not divide the step count
    rec = walk.run(lambda obs, st: policy(obs))
    for a in range(segment.num_assets):
        n = walk.steps[a]
        got = walk.env_records(rec, a)
        assert got["net"].shape == (n,)
        np.testing.assert_allclose(got["net"], want[a, :n], rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(got["action"], table[:n, a].numpy())


def test_walk_reports_out_of_range_actions_after_the_walk(segment):
    walk = SegmentWalk(segment, PARAMS)
    with pytest.raises(ValueError, match=r"0\.\.44"):
        walk.run(lambda obs, st: torch.full((obs.shape[0],), -1))
    routed = SegmentWalk(segment, PARAMS, routing={})
    with pytest.raises(ValueError, match=r"0\.\.4"):
        routed.run(lambda obs, st: torch.full((obs.shape[0],), 5))


def test_rules_trade_the_hand_computed_signal(segment):
    """Every variant's executed exposure is the documented rule of z_t over its lookback, with the
    position held inside the threshold band; buy-and-hold buys at MARKET and holds."""
    rules = RuleWalk(segment, PARAMS, routing={})
    out = rules.run()
    levels = np.array(PARAMS.exposure_levels)
    rn = segment.ret_norm.double().numpy()
    start = rules.walk.starts
    checked = 0
    for v in variants():
        for a, rec in enumerate(out[v.label]):
            e = rec["action"] // 9
            if v.rule == "buy_and_hold":
                assert (rec["action"] == encode(4, OrderType.MARKET, Urgency.NORMAL)).all()
                continue
            assert set(np.unique(rec["action"] % 9 // 3)) <= {0, 1, 2}
            sign = 1.0 if v.rule == "momentum" else -1.0
            pos_before = np.concatenate(([0.0], rec["position"][:-1]))
            for j in range(len(e)):
                t = start[a] + j
                z = rn[a, max(t - v.lookback + 1, 0): t + 1].sum() / math.sqrt(v.lookback) * sign
                held = int(np.abs(levels - pos_before[j]).argmin())
                want = 4 if z > v.threshold else (0 if z < -v.threshold else held)
                assert e[j] == want, (v.label, a, j, z)
                checked += 1
    assert checked > 10_000


def test_rule_choice_is_made_on_validation_and_frozen_for_test():
    cfg = {"num_assets": 3, "num_bars": 3000, "seed": 5}
    val, test = make_market(cfg, "validation"), make_market(cfg, "test")
    hold = lambda obs: torch.full((obs.shape[0],), 22)  # noqa: E731
    rv = evaluate_policy(hold, val, PARAMS)
    grid = rv.rule_grid
    for rule in ("momentum", "mean_reversion"):
        chosen = rv.rule_choice[rule]
        assert grid[chosen]["sharpe"] == max(grid[x.label]["sharpe"] for x in variants() if x.rule == rule)
        assert rv.baselines[rule]["variant"] == chosen
    rt = evaluate_policy(hold, test, PARAMS, rule_choice=rv.rule_choice)
    assert rt.rule_choice == rv.rule_choice
    for rule in ("momentum", "mean_reversion"):
        assert rt.baselines[rule]["mean"] == rt.rule_grid[rv.rule_choice[rule]]
    assert rt.baselines["flat"]["mean"]["sharpe"] == 0.0
    assert best_rule(rv.baselines) in ("flat", "buy_and_hold", "momentum", "mean_reversion")
    assert len(variants()) == 1 + 2 * len(LOOKBACKS) * len(THRESHOLDS)
    assert parse_label(rv.rule_choice["momentum"]).rule == "momentum"
    with pytest.raises(ValueError, match="unknown variant"):
        evaluate_policy(hold, test, PARAMS, rule_choice={"momentum": "momentum(3,9)", "mean_reversion": "x"})


def test_choose_takes_the_highest_mean_sharpe_per_rule():
    grid = {x.label: {"sharpe": 0.0} for x in variants()}
    grid["momentum(32,1)"] = {"sharpe": 2.0}
    grid["mean_reversion(4,0)"] = {"sharpe": -0.5}
    for x in variants():
        if x.rule == "mean_reversion" and x.label != "mean_reversion(4,0)":
            grid[x.label] = {"sharpe": -1.0}
    assert choose(grid) == {"momentum": "momentum(32,1)", "mean_reversion": "mean_reversion(4,0)"}


def test_selection_tracks_best_and_stops_after_patience():
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import _Selection

    s = from_dict({"run": {"early_stop_patience": 2}, "data": {"source": "synthetic"}})
    sel = _Selection(s, {})
    assert sel.update(5, {"validation_sharpe": 0.5})
    assert not sel.update(10, {"validation_sharpe": 0.5})  # equal is not better
    assert not sel.stop
    assert sel.update(15, {"validation_sharpe": 0.7})
    assert not sel.update(20, {"validation_sharpe": 0.1}) and not sel.stop
    assert not sel.update(25, {"validation_sharpe": 0.2}) and sel.stop
    state = sel.state()
    assert state == {"best": {"metric": "sharpe", "value": 0.7, "iteration": 15}, "evals_since_best": 2}
    again = _Selection(s, state)  # restored on resume
    assert (again.best_value, again.best_iteration, again.since_best) == (0.7, 15, 2)
    never = _Selection(from_dict({"data": {"source": "synthetic"}}), {})
    for i in range(10):
        never.update(i, {"validation_sharpe": -float(i)})
    assert not never.stop


def test_eval_every_default_gives_about_twenty_passes():
    from rl_zerosync.config.settings import SettingsError, from_dict

    assert from_dict({"run": {"iterations": 100}, "data": {"source": "synthetic"}}).eval_every == 5
    assert from_dict({"run": {"iterations": 3}, "data": {"source": "synthetic"}}).eval_every == 1
    assert from_dict({"run": {"iterations": 100, "eval_every": 7}, "data": {"source": "synthetic"}}).eval_every == 7
    with pytest.raises(SettingsError, match="run.eval_metric"):
        from_dict({"run": {"eval_metric": "profit"}, "data": {"source": "synthetic"}})
    with pytest.raises(SettingsError, match="run.eval_checkpoint"):
        from_dict({"run": {"eval_checkpoint": "first"}, "data": {"source": "synthetic"}})


def test_fresh_series_are_new_seeds_same_shape_swapped_in_place():
    cfg = {"source": "synthetic", "num_assets": 2, "num_bars": 600, "seed": 4, "regenerate_every": 3,
           "features": {"warmup": 32}}
    assert regenerate_every(cfg) == 3
    seeds = {training_seed(4, r, w, g) for r in range(3) for w in range(3) for g in range(5)}
    assert len(seeds) == 45 and 4 not in seeds
    fresh = FreshSeries(cfg, run_seed=0, runner=0, prefetch=False)
    data = fresh.first()
    held_out = make_market({k: v for k, v in cfg.items() if k != "regenerate_every"}, "all")
    assert data.close.shape == held_out.close.shape and not torch.equal(data.close, held_out.close)
    ptr, before = data.close.data_ptr(), data.close.clone()
    assert fresh.advance(data) == 1
    assert data.close.data_ptr() == ptr and not torch.equal(data.close, before)
    again = build_training_market(cfg, fresh.seed_of(1))
    assert torch.equal(data.close, again.close) and torch.equal(data.ret_norm, again.ret_norm)
    with pytest.raises(ValueError, match="data.regenerate_every"):
        regenerate_every({"source": "csv", "regenerate_every": 2})
    with pytest.raises(ValueError, match="data.regenerate_every"):
        regenerate_every({"source": "synthetic", "regenerate_every": -1})


def test_fresh_series_prefetch_in_a_process_matches():
    cfg = {"source": "synthetic", "num_assets": 1, "num_bars": 400, "seed": 2, "features": {"warmup": 32}}
    fresh = FreshSeries(cfg, run_seed=1, runner=0, prefetch=True)
    try:
        data = fresh.first()
        fresh.advance(data)
        assert torch.equal(data.close, build_training_market(cfg, fresh.seed_of(1)).close)
    finally:
        fresh.close()


def test_seed_statistics():
    mean, (lo, hi) = mean_ci95([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0 and 1.0 <= lo < 3.0 < hi <= 5.0
    assert mean_ci95([0.7]) == (0.7, [0.7, 0.7])
    assert parse_seeds("0,1, 2") == [0, 1, 2]
    for bad in ("", "a,b", "1,1", "-1"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)


def test_rule_metrics_grid_covers_every_variant(segment):
    grid, nets = rule_metrics(RuleWalk(segment, PARAMS, routing={}))
    assert set(grid) == {x.label for x in variants()} == set(nets)
    for label, per in grid.items():
        assert set(per) == set(segment.asset_names) | {"mean"}
        assert all(math.isfinite(v) for v in per["mean"].values()), label


def test_split_walk_equals_the_whole_walk_for_a_policy_that_forgets_its_position(segment):
    """Splits start flat `split_warmup` bars early: with MARKET orders (full fills) and a policy of
    the market features and the progress feature only, every counted bar matches the whole walk."""
    def policy(obs, st):
        up = obs[:, :4].sum(1) > 0
        late = obs[:, -1] > 0.5  # the progress feature: aligned with the whole walk
        e = torch.where(up, 4, torch.where(late, 2, 0))
        return e * 9 + encode(0, OrderType.MARKET, Urgency.NORMAL)

    whole = SegmentWalk(segment, PARAMS)
    split = SegmentWalk(segment, PARAMS, split_bars=37, split_warmup=5, chunk=16)
    assert whole.num_splits == 1 and split.num_splits > 3
    rw, rs = whole.run(policy), split.run(policy)
    for a in range(segment.num_assets):
        w, s = whole.env_records(rw, a), split.env_records(rs, a)
        for k in ("net", "position", "action", "trade"):
            np.testing.assert_allclose(s[k], w[k], rtol=1e-6, atol=1e-9, err_msg=k)


def _seed_returns(seed: int) -> dict:
    """One seed's test returns as ``read_returns`` gives them: two assets on one test period."""
    rng = np.random.default_rng(seed)
    bench = [np.random.default_rng(a).normal(0.0004, 0.01, 150) for a in range(2)]  # same bars every seed
    return {"agent": [b + rng.normal(0.0, 0.005, 150) for b in bench], "best_rule": [0.5 * b for b in bench],
            "buy_and_hold": bench, "position": [np.sign(b) for b in bench],
            "validation": [np.random.default_rng(10 + a).normal(0.0004, 0.01, 150) + rng.normal(0.0, 0.004, 150)
                           for a in range(2)],
            "trials": {"n": 1.5, "candidates": 3, "selected_validation_sharpe": 0.3 + 0.1 * seed, "se": 0.9,
                       "counted": "3 candidates, effective 1.5", "segment": "validation"},
            "independent": False, "periods_per_year": 252.0}


def test_seeds_summary_labels_a_seed_spread_a_range_below_5_seeds_and_resamples_seeds_and_bars():
    from rl_zerosync.run.seeds import summarize, summary_line

    def per_seed(n):
        return {s: {"test_sharpe": 0.1 * s, "agent_minus_best_rule": 0.05 * s, "best_rule_test_sharpe": 1.0,
                    "rules_test_sharpe": {"flat": 0.0}} for s in range(n)}

    few = summarize(per_seed(3), [_seed_returns(s) for s in range(3)])
    assert "test_sharpe_seed_ci95" not in few and few["test_sharpe_seed_range"] == [0.0, pytest.approx(0.2)]
    many = summarize(per_seed(5))
    assert many["test_sharpe_seed_ci95"][0] <= many["test_sharpe_mean"] <= many["test_sharpe_seed_ci95"][1]
    assert "test_sharpe_ci95" not in many and "range over seeds" not in summary_line({"summary": many})
    assert "range over seeds" in summary_line({"summary": summarize(per_seed(2))})
    ev = few["evidence"]
    # two assets on one test period: bars in blocks (one shared draw), the 3 seeds drawn with replacement
    assert ev["ci_method"].startswith("stationary block bootstrap over bars (series share a calendar")
    assert "seeds drawn with replacement (3)" in ev["ci_method"] and ev["intervals"]["agent"]["seeds"] == 3
    lo, hi = few["test_sharpe_ci95"]
    assert lo <= ev["intervals"]["agent"]["estimate"] <= hi
    dlo, dhi = few["agent_minus_best_rule_ci95"]
    assert dlo <= ev["intervals"]["agent_minus_best_rule"]["estimate"] <= dhi
    # The DSR of the seeds' mean selected validation Sharpe, each seed 1.5 effective trials.
    assert few["trials"] == few["dsr_trials"] == 1.5 and ev["trials"]["selections"] == 3
    assert few["dsr_sharpe"] == pytest.approx(0.4) and few["dsr_expected_max"] > 0
    assert 0.0 <= few["deflated_sharpe"] <= 1.0 and 0.0 <= few["psr"] <= 1.0
    assert "95% over seeds and bars" in summary_line({"summary": few})
