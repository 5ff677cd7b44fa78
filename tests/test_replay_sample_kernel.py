"""``replay_sample``: one launch for a uniform replay draw (``replay_sample.cu``), its twin and the replay's use.

CPU: the twin equals the replay's torch sampling bit for bit (indices, gathered rows, ``rng_step``,
step word); a replay built with ``kernels`` samples as one built without; the bind-time check names
the argument. GPU (``gpu`` marker): the kernel equals the twin bit for bit, makes no host sync, and a
CUDA graph of the bound launch replays as eager launches; a GPU replay with kernels equals one without.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from rl_zerosync.kernels import Kernels, get_kernels
from rl_zerosync.kernels import reference as ref
from rl_zerosync.kernels.rng import MASK32, hash32, seed_key
from rl_zerosync.kernels.replay_sample import replay_sample
from rl_zerosync.learner.replay import DeviceReplayBuffer, ReplaySample

SEED = 21
gpu = pytest.mark.gpu


def _rollout(t_len: int, n_envs: int, obs_shape=(3,), *, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tn = (t_len, n_envs)
    return {
        "obs": torch.randn(tn + tuple(obs_shape), generator=g),
        "next_obs": torch.randn(tn + tuple(obs_shape), generator=g),
        "actions": torch.randint(0, 5, tn, generator=g),
        "rewards": torch.randn(tn, generator=g),
        "terminateds": torch.rand(tn, generator=g) < 0.2,
        "truncateds": torch.rand(tn, generator=g) < 0.1,
    }


def _replay(device="cpu", *, capacity: int = 300, obs_shape=(3,), fill=((7, 13),), seed: int = SEED,
            **kw) -> DeviceReplayBuffer:
    buf = DeviceReplayBuffer(capacity=capacity, obs_shape=obs_shape, device=torch.device(device), gamma=0.9,
                             n_step=2, seed=seed, **kw)
    for i, (t_len, n_envs) in enumerate(fill):
        buf.add(_rollout(t_len, n_envs, obs_shape, seed=i))
    return buf


def _set_rng_step(buf: DeviceReplayBuffer, step: int) -> None:
    state = buf.state_dict()
    state["rng_step"] = step
    buf.load_state_dict(state)


def _step_word(step: int, seed: int = SEED) -> int:
    return int(hash32((step & MASK32) ^ seed_key(seed)))


def _twin_state(buf: DeviceReplayBuffer, batch: int) -> dict:
    """Buffers for the twin / kernel drawing as ``buf`` does from its current (public) state."""
    out = buf.make_sample_buffers(batch)
    step = int(buf.rng_step[0])
    dev = buf.device
    return dict(packed=buf.packed, size=torch.tensor([len(buf)], device=dev), row_keys=out.row_keys,
                step_word=torch.tensor([_step_word(step, buf.seed)], device=dev), rng_step=buf.rng_step.clone(),
                indices=out.indices, out_packed=out.packed,
                blocks_done=torch.zeros(1, dtype=torch.int32, device=dev))


def _assert_same_draw(out: ReplaySample, buf: DeviceReplayBuffer, state: dict) -> None:
    assert torch.equal(out.indices, state["indices"])
    assert torch.equal(out.packed, state["out_packed"])
    assert torch.equal(buf.rng_step, state["rng_step"])
    assert int(state["step_word"][0]) == _step_word(int(state["rng_step"][0]), buf.seed)
    assert int(state["blocks_done"][0]) == 0


# ----------------------------------------------------------------------------- twin (CPU)
FILLS = {"one row": ((1, 1),), "partial": ((7, 13),), "full": ((20, 10), (20, 10))}


@pytest.mark.parametrize("batch", [1, 7, 513])
@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("start", [0, 2**32 - 2])
def test_twin_equals_the_replay_torch_path(batch, fill, start):
    """Indices, gathered rows, rng_step and step word after each of several draws, across the 32-bit
    wrap of the step's low word."""
    buf = _replay(fill=FILLS[fill])
    assert len(buf) == {"one row": 1, "partial": 91, "full": 300}[fill]
    _set_rng_step(buf, start)
    out = buf.make_sample_buffers(batch)
    state = _twin_state(buf, batch)
    for _ in range(4):
        buf.sample_into(out)
        ref.replay_sample(**state, seed_key=seed_key(SEED))
        _assert_same_draw(out, buf, state)
    assert int(buf.rng_step[0]) == start + 4
    if fill == "one row":
        assert torch.equal(out.indices, torch.zeros(batch, dtype=torch.int64))


