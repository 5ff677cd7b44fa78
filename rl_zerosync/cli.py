"""``rl-zerosync`` (also ``python -m rl_zerosync``): train, evaluate, bench.

    rl-zerosync train --config configs/local.yaml [--set section.key=value ...] [--resume DIR | --overwrite]
    rl-zerosync train --config FILE --seeds 0,1,2,3,4 [--parallel N]
    rl-zerosync evaluate --checkpoint DIR [--which best|last] [--data FILE] [--set data.key=value ...] [--out DIR]
    rl-zerosync evaluate --walk-forward K --config FILE [--set section.key=value ...] [--out DIR]
                         [--resume | --overwrite]
    rl-zerosync report RUN [--html] [--out DIR]
    rl-zerosync bench [--quick] [--out-dir DIR]
"""
from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import traceback
from pathlib import Path

BENCHMARKS = ("kernels", "env", "learner", "env_runner", "e2e", "scaling")
EXIT_INPUT = 2
"""A bad input (setting, data, run directory, checkpoint): one ``error:`` line, nothing started."""
EXIT_HALTED = 3
"""Training stopped by a guard check with the "halt" policy (the last checkpoint kept)."""
EXIT_WRITE = 4
"""A write failed (disk full, no permission, read-only file system): one line naming the path."""
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG)
"""The ``OSError`` codes reported as a failed write (``EXIT_WRITE``) instead of a traceback."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rl-zerosync", description="Zero-sync DQN trading on Ray RLlib.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--debug", action="store_true",
                   help="full tracebacks instead of one-line errors (also accepted after the command; "
                        "or set RL_ZEROSYNC_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True)

    for add in (_train_parser, _evaluate_parser, _export_parser, _report_parser, _bench_parser):
        add(sub)
    return p


def _checkpoint_choice(parser: argparse.ArgumentParser) -> None:
    """``--which`` and ``--member``: which checkpoint of a run or population directory (evaluate, export)."""
    parser.add_argument("--which", choices=("best", "last"), default="best",
                        help="for a run directory: the best-validation checkpoint (default; an error when the "
                             "run saved none) or the last")
    parser.add_argument("--member", type=int, default=None, metavar="K",
                        help="a population directory's member K (default: for a population directory, the "
                             "member selected on validation)")


def _train_parser(sub) -> None:
    t = sub.add_parser("train", help="train from a YAML config")
    t.add_argument("--config", required=True, help="YAML settings file (see configs/)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, e.g. --set run.iterations=5 (repeatable)")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="run or checkpoint directory to continue from (its newest undamaged checkpoint); with "
                        "--seeds the sweep's directory: finished seeds are read back, the others continue; with "
                        "a population config the population's directory: it continues from its members' last "
                        "common checkpoint, finished members read back")
    t.add_argument("--overwrite", action="store_true",
                   help="clear the run directory's outputs (metrics, TensorBoard, checkpoints, evaluation) "
                        "first; without it or --resume a directory that holds a run is refused")
    t.add_argument("--seeds", default=None, metavar="S0,S1,...",
                   help="train once per seed and write <dir>/<name>/seeds.json: as one population process "
                        "(<dir>/<name>/population/member<k>/) when the seeds fit one device, else one process "
                        "per seed (<dir>/<name>/seed<k>/)")
    t.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="with --seeds: one process per seed, N at a time (several fit on one GPU)")
    t.add_argument("--processes", action="store_true",
                   help="with --seeds: one process per seed even when the seeds fit one population process")


def _evaluate_parser(sub) -> None:
    e = sub.add_parser("evaluate", help="greedy policy on the test segment -> metrics JSON, per-bar CSV + PNG",
                       description="Evaluate a checkpoint (--checkpoint: metrics.json, per-bar "
                                   "bars_<segment>.csv and portfolio_<segment>.csv (and .parquet), "
                                   "report.png), or train and evaluate K walk-forward folds of a config "
                                   "with a file data source (--walk-forward K --config FILE).")
    e.add_argument("--checkpoint", default=None, metavar="DIR", help="run or checkpoint directory")
    _checkpoint_choice(e)
    e.add_argument("--data", default=None, metavar="FILE",
                   help="CSV/Parquet OHLCV file to evaluate on (default: the run's validation and test "
                        "segments); read with the run's column mapping unless --set data.columns... says otherwise")
    e.add_argument("--out", default=None, metavar="DIR",
                   help="output directory, new, empty or an earlier evaluation's (replaced whole); default "
                        "<run>/evaluation/, with --data FILE <run>/evaluation_<file stem>/ (walk-forward: where "
                        "walk_forward.json goes; default the run directory)")
    e.add_argument("--walk-forward", type=int, default=None, metavar="K",
                   help="K rolling train/validation/test folds in time order of --config's file data: "
                        "retrain per fold, test metrics per fold and pooled -> walk_forward.json")
    e.add_argument("--config", default=None, help="YAML settings file (with --walk-forward)")
    e.add_argument("--anchored", action="store_true",
                   help="with --walk-forward: expanding windows (every fold trains from the series start; "
                        "validation and test segments as the rolling folds')")
    e.add_argument("--seeds", default=None, metavar="S0,S1,...",
                   help="with --walk-forward: every fold once per seed (seeds x folds, pooled) into "
                        "<dir>/<name>/seed<k>/fold<i>/")
    e.add_argument("--overwrite", action="store_true",
                   help="with --walk-forward: retrain folds whose run directories already hold a run")
    e.add_argument("--deploy-margin", type=float, default=None, metavar="SHARPE",
                   help="with --walk-forward: each fold deploys the agent only when agent - best baseline on its "
                        "validation segment and the lower bound of that interval exceed this (default 0.0)")
    e.add_argument("--resume", action="store_true",
                   help="with --walk-forward: continue an interrupted walk-forward: finished folds are read "
                        "back, not retrained; an interrupted fold resumes from its newest valid checkpoint "
                        "(or restarts without one); the settings must keep every model/env/data key")
    e.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting (repeatable): with --walk-forward any setting of --config; "
                        "with --checkpoint only data.KEY settings of the evaluated data, e.g. "
                        "data.periods_per_year=252, data.columns.close='Adj Close', data.spread_bps=5")


def _export_parser(sub) -> None:
    x = sub.add_parser("export", help="the greedy policy of a checkpoint as TorchScript or ONNX (+ JSON metadata)",
                       description="Write the Q network, its greedy action choice and (routed mode) the routing "
                                   "rule as one file mapping (obs, market) -> (action, exposure, order type, "
                                   "urgency), with its metadata beside it as <out>.json (rl_zerosync.serving.export).")
    x.add_argument("--checkpoint", required=True, metavar="DIR", help="run or checkpoint directory")
    _checkpoint_choice(x)
    x.add_argument("--format", choices=("torchscript", "onnx"), default="torchscript",
                   help="torchscript (default) or onnx (needs the onnx and onnxscript packages)")
    x.add_argument("--out", default=None, metavar="FILE",
                   help="model file (default <run>/export/<checkpoint>.pt or .onnx)")


def _report_parser(sub) -> None:
    r = sub.add_parser("report", help="quantstats tear sheet of an evaluation's portfolio vs buy-and-hold",
                       description="Tear sheet of the equal-weight portfolio's net returns on the evaluation's "
                                   "test segment (all for evaluate --data) against buy-and-hold, with quantstats: "
                                   "prints the metrics table and writes tearsheet.json (and tearsheet.html with "
                                   "--html); its Sharpe is checked against metrics.json "
                                   "(rl_zerosync.evaluation.tearsheet).")
    r.add_argument("run", metavar="RUN", help="run directory (its evaluation/) or an evaluation directory")
    r.add_argument("--html", action="store_true", help="also write the quantstats HTML tear sheet")
    r.add_argument("--out", default=None, metavar="DIR",
                   help="where tearsheet.json (and .html) go (default: the evaluation directory)")


def _bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="run the learner and env-runner benchmarks (and the others)")
    b.add_argument("--quick", action="store_true", help="small CPU-sized runs")
    b.add_argument("--only", choices=BENCHMARKS, action="append", help="run only these")
    b.add_argument("--out-dir", default="benchmarks/results")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rl_zerosync")
    except PackageNotFoundError:  # a source tree that is not installed
        return "(not installed)"


def _bench(args) -> int:
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    if not root.is_dir():
        print("benchmarks/ not found: run bench from a source checkout", file=sys.stderr)
        return 2
    rc = 0
    for name in args.only or ("learner", "env_runner"):
        cmd = [sys.executable, "-m", f"benchmarks.{name}", "--out", str(Path(args.out_dir).resolve() / f"{name}.json")]
        if args.quick:
            cmd.append("--quick")
        print("$", " ".join(cmd), flush=True)
        rc = max(rc, subprocess.call(cmd, cwd=root.parent))  # benchmarks is a package of the checkout
    return rc


def _walk_forward(args) -> int:
    from rl_zerosync.config.settings import SettingsError, load
    from rl_zerosync.rundir.lock import RunExistsError
    from rl_zerosync.run.walkforward import WalkForwardError, walk_forward

    if args.walk_forward is None or args.config is None or args.checkpoint is not None or args.data is not None:
        print("error: walk-forward evaluation takes --walk-forward K and --config FILE (not --checkpoint "
              "or --data: every fold trains its own model on the config's data)", file=sys.stderr)
        return 2
    if args.resume and args.overwrite:
        print("error: --resume and --overwrite cannot be combined", file=sys.stderr)
        return 2
    try:
        settings = load(args.config, args.set)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        seeds = None
        if args.seeds is not None:
            from rl_zerosync.run.seeds import parse_seeds

            seeds = parse_seeds(args.seeds)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        report = walk_forward(settings, args.walk_forward, out_dir=args.out, overwrite=args.overwrite,
                              anchored=args.anchored, seeds=seeds, resume=args.resume,
                              **({} if args.deploy_margin is None else {"deploy_margin": args.deploy_margin}))
    except WalkForwardError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunExistsError as err:
        _run_dir_error(err, args, resume=True)
        return 2
    for line in report["lines"]:
        print(line, flush=True)
    plot = f" | {report['plot']}" if report.get("plot") else ""
    print(f"walk-forward report: {report['path']}{plot}", flush=True)
    if report.get("verdict"):
        print(report["verdict"], flush=True)
    if report.get("interrupted_by"):
        return 128 + int(report["interrupted_by"])
    return 0 if report["complete"] else 1


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc), behind one error handler.

    Input errors (a bad setting, bad data, a GPU request this machine cannot meet: ``ValueError``
    and its subclasses, ``FileNotFoundError``, the run-directory and checkpoint errors) print one
    line ``error: <file>: <what>`` to stderr and return 2; ``--debug`` (anywhere on the line) or
    ``RL_ZEROSYNC_DEBUG=1`` prints the full traceback first. ``train`` and ``evaluate
    --walk-forward`` run :func:`rl_zerosync.run.preflight.check` on the loaded settings before anything
    else, so these errors come before Ray starts. Other exceptions propagate unchanged.

    A Ray instance the command starts (``train``, ``evaluate --walk-forward``) is shut down before it
    returns, on every path (its algorithms are stopped first, where they are built); one that was
    already running in this process is left running.

    Exit codes: 0 done; 1 a walk-forward with a fold that ended without an evaluation; 2 a bad
    input (``EXIT_INPUT``, also a run directory that disappeared during the run); 3 a guard halt
    (``EXIT_HALTED``); 4 a failed write (``EXIT_WRITE``: disk full, read-only); 128 + the signal
    for a run (or a walk-forward's fold) stopped by SIGINT (130), SIGTERM (143) or SIGHUP (129, a
    closed terminal) after its checkpoint was written (also during the end-of-run evaluation, which
    is then not written).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("RL_ZEROSYNC_DEBUG", "") not in ("", "0")
    args = _parser().parse_args(_joined_values([a for a in argv if a != "--debug"]))
    args.debug = debug
    args.argv = [a for a in argv if a != "--debug"]
    from rl_zerosync.run.ray_console import quiet_ray_notices
    from rl_zerosync.run.ray_session import owned_ray

    quiet_ray_notices()  # Ray's repeated notices once at debug level, in this command only
    try:
        with owned_ray():  # a Ray this command starts is shut down before it returns
            _preflight(args)
            return _command(args)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - sorted into input errors (one line) and the rest
        if _write_error(err):
            if debug:
                traceback.print_exc()
            print(f"error: write failed: {_one_line(err)}", file=sys.stderr)
            return EXIT_WRITE
        if not _input_error(err):
            raise
        if debug:
            traceback.print_exc()
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2


def _joined_values(argv: list[str]) -> list[str]:
    """``--seeds -1,2`` as ``--seeds=-1,2``: argparse takes a value starting with ``-`` for an option
    (and says "expected one argument"); joined, the value reaches its own check, which names it."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--seeds":
            value = next(it, None)
            out.append(a if value is None else f"{a}={value}")
        else:
            out.append(a)
    return out


