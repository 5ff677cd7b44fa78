"""Evaluation metrics against hand-computed values, and evaluate_policy on known segments."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_zerosync.actions import encode
from rl_zerosync.envs import EnvParams
from rl_zerosync.data import make_market
from rl_zerosync.evaluation.backtest import evaluate_policy
from rl_zerosync.evaluation.metrics import equity_curve, max_drawdown, performance_metrics

R = np.array([0.10, -0.20, 0.05, 0.0])


def test_metrics_by_hand():
    m = performance_metrics(R, periods_per_year=4, positions=[1, 1, -1, 0], pnl=[0.11, -0.19, 0.06, 0.0],
                            trades=[1, 0, -2, 1], costs=[0.01, 0.01, 0.01, 0.0], order_types=[0, 1, 2, 0])
    eq = [1.0, 1.1, 0.88, 0.924, 0.924]
    assert np.allclose(equity_curve(R), eq)
    assert m["total_return"] == pytest.approx(-0.076)
    assert m["annualized_return"] == pytest.approx(0.924 ** (4 / 4) - 1)
    mean, sd = -0.0125, np.std(R, ddof=1)
    assert m["sharpe"] == pytest.approx(mean / sd * 2)
    assert m["sortino"] == pytest.approx(mean / math.sqrt(0.04 / 4) * 2)
    assert m["max_drawdown"] == pytest.approx(1 - 0.88 / 1.1)
    assert m["calmar"] == pytest.approx(-0.076 / 0.2)
    assert m["turnover"] == 4 and m["turnover_per_bar"] == 1
    assert m["hit_rate"] == pytest.approx(2 / 3)  # exposed on 3 bars, gross pnl > 0 on 2
    assert m["exposure"] == pytest.approx(0.75)
    assert (m["cost_market"], m["cost_limit"], m["cost_passive"]) == pytest.approx((0.01, 0.01, 0.01))
    assert m["cost_total"] == pytest.approx(0.03)


def test_degenerate_runs_are_finite():
    flat = performance_metrics(np.zeros(10), periods_per_year=252)
    assert all(math.isfinite(v) for v in flat.values())
    assert flat["sharpe"] == 0 and flat["calmar"] == 0 and flat["max_drawdown"] == 0 and flat["hit_rate"] == 0
    assert max_drawdown(np.array([1.0, 2.0, 1.0, 3.0, 0.6])) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="net_returns"):
        performance_metrics(np.array([0.1, np.nan]), periods_per_year=252)


@pytest.fixture(scope="module")
def segment():
    return make_market({"num_assets": 2, "num_bars": 1200, "seed": 8, "features": {"warmup": 32}}, "test")


@pytest.mark.parametrize("lag", [0, 1])
def test_walk_covers_every_bar_and_buy_and_hold_matches_prices(segment, lag):
    params = EnvParams(episode_len=50, window=8, execution_lag=lag)
    hold = encode(4, 0, 1)
    res = evaluate_policy(lambda o: torch.full((o.shape[0],), hold), segment, params)
    for a, name in enumerate(segment.asset_names):
        first, n = int(segment.valid_start[a]), int(segment.length[a])
        close = segment.close[a, first:n].double().numpy()
        assert len(res.equity[a]) == n - first  # E_0 .. E_n for n - first - 1 traded bars
        # fully long from the first close (lag 0) or the next one (lag 1: no opens in the synthetic
        # data): equity ~ price ratio times (1 - entry cost) (MARKET NORMAL: fee + half spread +
        # impact 0.1 * vol * 1, at the fill bar)
        fill = first + lag
        entry = params.fee + 0.5 * float(segment.spread[a, fill]) + 0.1 * float(segment.vol[a, fill])
        want = close / close[lag] * (1 - entry)
        assert np.allclose(res.equity[a][1:], want[1:], rtol=2e-4)
        assert res.metrics[name]["turnover"] == pytest.approx(1.0)
        assert res.metrics[name] == pytest.approx(res.baselines["buy_and_hold"][name], rel=1e-6)
        assert res.baselines["flat"][name]["total_return"] == 0.0
    summary = res.summary()
    assert summary["action_mix"]["mix_exposure_4"] == 1.0 and summary["action_mix"]["mix_order_0"] == 1.0


def test_time_splits_count_every_bar_once(segment):
    """A walk in time splits (the training-data walk of an evaluation) covers the bars of the whole
    walk, each once; a policy whose position its warm-up reaches (always long) gives the same records."""
    params = EnvParams(episode_len=50, window=8)
    hold = encode(4, 0, 1)
    whole = evaluate_policy(lambda o: torch.full((o.shape[0],), hold), segment, params, baselines=False)
    split = evaluate_policy(lambda o: torch.full((o.shape[0],), hold), segment, params, baselines=False,
                            split_bars=100, split_warmup=16)
    for a in range(segment.num_assets):
        for key in ("net", "position", "trade", "cost"):
            assert split.records[a][key].shape == whole.records[a][key].shape
            np.testing.assert_allclose(split.records[a][key], whole.records[a][key], rtol=1e-6, atol=1e-9)
    flip = evaluate_policy(lambda o: torch.full((o.shape[0],), hold), segment, params, baselines=False,
                           split_bars=100, split_warmup=0)
    assert flip.records[0]["trade"].sum() > whole.records[0]["trade"].sum()  # no warm-up: each split enters again


def test_progress_feature_cycles_and_actions_are_validated(segment):
    params = EnvParams(episode_len=10, window=8)
    seen = []

    def policy(obs):
        seen.append(obs[0, -1].item())
        return torch.full((obs.shape[0],), encode(2, 1, 0))

    evaluate_policy(policy, segment, params, baselines=False)
    assert seen[:12] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.0, 0.1])
    with pytest.raises(ValueError, match=r"0\.\.44"):
        evaluate_policy(lambda o: torch.full((o.shape[0],), 45), segment, params, baselines=False)


def test_routed_policy_mix(segment):
    res = evaluate_policy(lambda o: torch.full((o.shape[0],), 3), segment, EnvParams(episode_len=50, window=8),
                          route_exposure=True, baselines=False)
    mix = res.summary()["action_mix"]
    assert mix["mix_exposure_3"] == 1.0
    assert sum(mix[f"mix_order_{o}"] for o in range(3)) == pytest.approx(1.0)
    assert all(math.isfinite(v) for v in res.metrics["mean"].values())
