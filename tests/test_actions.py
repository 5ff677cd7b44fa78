"""Factored action layout: encode/decode, enums, vectorized forms, bad input."""
from __future__ import annotations

import itertools

import pytest
import torch

from rl_zerosync import actions as A


def test_constants_and_enums():
    assert (A.NUM_EXPOSURES, A.NUM_ORDER_TYPES, A.NUM_URGENCIES, A.NUM_ACTIONS) == (5, 3, 3, 45)
    assert [int(o) for o in A.OrderType] == [0, 1, 2]
    assert [o.name for o in A.OrderType] == ["MARKET", "LIMIT", "PASSIVE"]
    assert [u.name for u in A.Urgency] == ["LOW", "NORMAL", "HIGH"]
    assert A.DEFAULT_EXPOSURE_LEVELS == (-1.0, -0.5, 0.0, 0.5, 1.0)


def test_round_trip_all_45():
    seen = set()
    for e, o, u in itertools.product(range(5), range(3), range(3)):
        i = A.encode(e, o, u)
        assert i == e * 9 + o * 3 + u  # the documented layout, written out
        assert A.decode(i) == (e, o, u)
        seen.add(i)
    assert seen == set(range(45))


def test_decode_returns_enums():
    e, o, u = A.decode(A.encode(4, A.OrderType.PASSIVE, A.Urgency.HIGH))
    assert (e, o, u) == (4, A.OrderType.PASSIVE, A.Urgency.HIGH)
    assert isinstance(o, A.OrderType) and isinstance(u, A.Urgency)
    assert A.decode(0) == (0, A.OrderType.MARKET, A.Urgency.LOW)
    assert A.decode(44) == (4, A.OrderType.PASSIVE, A.Urgency.HIGH)
    assert A.decode(11) == (1, A.OrderType.MARKET, A.Urgency.HIGH)
    assert A.decode(22) == (2, A.OrderType.LIMIT, A.Urgency.NORMAL)


def test_vectorized_matches_scalar():
    idx = torch.arange(45, dtype=torch.int64)
    e, o, u = A.decode_t(idx)
    assert e.dtype == torch.int64
    for i in range(45):
        assert (int(e[i]), int(o[i]), int(u[i])) == tuple(int(x) for x in A.decode(i))
    assert torch.equal(A.encode_t(e, o, u), idx)


def test_vectorized_on_batches():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 45, (7, 13), generator=g)
    e, o, u = A.decode_t(idx)
    assert e.shape == idx.shape
    assert int(e.max()) <= 4 and int(o.max()) <= 2 and int(u.max()) <= 2
    assert torch.equal(A.encode_t(e, o, u), idx)


@pytest.mark.parametrize(
    "args, name",
    [((5, 0, 0), "exposure"), ((-1, 0, 0), "exposure"), ((0, 3, 0), "order_type"), ((0, 0, 3), "urgency"),
     ((0, -1, 0), "order_type")],
)
def test_encode_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        A.encode(*args)


@pytest.mark.parametrize("index", [-1, 45, 100])
def test_decode_bad_input(index):
    with pytest.raises(ValueError, match="action index"):
        A.decode(index)


def test_exposure_levels_tensor():
    t = A.exposure_levels_tensor()
    assert t.dtype == torch.float32 and t.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="exposure_levels"):
        A.exposure_levels_tensor((0.0, 1.0))
    with pytest.raises(ValueError, match="exposure_levels"):
        A.exposure_levels_tensor((0.0, 1.0, float("nan"), 2.0, 3.0))
