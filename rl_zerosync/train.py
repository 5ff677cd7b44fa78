"""The training loop behind ``rl-zerosync train``: build, (resume), iterate, log, checkpoint."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import yaml

from rl_zerosync.runlog import RunLog
from rl_zerosync.settings import Settings, to_rllib_config

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "checkpoint_best"
"""The checkpoint with the best validation metric so far."""
SETTINGS_FILE = "settings.yaml"
RUN_STATE_FILE = "run_state.json"
"""Written into every checkpoint: iteration, best validation so far, evaluations since the best."""


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


def find_checkpoint(path: str | Path, which: str = "last") -> Path:
    """A run directory or a checkpoint directory -> the checkpoint directory.

    ``which``: for a run directory, ``"best"`` (``checkpoint_best/``, by validation; the last
    checkpoint when the run has none) or ``"last"``.
    """
    path = Path(path)
    if which not in ("best", "last"):
        raise ValueError(f"checkpoint: expected 'best' or 'last', got {which!r}")
    # checkpoint.old exists only if a run died between the two renames of save_checkpoint.
    names = (CHECKPOINT_DIR, CHECKPOINT_DIR + ".old")
    if which == "best":
        names = (BEST_DIR, BEST_DIR + ".old") + names
    for candidate in (path, *(path / n for n in names)):
        if (candidate / "rllib_checkpoint.json").is_file():
            return candidate
    raise FileNotFoundError(f"{path}: no checkpoint found (expected rllib_checkpoint.json in it "
                            f"or in {path / CHECKPOINT_DIR})")


def read_run_state(ckpt: Path) -> dict:
    """The training-loop state saved with a checkpoint (``{}`` for checkpoints without one)."""
    f = Path(ckpt) / RUN_STATE_FILE
    return json.loads(f.read_text()) if f.is_file() else {}  # host read: checkpoint metadata


def save_checkpoint(algo, settings: Settings, name: str = CHECKPOINT_DIR, run_state: dict | None = None) -> Path:
    """Write the checkpoint atomically: to ``<name>.tmp``, then swap it in."""
    run_dir = settings.run_dir
    final = run_dir / name
    tmp = run_dir / (name + ".tmp")
    old = run_dir / (name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    algo.save_to_path(str(tmp.resolve()))
    (tmp / SETTINGS_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    state = {"iteration": int(algo.iteration), **(run_state or {})}
    (tmp / RUN_STATE_FILE).write_text(json.dumps(state, indent=2, default=float))
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


class _Selection:
    """Best-validation bookkeeping: which iteration is best, patience for early stopping."""

    def __init__(self, settings: Settings, state: dict):
        self.metric = settings.run.eval_metric
        self.patience = settings.run.early_stop_patience
        best = state.get("best") or {}
        self.best_value = best.get("value")
        self.best_iteration = best.get("iteration")
        self.since_best = int(state.get("evals_since_best", 0))

    def update(self, iteration: int, metrics: dict) -> bool:
        """Record a validation pass; True when it is a new best (strictly higher)."""
        value = metrics[f"validation_{self.metric}"]
        if self.best_value is None or value > self.best_value:
            self.best_value, self.best_iteration, self.since_best = value, iteration, 0
            return True
        self.since_best += 1
        return False

    @property
    def stop(self) -> bool:
        return bool(self.patience) and self.since_best >= self.patience

    def state(self) -> dict:
        best = None if self.best_value is None else {
            "metric": self.metric, "value": self.best_value, "iteration": self.best_iteration}
        return {"best": best, "evals_since_best": self.since_best}


def train(settings: Settings, resume: str | None = None) -> dict:
    """Train for ``settings.run.iterations`` iterations, validating every ``eval_every``; keep
    ``checkpoint/`` (last) and ``checkpoint_best/`` (best validation); return the last result dict."""
    init_ray(settings)
    run_dir = settings.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SETTINGS_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    algo = to_rllib_config(settings).build_algo()
    state: dict = {}
    if resume:
        ckpt = find_checkpoint(resume, "last")
        algo.restore_from_path(str(ckpt.resolve()))
        state = read_run_state(ckpt)
        print(f"resumed from {ckpt} at iteration {algo.iteration}", flush=True)
    log = RunLog(run_dir)
    result: dict = {}
    every = settings.run.checkpoint_every
    eval_every = settings.eval_every
    selection = _Selection(settings, state)
    validator = None
    try:
        if eval_every:
            from rl_zerosync.validation import Validator

            validator = Validator(settings, algo)
        with _Interrupt() as interrupt:
            while algo.iteration < settings.run.iterations and not interrupt.requested:
                result = algo.train()
                it = algo.iteration
                if validator is not None and (it % eval_every == 0 or it == settings.run.iterations):
                    ev = validator.validate(algo)
                    if selection.update(it, ev):
                        save_checkpoint(algo, settings, BEST_DIR, {**selection.state(), "validation": ev})
                    ev["best_validation_" + selection.metric] = selection.best_value
                    ev["best_iteration"] = selection.best_iteration
                    result["eval"] = ev
                log.add_perf(result)
                log.write(result)
                log.progress(result)
                if every and it % every == 0:
                    save_checkpoint(algo, settings, run_state=selection.state())
                if selection.stop:
                    print(f"early stop: no new best validation {selection.metric} in "
                          f"{selection.patience} passes (best {selection.best_value:+.3f} at iteration "
                          f"{selection.best_iteration})", flush=True)
                    break
        ckpt = save_checkpoint(algo, settings, run_state=selection.state())
        print(f"checkpoint: {ckpt}", flush=True)
        if interrupt.requested:
            return result
        if settings.run.evaluate:
            from rl_zerosync.evaluate import evaluate_checkpoint

            report = evaluate_checkpoint(run_dir, out_dir=run_dir / "evaluation",
                                         which=settings.run.eval_checkpoint)
            print(report["summary_line"], flush=True)
            result["evaluation"] = report
    finally:
        log.close()
        algo.stop()
    return result
