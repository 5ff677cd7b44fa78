"""CPU tests of GPUEnvRunner (same code path as on the GPU, torch twins for the kernels)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env import INPUT_ENV_SPACES
from scipy import stats

from rl_zerosync.env_runner import GPUEnvRunner
from rl_zerosync.env_runner.rollout import LEADING_KEYS, ROLLOUT_COLUMNS
from rl_zerosync.envs import TradingGymEnv
from rl_zerosync.kernels.reference import route as route_twin
from rl_zerosync.module import ZeroSyncQModule

DATA = {"num_assets": 2, "num_bars": 2000, "seed": 3}


def make_config(mode="routed", n=8, t=16, runner=None, env=None, num_env_runners=0, seed=None):
    cfg = (
        DQNConfig()
        .environment(
            env="rl_zerosync/Trading-v0",
            env_config={"data": DATA, "env": {"episode_len": 12, **(env or {})}, "runner": dict(runner or {})},
        )
        .env_runners(env_runner_cls=GPUEnvRunner, num_envs_per_env_runner=n, rollout_fragment_length=t,
                     num_env_runners=num_env_runners)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ZeroSyncQModule),
                   model_config={"action_mode": mode, "hidden": [32, 32]})
    )
    if seed is not None:
        cfg = cfg.debugging(seed=seed)
    return cfg


def make_runner(mode="routed", worker_index=1, **kw):
    return GPUEnvRunner(config=make_config(mode, **kw), worker_index=worker_index)


def route_rule(spread, median_spread, vol, median_vol, wide=1.5, high_vol=1.5, low_vol=0.75):
    """Plain-Python routing table of the design (order type, urgency) for one sample."""
    def ratio(x, m):
        return x / m if (np.isfinite(x) and np.isfinite(m) and m > 0) else 1.0

    rs, rv = ratio(spread, median_spread), ratio(vol, median_vol)
    if rv >= high_vol:
        return (1 if rs >= wide else 0), 2
    return (2 if rs >= wide else 1), (0 if rv <= low_vol else 1)


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_sample_shapes_dtypes_and_transitions(mode):
    r = make_runner(mode)
    out = r.sample()
    T, N, D = 16, 8, r.env.params.observation_dim
    expect = {
        "obs": ((T, N, D), torch.float32), "next_obs": ((T, N, D), torch.float32),
        "actions": ((T, N), torch.int64), "factored_actions": ((T, N), torch.int64),
        "rewards": ((T, N), torch.float32), "terminateds": ((T, N), torch.bool),
        "truncateds": ((T, N), torch.bool),
    }
    assert set(out) == set(expect)
    for k, (shape, dtype) in expect.items():
        assert tuple(out[k].shape) == shape and out[k].dtype == dtype, k
    # The one declaration of the columns is this contract (docs/ARCHITECTURE.md, "Columnar rollout"), and the
    # small readback carries every [T, N] column of it.
    assert {k: (dtype, len(shape)) for k, (dtype, shape) in ROLLOUT_COLUMNS.items()} == {
        k: (dtype, len(shape)) for k, (shape, dtype) in expect.items()}
    assert {k for k, (shape, _) in expect.items() if len(shape) == 2} <= set(LEADING_KEYS)
    fa = out["factored_actions"]
    assert int(fa.min()) >= 0 and int(fa.max()) < 45
    heads = 5 if mode == "routed" else 45
    assert int(out["actions"].min()) >= 0 and int(out["actions"].max()) < heads
    if mode == "routed":
        assert torch.equal(fa // 9, out["actions"])
    else:
        assert torch.equal(fa, out["actions"])
    done = out["terminateds"] | out["truncateds"]
    assert int(done.sum()) > 0  # episode_len 12 < T: every env ends once
    # Where no episode ended, the next step starts from next_obs; after a done it is a fresh obs.
    same = (out["obs"][1:] == out["next_obs"][:-1]).all(-1)
    assert bool(same[~done[:-1]].all())
    assert not bool(same[done[:-1]].any())
    # Episode progress feature: next_obs of a truncation is at progress 1.
    k = r.env.params.window + 3
    assert torch.allclose(out["next_obs"][..., k][out["truncateds"]], torch.tensor(1.0))
    assert bool(torch.isfinite(out["rewards"]).all())
    # The second rollout continues from the first's last obs.
    last_next, last_done = out["next_obs"][-1].clone(), done[-1].clone()
    out2 = r.sample()
    assert torch.equal(out2["obs"][0][~last_done], last_next[~last_done])


def test_routing_matches_recorded_features():
    r = make_runner("routed", n=16, t=24, runner={"wide": 1.2, "high_vol": 1.3, "low_vol": 0.9})
    out = r.sample()
    ex = r.last_extras
    T, N = out["actions"].shape
    twin = torch.empty(N, dtype=torch.int64)
    for t in range(T):
        route_twin(out["actions"][t], ex["spread"][t], ex["median_spread"][t], ex["vol"][t],
                   ex["median_vol"][t], twin, wide=1.2, high_vol=1.3, low_vol=0.9)
        assert torch.equal(twin, out["factored_actions"][t])
    seen = set()
    for t in range(0, T, 3):
        for i in range(N):
            o, u = route_rule(*(float(ex[k][t, i]) for k in ("spread", "median_spread", "vol", "median_vol")),
                              wide=1.2, high_vol=1.3, low_vol=0.9)
            fa = int(out["factored_actions"][t, i])
            assert (fa // 3 % 3, fa % 3) == (o, u)
            seen.add((o, u))
    assert len(seen) >= 2  # the features actually vary the route


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_epsilon_zero_is_argmax_of_module_q(mode):
    r = make_runner(mode, runner={"epsilon": 0.0})
    out = r.sample()
    for t in range(out["obs"].shape[0]):  # per step: the same batch shape as in the rollout
        q = r.module.q_values(out["obs"][t])
        if mode == "branching":
            e, o, u = (p.argmax(1) for p in q.split((5, 3, 3), dim=1))
            greedy = e * 9 + o * 3 + u
        else:
            greedy = q.argmax(1)
        assert torch.equal(out["actions"][t], greedy), t
    assert (r.last_extras["epsilon"] == 0).all()
    # explore=False gives greedy even with epsilon 1.
    r2 = make_runner(mode, runner={"epsilon": 1.0})
    out = r2.sample(explore=False)
    q = r2.module.q_values(out["obs"][3])
    if mode != "branching":
        assert torch.equal(out["actions"][3], q.argmax(1))


@pytest.mark.parametrize("mode, k", [("routed", 5), ("flat", 45)])
def test_epsilon_one_is_uniform(mode, k):
    r = make_runner(mode, n=64, t=64, runner={"epsilon": 1.0, "seed": 11})
    acts = r.sample()["actions"].reshape(-1).numpy()
    counts = np.bincount(acts, minlength=k)
    assert counts.shape == (k,)
    p = stats.chisquare(counts).pvalue
    assert p > 1e-3, (p, counts)
    # random_actions=True also samples uniformly, whatever the schedule says.
    r = make_runner(mode, n=64, t=32, runner={"epsilon": 0.0})
    acts = r.sample(random_actions=True)["actions"].reshape(-1).numpy()
    assert stats.chisquare(np.bincount(acts, minlength=k)).pvalue > 1e-3


def test_explore_fraction_is_about_epsilon():
    eps = 0.3
    r = make_runner("flat", n=64, t=32, runner={"epsilon": eps, "seed": 5})
    out = r.sample()
    greedy = r.module.q_values(out["obs"].reshape(-1, out["obs"].shape[-1])).argmax(1)
    differs = (out["actions"].reshape(-1) != greedy).float().mean().item()
    expected = eps * (1 - 1 / 45)  # a random pick equals the greedy one with prob 1/45
    n = out["actions"].numel()
    assert abs(differs - expected) < 4 * np.sqrt(expected * (1 - expected) / n)


def linear(t, points):
    for (t0, v0), (t1, v1) in zip(points[:-1], points[1:]):
        if t0 <= t < t1:
            return v0 + (t - t0) / (t1 - t0) * (v1 - v0)
    return points[-1][1]


def test_epsilon_schedule_in_rollouts_and_broadcast():
    points = [(0, 1.0), (200, 0.5), (1000, 0.1)]
    r = make_runner("routed", n=8, t=16, runner={"epsilon": points})
    for k in range(3):  # own counting: 128 env steps per rollout, 8 per step
        r.sample()
        want = [linear(128 * k + 8 * t, points) for t in range(16)]
        np.testing.assert_allclose(r.last_extras["epsilon"].numpy(), want, atol=1e-6)
    assert r.num_env_steps_sampled_lifetime == 3 * 128
    # RLlib's broadcast of the global count moves the schedule; past the end it holds.
    r.set_state({"num_env_steps_sampled_lifetime": 900})
    r.sample()
    np.testing.assert_allclose(r.last_extras["epsilon"].numpy(), [linear(900 + 8 * t, points) for t in range(16)],
                               atol=1e-6)
    assert r.last_extras["epsilon"][-1].item() == pytest.approx(0.1)
    r.set_state({"num_env_steps_sampled_lifetime": 10**7})
    r.sample()
    assert torch.allclose(r.last_extras["epsilon"], torch.tensor(0.1))
    # Default schedule: DQNConfig.epsilon.
    r = make_runner("routed")
    r.sample()
    np.testing.assert_allclose(r.last_extras["epsilon"].numpy(),
                               [linear(8 * t, [(0, 1.0), (10000, 0.05)]) for t in range(16)], atol=1e-6)


def test_metrics_contain_rllib_keys_and_trading_metrics():
    r = make_runner("routed")
    r.sample()
    r.sample()
    m = r.get_metrics()
    peek = {k: (v.peek() if hasattr(v, "peek") else v) for k, v in m.items()}
    assert peek["num_env_steps_sampled"] == 256
    assert peek["num_env_steps_sampled_lifetime"] == 256
    assert m["num_agent_steps_sampled_lifetime"]["default_agent"].peek() == 256
    assert peek["episode_len_mean"] == pytest.approx(12.0)
    assert peek["episode_len_min"] == 12 and peek["episode_len_max"] == 12
    trading = {k: v.peek() for k, v in m["trading"].items()}
    for key in ("episode_pnl_mean", "episode_turnover_mean", "episode_cost_limit_mean", "mix_order_0"):
        assert key in trading
    assert sum(trading[f"mix_exposure_{e}"] for e in range(5)) == pytest.approx(1.0)
    assert trading["episode_reward_mean"] == pytest.approx(peek["episode_return_mean"], rel=1e-4, abs=1e-5)


def test_episode_return_metric_matches_rewards():
    """Episode return = sum of the episode's rewards, checked from a columnar rollout."""
    r = make_runner("flat", n=4, t=24)  # episode_len 12: two whole episodes per env
    out = r.sample()
    m = r.get_metrics()
    rets = out["rewards"].double().reshape(2, 12, 4).sum(1).reshape(-1)
    assert m["episode_return_mean"].peek() == pytest.approx(rets.mean().item(), rel=1e-6)
    assert m["episode_return_min"].peek() == pytest.approx(rets.min().item(), rel=1e-6)