def test_twin_hand_computed():
    """Two rows by hand: the documented hash, the 64-bit index maths, the gather and the step advance."""
    packed = torch.arange(40, dtype=torch.int32).reshape(10, 4)
    keys = torch.tensor([5, 2**32 - 1])
    step_word, key = _step_word(7), seed_key(SEED)
    state = dict(packed=packed, size=torch.tensor([9]), row_keys=keys, step_word=torch.tensor([step_word]),
                 rng_step=torch.tensor([7]), indices=torch.zeros(2, dtype=torch.int64),
                 out_packed=torch.zeros(2, 4, dtype=torch.int32), blocks_done=torch.zeros(1, dtype=torch.int32))
    ref.replay_sample(**state, seed_key=key)
    want = [(int(hash32(k ^ step_word)) * 9) >> 32 for k in (5, 2**32 - 1)]
    assert state["indices"].tolist() == want
    assert torch.equal(state["out_packed"], packed[want])
    assert state["rng_step"].tolist() == [8] and state["step_word"].tolist() == [int(hash32(8 ^ key))]
    assert state["blocks_done"].tolist() == [0]


def test_twin_clamps_size_to_capacity():
    """A size outside [0, capacity] (never written by the replay) still reads rows inside packed."""
    packed = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    state = dict(packed=packed, size=torch.tensor([0]), row_keys=torch.arange(64), step_word=torch.tensor([9]),
                 rng_step=torch.tensor([0]), indices=torch.zeros(64, dtype=torch.int64),
                 out_packed=torch.zeros(64, 4, dtype=torch.int32), blocks_done=torch.zeros(1, dtype=torch.int32))
    ref.replay_sample(**state, seed_key=1)
    assert int(state["indices"].max()) == 0
    state["size"].fill_(10**6)
    ref.replay_sample(**state, seed_key=1)
    assert int(state["indices"].max()) <= 2 and int(state["indices"].min()) >= 0


# ----------------------------------------------------------------------------- replay with kernels (CPU)
def _counting_kernels(device="cpu") -> tuple[Kernels, list]:
    """Twin kernels whose ``bind_replay_sample`` counts its calls."""
    k = Kernels(device, backend="torch")
    calls = []
    bind = k.bind_replay_sample

    def counted(*args, **kwargs):
        calls.append(1)
        return bind(*args, **kwargs)

    k.bind_replay_sample = counted
    return k, calls


@pytest.mark.parametrize("batch", [1, 64, 513])
def test_replay_with_kernels_samples_as_without(batch):
    plain = _replay(obs_shape=(2, 5), fill=((9, 11),))
    kernels, calls = _counting_kernels()
    fast = _replay(obs_shape=(2, 5), fill=((9, 11),), kernels=kernels)
    assert fast.sample_kernel and not plain.sample_kernel
    outs = [buf.make_sample_buffers(batch) for buf in (plain, fast)]
    for i in range(5):
        if i == 3:  # rows added between draws: the bound launch reads the size on the device
            for buf in (plain, fast):
                buf.add(_rollout(4, 11, (2, 5), seed=7))
        plain.sample_into(outs[0])
        fast.sample_into(outs[1])
        assert torch.equal(outs[0].indices, outs[1].indices) and torch.equal(outs[0].packed, outs[1].packed)
        for key, v in outs[0].as_batch().items():
            assert torch.equal(v, outs[1].as_batch()[key]), key
        assert torch.equal(plain.rng_step, fast.rng_step)
    assert len(calls) == 1  # validated once per ReplaySample, then plain launches
    other = fast.make_sample_buffers(batch)
    fast.sample_into(other)
    fast.sample_into(other)
    assert len(calls) == 2


