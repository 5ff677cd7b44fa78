"""Synthetic series: the loop over bars against the vectorised generator, and whether fresh series stall training.

How to run (from the repository root; a CPU machine or one GPU)::

    python -m benchmarks.synthetic_gen                 # all sections (CPU: ~3 min on 2 cores; GPU: ~2 min)
    python -m benchmarks.synthetic_gen --skip-train    # generation, build and cadence only
    python -m benchmarks.synthetic_gen --quick         # smoke run, writes synthetic_gen_quick.json in the temp folder

Sections, at the sizes of ``configs/local.yaml`` (training series 8 x 20,000 bars, sealed held-out
validation 8 x 3,000 and test 32 x 3,000):

* ``generation``: :func:`~rl_zerosync.data.synthetic.synthetic_series_loop` (the loop over bars, the
  generator as first written) and :func:`~rl_zerosync.data.synthetic.synthetic_series` (vectorised)
  on the same seeds, interleaved, ``--repeats`` seeds each; medians of wall and CPU (this process)
  seconds, the speed-up, and whether every field of every seed is the same bits.
* ``build``: one whole training generation as the prefetch process builds it
  (``fresh.build_training_market``: series, features, checks), with each generator, and with the
  vectorised one the features on one thread as well as on ``market.FEATURE_THREADS``; medians.
* ``cadence``: :class:`~rl_zerosync.data.fresh.FreshSeries` of local.yaml's data section with its
  prefetch process, advanced every ``regenerate_every x --iteration-s`` seconds (default 0.0345 s:
  local.yaml's median iteration on one H200, 32,768 env steps at ~950,000 env steps/s) with this
  process idle in between: the seconds each ``advance()`` takes (waiting for the generation, then
  copying it into the env's tensors), and the regenerating iteration's time over the median,
  ``(iteration_s + advance_s) / iteration_s``, after the first generation (reported apart: it also
  waits for the prefetch process to start, which a run overlaps with building its algorithm and
  its first ``regenerate_every`` iterations; the ``train`` section times that for real). The
  loop's ratio is estimated from its build time, ``(iteration_s + max(0, build_s - regenerate_every
  x iteration_s)) / iteration_s`` (its prefetch process cannot be timed here), and labelled so.
* ``train``: a short training (``algo.train()``, no validation) of local.yaml: on a GPU local.yaml
  as it is (fresh series every 10 iterations), 60 timed iterations; on a CPU with smaller envs,
  network and batch (``CPU_TRAIN``) but the same data, fresh series every 2 iterations, 16 timed
  iterations (``--regenerate-every``, ``--iterations``); ``--warmup`` iterations first, then each
  timed with ``common.timed_train``: the median iteration, every iteration that swapped in a new
  generation, and max / median (the goal: at most 1.5).

Results to expect: the generator 13-16x faster than the loop in CPU time (~0.05 s against ~0.75 s
for 8 x 20,000 bars on a 2-core EPYC), the same bits; wall times, the cadence and the CPU training
follow whatever else the machine runs (``hardware.load_average_at_end``): on a machine shared with
other work the prefetch process gets no core of its own. JSON: ``benchmarks/results/synthetic_gen.json``.
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import yaml

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, timed_train
from benchmarks.common import write_json

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "local.yaml"
SHAPES = {"training": (8, 20000), "heldout_validation": (8, 3000), "heldout_test": (32, 3000)}
H200_ITERATION_S = 32768 / 950_000
"""local.yaml's median iteration on one H200 (32,768 env steps at ~950,000 env steps/s)."""
CPU_TRAIN = ["algo.num_envs_per_runner=64", "algo.batch_size=64", "algo.learning_starts=1024",
             "model.hidden=[64,64]", "learner.replay_capacity=50000"]
"""Overrides that make local.yaml's training CPU-sized; its data section (what is generated) stays."""


def _data_cfg() -> dict:
    return yaml.safe_load(CONFIG.read_text())["data"]


