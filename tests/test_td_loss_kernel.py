"""The ``td_loss`` kernel: its twin against the torch loss of ``learner/loss.py`` (CPU, bit for bit),
its bind-time checks, and on the GPU the kernel against the twin (parity, NaN, no host sync, graph
replay, strided replay columns)."""
from __future__ import annotations

import pytest
import torch

from ray.rllib.core.columns import Columns

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.layouts import QSTATS
from rl_zerosync.kernels.reference import qstats
from rl_zerosync.kernels.td_loss import TD_MAX_BLOCKS, TD_ROWS_PER_BLOCK, td_loss_num_blocks, td_loss_scratch_numel
from rl_zerosync.learner.loss import td_loss as torch_td_loss
from rl_zerosync.module import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS

NAN = float("nan")


def _case(b: int, a: int, seed: int, dev, *, weights: bool, strided: bool = False) -> dict:
    """Inputs of one launch; ``strided`` puts the columns in a packed int32 block like the replay's."""
    g = torch.Generator().manual_seed(seed)
    q, qs, qt = (torch.randn(b, a, generator=g) * 3 for _ in range(3))
    actions = torch.randint(0, a, (b,), generator=g)
    rewards = torch.randn(b, generator=g)
    discounts = 0.99 ** torch.randint(1, 4, (b,), generator=g).float()
    terminateds = torch.rand(b, generator=g) < 0.2
    w = torch.rand(b, generator=g) + 0.5
    cols = {"actions": actions, "rewards": rewards, "discounts": discounts, "terminateds": terminateds}
    if strided:
        packed = torch.zeros((b, 8), dtype=torch.int32)
        views = {"actions": packed[:, 0:2].view(torch.int64)[:, 0], "rewards": packed[:, 2:3].view(torch.float32)[:, 0],
                 "discounts": packed[:, 3:4].view(torch.float32)[:, 0],
                 "terminateds": packed[:, 4:5].view(torch.uint8)[:, 0].view(torch.bool)}
        for k, v in views.items():
            v.copy_(cols[k])
        packed = packed.to(dev)
        cols = {"actions": packed[:, 0:2].view(torch.int64)[:, 0], "rewards": packed[:, 2:3].view(torch.float32)[:, 0],
                "discounts": packed[:, 3:4].view(torch.float32)[:, 0],
                "terminateds": packed[:, 4:5].view(torch.uint8)[:, 0].view(torch.bool)}
    else:
        cols = {k: v.to(dev) for k, v in cols.items()}
    return {"q": q.to(dev), "q_select": qs.to(dev), "q_target": qt.to(dev), **cols,
            "weights": w.to(dev) if weights else None}


def _outputs(b: int, a: int, dev, *, td_abs: bool = True) -> dict:
    return {"dq": torch.full((b, a), 7.0, device=dev), "loss": torch.zeros(1, device=dev),
            "td_abs": torch.zeros(b, device=dev) if td_abs else None,
            "qstats_out": torch.zeros(QSTATS.size, device=dev),
            "scratch": torch.zeros(td_loss_scratch_numel(b), dtype=torch.float64, device=dev),
            "blocks_done": torch.zeros(1, dtype=torch.int32, device=dev)}


# ----------------------------------------------------------------------------- CPU: the twin
@pytest.mark.parametrize("loss_type", ["huber", "mse"])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("double_q", [True, False])
def test_twin_is_the_torch_loss_and_its_autograd_gradient(loss_type, weights, double_q):
    """The twin writes exactly what learner/loss.py's td_loss and loss.backward() give for Q."""
    b, a = 37, 5
    case = _case(b, a, 3 + weights + 2 * double_q, "cpu", weights=weights)
    out = _outputs(b, a, "cpu")
    if not double_q:
        case["q_select"] = case["q_target"]
    get_kernels("cpu").td_loss(**case, **out, loss_type=loss_type)

    q = case["q"].clone().requires_grad_(True)
    fwd = {QF_PREDS: q, QF_NEXT_PREDS: case["q_select"], QF_TARGET_NEXT_PREDS: case["q_target"]}
    batch = {Columns.ACTIONS: case["actions"], Columns.REWARDS: case["rewards"],
             Columns.TERMINATEDS: case["terminateds"], "discounts": case["discounts"]}
    if weights:
        batch["weights"] = case["weights"]
    ref = torch_td_loss(fwd_out=fwd, batch=batch, branching=False, gamma=0.99, double_q=double_q,
                        loss_type=loss_type)
    ref.loss.backward()
    assert torch.equal(out["loss"], ref.loss.detach().reshape(1))
    assert torch.equal(out["dq"], q.grad)
    assert torch.equal(out["td_abs"], ref.td_abs)
    stats = torch.zeros(QSTATS.size)
    qstats(case["q"], stats, torch.zeros(1))
    assert torch.equal(out["qstats_out"], stats)
    # Only the taken action's column carries a gradient.
    mask = torch.zeros(b, a, dtype=torch.bool)
    mask[torch.arange(b), case["actions"]] = True
    assert torch.all(out["dq"][~mask] == 0) and torch.all(out["dq"][mask] != 0)