def test_replay_with_kernels_round_trips_its_state():
    a = _replay(kernels=get_kernels("cpu"))
    for _ in range(3):
        a.sample(16)
    b = _replay(fill=(), kernels=get_kernels("cpu"))
    b.load_state_dict(a.state_dict())
    c = _replay(fill=())
    c.load_state_dict(a.state_dict())
    for _ in range(3):
        draws = [buf.sample(16) for buf in (a, b, c)]
        for key, v in draws[0].items():
            assert torch.equal(v, draws[1][key]) and torch.equal(v, draws[2][key]), key


def test_replay_kernels_fall_back_to_torch_ops():
    """Prioritized replay ignores the kernels; unpacked sample buffers use the column-wise path."""
    pri = [_replay(prioritized=True, kernels=k) for k in (get_kernels("cpu"), None)]
    assert not pri[0].sample_kernel
    for buf in pri:
        buf.update_priorities(torch.arange(10), torch.linspace(0.1, 3.0, 10))
    draws = [buf.sample(32) for buf in pri]
    for key, v in draws[0].items():
        assert torch.equal(v, draws[1][key]), key
    kernels, calls = _counting_kernels()
    a, b = _replay(kernels=kernels), _replay()
    fresh = a.make_sample_buffers(16)
    unpacked = dataclasses.replace(fresh, packed=None, rng_words=None,
                                   **{k: getattr(fresh, k).clone() for k in ("obs", "next_obs", "actions",
                                                                             "rewards", "discounts", "terminateds")})
    out_b = b.make_sample_buffers(16)
    for _ in range(2):
        a.sample_into(unpacked)
        b.sample_into(out_b)
        assert torch.equal(unpacked.indices, out_b.indices) and torch.equal(unpacked.obs, out_b.obs)
    assert calls == []


def test_replay_kernels_must_match_its_device():
    with pytest.raises(ValueError, match="kernels must be for the replay's device cpu"):
        _replay(kernels=get_kernels("meta", backend="torch"))


# ----------------------------------------------------------------------------- check (CPU)
def _check_bufs(batch: int = 5, capacity: int = 10, words: int = 8) -> dict:
    i64 = dict(dtype=torch.int64)
    return dict(packed=torch.zeros(capacity, words, dtype=torch.int32), size=torch.ones(1, **i64),
                row_keys=torch.arange(batch), step_word=torch.zeros(1, **i64), rng_step=torch.zeros(1, **i64),
                indices=torch.zeros(batch, **i64), out_packed=torch.zeros(batch, words, dtype=torch.int32),
                blocks_done=torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(packed=torch.zeros(10, 8)), "packed must have dtype torch.int32"),
        (dict(packed=[0] * 8), "packed must be a torch.Tensor"),
        (dict(packed=torch.zeros(80, dtype=torch.int32)), r"packed must have shape \[\*, \*\]"),
        (dict(packed=torch.zeros(8, 10, dtype=torch.int32).t()), "packed must be contiguous"),
        (dict(packed=torch.zeros(0, 8, dtype=torch.int32)), "packed must have at least one row and one word"),
        (dict(packed=torch.zeros(10, 0, dtype=torch.int32), out_packed=torch.zeros(5, 0, dtype=torch.int32)),
         "packed must have at least one row and one word"),
        (dict(size=torch.ones(1, dtype=torch.int32)), "size must have dtype torch.int64"),
        (dict(size=torch.ones(2, dtype=torch.int64)), r"size must have shape \[1\]"),
        (dict(size=torch.ones(1, dtype=torch.int64, device="meta")), "size must be on device cpu"),
        (dict(row_keys=torch.arange(5, dtype=torch.int32)), "row_keys must have dtype torch.int64"),
        (dict(row_keys=torch.arange(10).reshape(5, 2)), r"row_keys must have shape \[\*\]"),
        (dict(row_keys=torch.arange(10)[::2]), "row_keys must be contiguous"),
        (dict(row_keys=torch.arange(0), indices=torch.zeros(0, dtype=torch.int64),
              out_packed=torch.zeros(0, 8, dtype=torch.int32)), "row_keys must have at least one row"),
        (dict(step_word=torch.zeros(())), "step_word must have dtype torch.int64"),
        (dict(step_word=torch.zeros((), dtype=torch.int64)), r"step_word must have shape \[1\]"),
        (dict(rng_step=torch.zeros(1)), "rng_step must have dtype torch.int64"),
        (dict(rng_step=torch.zeros(1, dtype=torch.int64, device="meta")), "rng_step must be on device cpu"),
        (dict(indices=torch.zeros(6, dtype=torch.int64)), r"indices must have shape \[5\]"),
        (dict(indices=torch.zeros(5, dtype=torch.int32)), "indices must have dtype torch.int64"),
        (dict(out_packed=torch.zeros(5, 12, dtype=torch.int32)), r"out_packed must have shape \[5, 8\]"),
        (dict(out_packed=torch.zeros(4, 8, dtype=torch.int32)), r"out_packed must have shape \[5, 8\]"),
        (dict(out_packed=torch.zeros(5, 8, dtype=torch.float32)), "out_packed must have dtype torch.int32"),
        (dict(out_packed=torch.zeros(5, 8, dtype=torch.int32, device="meta")), "out_packed must be on device cpu"),
        (dict(blocks_done=torch.zeros(1, dtype=torch.int64)), "blocks_done must have dtype torch.int32"),
        (dict(blocks_done=torch.zeros(2, dtype=torch.int32)), r"blocks_done must have shape \[1\]"),
    ],
)
def test_check_replay_sample_errors(change, match):
    with pytest.raises(ValueError, match=match):
        replay_sample.check(**{**_check_bufs(), **change}, seed_key=0)


