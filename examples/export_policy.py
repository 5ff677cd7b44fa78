"""Export a trained policy (TorchScript or ONNX) and act on recent bars with ``rl_zerosync.Policy``.

Trains a short run with the YAML settings (``rl_zerosync.config.settings.load`` with ``--set``-style
overrides, then ``rl_zerosync.run.train.train``) unless ``--checkpoint DIR`` names a run, exports it
(what ``rl-zerosync export --checkpoint DIR --format torchscript|onnx`` does), then prints the greedy
action (exposure, order type, urgency) for the last few bars, from the checkpoint and from the export.
Bars come from ``--csv`` (``close`` plus bid/ask or high/low columns) or a synthetic series; a
policy trained on synthetic data needs those columns or a fixed ``--spread-bps`` to estimate spreads.

    python examples/export_policy.py                         # configs/local.yaml, 10 iterations
    python examples/export_policy.py --quick                 # configs/smoke.yaml, 2 iterations, CPU
    python examples/export_policy.py --checkpoint runs/local --csv bars.csv --format onnx
"""
import argparse
import tempfile
from pathlib import Path

import pandas as pd

from rl_zerosync import Policy
from rl_zerosync.serving.export import export_policy

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--quick", action="store_true", help="tiny CPU training run")
p.add_argument("--checkpoint", help="an existing run or checkpoint directory (skips training)")
p.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript")
p.add_argument("--csv", help="bars of one asset, oldest first (default: a synthetic series)")
p.add_argument("--run-dir", help="where the training run goes (default: a temporary directory, removed at the end)")
p.add_argument("--spread-bps", type=float, default=None, help="fixed spread when the bars have no bid/ask/high/low")
args = p.parse_args()

run_dir = args.checkpoint
scratch = None  # the default run directory: temporary, removed at the end
if run_dir is None:
    import ray

    from rl_zerosync.config.settings import load
    from rl_zerosync.run.train import train

    config = Path(__file__).resolve().parent.parent / "configs" / ("smoke.yaml" if args.quick else "local.yaml")
    if not args.run_dir:
        scratch = tempfile.TemporaryDirectory(prefix="zerosync_export_")
    run_root = args.run_dir or scratch.name
    settings = load(config, [f"run.iterations={2 if args.quick else 10}", f"run.dir={run_root}",
                             "run.name=demo", "run.evaluate=false"])
    ray.init(address="local", num_cpus=2 if args.quick else None, include_dashboard=False)
    try:
        train(settings)
    finally:
        ray.shutdown()
    run_dir = str(settings.run_dir)

try:
    meta = export_policy(run_dir, args.format)  # best-validation checkpoint; which="last" for the newest
    print(f"exported {meta['format']}: {meta['path']} (metadata {meta['metadata_path']}), "
          f"action mode {meta['action_mode']}, obs dim {meta['inputs']['obs']['shape'][1]}")

    policy = Policy.from_checkpoint(run_dir, spread_bps=args.spread_bps)
    if args.csv:
        bars = pd.read_csv(args.csv)
    else:
        from rl_zerosync.data.synthetic import synthetic_series

        raw = synthetic_series(1, 2000, seed=7)
        close, spread = raw["close"][0], raw["spread"][0]
        bars = pd.DataFrame({"close": close, "bid": close * (1 - spread / 2), "ask": close * (1 + spread / 2)})
    bars = bars.tail(policy.recommended_bars + 5).reset_index(drop=True)
    live = Policy.from_export(meta["path"], spread_bps=args.spread_bps) if args.format == "torchscript" else None

    position = 0.0
    print(f"{'bar':>5} {'exposure':>8} {'target':>7} {'order type':>10} {'urgency':>8}")
    for end in range(len(bars) - 5, len(bars)):  # live: episode_progress is the sidecar's live_value
        action = policy.act(bars.iloc[: end + 1], position=position)
        exposure, order_type, urgency = action
        if live is not None:  # the TorchScript file gives the same action, with no Ray and no training code
            assert live.act(bars.iloc[: end + 1], position=position) == action
        print(f"{end:5d} {exposure:8d} {policy.target_position(action):7.2f} {order_type.name:>10} {urgency.name:>8}")
        position = policy.target_position(action)
    print("policy acted on", len(bars), "bars")
finally:
    if scratch is not None:
        scratch.cleanup()
