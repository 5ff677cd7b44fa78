"""Synthetic market: determinism, regimes, volatility-linked spreads, causal features, a learnable signal;
the vectorised generator against the loop over bars (bit for bit) and the sealed held-out series."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from rl_zerosync.envs import EnvParams
from rl_zerosync.data import make_market, synthetic_market
from rl_zerosync.evaluation.backtest import evaluate_policy
from rl_zerosync.data.market import FeatureConfig
from rl_zerosync.data.data_settings import heldout_seed
from rl_zerosync.data.synthetic import REVERT, TREND, synthetic_series, synthetic_series_loop


def test_same_seed_same_series_and_shapes():
    a, b, c = synthetic_series(3, 500, seed=1), synthetic_series(3, 500, seed=1), synthetic_series(3, 500, seed=2)
    for k in a:
        assert a[k].shape == (3, 500)
        assert np.array_equal(a[k], b[k])
    assert not np.array_equal(a["close"], c["close"])
    assert np.isfinite(a["close"]).all() and (a["close"] > 0).all() and (a["spread"] > 0).all()


def test_regimes_switch_with_the_configured_persistence():
    raw = synthetic_series(8, 20000, seed=3, p_stay_trend=0.99, p_stay_revert=0.98)
    g = raw["regime"]
    switches = (g[:, 1:] != g[:, :-1]).sum()
    time_trend = (g == TREND).mean()
    # stationary share of TREND = (1 - p_r) / ((1 - p_t) + (1 - p_r)) = 2/3
    assert time_trend == pytest.approx(2 / 3, abs=0.05)
    # expected switches per bar = 2 * pi_T * (1 - p_t) = 0.01333
    assert switches / g[:, 1:].size == pytest.approx(2 * (2 / 3) * 0.01, rel=0.1)


def test_trend_and_revert_have_their_serial_structure():
    raw = synthetic_series(4, 40000, seed=5, trend_drift=0.2, revert_strength=0.3)
    z, g = raw["z"][:, 1:], raw["regime"][:, 1:]
    zp, gp = raw["z"][:, :-1], raw["regime"][:, :-1]
    both_revert = (g == REVERT) & (gp == REVERT)
    rho = np.corrcoef(z[both_revert], zp[both_revert])[0, 1]
    assert rho == pytest.approx(-0.3, abs=0.03)
    # in trends |mean(z)| over a regime run is about trend_drift
    assert np.abs(z[g == TREND]).mean() > np.abs(z[g == REVERT]).mean()


def test_spread_widens_with_volatility():
    raw = synthetic_series(2, 5000, seed=2, spread_vol_elasticity=1.0, spread_noise=0.1)
    c = np.corrcoef(np.log(raw["sigma"]).ravel(), np.log(raw["spread"]).ravel())[0, 1]
    assert c > 0.8
    flat = synthetic_series(2, 5000, seed=2, spread_vol_elasticity=0.0, spread_noise=0.1)
    assert abs(np.corrcoef(np.log(flat["sigma"]).ravel(), np.log(flat["spread"]).ravel())[0, 1]) < 0.1


def test_bad_model_parameters_raise():
    with pytest.raises(ValueError, match="p_stay_trend"):
        synthetic_series(1, 100, p_stay_trend=1.5)
    with pytest.raises(ValueError, match="num_bars"):
        synthetic_series(1, 1)
    with pytest.raises(ValueError, match="data.synthetic"):
        make_market({"synthetic": {"drift": 0.1}}, "train")


def test_market_features_are_finite_and_match_documented_formulas():
    m = synthetic_market(2, 800, seed=4, features=FeatureConfig(warmup=20, median_window=50, vol_halflife=10.0))
    raw = synthetic_series(2, 800, seed=4)
    c = raw["close"][1]
    lr = np.log(c[1:] / c[:-1])
    assert np.allclose(m.log_ret[1, 1:].numpy(), lr, atol=1e-6)
    # EWMA (adjust=True) of squared log returns of bars 1..t, by direct weighted sums
    t = 300
    w = 0.5 ** (np.arange(t)[::-1] / 10.0)
    vol = np.sqrt((w * lr[:t] ** 2).sum() / w.sum())
    assert float(m.vol[1, t]) == pytest.approx(vol, rel=1e-5)
    w2 = w[1:]
    vol_prev = np.sqrt((w2 * lr[: t - 1] ** 2).sum() / w2.sum())
    assert float(m.ret_norm[1, t]) == pytest.approx(np.clip(lr[t - 1] / vol_prev, -10, 10), rel=1e-5)
    assert float(m.median_spread[1, t]) == pytest.approx(np.median(raw["spread"][1, t - 49: t + 1]), rel=1e-5)
    for name in ("close", "log_ret", "ret", "spread", "median_spread", "vol", "median_vol", "ret_norm", "obs_spread", "obs_vol"):
        assert torch.isfinite(getattr(m, name)).all(), name


def test_momentum_rule_earns_a_positive_sharpe_net_of_costs_and_random_loses():
    """The documented signal is there out of sample: a simple momentum rule on the observation
    beats costs on the test segment, a random policy does not."""
    data = make_market({"num_assets": 8, "num_bars": 4000, "seed": 21}, "test")
    params = EnvParams(episode_len=128, window=16)
    k = params.window

    def momentum(obs: torch.Tensor) -> torch.Tensor:
        s = obs[:, :k].mean(dim=1)
        cur = torch.round(obs[:, k] * 2 + 2).long()
        e = torch.where(s.abs() < 0.25, cur, torch.where(s > 0, 4, 0))
        return e * 9 + 1 * 3 + 1  # LIMIT, NORMAL

    gen = torch.Generator().manual_seed(0)

    def random(obs: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, 45, (obs.shape[0],), generator=gen)

    mom = evaluate_policy(momentum, data, params, baselines=False).metrics["mean"]
    rnd = evaluate_policy(random, data, params, baselines=False).metrics["mean"]
    assert mom["sharpe"] > 0.5, mom
    assert rnd["sharpe"] < 0.0, rnd
    assert mom["cost_total"] > 0.0


MODELS = [
    {},
    {"vol_persistence": 0.999, "revert_strength": 0.95},   # slow contractions: long warm-ups
    {"vol_persistence": 0.0, "revert_strength": 0.0},      # none: the paths have no memory
    {"vol_persistence": 0.3, "vol_of_vol": 0.0, "trend_drift": 0.0},
    {"p_stay_trend": 1.0, "p_stay_revert": 0.0},           # every chain goes to TREND and stays
    {"p_stay_trend": 0.0, "p_stay_revert": 1.0},
    {"p_stay_trend": 0.5, "p_stay_revert": 0.5},           # equal: no bar forgets the state
    {"p_stay_trend": 0.3, "p_stay_revert": 0.9},
]


def _same_bits(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].flags.c_contiguous, k
        assert a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("assets, bars, seed", [(1, 2, 0), (3, 5, 1), (2, 700, 7), (5, 3001, 2**40 + 3)])
def test_generator_is_the_loop_over_bars_bit_for_bit(model, assets, bars, seed):
    _same_bits(synthetic_series(assets, bars, seed, **model), synthetic_series_loop(assets, bars, seed, **model))


@pytest.mark.parametrize("assets, bars, seed", [(8, 20000, 0), (8, 20000, 12345), (32, 3000, 5)])
def test_generator_is_the_loop_at_the_sizes_local_yaml_draws(assets, bars, seed):
    """The training series (8 x 20,000) and the held-out test set's shape (32 x 3,000)."""
    _same_bits(synthetic_series(assets, bars, seed), synthetic_series_loop(assets, bars, seed))