def test_twin_strided_columns_equal_contiguous():
    b, a = 9, 45
    dense, strided = _case(b, a, 5, "cpu", weights=False), _case(b, a, 5, "cpu", weights=False, strided=True)
    assert strided["rewards"].stride(0) == 8 and strided["actions"].stride(0) == 4
    o1, o2 = _outputs(b, a, "cpu"), _outputs(b, a, "cpu")
    k = get_kernels("cpu")
    k.td_loss(**dense, **o1, loss_type="huber")
    k.td_loss(**strided, **o2, loss_type="huber")
    for key in ("dq", "loss", "td_abs", "qstats_out"):
        assert torch.equal(o1[key], o2[key]), key


def test_grid_geometry():
    r = TD_ROWS_PER_BLOCK
    assert td_loss_num_blocks(1) == 1 and td_loss_num_blocks(r) == 1 and td_loss_num_blocks(r + 1) == 2
    assert td_loss_num_blocks(1 << 30) == TD_MAX_BLOCKS
    assert td_loss_scratch_numel(513) == 6 * 65
    with pytest.raises(ValueError, match="num_rows"):
        td_loss_scratch_numel(0)


@pytest.mark.parametrize("field, bad, match", [
    ("q", torch.zeros(4, 5, dtype=torch.float64), "q must have dtype"),
    ("q_select", torch.zeros(4, 4), r"q_select must have shape \[4, 5\]"),
    ("q_target", torch.zeros(5, 4).t(), "q_target must be contiguous"),
    ("actions", torch.zeros(4, dtype=torch.int32), "actions must have dtype torch.int64"),
    ("rewards", torch.zeros(3), r"rewards must have shape \[4\]"),
    ("discounts", torch.zeros(4, dtype=torch.float64), "discounts must have dtype"),
    ("terminateds", torch.zeros(4), "terminateds must have dtype torch.bool"),
    ("weights", torch.zeros(4, dtype=torch.float16), "weights must have dtype"),
    ("dq", torch.zeros(4, 6), r"dq must have shape \[4, 5\]"),
    ("loss", torch.zeros(2), r"loss must have shape \[1\]"),
    ("td_abs", torch.zeros(5), r"td_abs must have shape \[4\]"),
    ("qstats_out", torch.zeros(4), "qstats_out must have shape"),
    ("scratch", torch.zeros(5, dtype=torch.float64), r"scratch must have at least td_loss_scratch_numel\(4\) = 6"),
    ("scratch", torch.zeros(6), "scratch must have dtype torch.float64"),
    ("blocks_done", torch.zeros(1, dtype=torch.int64), "blocks_done must have dtype torch.int32"),
    ("loss_type", "l1", "loss_type must be one of"),
])
def test_bind_rejects_bad_buffers(field, bad, match):
    case, out = _case(4, 5, 1, "cpu", weights=True), _outputs(4, 5, "cpu")
    args = {**case, **out, "loss_type": "huber"}
    args[field] = bad
    with pytest.raises(ValueError, match=match):
        get_kernels("cpu").bind_td_loss(**args)


def test_bind_rejects_an_empty_q():
    case, out = _case(4, 5, 1, "cpu", weights=False), _outputs(4, 5, "cpu")
    case["q"] = torch.zeros(0, 5)
    with pytest.raises(ValueError, match="at least one row"):
        get_kernels("cpu").bind_td_loss(**case, **out, loss_type="huber")