def test_episode_output_matches_columnar_and_continues():
    cols = make_runner("routed", runner={"seed": 7})
    eps = make_runner("routed", runner={"seed": 7, "output": "episodes"})
    eps.set_state(cols.get_state())  # same weights
    by_id = {}
    for _ in range(2):
        out = cols.sample()
        episodes = eps.sample()
        assert sum(len(e) for e in episodes) == 16 * 8
        # Chunks are ordered env by env: their actions concatenate to the columns.
        acts = np.concatenate([e.get_actions() for e in episodes])
        np.testing.assert_array_equal(acts, out["actions"].T.reshape(-1).numpy())
        rews = np.concatenate([e.get_rewards() for e in episodes])
        np.testing.assert_array_equal(rews, out["rewards"].T.reshape(-1).numpy())
        for e in episodes:
            assert e.observation_space == eps.get_spaces()[DEFAULT_MODULE_ID][0]
            if e.id_ in by_id:
                by_id[e.id_].concat_episode(e)
            else:
                by_id[e.id_] = e
    assert any(e.t_started == 0 and len(e) == 12 and e.is_truncated for e in by_id.values())


def test_spaces_per_mode_match_gym_twin():
    twin = TradingGymEnv({"data": DATA, "env": {"episode_len": 12}})
    assert make_runner("flat").get_spaces()[DEFAULT_MODULE_ID][0] == twin.observation_space
    data = {**DATA, "features": {"ret_clip": 4.0, "ratio_clip": 3.0}}
    twin = TradingGymEnv({"data": data, "env": {"episode_len": 12, "window": 5}})
    cfg = make_config("flat", env={"window": 5})
    cfg.env_config["data"] = data
    assert GPUEnvRunner(config=cfg, worker_index=1).get_spaces()[DEFAULT_MODULE_ID][0] == twin.observation_space
    for mode, n in (("routed", 5), ("flat", 45), ("branching", 45)):
        sp = make_runner(mode).get_spaces()
        assert sp[INPUT_ENV_SPACES] == sp[DEFAULT_MODULE_ID]
        assert sp[DEFAULT_MODULE_ID][1].n == n


