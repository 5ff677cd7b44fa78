"""What a user waits for: whole runs timed from process start to exit, beside their steady rates.

How to run (the GPU when present; the CPU numbers are what a new user without a GPU meets)::

    python -m benchmarks.wholerun            # local.yaml with and without its evaluation, fast.yaml, one evaluate
    python -m benchmarks.wholerun --quick    # local.yaml with 10 iterations, with and without evaluation, evaluate

Every case is one ``python -m rl_zerosync ...`` process, timed by the host clock from before it starts
to after it exits. Its wall time is split with the run's own ``metrics.jsonl`` (RLlib's ``timestamp``
at the end of each iteration, ``time_this_iter_s``, ``eval/validation_time_s``):

* ``startup_s``: process start to the start of the first iteration (imports, preflight, Ray, building
  the algorithm, data, kernel compilation);
* ``training_s``: the training clock, the sum of the iterations' ``time_this_iter_s``;
* ``validation_s``: the validation passes (``eval/validation_time_s``);
* ``end_s``: the rest after the last iteration: the end-of-run evaluation (when on), checkpoints and
  teardown; ``evaluate`` is also timed alone (``rl-zerosync evaluate`` of the trained main job);
* ``other_s``: what is left between iterations (checkpoints, logging).

Rates: ``whole_rate`` = env steps / wall; ``steady_rate`` = median over iterations after the first of
env steps / ``time_this_iter_s``; their ratio. ``slowest_iteration_over_median``: the slowest
iteration's time over the median iteration's (fresh synthetic series are generated inside some).
JSON -> ``benchmarks/results/wholerun.json`` (on a CPU: ``wholerun_cpu.json``, without ``fast.yaml``, which is
sized for a GPU).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, write_json

ROOT = Path(__file__).resolve().parents[1]


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def timed(args: list[str], run: Path | None, log: Path) -> dict:
    """Run ``python -m rl_zerosync *args``, time it from start to exit and split it (module doc)."""
    t0 = time.time()
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "rl_zerosync", *args], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, timeout=3600)
    t1 = time.time()
    res: dict = {"command": "rl-zerosync " + " ".join(args), "returncode": proc.returncode, "wall_s": t1 - t0,
                 "log": log.name}
    rows = _rows(run) if run is not None else []
    if not rows:
        return res
    iters = [float(r["time_this_iter_s"]) for r in rows]
    steps = [float(r.get("env_runners/num_env_steps_sampled", 0.0)) for r in rows]
    first_start = float(rows[0]["timestamp"]) - iters[0]
    last_end = float(rows[-1]["timestamp"])
    validation = sum(float(r.get("eval/validation_time_s", 0.0)) for r in rows)
    training = sum(iters)
    rates = [s / t for s, t in zip(steps[1:], iters[1:]) if t > 0]
    res.update({
        "iterations": len(rows), "env_steps": sum(steps),
        "startup_s": first_start - t0, "training_s": training, "validation_s": validation,
        "end_s": t1 - last_end, "other_s": (last_end - first_start) - training,
        "whole_rate": sum(steps) / (t1 - t0), "steady_rate": statistics.median(rates) if rates else None,
        "median_iteration_s": statistics.median(iters[1:]) if len(iters) > 1 else iters[0],
        "slowest_iteration_over_median": (max(iters[1:]) / statistics.median(iters[1:])) if len(iters) > 2 else None,
    })
    if res["steady_rate"]:
        res["whole_over_steady"] = res["whole_rate"] / res["steady_rate"]
    return res


def main() -> int:
    import torch

    p = parser(__doc__, out=None, quick="local.yaml x10 iterations only",
               out_help="JSON output path (default benchmarks/results/wholerun.json on CUDA, wholerun_cpu.json on a CPU)")
    p.add_argument("--runs-dir", default=None)
    p.add_argument("--logs", default=None, help="folder for the runs' console logs (default: beside the JSON)")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix="wholerun_"))
    out = quick_path("wholerun") if args.quick else args.out or results_path("wholerun" if device == "cuda" else "wholerun_cpu")
    logs = Path(args.logs) if args.logs else Path(out).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    short = ["--set", "run.iterations=10"] if args.quick else []
    cases = [
        ("main_job", ["train", "--config", "configs/local.yaml", "--set", f"run.dir={runs}", "--set", "run.name=main",
                      *short, "--overwrite"], runs / "main"),
        ("main_job_no_evaluation", ["train", "--config", "configs/local.yaml", "--set", f"run.dir={runs}", "--set",
                                    "run.name=noeval", "--set", "run.evaluate=false", *short, "--overwrite"],
         runs / "noeval"),
        ("evaluate", ["evaluate", "--checkpoint", str(runs / "main"), "--out", str(runs / "eval_again")], None),
    ]
    if not args.quick and device == "cuda":  # fast.yaml is sized for a GPU (1024 x 8 envs, 800M env steps)
        cases.append(("fast_no_evaluation", ["train", "--config", "configs/fast.yaml", "--set", f"run.dir={runs}",
                                             "--set", "run.name=fast", "--set", "run.evaluate=false", "--overwrite"],
                      runs / "fast"))
    results = {}
    report = {**result_header("wholerun", device=device, config={"quick": bool(args.quick)}), "cases": results}
    for name, cmd, run in cases:
        results[name] = timed(cmd, run, logs / f"wholerun_{device}_{name}.log")
        print(f"{name}: {results[name]['wall_s']:.1f} s (rc {results[name]['returncode']})", flush=True)
        write_json(report, out)  # after every case: a cut-off run keeps the cases it finished
    cols = ["case", "wall_s", "startup_s", "training_s", "validation_s", "end_s", "whole_rate", "steady_rate",
            "slowest_iteration_over_median"]
    print_table([{"case": k, **{c: v.get(c) for c in cols[1:]}} for k, v in results.items()], cols, width=14)
    print_summary({k: {"wall_s": v["wall_s"], "whole_over_steady": v.get("whole_over_steady")} for k, v in results.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
