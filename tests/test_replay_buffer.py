"""Device replay buffer: n-step vs a hand loop, wraparound, sampling statistics, state round trip."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import dataclasses

from rl_zerosync.kernels.rng import MASK32, combine, hash32, seed_key
from rl_zerosync.learner.replay import STREAM_SAMPLE, DeviceReplayBuffer


def make_rollout(t_len: int, n_envs: int, obs_dim: int = 3, *, seed: int = 0, p_term=0.15, p_trunc=0.1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.arange(t_len * n_envs, dtype=torch.float32).reshape(t_len, n_envs)
    obs = torch.randn(t_len, n_envs, obs_dim, generator=g)
    obs[..., 0] = ids  # row id, to track where each transition lands
    return {
        "obs": obs,
        "next_obs": torch.randn(t_len, n_envs, obs_dim, generator=g),
        "actions": torch.randint(0, 5, (t_len, n_envs), generator=g),
        "factored_actions": torch.randint(0, 45, (t_len, n_envs), generator=g),
        "rewards": torch.randn(t_len, n_envs, generator=g),
        "terminateds": torch.rand(t_len, n_envs, generator=g) < p_term,
        "truncateds": torch.rand(t_len, n_envs, generator=g) < p_trunc,
    }


def nstep_reference(ro, gamma: float, n: int):
    """Plain per-(t, env) loop, float64."""
    r = ro["rewards"].double().numpy()
    term, trunc = ro["terminateds"].numpy(), ro["truncateds"].numpy()
    t_len, n_envs = r.shape
    out = {"rewards": [], "discounts": [], "terminateds": [], "next_obs": []}
    for t in range(t_len):
        for i in range(n_envs):
            ret, k = 0.0, 0
            while k < n and t + k < t_len:
                ret += gamma**k * r[t + k, i]
                k += 1
                if term[t + k - 1, i] or trunc[t + k - 1, i]:
                    break
            last = t + k - 1
            out["rewards"].append(ret)
            out["discounts"].append(gamma**k)
            out["terminateds"].append(bool(term[last, i]))
            out["next_obs"].append(ro["next_obs"][last, i].numpy())
    return {k: np.array(v) for k, v in out.items()}


def make_buffer(capacity=1000, obs_dim=3, **kw) -> DeviceReplayBuffer:
    kw.setdefault("gamma", 0.9)
    kw.setdefault("n_step", 3)
    return DeviceReplayBuffer(capacity=capacity, obs_shape=(obs_dim,), device=torch.device("cpu"), **kw)


def test_add_and_sample_shapes():
    buf = make_buffer()
    assert buf.add(make_rollout(6, 4)) == 24
    assert len(buf) == 24
    batch = buf.sample(17)
    assert batch["obs"].shape == (17, 3) and batch["new_obs"].shape == (17, 3)
    assert batch["actions"].dtype == torch.int64 and batch["actions"].shape == (17,)
    assert batch["rewards"].dtype == torch.float32 and batch["discounts"].shape == (17,)
    assert batch["terminateds"].dtype == torch.bool
    assert torch.equal(batch["weights"], torch.ones(17))
    assert int(batch["indices"].min()) >= 0 and int(batch["indices"].max()) < 24


def test_nstep_matches_hand_loop():
    for gamma, n in ((0.9, 3), (0.5, 1), (0.99, 7)):
        ro = make_rollout(9, 5, seed=n)
        buf = make_buffer(gamma=gamma, n_step=n)
        buf.add(ro)
        ref = nstep_reference(ro, gamma, n)
        s = buf.storage
        np.testing.assert_allclose(s["rewards"][:45].numpy(), ref["rewards"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s["discounts"][:45].numpy(), ref["discounts"], rtol=1e-6)
        assert s["terminateds"][:45].numpy().tolist() == ref["terminateds"].tolist()
        np.testing.assert_array_equal(s["next_obs"][:45].numpy(), np.stack(ref["next_obs"]))
        assert torch.equal(s["obs"][:45], ro["obs"].reshape(45, 3))
        assert torch.equal(s["actions"][:45], ro["actions"].reshape(45))


def test_nstep_hand_values():
    """A small case written out by hand (gamma 0.5, n 3)."""
    ro = make_rollout(5, 1, p_term=0.0, p_trunc=0.0)
    ro["rewards"] = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0]])
    ro["terminateds"][1, 0] = True
    buf = make_buffer(gamma=0.5, n_step=3)
    buf.add(ro)
    s = buf.storage
    assert s["rewards"][:5].tolist() == [2.0, 2.0, 6.25, 6.5, 5.0]
    assert s["discounts"][:5].tolist() == [0.25, 0.5, 0.125, 0.25, 0.5]
    assert s["terminateds"][:5].tolist() == [True, True, False, False, False]
    assert torch.equal(s["next_obs"][0], ro["next_obs"][1, 0])
    assert torch.equal(s["next_obs"][2], ro["next_obs"][4, 0])


def test_wraparound_and_oversized_add():
    buf = make_buffer(capacity=7, n_step=1)
    buf.add(make_rollout(2, 3))  # rows 0..5
    second = make_rollout(2, 3, seed=1)
    second["obs"][..., 0] += 100.0
    buf.add(second)  # 6 rows: slot 6, then slots 0..4
    ids = buf.storage["obs"][:, 0].tolist()
    assert ids == [101.0, 102.0, 103.0, 104.0, 105.0, 5.0, 100.0]
    assert (len(buf), buf.ptr) == (7, 5)

    small = make_buffer(capacity=4, n_step=1)
    big = make_rollout(5, 2)
    small.add(big)  # 10 rows: only the newest 4 are kept
    assert sorted(small.storage["obs"][:, 0].tolist()) == [6.0, 7.0, 8.0, 9.0]
    assert (len(small), small.ptr) == (4, 2)


def test_uniform_sampling_is_uniform_and_deterministic():
    buf = make_buffer(capacity=64, seed=3)
    buf.add(make_rollout(4, 5))  # 20 rows
    idx = torch.cat([buf.sample(500)["indices"] for _ in range(40)])
    counts = torch.bincount(idx, minlength=20).numpy()
    assert counts.sum() == 20000 and counts[20:].sum() == 0
    assert stats.chisquare(counts[:20]).pvalue > 1e-3

    a, b, c = make_buffer(seed=7), make_buffer(seed=7), make_buffer(seed=8)
    for buf in (a, b, c):
        buf.add(make_rollout(4, 5))
    first_a, first_b, first_c = (buf.sample(64)["indices"] for buf in (a, b, c))
    assert torch.equal(first_a, first_b)
    assert not torch.equal(first_a, first_c)
    assert not torch.equal(first_a, a.sample(64)["indices"])  # the device step counter advanced


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_prioritized_frequencies_follow_priorities(alpha):
    buf = make_buffer(capacity=32, prioritized=True, alpha=alpha, beta=0.6, seed=11)
    buf.add(make_rollout(2, 6))  # 12 rows
    td = torch.tensor([0.1, 0.5, 1.0, 2.0, 4.0, 0.2, 3.0, 0.05, 1.5, 0.7, 2.5, 0.3])
    buf.update_priorities(torch.arange(12), td)
    p = (td.double() + buf.priority_eps) ** alpha
    prob = (p / p.sum()).numpy()
    counts = np.zeros(12)
    for _ in range(40):
        counts += torch.bincount(buf.sample(500)["indices"], minlength=12).numpy()
    assert stats.chisquare(counts, prob * counts.sum()).pvalue > 1e-3

    batch = buf.sample(256)
    pi = prob[batch["indices"].numpy()]
    w = (12 * pi) ** -0.6
    np.testing.assert_allclose(batch["weights"].numpy(), w / w.max(), rtol=1e-5)


def test_priority_update_rules():
    buf = make_buffer(capacity=16, prioritized=True, alpha=1.0)
    buf.add(make_rollout(2, 4))
    assert torch.equal(buf.priorities[:8], torch.ones(8, dtype=torch.float64))  # new rows: max priority 1
    buf.update_priorities(torch.tensor([0, 1, 2]), torch.tensor([3.0, float("nan"), float("inf")]))
    assert buf.priorities[0].item() == pytest.approx(3.0 + 1e-6)
    assert buf.priorities[1].item() == 1.0 and buf.priorities[2].item() == 1.0  # non-finite: kept
    assert buf.max_priority.item() == pytest.approx(3.0 + 1e-6)
    buf.add(make_rollout(1, 2))  # new rows get the max priority seen
    assert buf.priorities[8:10].tolist() == pytest.approx([3.0 + 1e-6] * 2)


def test_state_dict_round_trip():
    buf = make_buffer(capacity=20, prioritized=True, seed=5)
    buf.add(make_rollout(5, 5))  # wraps
    buf.update_priorities(torch.arange(6), torch.linspace(0.1, 2.0, 6))
    buf.sample(8)
    state = buf.state_dict()
    other = make_buffer(capacity=20, prioritized=True, seed=5)
    other.load_state_dict(state)
    for k in buf.storage:
        assert torch.equal(buf.storage[k], other.storage[k])
    assert torch.equal(buf.priorities, other.priorities)
    assert (other.size, other.ptr, other.num_added) == (buf.size, buf.ptr, buf.num_added)
    a, b = buf.sample(32), other.sample(32)
    assert torch.equal(a["indices"], b["indices"]) and torch.equal(a["weights"], b["weights"])
    with pytest.raises(ValueError, match="capacity"):
        make_buffer(capacity=21).load_state_dict(state)


def test_add_validation_names_the_column():
    buf = make_buffer()
    ro = make_rollout(3, 2)
    with pytest.raises(ValueError, match="truncateds"):
        buf.add({k: v for k, v in ro.items() if k != "truncateds"})
    with pytest.raises(ValueError, match="obs"):
        buf.add({**ro, "obs": ro["obs"][..., :2]})
    with pytest.raises(ValueError, match="terminateds"):
        buf.add({**ro, "terminateds": ro["terminateds"].float()})
    with pytest.raises(ValueError, match=r"rollout\['truncateds'\] must have shape \[3, 2\]"):
        buf.add({**ro, "truncateds": ro["truncateds"][:2]})
    buf.add({**ro, "factored_actions": "not read"})  # columns the replay does not read are ignored
    with pytest.raises(ValueError, match="empty"):
        make_buffer().sample(4)
    with pytest.raises(ValueError, match="capacity"):
        DeviceReplayBuffer(capacity=0, obs_shape=(3,), device=torch.device("cpu"), gamma=0.9, n_step=1)


def test_packed_rows_back_storage_and_samples():
    buf = DeviceReplayBuffer(capacity=50, obs_shape=(2, 3), device=torch.device("cpu"), gamma=0.9, n_step=2)
    ro = make_rollout(5, 4, obs_dim=6)
    ro["obs"], ro["next_obs"] = ro["obs"].reshape(5, 4, 2, 3), ro["next_obs"].reshape(5, 4, 2, 3)
    buf.add(ro)
    assert buf.row_words % 4 == 0
    base = buf.packed.data_ptr()
    for k, col in buf.storage.items():  # every column is a view into the one packed tensor
        assert col.shape[0] == 50 and col.untyped_storage().data_ptr() == base, k
    assert (buf.storage["next_obs"].data_ptr() - base) % 16 == 0 and (buf.storage["actions"].data_ptr() - base) % 8 == 0
    assert buf.storage["obs"].shape == (50, 2, 3) and buf.storage["obs"].dtype == torch.float32
    assert buf.storage["terminateds"].dtype == torch.bool and buf.storage["actions"].dtype == torch.int64
    assert torch.equal(buf.storage["obs"][:20], ro["obs"].reshape(20, 2, 3))
    assert torch.equal(buf.storage["actions"][:20], ro["actions"].reshape(20))
    out = buf.make_sample_buffers(9)
    buf.sample_into(out)
    for k in ("obs", "next_obs", "actions", "rewards", "discounts", "terminateds"):
        col = getattr(out, k)
        assert col.untyped_storage().data_ptr() == out.packed.data_ptr(), k
        assert torch.equal(col, buf.storage[k][out.indices]), k


def test_sampled_indices_follow_the_documented_hash():
    """index_i = (hash32(K_i ^ hash32(step_lo32 ^ seed_key)) * size) >> 32, step by step."""
    buf = make_buffer(capacity=100, seed=21)
    buf.add(make_rollout(7, 3))  # 21 rows
    b = 33
    keys = combine(combine(seed_key(21), STREAM_SAMPLE), torch.arange(b))
    out = buf.make_sample_buffers(b)

    def expected(step: int) -> torch.Tensor:
        return (hash32(keys ^ hash32((step & MASK32) ^ seed_key(21))) * 21) >> 32

    for step in range(4):
        buf.sample_into(out)
        assert torch.equal(out.indices, expected(step)), step
    state = buf.state_dict()
    state["rng_step"] = 2**32 + 5  # only the low 32 bits of the counter enter the hash
    buf.load_state_dict(state)
    buf.sample_into(out)
    assert torch.equal(out.indices, expected(5))
    assert int(buf.rng_step) == 2**32 + 6
    buf.sample_into(out)
    assert torch.equal(out.indices, expected(6))


@pytest.mark.parametrize("prioritized", [False, True])
def test_unpacked_sample_buffers_draw_the_same(prioritized):
    """A ReplaySample without the packed rows / RNG scratch (columns filled one by one) is equivalent."""
    a, b = make_buffer(capacity=40, seed=2, prioritized=prioritized), make_buffer(capacity=40, seed=2,
                                                                                  prioritized=prioritized)
    for buf in (a, b):
        buf.add(make_rollout(6, 5))
        if prioritized:
            buf.update_priorities(torch.arange(10), torch.linspace(0.1, 3.0, 10))
    packed = a.make_sample_buffers(16)
    fresh = b.make_sample_buffers(16)
    plain = dataclasses.replace(fresh, packed=None, rng_words=None,
                                **{k: getattr(fresh, k).clone() for k in ("obs", "next_obs", "actions", "rewards",
                                                                          "discounts", "terminateds")})
    for _ in range(3):
        a.sample_into(packed)
        b.sample_into(plain)
        assert torch.equal(packed.indices, plain.indices) and torch.equal(packed.weights, plain.weights)
        for k, v in packed.as_batch().items():
            assert torch.equal(v, plain.as_batch()[k]), k
    assert torch.equal(a.rng_step, b.rng_step)