def test_set_state_loads_weights_in_place_and_respects_seq_no():
    r = make_runner("flat")
    ptrs = {k: v.data_ptr() for k, v in r.module.state_dict().items()}
    state = r.get_state()
    assert set(state) >= {COMPONENT_RL_MODULE, "weights_seq_no", "num_env_steps_sampled_lifetime"}
    g = torch.Generator().manual_seed(0)
    new = {k: torch.randn(v.shape, generator=g).numpy() for k, v in state[COMPONENT_RL_MODULE].items()}
    r.set_state({COMPONENT_RL_MODULE: {DEFAULT_MODULE_ID: new}, "weights_seq_no": 3})
    for k, v in r.module.state_dict().items():
        assert v.data_ptr() == ptrs[k], k
        np.testing.assert_array_equal(v.numpy(), new[k])
    # An older (or equal) seq no is ignored, like RLlib's runners.
    stale = {k: np.zeros_like(v) for k, v in new.items()}
    r.set_state({COMPONENT_RL_MODULE: stale, "weights_seq_no": 3})
    np.testing.assert_array_equal(next(iter(r.module.state_dict().values())).numpy(), next(iter(new.values())))
    # Round trip through get_state.
    back = r.get_state()[COMPONENT_RL_MODULE]
    for k in new:
        np.testing.assert_array_equal(back[k], new[k])
    with pytest.raises(ValueError, match="shape"):
        r.set_state({COMPONENT_RL_MODULE: {k: v[..., :1] for k, v in new.items()}})
    with pytest.raises(ValueError, match="missing"):
        r.set_state({COMPONENT_RL_MODULE: {}})


