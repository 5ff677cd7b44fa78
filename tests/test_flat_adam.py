"""FlatAdam (learner/flat_adam.py): parameters as views of one flat buffer, one adam_step per update,
state round trip through the torch optimizer (CPU: the kernel's torch twin)."""
from __future__ import annotations

import copy

import pytest
import torch

from rl_zerosync.kernels import get_kernels
from rl_zerosync.learner.flat_adam import ALIGN, NORM_CHUNK, FlatAdam

LR = 1e-2


def net(seed=0):
    torch.manual_seed(seed)
    # Sizes that are not multiples of ALIGN, so every parameter but the first sits after a pad.
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def guard_bufs(found_inf=0.0, loss_scale=1.0):
    return dict(found_inf=torch.full((1,), found_inf), loss_scale=torch.full((1,), loss_scale),
                grad_norm=torch.zeros(1))


def make(model, *, wd=0.0, grad_clip=None, **bufs):
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=wd) if wd else torch.optim.Adam(params, lr=LR)
    bufs = bufs or guard_bufs()
    return FlatAdam(opt, get_kernels("cpu"), grad_clip=grad_clip, **bufs), bufs


def backward(model, seed):
    g = torch.Generator().manual_seed(seed)
    model.zero_grad(set_to_none=True)
    model(torch.randn(11, 5, generator=g)).pow(2).sum().backward()


def test_parameters_become_aligned_views_of_the_flat_buffer():
    model = net()
    before = [p.detach().clone() for p in model.parameters()]
    flat, _ = make(model)
    assert flat.numel % NORM_CHUNK == 0 and flat.numel % ALIGN == 0 and flat.numel > sum(p.numel() for p in before)
    base = flat.flat_params.data_ptr()
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p, b)
        assert p.untyped_storage().data_ptr() == flat.flat_params.untyped_storage().data_ptr()
        assert (p.data_ptr() - base) % (ALIGN * 4) == 0
    flat.flat_params.add_(1.0)
    assert all(torch.equal(p, b + 1.0) for p, b in zip(model.parameters(), before))


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_steps_match_torch_adam(wd):
    model, ref = net(), net()
    flat, bufs = make(model, wd=wd)
    cls = torch.optim.AdamW if wd else torch.optim.Adam
    ref_opt = cls(ref.parameters(), lr=LR, weight_decay=wd, foreach=False)
    for seed in range(4):
        backward(model, seed)
        backward(ref, seed)
        flat.gather_grads()
        flat.grad_norm_into(bufs["grad_norm"])
        want_norm = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in ref.parameters()]))
        torch.testing.assert_close(bufs["grad_norm"][0], want_norm, rtol=1e-5, atol=0)
        flat.step()
        ref_opt.step()
        for p, r in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, r, rtol=1e-6, atol=1e-4 * LR)  # float32 bias corrections
    state, want = flat.optimizer.state_dict()["state"], ref_opt.state_dict()["state"]
    for k in want:
        assert float(state[k]["step"]) == float(want[k]["step"]) == 4.0
        for name in ("exp_avg", "exp_avg_sq"):
            # the gradients drift with the float32 rounding of earlier steps
            torch.testing.assert_close(state[k][name], want[k][name], rtol=1e-4, atol=1e-5)
    assert not flat.flat_grads[flat.numel - 1:].any()  # the pads stay zero


def test_clip_and_loss_scale_are_applied_to_the_gradient():
    model, ref = net(), net()
    flat, bufs = make(model, grad_clip=0.5, **guard_bufs(loss_scale=0.25))
    ref_opt = torch.optim.Adam(ref.parameters(), lr=LR, foreach=False)
    backward(model, 0)
    backward(ref, 0)
    flat.gather_grads()
    flat.grad_norm_into(bufs["grad_norm"])
    norm = float(bufs["grad_norm"])
    assert norm * 0.25 > 0.5  # the clip is active
    scale = 0.25 * min(1.0, 0.5 / (norm * 0.25 + 1e-6))
    flat.step()
    for r in ref.parameters():
        r.grad.mul_(scale)
    ref_opt.step()
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, r, rtol=1e-6, atol=1e-4 * LR)  # float32 bias corrections


