"""The rule baselines of a segment are walked once per process (``backtest.cached_rule_metrics``):
a second evaluation of the same data reuses the first walk, other data or env parameters walk again,
and the cached baselines are the ones a fresh walk gives."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from rl_zerosync.data.synthetic import synthetic_market
from rl_zerosync.envs import EnvParams
from rl_zerosync.evaluation import backtest
from rl_zerosync.evaluation.rules import RuleWalk


def test_same_content_walks_once_and_equals_a_fresh_walk(monkeypatch):
    walks = []
    real = backtest.rule_metrics
    monkeypatch.setattr(backtest, "rule_metrics", lambda rules: walks.append(1) or real(rules))
    monkeypatch.setattr(backtest, "_RULE_CACHE", {})
    data = synthetic_market(2, 400, seed=3)
    params = EnvParams()
    first = backtest.cached_rule_metrics(data, params, {})
    again = backtest.cached_rule_metrics(synthetic_market(2, 400, seed=3), params, {})  # same content, new object
    assert len(walks) == 1 and again is first
    backtest.cached_rule_metrics(synthetic_market(2, 400, seed=4), params, {})
    backtest.cached_rule_metrics(data, replace(params, fee=params.fee * 2), {})
    assert len(walks) == 3
    fresh_grid, fresh_nets = real(RuleWalk(data, params, {}))
    assert fresh_grid == first[0]
    assert all(np.array_equal(a, b) for k in fresh_nets for a, b in zip(fresh_nets[k], first[1][k]))
    assert backtest.data_fingerprint(data) != backtest.data_fingerprint(synthetic_market(2, 400, seed=4))
