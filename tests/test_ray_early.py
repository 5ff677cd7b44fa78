"""Ray started on a thread while the driver walks its validation baselines (run/ray_session.py)."""
from __future__ import annotations

import threading

import pytest

from rl_zerosync.run import ray_session


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setattr(ray_session, "_early", {})
    monkeypatch.setattr(ray_session, "ray_is_running", lambda: False)


def test_join_waits_for_the_start_and_the_thread_stays_parked():
    gate, seen = threading.Event(), {}

    def start():
        seen["thread"] = threading.current_thread()
        gate.wait(10)

    ray_session.start_early(start)
    assert not ray_session._early["done"].is_set()  # still starting
    gate.set()
    ray_session.join_early()
    # Ray's children die with the thread that started them: it must outlive the start.
    assert seen["thread"] is not threading.current_thread() and seen["thread"].is_alive()
    assert seen["thread"].daemon and ray_session._early == {}
    ray_session.join_early()  # nothing pending: returns at once


def test_the_start_error_is_raised_where_ray_is_needed():
    def start():
        raise ValueError("ray.init: bad address")

    ray_session.start_early(start)
    with pytest.raises(ValueError, match="bad address"):
        ray_session.join_early()
    assert ray_session._early == {}


def test_no_second_start_while_one_is_pending():
    calls = []
    gate = threading.Event()
    ray_session.start_early(lambda: (calls.append(1), gate.wait(10)))
    ray_session.start_early(lambda: calls.append(2))
    gate.set()
    ray_session.join_early()
    assert calls == [1]


def test_owned_ray_waits_for_a_pending_start_before_shutting_down(monkeypatch):
    ray = pytest.importorskip("ray")
    state = {"running": False, "shutdowns": 0}
    monkeypatch.setattr(ray_session, "ray_is_running", lambda: state["running"])
    monkeypatch.setattr(ray, "shutdown", lambda: state.update(running=False, shutdowns=state["shutdowns"] + 1))
    gate = threading.Event()

    def start():
        gate.wait(10)
        state["running"] = True

    with pytest.raises(RuntimeError):
        with ray_session.owned_ray():
            ray_session.start_early(start)
            threading.Timer(0.2, gate.set).start()
            raise RuntimeError("the command failed while Ray was starting")
    assert state == {"running": False, "shutdowns": 1}  # the start finished, then it was shut down