def test_found_inf_skips_everything_bit_identically():
    model = net()
    flat, bufs = make(model, wd=0.1)
    backward(model, 0)
    flat.gather_grads()
    flat.grad_norm_into(bufs["grad_norm"])
    flat.step()
    before = [t.clone() for t in (flat.flat_params, flat.exp_avg, flat.exp_avg_sq, flat.step_count)]
    bufs["found_inf"].fill_(1.0)
    backward(model, 1)
    flat.gather_grads()
    flat.step()
    after = (flat.flat_params, flat.exp_avg, flat.exp_avg_sq, flat.step_count)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert float(flat.step_count) == 1.0


def test_missing_gradient_counts_as_zero():
    model = net()
    flat, bufs = make(model)
    backward(model, 0)
    last = list(model.parameters())[-1]
    last.grad = None
    flat.gather_grads()
    params = list(model.parameters())
    at = (last.data_ptr() - flat.flat_params.data_ptr()) // 4  # the last parameter's slot
    assert not flat.flat_grads[at:].any()
    assert torch.equal(flat.flat_grads[:params[0].numel()], params[0].grad.reshape(-1))


def test_state_round_trip_through_the_optimizer():
    a_model, b_model = net(0), net(1)
    a, bufs = make(a_model, wd=0.1)
    for seed in range(3):
        backward(a_model, seed)
        a.gather_grads()
        a.grad_norm_into(bufs["grad_norm"])
        a.step()
    b, _ = make(b_model, wd=0.1)
    b_model.load_state_dict(a_model.state_dict())
    b.optimizer.load_state_dict(copy.deepcopy(a.optimizer.state_dict()))
    b.absorb_state()
    for name in ("flat_params", "exp_avg", "exp_avg_sq", "step_count"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    for p in b_model.parameters():  # the views are back on the flat buffers
        st = b.optimizer.state[p]
        assert st["exp_avg"].untyped_storage().data_ptr() == b.exp_avg.untyped_storage().data_ptr()
        assert p.untyped_storage().data_ptr() == b.flat_params.untyped_storage().data_ptr()


def test_restore_of_an_empty_state_zeroes_the_moments():
    model = net()
    flat, bufs = make(model)
    backward(model, 0)
    flat.gather_grads()
    flat.step()
    fresh = torch.optim.Adam(net().parameters(), lr=LR)
    flat.optimizer.load_state_dict(fresh.state_dict())
    flat.absorb_state()
    assert not flat.exp_avg.any() and not flat.exp_avg_sq.any() and float(flat.step_count) == 0.0


def test_restore_refuses_unequal_steps_and_partial_state():
    model = net()
    flat, _ = make(model)
    state = copy.deepcopy(flat.optimizer.state_dict())
    state["state"][1]["step"] = torch.tensor(5.0)
    flat.optimizer.load_state_dict(state)
    with pytest.raises(ValueError, match="Adam steps differ"):
        flat.absorb_state()
    state = copy.deepcopy(flat.optimizer.state_dict())
    del state["state"][0]
    flat.optimizer.load_state_dict(state)
    with pytest.raises(ValueError, match="have no Adam state"):
        flat.absorb_state()


@pytest.mark.parametrize("opt,match", [
    (lambda ps: torch.optim.Adam(ps, lr=LR, weight_decay=0.1), "coupled"),
    (lambda ps: torch.optim.Adam(ps, lr=LR, amsgrad=True), "amsgrad"),
    (lambda ps: torch.optim.Adam([{"params": ps[:1]}, {"params": ps[1:]}], lr=LR), "one param group"),
])
def test_unsupported_optimizers_are_refused(opt, match):
    with pytest.raises(ValueError, match=match):
        FlatAdam(opt(list(net().parameters())), get_kernels("cpu"), grad_clip=None, **guard_bufs())