@pytest.mark.parametrize("bad", [-1, 2**32, True, 1.5, "3", None])
def test_check_replay_sample_seed_key(bad):
    with pytest.raises(ValueError, match=r"seed_key must be an int in \[0, 2\*\*32\)"):
        replay_sample.check(**_check_bufs(), seed_key=bad)


def test_bind_replay_sample_checks_once_and_launches():
    k = get_kernels("cpu")
    bufs = _check_bufs(batch=3, capacity=4, words=4)
    bufs["packed"].copy_(torch.arange(16, dtype=torch.int32).reshape(4, 4))
    bufs["size"].fill_(4)
    replay_sample.check(**bufs, seed_key=0)
    replay_sample.check(**bufs, seed_key=2**32 - 1)
    launch = k.bind_replay_sample(*bufs.values(), seed_key=5)  # positional form, in signature order
    launch()
    k.bind_replay_sample(**bufs, seed_key=5)()  # keyword form
    assert bufs["rng_step"].tolist() == [2] and bufs["step_word"].tolist() == [int(hash32(2 ^ 5))]
    assert torch.equal(bufs["out_packed"], bufs["packed"][bufs["indices"]])
    with pytest.raises(ValueError, match="these kernels are for meta"):
        get_kernels("meta", backend="torch").bind_replay_sample(**bufs, seed_key=5)


# ----------------------------------------------------------------------------- kernel (GPU)
@pytest.fixture(scope="module")
def dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def kc(dev) -> Kernels:
    k = get_kernels(dev, backend="cuda")
    assert k.backend == "cuda"
    k.warmup()  # compile + load before any sync-checked or captured launch
    return k


@pytest.fixture(scope="module")
def kt(dev) -> Kernels:
    return get_kernels(dev, backend="torch")


def _gpu_state(dev, *, batch: int, words: int, capacity: int = 5003, size: int = 5003, step: int = 2**32 - 2,
               seed: int = 3, misaligned: bool = False) -> dict:
    """Random packed rows and row keys; ``misaligned``: ``out_packed`` starts one word into its storage."""
    g = torch.Generator().manual_seed(seed)
    key = seed_key(seed)
    out = torch.zeros(batch * words + 1, dtype=torch.int32, device=dev)
    return dict(
        packed=torch.randint(-2**31, 2**31 - 1, (capacity, words), generator=g, dtype=torch.int32).to(dev),
        size=torch.tensor([size], device=dev),
        row_keys=torch.randint(0, 2**32, (batch,), generator=g).to(dev),
        step_word=torch.tensor([int(hash32((step & MASK32) ^ key))], device=dev),
        rng_step=torch.tensor([step], device=dev),
        indices=torch.full((batch,), -1, dtype=torch.int64, device=dev),
        out_packed=(out[1:] if misaligned else out[:-1]).view(batch, words),
        blocks_done=torch.zeros(1, dtype=torch.int32, device=dev),
    )


