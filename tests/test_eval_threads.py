"""The evaluation's walks on one CPU thread (``evaluation/threads.py``) give the numbers of the
default thread count bit for bit: the agent's walk through a 256-wide network (routed and
factored), the rules' batched walk and the cost sensitivity; the thread count is restored after."""
from __future__ import annotations

import numpy as np
import torch

from rl_zerosync.data.synthetic import synthetic_market
from rl_zerosync.envs import EnvParams
from rl_zerosync.evaluation.backtest import evaluate_policy, rule_metrics
from rl_zerosync.evaluation.rules import RuleWalk
from rl_zerosync.evaluation.sensitivity import segment_sensitivity
from rl_zerosync.evaluation.threads import one_cpu_thread

ROUTING = {"wide": 1.5, "high_vol": 1.5, "low_vol": 0.67}


def _net(out: int) -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(20, 256), torch.nn.ReLU(), torch.nn.LayerNorm(256),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, out)).eval()


def _walks(data, params):
    routed, flat = _net(5), _net(45)
    with torch.no_grad():
        agent = evaluate_policy(lambda o: routed(o).argmax(1), data, params, route_exposure=True, routing=ROUTING,
                                baselines=False)
        factored = evaluate_policy(lambda o: flat(o).argmax(1), data, params, baselines=False)
        rules = rule_metrics(RuleWalk(data, params, ROUTING))  # walked here, not read from the process's cache
        sens = segment_sensitivity(lambda o: routed(o).argmax(1), data, params, route_exposure=True, routing=ROUTING,
                                   best_rule="momentum(8,0.5)")
    return agent, factored, rules, sens


def test_one_thread_walks_are_the_default_threads_walks_bit_for_bit():
    torch.set_num_threads(2)
    data = synthetic_market(4, 300, seed=5)
    params = EnvParams(episode_len=64, window=16)
    default = _walks(data, params)
    with one_cpu_thread("cpu"):
        assert torch.get_num_threads() == 1
        single = _walks(data, params)
    assert torch.get_num_threads() == 2  # restored
    for a, b in zip(default[:2], single[:2]):
        for x, y in zip(a.records, b.records):
            assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        assert a.metrics == b.metrics
    grid, nets = default[2]
    assert grid == single[2][0] and all(np.array_equal(x, y) for k in nets for x, y in zip(nets[k], single[2][1][k]))
    assert default[3] == single[3]
    assert len({int(a) for r in default[0].records for a in r["action"]}) > 1  # the network acts, not one action


def test_one_cpu_thread_leaves_other_devices_alone():
    torch.set_num_threads(2)
    with one_cpu_thread("cuda"):
        assert torch.get_num_threads() == 2
    with one_cpu_thread(torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