def _preflight(args) -> None:
    """Settings, data and GPU checks of ``train`` / ``evaluate --walk-forward`` before dispatch."""
    walk = args.command == "evaluate" and getattr(args, "walk_forward", None) is not None
    if getattr(args, "resume", None) and getattr(args, "overwrite", False):
        raise ValueError("--resume and --overwrite cannot be combined")  # before the data is read
    if args.command != "train" and not walk:
        return
    if getattr(args, "config", None) is None:
        return  # the command's own usage error follows
    from rl_zerosync.run.preflight import check
    from rl_zerosync.config.settings import load

    settings = load(args.config, args.set)
    if settings.population is not None:  # the population section and every member's settings, first
        from rl_zerosync.population.members import all_member_settings
        from rl_zerosync.population.space import parse_population

        all_member_settings(settings, parse_population(settings.population, settings.source))
    if walk and settings.data.get("source") not in ("csv", "parquet"):
        return  # walk_forward names the problem
    # Walk-forward folds build and check their own segments before the first fold trains.
    check(settings, segments=not walk)


def _input_error(err: BaseException) -> bool:
    """A bad input the user can fix (one line), not a bug or a failure inside Ray (traceback)."""
    ray_exc = sys.modules.get("ray.exceptions")
    if ray_exc is not None and isinstance(err, ray_exc.RayError):
        return False
    kinds: list[type] = [ValueError, FileNotFoundError]
    for module, name in (("rl_zerosync.rundir.lock", "RunDirError"),
                         ("rl_zerosync.rundir.checkpoints", "CheckpointError")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            kinds.append(cls)
    return isinstance(err, tuple(kinds))


def again_commands(argv: list[str], err, resume: bool, walk: bool = False) -> list[str]:
    """The exact commands that continue or replace the run a
    :class:`~rl_zerosync.rundir.lock.RunExistsError` refused: this command's arguments ``argv`` without
    ``--resume``/``--overwrite``, plus ``--resume <dir>`` (a walk-forward's ``--resume`` takes no value)
    when the run can be continued (``resume``), and ``--overwrite``."""
    import shlex

    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume":
            skip = not walk  # train's --resume takes the directory
        elif a != "--overwrite" and not a.startswith("--resume="):
            rest.append(a)
    base = shlex.join(["rl-zerosync", *rest])
    lines = []
    if resume:
        lines.append(f"  continue it:                        {base} --resume"
                     + ("" if walk else f" {shlex.quote(str(err.path))}"))
    lines.append(f"  start again (its outputs removed):  {base} --overwrite")
    return lines


def _run_dir_error(err: BaseException, args, resume: bool) -> None:
    """The ``error:`` line of a run-directory error and, for a directory that holds a run, the exact
    commands to continue it (``resume``: when the command can) or to start it again."""
    from rl_zerosync.rundir.lock import RunExistsError

    print(f"error: {err}", file=sys.stderr)
    if isinstance(err, RunExistsError):
        walk = getattr(args, "walk_forward", None) is not None
        for line in again_commands(getattr(args, "argv", []), err, resume, walk=walk):
            print(line, file=sys.stderr)


def _kept_checkpoint(run_dir: Path) -> str:
    """Which checkpoint a halted run keeps (nothing is written after the halt)."""
    from rl_zerosync.rundir.checkpoints import CHECKPOINT_DIR

    ckpt = Path(run_dir) / CHECKPOINT_DIR
    return f"the last good checkpoint stays: {ckpt}" if ckpt.is_dir() else "no checkpoint was written before it"


def _write_error(err: BaseException) -> bool:
    """A write the machine refused (a full disk, a read-only file system, no permission): one line
    naming the path (``OSError`` carries it), not a traceback."""
    return isinstance(err, OSError) and not isinstance(err, FileNotFoundError) and err.errno in WRITE_ERRNOS


def _one_line(err: BaseException) -> str:
    """``err`` on one line; an ``OSError`` with an errno as its path, the system's words and the errno
    name (:func:`~rl_zerosync.rundir.os_errors.os_error_text`), not Python's ``[Errno 28] ...``."""
    if isinstance(err, OSError) and err.errno is not None:
        from rl_zerosync.rundir.os_errors import os_error_text

        err = os_error_text(err)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " | ".join(lines) or type(err).__name__


def _train_population(settings, args) -> int:
    """``train`` of a config with a ``population:`` section (:mod:`rl_zerosync.population.lockstep`)."""
    from rl_zerosync.population.drive import train_population

    if args.seeds is not None:
        print("error: --seeds cannot be combined with a population config (population.seeds lists the seeds)",
              file=sys.stderr)
        return 2
    if args.resume is not None and Path(args.resume).resolve() != settings.run_dir.resolve():
        print(f"error: --resume {args.resume} with a population config: expected the population's directory "
              f"{settings.run_dir} (run.dir / run.name of the config; a member is resumed with its population)",
              file=sys.stderr)
        return 2
    return _exit_code(lambda: train_population(settings, overwrite=args.overwrite, resume=args.resume is not None),
                      args, halted=lambda: "")


def _command(args) -> int:
    """Run the parsed command (one function per command)."""
    if args.command == "evaluate" and (args.walk_forward is not None or args.config is not None):
        return _walk_forward(args)
    return {"train": _train, "evaluate": _evaluate, "export": _export, "report": _report,
            "bench": _bench}.get(args.command, lambda _args: 2)(args)


def _train(args) -> int:
    from rl_zerosync.rundir.lock import RunDirError
    from rl_zerosync.config.settings import SettingsError, load
    from rl_zerosync.run.train import train

    try:
        settings = load(args.config, args.set)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.resume and args.overwrite:
        print("error: --resume and --overwrite cannot be combined", file=sys.stderr)
        return 2
    if settings.population is not None:  # before --seeds, which it refuses (population.seeds lists them)
        return _train_population(settings, args)
    if args.seeds is not None:
        from rl_zerosync.run.seeds import SweepArgumentError, sweep_command

        try:
            return sweep_command(settings, args)
        except SweepArgumentError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except RunDirError as err:
            _run_dir_error(err, args, resume=False)
            return 2
    return _exit_code(lambda: train(settings, resume=args.resume, overwrite=args.overwrite), args,
                      halted=lambda: f"; {_kept_checkpoint(settings.run_dir)}")


def _exit_code(run, args, *, halted) -> int:
    """The exit code of a training command ``run()`` (a single run's or a population's): 2 for a run
    directory or checkpoint refused (one line), :data:`EXIT_HALTED` for a guard halt (its line plus
    ``halted()``, read after the halt), 128 + the signal that interrupted it, else 0."""
    from rl_zerosync.learner.training_guard import TrainingHalted
    from rl_zerosync.rundir.checkpoints import CheckpointError
    from rl_zerosync.rundir.lock import RunDirError

    try:
        result = run()
    except (RunDirError, CheckpointError) as err:
        _run_dir_error(err, args, resume=True)
        return 2
    except TrainingHalted as err:
        print(f"error: {err}{halted()}", file=sys.stderr)
        return EXIT_HALTED
    signum = result.get("interrupted_by")
    return 128 + signum if signum else 0


def _evaluate(args) -> int:
    if args.checkpoint is None:
        print("error: evaluate needs --checkpoint DIR (or --walk-forward K --config FILE)", file=sys.stderr)
        return 2
    if args.resume:
        print("error: evaluate --resume continues a walk-forward: it needs --walk-forward K --config FILE",
              file=sys.stderr)
        return 2
    from rl_zerosync.evaluation.evaluate import evaluate_checkpoint
    from rl_zerosync.population.report import member_checkpoint

    args.checkpoint = member_checkpoint(args.checkpoint, args.member)
    # A --set key outside data.* is a SettingsError (one line, exit 2) before anything loads.
    report = evaluate_checkpoint(args.checkpoint, data=args.data, out_dir=args.out, which=args.which,
                                 overrides=args.set)
    if report.get("output_line"):
        print(report["output_line"])
    print(report["summary_line"])
    print(report["verdict_line"])
    return 0


def _export(args) -> int:
    from rl_zerosync.population.report import member_checkpoint
    from rl_zerosync.serving.export import export_policy

    args.checkpoint = member_checkpoint(args.checkpoint, args.member)
    try:
        res = export_policy(args.checkpoint, fmt=args.format, out=args.out, which=args.which)
    except ImportError as err:  # a missing optional package (onnx): one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exported {res['action_mode']} policy of {res['checkpoint']} to {res['path']} "
          f"(metadata {res['metadata_path']})")
    return 0


def _report(args) -> int:
    from rl_zerosync.evaluation.tearsheet import tear_sheet

    try:
        res = tear_sheet(args.run, html=args.html, out=args.out)
    except ImportError as err:  # quantstats not installed: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(res["table"])
    if not res["sharpe_check"]["within_tolerance"]:
        print(f"warning: quantstats' Sharpe differs from metrics.json's by more than "
              f"{res['sharpe_check']['tolerance']:g}: {res['sharpe_check']}", file=sys.stderr)
    print(res["line"])
    return 0

if __name__ == "__main__":
    sys.exit(main())
