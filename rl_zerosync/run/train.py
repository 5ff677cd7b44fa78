"""The training loop behind ``rl-zerosync train``: build, (resume), iterate, log, checkpoint."""
from __future__ import annotations

import os
import signal
import sys

from rl_zerosync.run.children import Stop, Stopped, install_stop_handlers, restore_handlers
from rl_zerosync.rundir.checkpoints import BEST_DIR, best_or_last
from rl_zerosync.rundir.progress import Progress, say, say_raw
from rl_zerosync.rundir.run_dir import EVALUATION_DIR, EVALUATION_NAMES, RunDir
from rl_zerosync.config.settings import Settings, to_rllib_config


def init_ray(settings: Settings) -> None:
    """Join the cluster named by RAY_ADDRESS (``ray job submit`` sets it; ``RAY_ADDRESS=auto`` joins a
    cluster started on this machine with ``ray start``) or start a private local instance; a start
    begun on a thread (:func:`rl_zerosync.run.ray_session.start_early`) is waited for instead."""
    from rl_zerosync.run.ray_session import join_early

    join_early()
    _start_ray(settings)


def _start_ray(settings: Settings) -> None:
    import ray

    from rl_zerosync.run.ray_console import quiet_ray_notices

    quiet_ray_notices()
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=True)
        return
    kwargs = {"address": "local", "include_dashboard": False, "log_to_driver": True,
              # the same quieting in Ray's worker processes (remote runners and learners)
              "runtime_env": {"worker_process_setup_hook": "rl_zerosync.run.ray_console.quiet_ray_notices"}}
    if settings.run.num_cpus:
        kwargs["num_cpus"] = settings.run.num_cpus
    ray.init(**kwargs)


