"""Benchmark the trading env: batched steps/s on the GPU at 1k, 64k and 1M envs, and the gymnasium twin on CPU.

How to run:
    python -m benchmarks.env             # one CUDA GPU, about a minute
    python -m benchmarks.env --quick     # CPU only (batched env at small N + twin), a few seconds

Results to expect: at 1k envs a step is bound by kernel-launch overhead (tens of launches), so the
CUDA-graph column is several times faster than eager; at 1M envs a step is memory-bound and runs
at billions of env steps per second, orders of magnitude above the single-env gymnasium twin (tens of
thousands of steps/s on one CPU core at most, usually thousands).

Each measurement steps N envs with random factored actions (pre-drawn on the device, no network),
after warm-up; GPU times come from CUDA events, CPU times from ``time.perf_counter``; the reported
value is the median over repeats. Writes JSON (``--out``, default ``benchmarks/results/env.json``)
with the date, hardware, versions, config, every row and a top-level ``summary`` with
``env_steps_per_s_max`` (eager, best N), ``env_steps_per_s_graph_max`` and ``twin_steps_per_s``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import fields
from typing import Optional

import numpy as np
import torch

from benchmarks.common import (cell, parser, print_summary, print_table, result_header, results_path,
                               time_cuda_seconds, time_host_seconds, write_json)
from rl_zerosync.envs import BatchedTradingEnv, EnvParams, TradingGymEnv
from rl_zerosync.data import make_market

ACTION_BANK = 8  # distinct pre-drawn action rows, cycled


class Stepper:
    """Steps a batched env with a cycling bank of random device actions."""

    def __init__(self, env: BatchedTradingEnv, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.env = env
        self.bank = torch.randint(0, 45, (ACTION_BANK, env.num_envs), generator=g).to(env.device)
        self.i = 0

    def __call__(self) -> None:
        self.env.step(self.bank[self.i % ACTION_BANK])
        self.i += 1


def graph_step_seconds(env: BatchedTradingEnv, stepper: Stepper, *, steps: int, repeats: int) -> float:
    """Seconds per env step when ``steps`` steps are captured in one CUDA graph and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            stepper()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    state0 = env.state
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            stepper()
        final = env.state
        for f in fields(state0):  # carry the state so each replay continues the last one
            first, last = getattr(state0, f.name), getattr(final, f.name)
            if first is not last:
                first.copy_(last)
    env.state = state0
    seconds = time_cuda_seconds(graph.replay, calls=3, repeats=repeats) / steps
    del graph
    return seconds


def twin_steps_per_s(market, params: EnvParams, steps: int) -> float:
    """Steps/s of the gymnasium twin (resets included) on the CPU."""
    env = TradingGymEnv(data=market, env=params)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 45, size=steps)
    for a in actions[:50]:  # warm-up
        if any(env.step(int(a))[2:4]):
            env.reset()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        for a in actions:
            _, _, term, trunc, _ = env.step(int(a))
            if term or trunc:
                env.reset()
        samples.append(steps / (time.perf_counter() - t0))
    return statistics.median(samples)


def run(args: argparse.Namespace) -> dict:
    cuda = not args.quick
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --quick for the CPU path")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sizes = (1 << 10, 1 << 16, 1 << 20) if cuda else (1 << 10, 1 << 14)
    data_cfg = {"num_assets": args.assets, "num_bars": args.bars, "seed": 0}
    params = EnvParams(episode_len=args.episode_len, window=args.window)
    config = {"quick": args.quick, "sizes": list(sizes), "data": data_cfg, "episode_len": args.episode_len,
              "window": args.window, "calls": args.calls, "repeats": args.repeats,
              "graph_steps": args.graph_steps, "twin_steps": args.twin_steps, "fill_mode": params.fill_mode}
    market = make_market(data_cfg, "train")
    rows = []
    for n in sizes:
        env = BatchedTradingEnv(market, params, num_envs=n, device=device, seed=1)
        stepper = Stepper(env, seed=n)
        timer = time_cuda_seconds if cuda else time_host_seconds
        sec = timer(stepper, calls=args.calls, repeats=args.repeats)
        row = {"num_envs": n, "step_us": sec * 1e6, "env_steps_per_s": n / sec, "graph_step_us": None,
               "graph_env_steps_per_s": None}
        if cuda:
            gsec = graph_step_seconds(env, stepper, steps=args.graph_steps, repeats=args.repeats)
            row.update(graph_step_us=gsec * 1e6, graph_env_steps_per_s=n / gsec)
        rows.append(row)
        del env, stepper
        if cuda:
            torch.cuda.empty_cache()
    twin = twin_steps_per_s(market, params, args.twin_steps)
    summary = {
        "env_steps_per_s_max": max(r["env_steps_per_s"] for r in rows),
        "env_steps_per_s_graph_max": max(r["graph_env_steps_per_s"] for r in rows) if cuda else None,
        "env_steps_per_s_1k": rows[0]["env_steps_per_s"],
        "twin_steps_per_s": twin,
    }
    return {**result_header("env", device=device, config=config), "batched": rows,
            "twin": {"device": "cpu", "env": "torch twin", "steps_per_s": twin},  # TradingGymEnv
            "summary": summary}


def print_tables(result: dict) -> None:
    print_table(result["batched"], ("num_envs", "step_us", "env_steps_per_s", "graph_step_us", "graph_env_steps_per_s"),
                width=22, fmt=lambda v: cell(v, sci_at=1e5),
                title=f"\nbatched env on {result['hardware']['device']} (median of repeats)")
    print(f"\ngymnasium twin (cpu): {result['twin']['steps_per_s']:.0f} steps/s")
    print_summary(result["summary"])


def main(argv: Optional[list[str]] = None) -> dict:
    p = parser(__doc__, out=results_path("env"), quick="CPU only, small sizes")
    p.add_argument("--assets", type=int, default=16, help="synthetic assets")
    p.add_argument("--bars", type=int, default=20000, help="synthetic bars per asset")
    p.add_argument("--episode-len", type=int, default=256)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--calls", type=int, default=50, help="steps per timing sample")
    p.add_argument("--repeats", type=int, default=5, help="timing samples per measurement (median)")
    p.add_argument("--graph-steps", type=int, default=32, help="env steps captured in one CUDA graph")
    p.add_argument("--twin-steps", type=int, default=3000, help="twin steps per timing sample")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.repeats = min(args.calls, 10), min(args.repeats, 3)
        args.bars, args.twin_steps = min(args.bars, 5000), min(args.twin_steps, 500)
    result = run(args)
    print_tables(result)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
