"""The training loop behind ``rl-zerosync train``: build, (resume), iterate, log, checkpoint."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import yaml

from rl_zerosync.runlog import RunLog
from rl_zerosync.settings import Settings, to_rllib_config

CHECKPOINT_DIR = "checkpoint"
SETTINGS_FILE = "settings.yaml"


def init_ray(settings: Settings) -> None:
    """Join the cluster named by RAY_ADDRESS (``ray job submit`` sets it; ``RAY_ADDRESS=auto`` joins a
    cluster started on this machine with ``ray start``) or start a private local instance."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=True)
        return
    kwargs = {"address": "local", "include_dashboard": False, "log_to_driver": True}
    if settings.run.num_cpus:
        kwargs["num_cpus"] = settings.run.num_cpus
    ray.init(**kwargs)


def find_checkpoint(path: str | Path) -> Path:
    """A run directory or a checkpoint directory -> the checkpoint directory."""
    path = Path(path)
    # checkpoint.old exists only if a run died between the two renames of save_checkpoint.
    for candidate in (path, path / CHECKPOINT_DIR, path / (CHECKPOINT_DIR + ".old")):
        if (candidate / "rllib_checkpoint.json").is_file():
            return candidate
    raise FileNotFoundError(f"{path}: no checkpoint found (expected rllib_checkpoint.json in it "
                            f"or in {path / CHECKPOINT_DIR})")


def save_checkpoint(algo, settings: Settings) -> Path:
    """Write the checkpoint atomically: to ``checkpoint.tmp``, then swap it in."""
    run_dir = settings.run_dir
    final = run_dir / CHECKPOINT_DIR
    tmp = run_dir / (CHECKPOINT_DIR + ".tmp")
    old = run_dir / (CHECKPOINT_DIR + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    algo.save_to_path(str(tmp.resolve()))
    (tmp / SETTINGS_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


class _Interrupt:
    """Turns SIGINT/SIGTERM into a flag checked between iterations."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: finishing this iteration, then writing a checkpoint", flush=True)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def train(settings: Settings, resume: str | None = None) -> dict:
    """Train for ``settings.run.iterations`` iterations; return the last result dict."""
    init_ray(settings)
    run_dir = settings.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SETTINGS_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    algo = to_rllib_config(settings).build_algo()
    if resume:
        ckpt = find_checkpoint(resume)
        algo.restore_from_path(str(ckpt.resolve()))
        print(f"resumed from {ckpt} at iteration {algo.iteration}", flush=True)
    log = RunLog(run_dir)
    result: dict = {}
    every = settings.run.checkpoint_every
    try:
        with _Interrupt() as interrupt:
            while algo.iteration < settings.run.iterations and not interrupt.requested:
                result = algo.train()
                log.add_perf(result)
                log.write(result)
                log.progress(result)
                if every and algo.iteration % every == 0:
                    save_checkpoint(algo, settings)
        ckpt = save_checkpoint(algo, settings)
        print(f"checkpoint: {ckpt}", flush=True)
        if interrupt.requested:
            return result
        if settings.run.evaluate:
            from rl_zerosync.evaluate import evaluate_checkpoint

            report = evaluate_checkpoint(ckpt, out_dir=run_dir / "evaluation")
            print(report["summary_line"], flush=True)
            result["evaluation"] = report
    finally:
        log.close()
        algo.stop()
    return result