def _clocks(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def generation(repeats: int) -> list[dict]:
    """Loop and vectorised generator on the same seeds, interleaved, at each shape of SHAPES."""
    from rl_zerosync.data.synthetic import synthetic_series, synthetic_series_loop

    rows = []
    for name, (assets, bars) in SHAPES.items():
        times = {"loop": ([], []), "vectorised": ([], [])}
        same = True
        for seed in range(repeats):
            w0, c0, old = _clocks(lambda: synthetic_series_loop(assets, bars, 1000 + seed))
            w1, c1, new = _clocks(lambda: synthetic_series(assets, bars, 1000 + seed))
            same &= all(old[k].dtype == new[k].dtype and old[k].tobytes() == new[k].tobytes() for k in old)
            for key, w, c in (("loop", w0, c0), ("vectorised", w1, c1)):
                times[key][0].append(w)
                times[key][1].append(c)
        med = {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in times.items()}
        rows.append({"series": name, "assets": assets, "bars": bars, "seeds": repeats,
                     "loop_wall_s": med["loop"][0], "loop_cpu_s": med["loop"][1],
                     "vectorised_wall_s": med["vectorised"][0], "vectorised_cpu_s": med["vectorised"][1],
                     "speedup_cpu": med["loop"][1] / med["vectorised"][1], "bit_for_bit": bool(same)})
    return rows


def build(repeats: int) -> dict:
    """Median seconds of one training generation (series + features + checks): the vectorised generator
    with the features on market.FEATURE_THREADS threads and on one, and the loop (features threaded)."""
    import rl_zerosync.data.market as market
    import rl_zerosync.data.synthetic as synthetic
    from rl_zerosync.data.fresh import build_training_market

    cfg, vectorised, threads = _data_cfg(), synthetic.synthetic_series, market.FEATURE_THREADS
    out = {"feature_threads": min(threads, os.cpu_count() or 1, int(cfg["num_assets"]))}
    for key, fn, feature_threads in (("vectorised", vectorised, threads), ("vectorised_1_thread", vectorised, 1),
                                     ("loop", synthetic.synthetic_series_loop, threads)):
        synthetic.synthetic_series = fn  # synthetic_market and build_market look these up when called
        market.FEATURE_THREADS = feature_threads
        try:
            walls, cpus = zip(*(_clocks(lambda: build_training_market(cfg, 2000 + i))[:2] for i in range(repeats)))
        finally:
            synthetic.synthetic_series, market.FEATURE_THREADS = vectorised, threads
        out[f"{key}_wall_s"], out[f"{key}_cpu_s"] = statistics.median(walls), statistics.median(cpus)
    return out


def cadence(generations: int, iteration_s: float, build_s: dict) -> dict:
    """FreshSeries advanced at local.yaml's cadence (module doc)."""
    from rl_zerosync.data.fresh import PREFETCH, FreshSeries

    cfg = _data_cfg()
    every = int(cfg["regenerate_every"])
    period = every * iteration_s
    fresh = FreshSeries(cfg, run_seed=0, runner=0, prefetch=True)
    try:
        data = fresh.first()
        seconds = []
        for _ in range(generations + 1):
            time.sleep(period)
            t0 = time.perf_counter()
            fresh.advance(data)
            seconds.append(time.perf_counter() - t0)
    finally:
        fresh.close()
    steady = seconds[1:]  # the first waits for the prefetch process to start (imports) as well
    loop_wait = max(0.0, build_s["loop_wall_s"] - period)
    return {"regenerate_every": every, "iteration_s": iteration_s, "prefetch": PREFETCH, "generations": generations,
            "first_advance_s": seconds[0], "advance_s": steady, "advance_median_s": statistics.median(steady),
            "advance_max_s": max(steady), "ratio_max": (iteration_s + max(steady)) / iteration_s,
            "loop_ratio_estimated": (iteration_s + loop_wait) / iteration_s}


def train(args) -> dict:
    """Per-iteration seconds of a short training with fresh series (module doc)."""
    from rl_zerosync.config.settings import load, to_rllib_config

    cuda = torch.cuda.is_available()
    every = args.regenerate_every or (10 if cuda else 2)
    overrides = ["run.evaluate=false", f"data.regenerate_every={every}"] + ([] if cuda else CPU_TRAIN)
    settings = load(str(CONFIG), overrides)
    algo = to_rllib_config(settings).build_algo()
    try:
        for _ in range(args.warmup):
            algo.train()
        rows, last = [], 0
        for _ in range(args.iterations or (60 if cuda else 16)):
            result, seconds = timed_train(algo)
            # logged on the rollouts that swap a generation in (NaN or absent on the others)
            generation = float(result.get("env_runners", {}).get("data_generation", float("nan")))
            swapped = not np.isnan(generation) and generation != last
            rows.append({"seconds": seconds, "data_generation": None if np.isnan(generation) else generation,
                         "regenerated": swapped, "env_steps": float(result["env_runners"]["num_env_steps_sampled"])})
            last = generation if swapped else last
    finally:
        algo.stop()
    med = statistics.median(r["seconds"] for r in rows)
    regen = [r["seconds"] for r in rows if r["regenerated"]]
    return {"device": "cuda" if cuda else "cpu", "overrides": overrides, "warmup": args.warmup,
            "iterations": rows, "median_s": med, "env_steps_per_s_median": statistics.median(
                r["env_steps"] / r["seconds"] for r in rows),
            "regenerating_iterations": len(regen), "regenerating_max_s": max(regen) if regen else None,
            "ratio_max": max(r["seconds"] for r in rows) / med,
            "ratio_regenerating_max": max(regen) / med if regen else None}


def main(argv: Optional[list] = None) -> dict:
    p = parser(__doc__, out=None, quick="smoke run: fewer seeds and iterations (temp folder output)")
    p.add_argument("--repeats", type=int, default=7, help="seeds per generator and shape (medians)")
    p.add_argument("--iteration-s", type=float, default=H200_ITERATION_S, help="cadence: seconds per iteration")
    p.add_argument("--generations", type=int, default=6, help="cadence: generations advanced after the first")
    p.add_argument("--skip-train", action="store_true", help="leave out the training section")
    p.add_argument("--regenerate-every", type=int, default=None, help="train: data.regenerate_every (GPU 10, CPU 2)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iterations", type=int, default=None, help="train: timed iterations (GPU 60, CPU 16)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.generations, args.warmup, args.iterations = 2, 2, 1, 4
    out = args.out or (quick_path("synthetic_gen") if args.quick else results_path("synthetic_gen"))

    load_at_start = list(os.getloadavg())
    gen = generation(args.repeats)
    print_table(gen, ["series", "assets", "bars", "loop_cpu_s", "vectorised_cpu_s", "speedup_cpu", "loop_wall_s",
                      "vectorised_wall_s", "bit_for_bit"], width=17,
                fmt=lambda v: f"{v:.4g}" if isinstance(v, float) else str(v), title="generation (medians)")
    built = build(args.repeats)
    print(f"\nbuild of one training generation (series + features): vectorised {built['vectorised_wall_s']:.3f} s "
          f"({built['vectorised_1_thread_wall_s']:.3f} s with the features on one thread), "
          f"loop {built['loop_wall_s']:.3f} s (wall medians)")
    cad = cadence(args.generations, args.iteration_s, built)
    print(f"cadence: advance() median {cad['advance_median_s'] * 1e3:.1f} ms, max {cad['advance_max_s'] * 1e3:.1f} ms; "
          f"regenerating iteration / median: {cad['ratio_max']:.2f} (the loop, estimated: {cad['loop_ratio_estimated']:.1f})")
    trained = None if args.skip_train else train(args)
    if trained:
        print(f"train ({trained['device']}): median iteration {trained['median_s']:.3f} s, "
              f"{trained['regenerating_iterations']} regenerating, max / median {trained['ratio_max']:.2f}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = result_header("synthetic_gen", device=device, config={
        "config": "configs/local.yaml", "repeats": args.repeats, "iteration_s": args.iteration_s,
        "generations": args.generations, "regenerate_every_train": args.regenerate_every,
        "quick": bool(args.quick)})
    # other work on the machine (1, 5 and 15 minute load averages) inflates the wall times
    result["hardware"].update(load_average_at_start=load_at_start, load_average_at_end=list(os.getloadavg()))
    training_row = next(r for r in gen if r["series"] == "training")
    result.update({"generation": gen, "build": built, "cadence": cad, "train": trained, "summary": {
        "loop_cpu_s": training_row["loop_cpu_s"], "vectorised_cpu_s": training_row["vectorised_cpu_s"],
        "speedup_cpu": training_row["speedup_cpu"], "bit_for_bit": all(r["bit_for_bit"] for r in gen),
        "build_wall_s": built["vectorised_wall_s"], "cadence_ratio_max": cad["ratio_max"],
        "train_ratio_max": trained and trained["ratio_max"]}})
    print_summary(result["summary"])
    write_json(result, out)
    return result


if __name__ == "__main__":
    main()
