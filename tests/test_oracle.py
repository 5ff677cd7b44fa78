"""The oracle reference policy of synthetic data (CPU): its filter, its prediction, what it reads of
the generator, and its walk through the agent's execution (:mod:`rl_zerosync.evaluation.oracle`)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rl_zerosync.data import make_market
from rl_zerosync.data.hidden import model_keywords, synthetic_hidden
from rl_zerosync.data.synthetic import TREND, synthetic_series
from rl_zerosync.envs.params import EnvParams
from rl_zerosync.evaluation import oracle as O
from rl_zerosync.evaluation.backtest import record_metrics
from rl_zerosync.evaluation.rules import RuleVariant, RuleWalk

DEFAULT = model_keywords({"source": "synthetic"})
PARAMS = EnvParams.from_dict({"episode_len": 64, "window": 16})
BLOCK = 600
PATH = [O.UP] * BLOCK + [O.REVERT] * BLOCK + [O.DOWN] * BLOCK + [O.REVERT] * BLOCK


def _z_on_path(model, path, assets=16, seed=1):
    """Normalized returns drawn as the generator draws them, on a given state path."""
    rng = np.random.default_rng(seed)
    drift, rs = model["trend_drift"], model["revert_strength"]
    z = np.zeros((assets, len(path)))
    for t in range(1, len(path)):
        n = rng.standard_normal(assets)
        z[:, t] = {O.UP: drift + n, O.DOWN: -drift + n}.get(path[t], -rs * z[:, t - 1] + math.sqrt(1 - rs * rs) * n)
    return z


@pytest.mark.parametrize("drift, revert, mean_floor, hit_floor", [(0.5, 0.5, 0.85, 0.95), (0.2, 0.2, 0.55, 0.75)])
def test_posterior_concentrates_on_the_true_regime(drift, revert, mean_floor, hit_floor):
    model = {**DEFAULT, "trend_drift": drift, "revert_strength": revert}
    post = O.posterior(_z_on_path(model, PATH), model)
    assert post.shape == (16, len(PATH), 3) and np.allclose(post.sum(axis=2), 1.0)
    for k in range(len(PATH) // BLOCK):
        state = PATH[k * BLOCK]
        block = post[:, k * BLOCK + 100:(k + 1) * BLOCK]  # after 100 bars of evidence
        assert block[..., state].mean() > mean_floor, (state, block[..., state].mean())
        assert (block.argmax(axis=2) == state).mean() > hit_floor


def test_posterior_tells_trend_from_revert_on_the_generators_own_series():
    raw = synthetic_series(16, 3000, 5, **DEFAULT)
    post = O.posterior(raw["z"], DEFAULT)
    trend = post[..., O.UP] + post[..., O.DOWN]
    assert ((trend > 0.5) == (raw["regime"] == TREND)).mean() > 0.72


def test_prediction_matches_simulation():
    """``E[z_{t+k}]`` of the recursion against paths simulated from the posterior (5 standard errors)."""
    model = {**DEFAULT, "trend_drift": 0.3, "revert_strength": 0.6, "p_stay_trend": 0.9, "p_stay_revert": 0.8}
    trans = O.transition_matrix(model)
    pi, z0 = np.array([0.2, 0.3, 0.5]), 1.7
    rng = np.random.default_rng(0)
    n = 400_000
    state = rng.choice(3, size=n, p=pi)
    z = np.full(n, z0)
    for k in (1, 2, 3):
        u = rng.random(n)
        state = (u[:, None] > trans[state].cumsum(axis=1)).sum(axis=1)
        noise = rng.standard_normal(n)
        rs = model["revert_strength"]
        z = np.where(state == O.UP, 0.3 + noise, np.where(state == O.DOWN, -0.3 + noise,
                                                           -rs * z + math.sqrt(1 - rs * rs) * noise))
        want = O.expected_z(pi[None, None, :], np.array([[z0]]), model, k)[0, 0]
        assert abs(z.mean() - want) < 5 * z.std() / math.sqrt(n), (k, z.mean(), want)


def test_volatility_prediction_matches_simulation():
    model = {**DEFAULT, "vol_persistence": 0.9, "vol_of_vol": 0.3}
    rng = np.random.default_rng(0)
    h0 = math.log(0.02)
    h = np.full(400_000, h0)
    m = math.log(model["vol_mean"])
    for k in (1, 2):
        h = m + 0.9 * (h - m) + 0.3 * rng.standard_normal(h.shape)
        want = O.expected_sigma(np.array([[0.02]]), model, k)[0, 0]
        assert np.exp(h).mean() == pytest.approx(want, rel=5 * np.exp(h).std() / want / math.sqrt(h.size))


def test_signal_reads_no_later_bar():
    market_cfg = {"source": "synthetic", "num_assets": 3, "num_bars": 800, "seed": 2, "split": [0.0, 0.0, 1.0]}
    market = make_market(market_cfg, "test")
    hidden = synthetic_hidden(market_cfg, market)
    x, c = O.signals(hidden, market, PARAMS)
    cut = 400
    z = hidden.z.copy()
    z[:, cut + 1:] = np.random.default_rng(3).standard_normal(z[:, cut + 1:].shape)
    sigma = hidden.sigma.copy()
    sigma[:, cut + 1:] *= 3.0
    changed = O.signals(O.HiddenState(sigma=sigma, z=z, regime=hidden.regime, model=hidden.model, seed=0),
                        market, PARAMS)
    assert np.array_equal(x[:, :cut + 1], changed[0][:, :cut + 1])
    assert np.array_equal(c[:, :cut + 1], changed[1][:, :cut + 1])
    assert not np.array_equal(x[:, cut + 1:], changed[0][:, cut + 1:])


def test_hidden_state_lines_up_with_the_market():
    for cfg in ({"source": "synthetic", "num_assets": 2, "num_bars": 1500, "seed": 4},
                {"source": "synthetic", "num_assets": 2, "num_bars": 1500, "seed": 4, "heldout_validation_series": 3,
                 "heldout_test_series": 2, "heldout_bars": 500}):
        for segment in ("validation", "test"):
            market = make_market(cfg, segment)
            hidden = synthetic_hidden(cfg, market)
            n = int(market.length.min())
            log_ret = market.log_ret.numpy().astype(np.float64)[:, 1:n]
            assert np.allclose(log_ret, hidden.sigma[:, 1:n] * hidden.z[:, 1:n], rtol=0, atol=1e-6)
    market = make_market({"source": "synthetic", "num_assets": 2, "num_bars": 1500, "seed": 4}, "test")
    with pytest.raises(ValueError, match="generator seed 5 does not give the closes"):
        synthetic_hidden({"source": "synthetic", "num_assets": 2, "num_bars": 1500, "seed": 5}, market)
    with pytest.raises(ValueError, match="synthetic data only"):
        synthetic_hidden({"source": "csv", "paths": ["x.csv"]}, market)


def test_no_drift_no_reversion_stays_flat():
    cfg = {"source": "synthetic", "num_assets": 3, "num_bars": 700, "seed": 6, "split": [0.0, 0.0, 1.0],
           "synthetic": {"trend_drift": 0.0, "revert_strength": 0.0}}
    market = make_market(cfg, "test")
    walked = O.OracleWalk(market, PARAMS, synthetic_hidden(cfg, market), {}).run()
    assert len(walked) == O.NUM_VARIANTS == len(O.SCALES) * len(O.BANDS)
    for recs in walked.values():
        for rec in recs:
            assert not rec["position"].any() and not rec["trade"].any() and not rec["cost"].any()


def test_beats_momentum_on_fresh_series():
    """Oracle(5, 1) against momentum(64, 1) (configs/local.yaml's validation choice) on 24 fresh
    series of 2000 bars, the same walk and costs: the mean Sharpe difference over series is > 0.15 and
    > 3 paired standard errors (about 5 here)."""
    cfg = {"source": "synthetic", "num_assets": 24, "num_bars": 2000, "seed": 11, "split": [0.0, 0.0, 1.0]}
    params = EnvParams.from_dict({"episode_len": 256, "window": 64})
    market = make_market(cfg, "test")
    oracle = O.OracleWalk(market, params, synthetic_hidden(cfg, market), {},
                          oracle_variants=[O.OracleVariant(5.0, 1.0)]).run()["oracle(5,1)"]
    momentum = RuleWalk(market, params, {}, rule_variants=[RuleVariant("momentum", 64, 1.0)]).run()["momentum(64,1)"]
    diff = np.array([record_metrics(o, 252.0)["sharpe"] - record_metrics(m, 252.0)["sharpe"]
                     for o, m in zip(oracle, momentum)])
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    assert diff.mean() > 0.15 and diff.mean() > 3 * se, (diff.mean(), se)


def test_baseline_chooses_on_validation_and_freezes_for_test():
    cfg = {"source": "synthetic", "num_assets": 2, "num_bars": 800, "seed": 0, "heldout_validation_series": 2,
           "heldout_test_series": 3, "heldout_bars": 600}
    val = O.oracle_baseline(cfg, make_market(cfg, "validation"), PARAMS, {})
    assert val["available"] and val["label"] == O.ORACLE_LABEL == "oracle (knows the generator)"
    assert val["trials"] == O.NUM_VARIANTS and len(val["grid"]) == O.NUM_VARIANTS and val["chosen_on"] == "validation"
    assert val["grid"][val["variant"]] == max(val["grid"].values()) == val["mean"]["sharpe"]
    assert set(val) >= {"validation0", "validation1", "mean"}
    # the same segment again (rebuilt: same content) is not walked again
    assert O.oracle_baseline(cfg, make_market(cfg, "validation"), PARAMS, {}) is val
    assert O.oracle_baseline(cfg, make_market(cfg, "validation"), PARAMS, {"wide": 2.0}) is not val
    test = O.oracle_baseline(cfg, make_market(cfg, "test"), PARAMS, {}, variant=val["variant"])
    assert test["variant"] == val["variant"] and test["chosen_on"] == "validation" and "grid" not in test
    assert set(test) >= {"test0", "test1", "test2"}
    files = O.oracle_baseline({"source": "csv", "paths": ["x.csv"]}, make_market(cfg, "test"), PARAMS)
    assert files == {"label": O.ORACLE_LABEL, "available": False, "reason": O.NO_GENERATOR}


def test_summary_and_line():
    s = O.oracle_summary(0.5, {"available": True, "variant": "oracle(5,1)", "trials": 20, "mean": {"sharpe": 2.0}})
    assert s["efficiency"] == 0.25 and s["oracle_sharpe"] == 2.0 and s["oracle"] == O.ORACLE_LABEL
    assert O.oracle_text(s) == "oracle (knows the generator) +2.00, efficiency 0.25"
    s = O.oracle_summary(0.5, {"available": True, "variant": "oracle(5,1)", "trials": 20, "mean": {"sharpe": -0.1}})
    assert s["efficiency"] is None and "not > 0" in s["efficiency_reason"] and "n/a" in O.oracle_text(s)
    s = O.oracle_summary(0.5, {"label": O.ORACLE_LABEL, "available": False, "reason": O.NO_GENERATOR})
    assert s["oracle_sharpe"] is None and s["efficiency"] is None and O.NO_GENERATOR in O.oracle_text(s)
