"""Benchmark the rl_zerosync kernels: launch cost eager vs inside a CUDA graph, Q-stats throughput.

How to run:
    python -m benchmarks.kernels                 # one CUDA GPU, about 30 s
    python -m benchmarks.kernels --quick         # CPU, torch twins only, a few seconds

Results to expect: graph replay removes the per-launch host cost, so ``graph_us`` is a small
fraction of ``eager_us``; Q-stats beats its torch twin at 1M rows because it reads Q once (the twin
makes several passes and allocates temporaries).

A "launch" of qstats is one call (two kernels: per-block partials, then the final reduction).
``guard_record`` is the fused kernel the learner launches once per update (``TrainingGuard.record``:
``guard_accumulate`` + the Q-stats aggregate + first-trigger records + the update index); its twin
is ``reference.guard_record`` (about a dozen small torch ops).

Writes a JSON file (``--out``, default ``benchmarks/results/kernels.json``) with the date, hardware,
versions, config, every measurement and a top-level ``summary`` holding
``qstats_speedup_vs_twin_1M`` and ``graph_launch_us_median`` (null on the CPU path).
"""
from __future__ import annotations

import argparse
import statistics
from typing import Callable, Optional

import torch

from benchmarks.common import (parser, print_summary, print_table, result_header, results_path,
                               time_cuda_seconds, time_host_seconds, write_json)
from rl_zerosync.kernels import Kernels, get_kernels, qstats_scratch_numel
from rl_zerosync.kernels.validate import GUARD_CHECKS, GUARD_RECORD_FIELDS

KERNEL_NAMES = ("guard_check", "guard_accumulate", "guard_record", "qstats", "divergence", "epsilon_greedy",
                "branching_select", "route")


def make_launchers(k: Kernels, device: torch.device, *, envs: int, actions: int, q_rows: int) -> dict[str, Callable]:
    """Bound launchers of every kernel on representative buffers."""
    f = dict(device=device)
    g = torch.Generator().manual_seed(0)
    scalar = lambda v: torch.full((1,), v, **f)  # noqa: E731
    flags = torch.zeros(3, dtype=torch.int32, device=device)
    cl, ls, fi = scalar(0.0), scalar(0.0), scalar(0.0)
    loss, gn = scalar(2.0), scalar(0.5)
    q = torch.randn(q_rows, actions, generator=g).to(device)
    qout, scratch = torch.zeros(5, **f), torch.zeros(qstats_scratch_numel(q_rows), **f)
    qsel = torch.randn(envs, actions, generator=g).to(device)
    qe, qo, qu = (torch.randn(envs, n, generator=g).to(device) for n in (5, 3, 3))
    eps, step = scalar(0.1), torch.zeros(1, dtype=torch.int64, device=device)
    act = lambda: torch.zeros(envs, dtype=torch.int64, device=device)  # noqa: E731
    pos = lambda: (torch.rand(envs, generator=g) + 0.5).to(device)  # noqa: E731
    i32 = lambda: torch.zeros(1, dtype=torch.int32, device=device)  # noqa: E731
    f64 = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
    exposure = torch.randint(0, 5, (envs,), generator=g).to(device)
    qrec = torch.tensor([-1.0, 2.0, 0.5, 0.1, 0.0], **f)  # a Q-stats output: min, max, mean row-max, mean, nan flag
    qagg = torch.tensor([float("inf"), float("-inf"), 0.0, 0.0, 0.0], dtype=torch.float64, **f)
    return {
        "guard_check": k.bind_guard_check(loss, gn, scalar(1.0), flags, cl, ls, fi, loss_clip=1e6,
                                          collapse_threshold=1e-6),
        "guard_accumulate": k.bind_guard_accumulate(cl, gn, flags, torch.zeros(6, dtype=torch.float64, device=device)),
        # the learner's per-update launch (learner/training_guard.py TrainingGuard.record): accumulate, fold the
        # Q stats into the iteration aggregate, first-trigger records, bump the update index
        "guard_record": k.bind_guard_record(cl, loss, gn, flags, qrec, i32(), f64(6), qagg,
                                            f64(GUARD_CHECKS, GUARD_RECORD_FIELDS), f64(1)),
        "qstats": k.bind_qstats(q, qout, scratch),
        "divergence": k.bind_divergence(qout, i32(), i32(), threshold=1e4, patience=3),
        "epsilon_greedy": k.bind_epsilon_greedy(qsel, eps, step, act(), seed=1),
        "branching_select": k.bind_branching_select(qe, qo, qu, eps, step, act(), seed=1),
        "route": k.bind_route(exposure, pos(), pos(), pos(), pos(), act()),
    }