def test_load_weights_from_learner_module_in_place():
    r = make_runner("routed")
    spec = make_config("routed").get_rl_module_spec(spaces=r.get_spaces(), inference_only=False)
    learner_module = spec.build()
    learner_module.make_target_networks()  # the learner copy has extra (target) weights
    src = learner_module.state_dict()
    assert len(src) > len(r.module.state_dict())
    assert not all(torch.equal(v, src[k]) for k, v in r.module.state_dict().items())
    ptrs = [p.data_ptr() for p in r.module.parameters()]
    r.load_weights_from_module(learner_module)
    assert [p.data_ptr() for p in r.module.parameters()] == ptrs
    for k, v in r.module.state_dict().items():
        assert torch.equal(v, src[k]), k


def test_checkpoint_round_trip(tmp_path):
    r = make_runner("flat", seed=1)
    r.sample()
    r.save_to_path(tmp_path / "runner")
    r2 = make_runner("flat", seed=2)
    assert not all(torch.equal(a, b) for a, b in zip(r.module.parameters(), r2.module.parameters()))
    ptrs = [p.data_ptr() for p in r2.module.parameters()]
    r2.restore_from_path(tmp_path / "runner")
    assert all(torch.equal(a, b) for a, b in zip(r.module.parameters(), r2.module.parameters()))
    assert [p.data_ptr() for p in r2.module.parameters()] == ptrs
    assert r2.num_env_steps_sampled_lifetime == 128