def test_sealed_heldout_series_of_local_yaml_are_the_recorded_ones():
    """local.yaml's sealed validation (8 x 3,000) and test (32 x 3,000) series, pinned with values
    drawn by the loop over bars before the generator was vectorised: regimes to the bit (uniform
    draws and comparisons only), closes and spreads to 1e-12."""
    for segment, n, regime_sha, closes, spread in (
        ("validation", 8, "71f534ed85b223ce2c2028a62131253bf2e914b2b713704d620029d42f1e8987",
         (58.57655705296394, 373.166198923144), 0.0005132499129880226),
        ("test", 32, "f4dea52a0c35a9162fd7506e730c8f1e522fb286447521a6ef00f88735d652fc",
         (29.16160746064306, 194.19203597546903), 0.000354585172599187),
    ):
        raw = synthetic_series(n, 3000, heldout_seed(0, segment))
        assert hashlib.sha256(raw["regime"].tobytes()).hexdigest() == regime_sha, segment
        assert (raw["close"][0, -1], raw["close"][-1, 1500]) == pytest.approx(closes, rel=1e-12), segment
        assert raw["spread"][1, 2999] == pytest.approx(spread, rel=1e-12), segment


def test_loop_reference_takes_the_same_keywords():
    with pytest.raises(ValueError, match="data.synthetic: unknown model keyword"):
        synthetic_series_loop(1, 10, drift=0.1)
    with pytest.raises(ValueError, match="p_stay_trend"):
        synthetic_series_loop(1, 100, p_stay_trend=1.5)


def test_features_are_the_same_numbers_on_threads(monkeypatch):
    """build_market computes assets' features on up to FEATURE_THREADS threads: the same tensors as one."""
    import rl_zerosync.data.market as market

    raw = synthetic_series(5, 3000, seed=9)
    threaded = market.build_market(list(raw["close"]), list(raw["spread"]))
    monkeypatch.setattr(market, "FEATURE_THREADS", 1)
    single = market.build_market(list(raw["close"]), list(raw["spread"]))
    for f in threaded.present_fields:
        assert torch.equal(getattr(threaded, f), getattr(single, f)), f
