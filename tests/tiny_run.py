"""A tiny CPU training config shared by the train-loop tests (seconds per iteration)."""
from __future__ import annotations

import copy

TINY = {
    "model": {"action_mode": "routed", "hidden": [16, 16]},
    "algo": {"lr": 1e-3, "batch_size": 32, "replay_ratio": 0.5, "learning_starts": 64,
             "target_update_freq": 10, "epsilon": [[0, 1.0], [600, 0.1]], "num_envs_per_runner": 8,
             "rollout_length": 16, "num_gpus_per_learner": 0},
    "data": {"source": "synthetic", "num_assets": 2, "num_bars": 1600, "seed": 0, "features": {"warmup": 32}},
    "env": {"episode_len": 32, "window": 8},
    "runner": {"device": "cpu"},
    "learner": {"replay_capacity": 2000, "graph": False},
}


def tiny_raw(run: dict, **sections: dict) -> dict:
    """A deep copy of TINY with this ``run`` section and other sections updated key by key."""
    raw = copy.deepcopy(TINY)
    raw["run"] = {"num_cpus": 2, **run}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return raw
