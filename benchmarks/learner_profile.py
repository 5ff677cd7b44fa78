"""Where one learner update's device time goes: per-kernel counts and times at batch 512.

How to run (one GPU):
    python -m benchmarks.learner_profile

Builds the learner of ``benchmarks/learner.py`` (obs 32 -> 2x256 -> 45 Q-values, batch 512) six
ways: the default CUDA graph (the Q network's forward and backward as the linear kernels), the same
with ``learner.mlp_kernel = False`` (torch's forward and autograd, cuBLAS GEMMs), ``learner.compile``,
``learner.compile`` + ``learner.tf32``, and the network with LayerNorm after each hidden Linear
(``configs/local.yaml``'s) with and without the kernels.
For each, after 30 warm updates, the torch profiler records 20 updates; every device activity
(kernel, memcpy, memset; CUDA-graph nodes included) is grouped by name with its count and
microseconds per update. ``wall_us_per_update`` is CUDA-event time over 200 more updates. A
diagnostic, not a comparison: ``benchmarks/learner.py`` holds the timed ratios against stock.
Writes JSON (``--out``, default ``benchmarks/results/learner_profile.json``).
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional

import torch

from benchmarks.common import parser, result_header, results_path, write_json
from benchmarks.learner import make_config, random_rollout, spaces
from rl_zerosync.learner import ZeroSyncDQNTorchLearner

BATCH = 512
VARIANTS = {"graph": {}, "graph_torch_mlp": {"mlp_kernel": False}, "graph_compile": {"compile": True},
            "graph_compile_tf32": {"compile": True, "tf32": True},
            "graph_layernorm": {"layernorm": True},
            "graph_layernorm_torch_mlp": {"layernorm": True, "mlp_kernel": False}}
"""Per variant: learner settings, plus ``mlp_kernel`` (the learner property, set after the build) and
``layernorm`` (the module's LayerNorm after each hidden Linear, as in ``configs/local.yaml``)."""


def profile_variant(zerosync: Dict, *, profiled: int = 20, timed: int = 200) -> Dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    zerosync = dict(zerosync)
    mlp_kernel = zerosync.pop("mlp_kernel", None)
    layernorm = zerosync.pop("layernorm", False)
    cfg = make_config(batch=BATCH, hidden=[256, 256], cuda=True, learner_class=ZeroSyncDQNTorchLearner,
                      zerosync={"replay_capacity": 100_000, **zerosync}, layernorm=layernorm)
    learner = cfg.build_learner(spaces=spaces())
    if mlp_kernel is not None:
        learner.mlp_kernel = mlp_kernel
    learner.replay.add(random_rollout(100, 1000, learner.device))
    learner.train(30)
    learner.collect_metrics()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        learner.train(profiled)
        torch.cuda.synchronize()
    agg: Dict[str, List[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            agg[e.name][0] += 1
            agg[e.name][1] += e.device_time_total
    rows = sorted(({"name": n, "per_update": c / profiled, "us_per_update": t / profiled}
                   for n, (c, t) in agg.items()), key=lambda r: -r["us_per_update"])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    learner.train(timed)
    end.record()
    torch.cuda.synchronize()
    learner.collect_metrics()
    return {"mlp_kernel": learner.mlp_kernel, "ops_per_update": sum(r["per_update"] for r in rows),
            "kernel_us_per_update": sum(r["us_per_update"] for r in rows),
            "wall_us_per_update": start.elapsed_time(end) * 1000.0 / timed, "kernels": rows}


def main(argv: Optional[List[str]] = None) -> Dict:
    p = parser(__doc__, out=results_path("learner_profile"), quick="(no quick mode: needs CUDA)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.learner_profile needs a CUDA device")
    import ray

    ray.init(num_cpus=8, include_dashboard=False, ignore_reinit_error=True)  # RLlib asks Ray for the GPU
    result = result_header("learner_profile", device="cuda", config={"batch": BATCH, "hidden": [256, 256],
                                                                      "variants": VARIANTS})
    result["results"] = {}
    for name, zs in VARIANTS.items():
        r = profile_variant(zs)
        result["results"][name] = r
        print(f"{name}: {r['ops_per_update']:.0f} ops, {r['kernel_us_per_update']:.1f} us of kernels, "
              f"{r['wall_us_per_update']:.1f} us wall per update")
        for row in r["kernels"][:8]:
            print(f"    {row['per_update']:5.2f} x {row['us_per_update']:6.2f} us  {row['name'][:90]}")
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
