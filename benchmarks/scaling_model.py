"""Projection of the two-GPU measurement (``results/scaling.json``) to 8 and 64 GPUs.

How to run: ``python -m benchmarks.scaling_model [--results benchmarks/results/scaling.json]``
(pure arithmetic, no GPU; prints markdown for ``docs/scaling.md`` and writes
``benchmarks/results/scaling_model.json``).

Weak scaling as in the benchmark: every GPU holds one GPU env runner and one DDP learner, each
iteration samples ``N x T`` env steps per runner and every learner runs the same K updates of its
own batch. An iteration at ``n`` GPUs is modelled as

    T(n) = T_work(1) + (n - 1) * c_fanout + K * t_allreduce(n) + T_rollout_net(n)

* ``T_work(1)``: the measured 1-GPU iteration (sample + add + train + weight sync + RLlib's
  own per-iteration work), from the benchmark's wall clock.
* ``c_fanout``: the driver's extra cost per added runner + learner pair (Ray calls fanned out and
  gathered, weights pushed to one more runner). Two cases: ``measured`` takes the 2-GPU minus
  1-GPU difference of the sample + add + sync phases and keeps it linear (pessimistic: part of it
  is the max of two samples' jitter); ``ray_call`` assumes 0.5 ms per added pair.
* ``t_allreduce(n)``: DDP's all-reduce of the gradients (``S`` bytes) per update, an alpha-beta
  model: ``c_ddp + 2 * ceil(log2 g) * alpha_nvlink + 2 * ceil(log2 m) * alpha_net
  + 2 (n - 1) / n * S / beta`` with ``g`` GPUs per node (NVLink), ``m`` nodes, ``beta`` the
  slowest link's bandwidth per GPU. ``c_ddp + 2 * alpha_nvlink`` is calibrated on the measured
  2-GPU minus 1-GPU learner update (``alpha_nvlink`` 5 us assumed, the rest is DDP's fixed cost).
* ``T_rollout_net(n)``: 0 when each runner's learner is on its node (the layout below); else the
  rollout bytes over the node's network link.

Everything here is a projection from one two-GPU measurement, not a measurement at 8 or 64 GPUs.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.common import results_path, write_json


def model_params(obs_dim: int, hidden: list, outputs: int) -> int:
    """Weights + biases of the MLP Q network."""
    sizes = [obs_dim, *hidden, outputs]
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def rollout_bytes_per_step(obs_dim: int) -> int:
    """Bytes per env step a remote runner ships: obs + next_obs (f32), action (i64), reward (f32),
    terminated + truncated (bool)."""
    return 2 * 4 * obs_dim + 8 + 4 + 1 + 1


def allreduce_s(n: int, *, gpus_per_node: int, grad_bytes: float, c_ddp: float, alpha_nvlink: float,
                alpha_net: float, beta_nvlink: float, beta_net: float) -> float:
    """Seconds of one gradient all-reduce across ``n`` GPUs (alpha-beta model; 0 for one GPU)."""
    if n <= 1:
        return 0.0
    g = min(n, gpus_per_node)
    m = math.ceil(n / gpus_per_node)
    beta = beta_net if m > 1 else beta_nvlink
    return (c_ddp + 2 * math.ceil(math.log2(g)) * alpha_nvlink + 2 * math.ceil(math.log2(m)) * alpha_net
            + 2 * (n - 1) / n * grad_bytes / beta)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=results_path("scaling"))
    p.add_argument("--out", default=results_path("scaling_model"), help="JSON output path")
    p.add_argument("--obs-dim", type=int, default=20, help="observation size of configs/two_gpu.yaml")
    p.add_argument("--outputs", type=int, default=5, help="Q outputs (routed: 5 exposures)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--alpha-nvlink-us", type=float, default=5.0)
    p.add_argument("--alpha-net-us", type=float, default=15.0, help="inter-node latency per tree step")
    p.add_argument("--beta-nvlink-gbs", type=float, default=450.0, help="NVLink GB/s per GPU, one way")
    p.add_argument("--beta-net-gbs", type=float, default=50.0, help="network GB/s per GPU (400 Gb/s NIC)")
    p.add_argument("--ray-call-ms", type=float, default=0.5)
    args = p.parse_args(argv)

    r = json.loads(Path(args.results).read_text())
    cfg = r["config"]
    e1, e2 = (next(x for x in r["e2e"] if x["gpus"] == g) for g in (1, 2))
    lg = {(x["variant"], x["gpus"]): x for x in r["learner"]}
    steps_per_runner = cfg["envs"] * cfg["rollout"]
    t1 = e1["wall_s"] / e1["iterations"]
    t2 = e2["wall_s"] / e2["iterations"]
    k = e1["updates"] / e1["iterations"]
    ph1, ph2 = e1["phase_median_s"], e2["phase_median_s"]
    fanout_measured = sum(ph2[p] - ph1[p] for p in ("sample", "add", "sync_weights"))
    params = model_params(args.obs_dim, cfg["hidden"], args.outputs)
    grad_bytes = 4 * params
    d_update = (lg[("ours_graph", 2)]["us_per_update"] - lg[("ours_graph", 1)]["us_per_update"]) * 1e-6
    alpha_nv = args.alpha_nvlink_us * 1e-6
    c_ddp = d_update - 2 * alpha_nv - grad_bytes / (args.beta_nvlink_gbs * 1e9)
    net = dict(gpus_per_node=args.gpus_per_node, grad_bytes=grad_bytes, c_ddp=c_ddp, alpha_nvlink=alpha_nv,
               alpha_net=args.alpha_net_us * 1e-6, beta_nvlink=args.beta_nvlink_gbs * 1e9,
               beta_net=args.beta_net_gbs * 1e9)
    bps = rollout_bytes_per_step(args.obs_dim)

    rows = []
    for n in (1, 2, 8, 64):
        for case, fan in (("measured", fanout_measured), ("ray_call", args.ray_call_ms * 1e-3)):
            t = t1 + (n - 1) * fan + k * allreduce_s(n, **net)
            steps = n * steps_per_runner
            rows.append({
                "gpus": n, "nodes": math.ceil(n / args.gpus_per_node), "fanout": case, "iteration_s": t,
                "env_steps_per_s": steps / t, "efficiency": t1 / t,
                "allreduce_us": allreduce_s(n, **net) * 1e6,
                "rollout_gb_per_s_per_runner": steps_per_runner * bps / t / 1e9,
                "weights_mb_per_s_from_driver": n * grad_bytes / t / 1e6,
                "ddp_gb_per_s_per_gpu": k * 2 * (n - 1) / n * grad_bytes / t / 1e9 if n > 1 else 0.0,
            })
    out = {
        "source": str(Path(args.results).name), "measured": {
            "iteration_s_1gpu": t1, "iteration_s_2gpu": t2, "updates_per_iteration": k,
            "steps_per_runner_per_iteration": steps_per_runner, "fanout_s_per_added_gpu": fanout_measured,
            "ddp_extra_us_per_update_2gpu": d_update * 1e6,
        },
        "assumptions": {**vars(args), "c_ddp_us": c_ddp * 1e6, "grad_bytes": grad_bytes, "params": params,
                        "rollout_bytes_per_env_step": bps},
        "rows": rows,
    }
    print(f"measured: iteration {t1 * 1e3:.1f} ms (1 GPU), {t2 * 1e3:.1f} ms (2 GPUs); K = {k:.0f} updates; "
          f"fan-out +{fanout_measured * 1e3:.1f} ms per added GPU; DDP +{d_update * 1e6:.0f} us/update "
          f"(c_ddp {c_ddp * 1e6:.0f} us); {params:,} params = {grad_bytes / 1e6:.2f} MB of gradients; "
          f"{bps} B per env step\n")
    print("| GPUs | nodes | driver fan-out | iteration ms | env steps/s | efficiency | all-reduce µs/update "
          "| rollout GB/s per runner | weights MB/s (driver) | DDP GB/s per GPU |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for x in rows:
        print(f"| {x['gpus']} | {x['nodes']} | {x['fanout']} | {x['iteration_s'] * 1e3:.0f} | "
              f"{x['env_steps_per_s'] / 1e6:.1f} M | {x['efficiency']:.2f} | {x['allreduce_us']:.0f} | "
              f"{x['rollout_gb_per_s_per_runner']:.2f} | {x['weights_mb_per_s_from_driver']:.0f} | "
              f"{x['ddp_gb_per_s_per_gpu']:.2f} |")
    write_json(out, args.out)
    return out


if __name__ == "__main__":
    main()