def graph_per_launch_us(fn: Callable[[], None], *, launches: int, repeats: int) -> float:
    """Microseconds per launch of ``fn`` replayed inside a CUDA graph of ``launches`` launches."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    return time_cuda_seconds(graph.replay, calls=5, repeats=repeats) * 1e6 / launches


def run(args: argparse.Namespace) -> dict:
    cuda = not args.quick
    if cuda and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --quick for the CPU (twin-only) path")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sizes = (256, 65536, 1 << 20) if cuda else (256, 65536)
    config = {"quick": args.quick, "envs": args.envs, "actions": args.actions, "graph_launches": args.graph_launches,
              "repeats": args.repeats, "eager_calls": args.eager_calls, "qstats_rows": list(sizes),
              "qstats_actions": args.actions}
    twin = get_kernels(device, backend="torch")
    kernels = get_kernels(device, backend="cuda") if cuda else None
    launch_rows = []
    twin_l = make_launchers(twin, device, envs=args.envs, actions=args.actions, q_rows=args.envs)
    if kernels is not None:
        kernels.warmup()
        cuda_l = make_launchers(kernels, device, envs=args.envs, actions=args.actions, q_rows=args.envs)
    for name in KERNEL_NAMES:
        row: dict[str, Optional[float]] = {"kernel": name}
        if cuda:
            row["twin_eager_us"] = time_cuda_seconds(twin_l[name], calls=args.eager_calls, repeats=args.repeats) * 1e6
            row["eager_us"] = time_cuda_seconds(cuda_l[name], calls=args.eager_calls, repeats=args.repeats) * 1e6
            row["graph_us"] = graph_per_launch_us(cuda_l[name], launches=args.graph_launches, repeats=args.repeats)
            row["graph_speedup_vs_eager"] = row["eager_us"] / row["graph_us"]
        else:
            row["twin_eager_us"] = time_host_seconds(twin_l[name], calls=args.eager_calls, repeats=args.repeats) * 1e6
            row["eager_us"] = row["graph_us"] = row["graph_speedup_vs_eager"] = None
        launch_rows.append(row)

    qstats_rows = []
    for rows in sizes:
        q = torch.randn(rows, args.actions, generator=torch.Generator().manual_seed(rows)).to(device)
        out, scratch = torch.zeros(5, device=device), torch.zeros(qstats_scratch_numel(rows), device=device)
        calls = 20 if rows >= 65536 else 200
        timer = time_cuda_seconds if cuda else time_host_seconds
        twin_us = timer(twin.bind_qstats(q, out, scratch), calls=calls, repeats=args.repeats) * 1e6
        row = {"rows": rows, "actions": args.actions, "twin_us": twin_us, "kernel_us": None,
               "kernel_gb_per_s": None, "speedup_vs_twin": None}
        if kernels is not None:
            kernel_us = time_cuda_seconds(kernels.bind_qstats(q, out, scratch), calls=calls, repeats=args.repeats) * 1e6
            row.update(kernel_us=kernel_us, kernel_gb_per_s=q.numel() * 4 / kernel_us / 1e3,
                       speedup_vs_twin=twin_us / kernel_us)
        qstats_rows.append(row)
        del q

    by_rows = {r["rows"]: r for r in qstats_rows}
    summary = {
        "qstats_speedup_vs_twin_1M": by_rows.get(1 << 20, {}).get("speedup_vs_twin"),
        "graph_launch_us_median": statistics.median(r["graph_us"] for r in launch_rows) if cuda else None,
        "eager_launch_us_median": statistics.median(r["eager_us"] for r in launch_rows) if cuda else None,
        "twin_eager_us_median": statistics.median(r["twin_eager_us"] for r in launch_rows),
        "qstats_kernel_gb_per_s_1M": by_rows.get(1 << 20, {}).get("kernel_gb_per_s"),
    }
    return {**result_header("kernels", device=device, config=config),
            "launch": launch_rows, "qstats": qstats_rows, "summary": summary}


def print_tables(result: dict) -> None:
    print_table(result["launch"], ("kernel", "twin_eager_us", "eager_us", "graph_us", "graph_speedup_vs_eager"),
                width=22, title="\nper-launch cost (us; median of repeats)")
    print_table(result["qstats"], ("rows", "actions", "twin_us", "kernel_us", "kernel_gb_per_s", "speedup_vs_twin"),
                width=16, title="\nqstats (us per call; median of repeats)")
    print_summary(result["summary"])


def main(argv: Optional[list[str]] = None) -> dict:
    p = parser(__doc__, out=results_path("kernels"), quick="CPU, torch twins only")
    p.add_argument("--envs", type=int, default=4096, help="rows of the selection/routing kernels")
    p.add_argument("--actions", type=int, default=45, help="Q columns")
    p.add_argument("--graph-launches", type=int, default=100, help="launches captured in one graph")
    p.add_argument("--eager-calls", type=int, default=200, help="calls per eager timing sample")
    p.add_argument("--repeats", type=int, default=7, help="timing samples per measurement (median)")
    args = p.parse_args(argv)
    if args.quick:
        args.eager_calls = min(args.eager_calls, 50)
        args.repeats = min(args.repeats, 3)
    result = run(args)
    print_tables(result)
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