# ----------------------------------------------------------------------------- GPU: kernel vs twin
def _pair(b, a, seed, dev, *, weights, strided=False, td_abs=True):
    case = _case(b, a, seed, dev, weights=weights, strided=strided)
    return case, _outputs(b, a, dev, td_abs=td_abs), _outputs(b, a, dev, td_abs=td_abs)


def _assert_parity(c, t, b):
    assert torch.allclose(c["dq"], t["dq"], rtol=1e-6, atol=1e-7 / b)
    assert torch.allclose(c["loss"], t["loss"], rtol=1e-5, atol=1e-7)
    if t["td_abs"] is not None:
        assert torch.equal(c["td_abs"], t["td_abs"])  # y and td round exactly as torch's ops do
    assert torch.allclose(c["qstats_out"], t["qstats_out"], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert int(c["blocks_done"][0]) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("b", (1, 7, 512, 4099, TD_ROWS_PER_BLOCK * TD_MAX_BLOCKS + 3, (1 << 17) + 5))
@pytest.mark.parametrize("a", (1, 5, 45))
@pytest.mark.parametrize("loss_type, weights", [("huber", False), ("mse", True), ("huber", True)])
def test_kernel_parity(b, a, loss_type, weights):
    dev = torch.device("cuda", torch.cuda.current_device())
    kc, kt = get_kernels(dev, backend="cuda"), get_kernels(dev, backend="torch")
    case, oc, ot = _pair(b, a, b + a, dev, weights=weights)
    kc.td_loss(**case, **oc, loss_type=loss_type)
    kt.td_loss(**case, **ot, loss_type=loss_type)
    _assert_parity(oc, ot, b)


@pytest.mark.gpu
def test_kernel_strided_columns_and_no_td_abs():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc, kt = get_kernels(dev, backend="cuda"), get_kernels(dev, backend="torch")
    case, oc, ot = _pair(513, 5, 2, dev, weights=False, strided=True, td_abs=False)
    kc.td_loss(**case, **oc, loss_type="huber")
    kt.td_loss(**case, **ot, loss_type="huber")
    _assert_parity(oc, ot, 513)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["q", "q_select", "q_target"])
def test_kernel_nonfinite(where):
    """NaN / Inf reach the loss and the stats as torch's ops give them (the guard then skips the step)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    kc, kt = get_kernels(dev, backend="cuda"), get_kernels(dev, backend="torch")
    case, oc, ot = _pair(300, 5, 4, dev, weights=False)
    case[where][17, :] = NAN
    case[where][200, 3] = float("inf")
    kc.td_loss(**case, **oc, loss_type="huber")
    kt.td_loss(**case, **ot, loss_type="huber")
    assert torch.equal(torch.isfinite(oc["loss"]), torch.isfinite(ot["loss"]))
    assert torch.equal(torch.isnan(oc["dq"]), torch.isnan(ot["dq"]))
    assert torch.equal(oc["td_abs"].isnan(), ot["td_abs"].isnan())
    assert torch.allclose(oc["qstats_out"], ot["qstats_out"], equal_nan=True)


@pytest.mark.gpu
def test_kernel_bad_action_gives_nan_not_a_clamp():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc = get_kernels(dev, backend="cuda")
    case, oc, _ = _pair(64, 5, 6, dev, weights=False)
    case["actions"][9] = 5
    kc.td_loss(**case, **oc, loss_type="huber")
    assert torch.isnan(oc["loss"]).all() and torch.isnan(oc["dq"][9]).all() and torch.isfinite(oc["dq"][10]).all()


@pytest.mark.gpu
def test_kernel_no_sync_and_graph_replay():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc = get_kernels(dev, backend="cuda")
    kc.warmup()
    case, graphed, eager = _pair(4099, 5, 8, dev, weights=True)
    launch = kc.bind_td_loss(**case, **graphed, loss_type="huber")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        kc.td_loss(**case, **eager, loss_type="huber")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        launch()
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(3):
        case["q"].normal_(generator=None)
        graph.replay()
        kc.td_loss(**case, **eager, loss_type="huber")
        torch.cuda.synchronize()
        for key in ("dq", "loss", "td_abs", "qstats_out", "blocks_done"):
            assert torch.equal(graphed[key], eager[key]), (step, key)