class _Interrupt:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag checked between iterations (a second Ctrl-C stops at
    once; a second SIGTERM or SIGHUP changes nothing: the checkpoint is written, then the run exits
    128 + signal: 130, 143, 129)."""

    def __init__(self):
        self.requested = False
        self.signum: int | None = None
        self._previous = {}

    def __enter__(self):
        self._previous = install_stop_handlers(self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        if self.requested:  # a repeated SIGTERM (a driver and its death signal both): the checkpoint goes on
            say_raw(f"\ninterrupt ({signal.Signals(signum).name}) again: the checkpoint is still written\n")
            return
        self.requested = True
        self.signum = int(signum)
        say_raw(f"\ninterrupt ({signal.Signals(signum).name}): finishing this iteration, then writing a "
             f"checkpoint; the run then exits with {128 + signum}\n")

    def __exit__(self, *exc):
        restore_handlers(self._previous)
        return False


def stopped_early(settings: Settings, state: dict) -> bool:
    """Whether a run with ``settings`` whose checkpoint holds the run state ``state`` had stopped early
    (``run.early_stop_patience`` passes without a new best): a resume reads it back, it trains no more."""
    return _Selection(settings, state).stop


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
        if value != value:  # NaN is never a new best
            self.since_best += 1
            return False
        if self.best_value is None or value > self.best_value:
            self.best_value, self.best_iteration, self.since_best = value, iteration, 0
            return True
        self.since_best += 1
        return False

    @property
    def stop(self) -> bool:
        """The early-stop rule: ``run.early_stop_patience`` validation passes without a new best."""
        return bool(self.patience) and self.since_best >= self.patience

    def state(self) -> dict:
        best = None if self.best_value is None else {
            "metric": self.metric, "value": self.best_value, "iteration": self.best_iteration}
        return {"best": best, "evals_since_best": self.since_best}


def train(settings: Settings, resume: str | None = None, overwrite: bool = False) -> dict:
    """Train for ``settings.run.iterations`` iterations, validating every ``eval_every``; keep
    ``checkpoint/`` (last, and the previous ones up to ``KEEP_LAST``) and ``checkpoint_best/`` (best
    validation); return the last result dict.

    The run directory is locked for the run's life, before Ray starts (``RunDirError`` when another
    run holds it). A directory that already holds a run is refused unless ``resume`` (a run or
    checkpoint directory to continue from: its newest checkpoint that matches its manifest, older
    ones tried in turn; the metrics rows after it are dropped) or ``overwrite`` (cleared first)."""
    if resume:
        from rl_zerosync.run.resume_settings import compare

        changes = compare(settings, resume)  # a fixed key changed: refused before anything is written
        print("resume: settings as the run's" if not changes else
              f"resume: changed from the run's settings: {', '.join(changes)}", flush=True)
    with RunDir.claim(settings.run_dir, resume=bool(resume), overwrite=overwrite) as run_dir:
        # Verified before Ray starts: a damaged checkpoint fails (or falls back) at once.
        ckpt = run_dir.resume_point(resume) if resume else None
        if settings.eval_every:  # Ray's processes start while the validation rules walk (one shared cache)
            from rl_zerosync.evaluation.validation import prewalk_rules
            from rl_zerosync.run.ray_session import start_early

            start_early(lambda: _start_ray(settings))
            prewalk_rules(settings)
        init_ray(settings)
        run_dir.write_settings(settings)
        algo = to_rllib_config(settings).build_algo()
        try:
            return _train_loop(settings, run_dir, algo, ckpt)
        finally:
            algo.stop()


def header_line(settings: Settings, algo) -> str:
    """One line before the first iteration: run directory, devices, env steps and updates per
    iteration, iterations (the kernel backend is printed by the preflight just before)."""
    from rl_zerosync.algorithm import updates_for

    a = settings.algo
    runners = max(a.num_env_runners, 1)
    steps = a.num_envs_per_runner * a.rollout_length * runners
    learners = max(a.num_learners, 1)
    k = updates_for(steps, a.replay_ratio, a.batch_size * learners)
    runner = algo.env_runner
    where = getattr(runner, "device", None) if a.num_env_runners == 0 else "remote runners"
    learner = algo.local_learner
    learner_dev = learner.device if learner is not None else "remote learners"
    return (f"run: {settings.run_dir} | runner: {where}, learner: {learner_dev} | {a.num_envs_per_runner} envs x "
            f"{a.rollout_length} steps x {runners} runner(s) = {steps:,} env steps/iteration | "
            f"K = {k} updates/iteration (batch {a.batch_size}, replay ratio {a.replay_ratio:g}) | "
            f"{settings.run.iterations} iterations")


def _halt_in(err: BaseException):
    """The :class:`~rl_zerosync.learner.training_guard.TrainingHalted` that ``err`` is or wraps
    (RLlib and Ray chain it into their own errors), or None."""
    from rl_zerosync.learner.training_guard import TrainingHalted

    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, TrainingHalted):
            return err
        seen.add(id(err))
        cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError keeps the remote one here
        err = cause if isinstance(cause, BaseException) else (err.__cause__ or err.__context__)
    return None


def _train_iteration(algo) -> dict:
    """One ``algo.train()``; a guard halt comes out as one ``TrainingHalted`` naming its iteration
    (not RLlib's chain of errors around it)."""
    try:
        return algo.train()
    except Exception as err:  # noqa: BLE001 - only a halt is rewritten, the rest re-raised as is
        halt = _halt_in(err)
        if halt is None:
            raise
        raise halt.at_iteration(algo.iteration + 1) from None


class TrainLoop:
    """One run's training, step by step: :meth:`step` is one iteration (validation, best checkpoint,
    metrics row, progress line, periodic checkpoint, early-stop check), :meth:`save` the final
    checkpoint, :meth:`evaluate` the end-of-run evaluation. ``train()`` drives one loop to the end; a
    population (:mod:`rl_zerosync.population`) steps its members' loops in lockstep.

    Args:
        settings, run_dir, algo: The run's settings, claimed run directory and built algorithm.
        ckpt: Checkpoint to restore first (a resume), or None.
        validator: The :class:`~rl_zerosync.evaluation.validation.Validator` to use (a population
            shares one across its members, whose shapes agree); None builds one when the run validates.
        show: Print the header and the per-iteration progress line (members of a population do not).
    """

    def __init__(self, settings: Settings, run_dir: RunDir, algo, ckpt=None, *, validator=None,
                 show: bool = True) -> None:
        self.settings, self.run_dir, self.algo = settings, run_dir, algo
        state = run_dir.restore(algo, ckpt) if ckpt is not None else {}
        self.selection = _Selection(settings, state)
        self.progress = Progress(total_iterations=settings.run.iterations)
        self.show = show
        self.result: dict = {}
        self.stopped = self.selection.stop
        """Validation stopped the run early (restored from the checkpoint's run state at a resume: an
        early-stopped run or population member resumed is read back, not trained on)."""
        run_dir.open_log()
        try:
            if show:
                print(header_line(settings, algo), flush=True)
            if validator is None and settings.eval_every:
                from rl_zerosync.evaluation.validation import Validator

                validator = Validator(settings, algo)
            self.validator = validator if settings.eval_every else None
        except BaseException:
            run_dir.close_log()
            raise

    @property
    def done(self) -> bool:
        """All iterations ran, or validation stopped the run early."""
        return self.stopped or self.algo.iteration >= self.settings.run.iterations

    def validation_due(self, iteration: int) -> bool:
        """Whether iteration ``iteration`` ends with a validation pass."""
        every = self.settings.eval_every
        return bool(self.validator is not None and every and
                    (iteration % every == 0 or iteration == self.settings.run.iterations))

    def step(self) -> dict:
        """One iteration; returns its result (``result["eval"]`` after a validation pass)."""
        return self.conclude(self.advance())

    def advance(self) -> dict:
        """The training part of :meth:`step`: one ``algo.train()``; returns its result for :meth:`conclude`."""
        return _train_iteration(self.algo)

    def conclude(self, result: dict, validation: dict | None = None) -> dict:
        """The rest of :meth:`step` after :meth:`advance`: validation when due (``validation``: this
        iteration's pass already made, e.g. by the population's batched pass), best checkpoint, metrics
        row, progress line, periodic checkpoint, early-stop check."""
        settings, algo, run_dir, selection = self.settings, self.algo, self.run_dir, self.selection
        it = algo.iteration
        if self.validation_due(it):
            ev = validation if validation is not None else self.validator.validate(algo)
            nets = ev.pop("_validation_nets", None)  # evaluation.validation.NETS_KEY
            if nets is not None:  # the checkpoint candidates' returns: the evidence's trials and agent PBO
                from rl_zerosync.evidence.block import save_validation_returns

                save_validation_returns(run_dir.path, it, nets)
            if selection.update(it, ev):
                run_dir.save(algo, settings, BEST_DIR, {**selection.state(), "validation": ev})
            ev["best_validation_" + selection.metric] = selection.best_value
            ev["best_iteration"] = selection.best_iteration
            result["eval"] = ev
        self.progress.add_perf(result)
        run_dir.log(result)
        if self.show:
            self.progress.show(result)
        every = settings.run.checkpoint_every
        if every and it % every == 0:
            run_dir.save(algo, settings, run_state=selection.state(), keep=settings.run.keep_checkpoints)
        if selection.stop:
            self.stopped = True
            if self.show:
                print(f"early stop: no new best validation {selection.metric} in "
                      f"{selection.patience} passes (best {selection.best_value:+.3f} at iteration "
                      f"{selection.best_iteration})", flush=True)
        self.result = result
        return result

    def save(self):
        """The final checkpoint (``checkpoint/``); returns its path."""
        settings = self.settings
        return self.run_dir.save(self.algo, settings, run_state=self.selection.state(),
                                 keep=settings.run.keep_checkpoints)

    def evaluate(self, quiet: bool = False) -> dict:
        """The end-of-run evaluation into ``evaluation/`` (``run.eval_checkpoint``); returns its report.
        ``quiet``: without its progress lines (a population prints one per member)."""
        from rl_zerosync.evaluation.evaluate import evaluate_checkpoint

        self.run_dir.record(*EVALUATION_NAMES)
        which = best_or_last(self.run_dir.path, self.settings.run.eval_checkpoint)  # no best: the last, warned
        return evaluate_checkpoint(self.run_dir.path, out_dir=self.run_dir.path / EVALUATION_DIR, which=which,
                                   quiet=quiet)

    def close(self) -> None:
        self.run_dir.close_log()


def _train_loop(settings: Settings, run_dir: RunDir, algo, ckpt) -> dict:
    loop = TrainLoop(settings, run_dir, algo, ckpt)
    try:
        with _Interrupt() as interrupt:
            while not loop.done and not interrupt.requested:
                loop.step()
            # inside the handler: a SIGTERM during the save (a driver and its death signal both) waits for it
            ckpt = loop.save()
            say(f"checkpoint: {ckpt}")
        result = loop.result
        if interrupt.requested:
            result["interrupted_by"] = interrupt.signum
            return result
        if settings.run.evaluate:
            try:
                with Stop():  # the project's handlers through the evaluation too: a stop is a line and 128 + signal
                    report = loop.evaluate()
            except Stopped as stop:
                name = signal.Signals(stop.signum).name
                say(f"interrupt ({name}) during the end-of-run evaluation: no evaluation written (the checkpoint "
                    f"is; `rl-zerosync evaluate --checkpoint {run_dir.path}` writes it); the run exits "
                    f"{128 + stop.signum}", stream=sys.stderr)
                result["interrupted_by"] = stop.signum
                return result
            say(report["summary_line"])
            say(report["verdict_line"])
            result["evaluation"] = report
    finally:
        loop.close()
    return result
