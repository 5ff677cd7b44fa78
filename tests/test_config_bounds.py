"""Config values that trained silently into meaningless numbers are named errors at load: a replay
smaller than a batch or than one iteration's transitions, one-step episodes, exposure levels beyond
the documented bound."""
from __future__ import annotations

import pytest

from rl_zerosync.config.settings import SettingsError, from_dict
from rl_zerosync.envs.params import MAX_ABS_EXPOSURE

SMALL = {"num_envs_per_runner": 8, "rollout_length": 16, "batch_size": 32}


@pytest.mark.parametrize("raw, needle", [
    ({"algo": SMALL, "learner": {"replay_capacity": 1}},
     "learner.replay_capacity: 1 is smaller than one batch (algo.batch_size 32); expected >= 32"),
    ({"algo": {**SMALL, "batch_size": 4096}, "learner": {"replay_capacity": 1000}},
     "learner.replay_capacity: 1000 is smaller than one batch (algo.batch_size 4096)"),
    ({"algo": {**SMALL, "num_envs_per_runner": 64}, "learner": {"replay_capacity": 1000}},
     "learner.replay_capacity: 1000 is smaller than one iteration's transitions per learner (1024 ="),
    ({"algo": SMALL, "env": {"episode_len": 1}}, "env.episode_len: expected an int >= 2"),
    ({"algo": SMALL, "env": {"exposure_levels": [-50, -1, 0, 1, 50]}},
     f"exposure_levels: expected every |level| <= {MAX_ABS_EXPOSURE:g}"),
])
def test_bounds_are_named_at_load(raw, needle):
    with pytest.raises(SettingsError) as err:
        from_dict({"data": {"source": "synthetic"}, **raw}, source="b.yaml")
    assert str(err.value).startswith("b.yaml: ") and needle in str(err.value)


def test_values_at_the_bounds_load():
    s = from_dict({"data": {"source": "synthetic"}, "algo": SMALL, "learner": {"replay_capacity": 128},
                   "env": {"episode_len": 2, "exposure_levels": [-10, -1, 0, 1, 10]}})
    assert s.learner.typed.replay_capacity == 128 and s.env.typed.episode_len == 2
    more = from_dict({"data": {"source": "synthetic"}, "learner": {"replay_capacity": 128},
                      "algo": {**SMALL, "num_envs_per_runner": 16, "num_learners": 2}})
    assert more.learner.typed.replay_capacity == 128  # 256 transitions split over 2 learners