def _assert_states_equal(a: dict, b: dict) -> None:
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert int(a["blocks_done"][0]) == 0


@gpu
@pytest.mark.parametrize("batch", [1, 7, 512, 8192])
@pytest.mark.parametrize("words, misaligned", [(4, False), (92, False), (13, False), (92, True)])
@pytest.mark.parametrize("size", [1, 1700, 5003])
def test_kernel_equals_twin(kc, kt, dev, batch, words, misaligned, size):
    """int4 copies (W a multiple of 4, aligned), word copies (odd W, or an out_packed one word off)."""
    seed_key_ = seed_key(3)
    c = _gpu_state(dev, batch=batch, words=words, size=size, misaligned=misaligned)
    t = _gpu_state(dev, batch=batch, words=words, size=size, misaligned=misaligned)
    for _ in range(3):
        kc.replay_sample(**c, seed_key=seed_key_)
        kt.replay_sample(**t, seed_key=seed_key_)
        torch.cuda.synchronize()
        _assert_states_equal(c, t)
    assert int(c["rng_step"][0]) == 2**32 + 1
    assert int(c["indices"].min()) >= 0 and int(c["indices"].max()) < size


@gpu
def test_kernel_has_no_sync(kc, dev):
    state = _gpu_state(dev, batch=512, words=92)
    launch = kc.bind_replay_sample(**state, seed_key=seed_key(3))
    launch()  # warm-up outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            launch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert int(state["rng_step"][0]) == 2**32 + 2 and int(state["blocks_done"][0]) == 0


def _capture(launch) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream first
        launch()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return graph


@gpu
def test_graph_replay_equals_eager_launches(kc, dev):
    graphed, eager = (_gpu_state(dev, batch=4099, words=92) for _ in range(2))
    start = {k: v.clone() for k, v in graphed.items()}
    seed_key_ = seed_key(3)
    graph = _capture(kc.bind_replay_sample(**graphed, seed_key=seed_key_))
    for key, v in graphed.items():  # the warm-up launch stepped the RNG: back to the start, in place
        v.copy_(start[key])
    for i in range(3):
        graph.replay()
        kc.replay_sample(**eager, seed_key=seed_key_)
        torch.cuda.synchronize()
        _assert_states_equal(graphed, eager)
    assert int(graphed["rng_step"][0]) == int(start["rng_step"][0]) + 3


@gpu
@pytest.mark.parametrize("batch", [1, 257])
def test_gpu_replay_with_kernels_samples_as_without(kc, dev, batch):
    plain = _replay(dev, capacity=1000, obs_shape=(5,), fill=((30, 17),))
    fast = _replay(dev, capacity=1000, obs_shape=(5,), fill=((30, 17),), kernels=kc)
    assert fast.sample_kernel and not plain.sample_kernel
    outs = [buf.make_sample_buffers(batch) for buf in (plain, fast)]
    for _ in range(4):
        plain.sample_into(outs[0])
        fast.sample_into(outs[1])
        torch.cuda.synchronize()
        assert torch.equal(outs[0].indices, outs[1].indices) and torch.equal(outs[0].packed, outs[1].packed)
        assert torch.equal(plain.rng_step, fast.rng_step)
    graph = _capture(lambda: fast.sample_into(outs[1]))  # the learner captures sample_into in its graph
    plain.sample_into(outs[0])  # the capture's warm-up drew once
    for _ in range(2):
        plain.sample_into(outs[0])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(outs[0].indices, outs[1].indices) and torch.equal(outs[0].packed, outs[1].packed)
        assert torch.equal(plain.rng_step, fast.rng_step)
