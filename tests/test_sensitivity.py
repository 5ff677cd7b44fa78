"""Cost and execution sensitivity (``evaluation/sensitivity.py``): one batched walk per actor, the
variants as extra envs, monotone in the cost multiplier for a fixed action sequence (CPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_zerosync.data import synthetic_market
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.envs import EnvParams
from rl_zerosync.evaluation.backtest import evaluate_policy
from rl_zerosync.evaluation.sensitivity import (
    VARIANTS, execution_line, policy_sensitivity, rule_sensitivity, segment_sensitivity,
)
from rl_zerosync.evaluation.walk import SegmentWalk

FEATURES = FeatureConfig(warmup=32, median_window=64)


@pytest.fixture(scope="module")
def market():
    return synthetic_market(3, 900, seed=2, features=FEATURES, ohlc=True).split("test", (0.5, 0.2, 0.3))


def fixed_actions(data, seed=0):
    """act(obs, state) -> a fixed random factored action per (asset, bar): the same sequence in
    every variant."""
    table = torch.from_numpy(np.random.default_rng(seed).integers(0, 45, size=(data.num_assets, data.num_bars)))
    return lambda obs, state: table[state.asset, state.t]


@pytest.mark.parametrize("lag", [0, 1])
def test_sensitivity_is_monotone_in_the_cost_multiplier_for_fixed_actions(market, lag):
    params = EnvParams(episode_len=40, window=8, execution_lag=lag)
    out = policy_sensitivity(fixed_actions(market), market, params)
    assert list(out) == list(VARIANTS)
    scaled = ["cost_x0", "cost_x1", "cost_x2", "cost_x4"]
    sharpe = [out[n]["sharpe"] for n in scaled]
    ret = [out[n]["total_return"] for n in scaled]
    cost = [out[n]["cost_total"] for n in scaled]
    assert sharpe[0] > sharpe[1] > sharpe[2] > sharpe[3], sharpe
    assert ret[0] > ret[1] > ret[2] > ret[3], ret
    assert cost[0] == 0.0 and cost[2] == pytest.approx(2 * cost[1], rel=1e-5) and cost[3] == pytest.approx(4 * cost[1], rel=1e-5)
    turnover = [out[n]["turnover_per_bar"] for n in scaled]
    assert turnover == pytest.approx([turnover[0]] * 4)  # costs scale, fills do not


def test_cost_x1_is_the_walk_itself_and_all_market_changes_only_order_types(market):
    params = EnvParams(episode_len=40, window=8)
    act = fixed_actions(market, seed=3)
    out = policy_sensitivity(act, market, params)
    plain = SegmentWalk(market, params)
    rec = plain.run(act)
    from rl_zerosync.evaluation.backtest import walk_result

    assert out["cost_x1"]["sharpe"] == pytest.approx(walk_result(plain, rec).metrics["mean"]["sharpe"], rel=1e-9)
    assert out["market_only"]["sharpe"] != out["cost_x1"]["sharpe"]  # passive fills differ from MARKET


def test_segment_block_for_a_policy_and_the_best_rule(market):
    params = EnvParams(episode_len=40, window=8)
    policy = lambda obs: torch.full((obs.shape[0],), 3, dtype=torch.int64)  # noqa: E731  (exposure 3, routed)
    res = evaluate_policy(policy, market, params, route_exposure=True, routing={})
    label = res.baselines["momentum"]["variant"]
    block = segment_sensitivity(policy, market, params, route_exposure=True, routing={}, best_rule=label)
    assert block["policy_sharpe"]["cost_x1"] == pytest.approx(res.metrics["mean"]["sharpe"], rel=1e-9)
    assert block["best_rule_sharpe"]["cost_x1"] == pytest.approx(res.baselines["momentum"]["mean"]["sharpe"], rel=1e-9)
    assert block["best_rule"]["label"] == label and set(block["variants"]) == set(VARIANTS)
    assert rule_sensitivity("flat", market, params)["cost_x4"]["sharpe"] == 0.0
    line = execution_line({"settings": {"execution_lag": 1}, "sensitivity": block})
    assert line.startswith(" | execution lag 1: sharpe at cost x0/x1/x2/x4/all-market ")


def test_walk_rejects_per_env_values_of_the_wrong_shape(market):
    with pytest.raises(ValueError, match="cost_scale: expected one value per env"):
        SegmentWalk(market, EnvParams(episode_len=40, window=8), cost_scale=torch.ones(2))