def test_same_seed_same_rollout_and_sample_device():
    a = make_runner("routed", runner={"seed": 4}, seed=0)
    b = make_runner("routed", runner={"seed": 4}, seed=0)
    c = make_runner("routed", runner={"seed": 5}, seed=0)
    for x in (b, c):
        x.set_state(a.get_state())
    oa, ob, oc = a.sample(), b.sample_device(), c.sample()
    for k in oa:
        assert torch.equal(oa[k], ob[k]), k
    assert not torch.equal(oa["actions"], oc["actions"])
    assert b.get_metrics()["num_env_steps_sampled"].peek() == 128


def test_lazy_local_runner_and_num_timesteps():
    r = GPUEnvRunner(config=make_config("routed", num_env_runners=2), worker_index=0)
    assert r.env is None and r.device == torch.device("cpu")
    r.assert_healthy()
    out = r.sample(num_timesteps=200)  # 2 rollouts of 16 x 8 = 256 >= 200
    assert out["actions"].shape == (32, 8)
    # The fragments are consecutive (not two views of the last one).
    done = out["terminateds"][15] | out["truncateds"][15]
    assert torch.equal(out["obs"][16][~done], out["next_obs"][15][~done])
    assert not torch.equal(out["actions"][:16], out["actions"][16:])
    assert r.env is not None


def test_force_reset_restarts_episodes():
    r = make_runner("routed", runner={"seed": 2})
    first = r.sample()["obs"][0].clone()
    r.sample()
    again = r.sample(force_reset=True)["obs"][0]
    assert torch.equal(first, again)  # the env RNG restarts at step 0 on reset


@pytest.mark.parametrize(
    "env_config, match",
    [
        ({"runner": {"bogus": 1}}, "unknown keys"),
        ({"runner": {"output": "frames"}}, "runner.output"),
        ({"env": {"episode_len": 0}}, "episode_len"),
    ],
)
def test_bad_config_raises(env_config, match):
    cfg = make_config("routed")
    cfg.env_config = {"data": DATA, **env_config}
    with pytest.raises(ValueError, match=match):
        GPUEnvRunner(config=cfg, worker_index=1)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="rollout_fragment_length"):
        GPUEnvRunner(config=make_config("routed", t=0), worker_index=1)


def test_bad_action_mode_and_num_episodes():
    with pytest.raises(ValueError, match="action_mode"):
        make_runner("tabular")
    with pytest.raises(ValueError, match="num_episodes"):
        make_runner("routed").sample(num_episodes=3)


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_device_rollout_makes_no_host_reads(mode, monkeypatch):
    """The T-step device loop calls none of the Python-level host reads (CPU probe of the GPU rule)."""
    r = make_runner(mode)
    r.sample()  # warm-up outside the probe
    calls = []

    def probe(name, orig):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return orig(*args, **kwargs)
        return wrapped

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, probe(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch, "nonzero", probe("torch.nonzero", torch.nonzero))
    r.rollout.run(env_steps=0, rng_step=0, mode="explore", graph=False)
    monkeypatch.undo()
    assert calls == []
