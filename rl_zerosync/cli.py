"""``rl-zerosync`` (also ``python -m rl_zerosync``): train, evaluate, bench.

    rl-zerosync train --config configs/local.yaml [--set section.key=value ...] [--resume DIR]
    rl-zerosync evaluate --checkpoint DIR [--data FILE] [--out DIR]
    rl-zerosync bench [--quick] [--out-dir DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCHMARKS = ("kernels", "env", "learner", "env_runner", "e2e", "scaling")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rl-zerosync", description="Zero-sync DQN trading on Ray RLlib.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train from a YAML config")
    t.add_argument("--config", required=True, help="YAML settings file (see configs/)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, e.g. --set run.iterations=5 (repeatable)")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="run or checkpoint directory to continue from")

    e = sub.add_parser("evaluate", help="greedy policy on the test segment -> metrics JSON + PNG")
    e.add_argument("--checkpoint", required=True, metavar="DIR", help="run or checkpoint directory")
    e.add_argument("--data", default=None, metavar="FILE",
                   help="CSV/Parquet OHLCV file to evaluate on (default: the run's test segment)")
    e.add_argument("--out", default=None, metavar="DIR", help="output directory")

    b = sub.add_parser("bench", help="run the learner and env-runner benchmarks (and the others)")
    b.add_argument("--quick", action="store_true", help="small CPU-sized runs")
    b.add_argument("--only", choices=BENCHMARKS, action="append", help="run only these")
    b.add_argument("--out-dir", default="benchmarks/results")
    return p


def _bench(args) -> int:
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    if not root.is_dir():
        print("benchmarks/ not found: run bench from a source checkout", file=sys.stderr)
        return 2
    rc = 0
    for name in args.only or ("learner", "env_runner"):
        cmd = [sys.executable, str(root / f"{name}.py"), "--out", str(Path(args.out_dir) / f"{name}.json")]
        if args.quick:
            cmd.append("--quick")
        print("$", " ".join(cmd), flush=True)
        rc = max(rc, subprocess.call(cmd))
    return rc


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "train":
        from rl_zerosync.settings import SettingsError, load
        from rl_zerosync.train import train

        try:
            settings = load(args.config, args.set)
        except SettingsError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        train(settings, resume=args.resume)
        return 0
    if args.command == "evaluate":
        from rl_zerosync.evaluate import evaluate_checkpoint

        report = evaluate_checkpoint(args.checkpoint, data=args.data, out_dir=args.out)
        print(report["summary_line"])
        return 0
    if args.command == "bench":
        return _bench(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
