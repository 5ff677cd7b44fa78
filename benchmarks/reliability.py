"""Reliability on a CPU: bad inputs and faults the way a new user meets them, through the real CLI.

How to run (CPU only; GPUs are hidden from the runs even when present)::

    python -m benchmarks.reliability            # everything: ~15 min on 2 idle cores (longer when busy)
    python -m benchmarks.reliability --quick    # 5 bad inputs + the concurrent-run fault: ~35 s
    python -m benchmarks.reliability --out FILE --work-dir DIR --keep

**Bad inputs** -- every case of ``CASES`` in ``tests/test_preflight.py`` (its CSV builders, config
builder and needles are imported from there, not copied), plus GPU requests on a machine without
GPUs that the list does not already hold (``num_gpus_per_env_runner: 1`` with one remote env
runner, ``num_gpus_per_learner: 1`` with one remote learner). Each runs as a subprocess,
``python -m rl_zerosync train --config pf.yaml``, and counts as a *named error* when: exit code 2;
stderr is one line starting with ``error:`` that holds every needle of the case; no traceback;
under ``LIMIT_S`` (10 s) of wall time; Ray never started (no ``Started a local Ray instance``);
and no run directory was created. Each case also records its CPU seconds and the load average,
to tell a slow command from a busy machine when the 10 s limit is missed.

**Faults** -- each is *tried*, and *survived* (the run completes; metrics rows 1..N exactly once)
or *named* (refused with one ``error:`` line naming the cause):

* ``same-name-concurrent``: a second ``train`` of a run name another live run holds: refused
  (exit 2, < 10 s, before Ray) naming the holder's pid and host; the first run then completes.
* ``kill-9-mid-training``: the driver's session SIGKILLed between two checkpoints; a plain re-run
  is refused (the stale lock taken over, ``--resume``/``--overwrite`` named); ``--resume``
  completes with iterations 1..N once each.
* ``kill-9-in-checkpoint-write:<point>``: killed while a checkpoint is written, then ``--resume``:
  ``external`` (a SIGKILL sent as soon as ``checkpoint.tmp/`` appears), ``before-manifest`` (the
  driver SIGKILLs itself when the checkpoint's files are written but its manifest is not) and
  ``between-renames`` (after ``checkpoint/`` moved to ``checkpoint.1/``, before ``checkpoint.tmp/``
  moved in). The two in-process kill points wrap ``rl_zerosync.rundir.checkpoints`` functions in a small
  launcher (``KILL_LAUNCHER``) that then calls the real ``rl_zerosync.cli.main``.
* ``checkpoint-<damage>``: ``DAMAGE`` of ``tests/test_checkpoint_integrity.py`` (truncated file,
  random bytes in the weights, a missing file) applied to ``checkpoint/`` of a finished 3-iteration
  run: ``evaluate`` (of the checkpoint directory and of the run directory with ``--which last``)
  must fail with one line naming the file, ``--resume`` must name it and fall back to
  ``checkpoint.1/`` and complete; ``checkpoint-all-damaged``: both checkpoints damaged, so
  ``--resume`` must be refused naming the file, before Ray starts.
* ``remote-env-runner-kill-9``: ``num_env_runners: 1``; the runner actor's process SIGKILLed after
  iteration 3; the run must complete with every iteration's row (RLlib restarts the actor; the
  iterations that sampled nothing meanwhile are listed).
* ``data-error-2-remote-runners``: the ``nan-close`` CSV of ``CASES`` with ``num_env_runners: 2``,
  trained through the Python API (``rl_zerosync.run.train.train(load(cfg))``, which the CLI's
  preflight does not guard): the exception must name the data problem (the case's needles on its
  first line), not a consequence such as ``IndexError``; and the same config through the CLI must
  be refused by preflight before Ray.

Second round (ownership of files, exit codes, guard halts, resume against the run's settings):

* ``overwrite-deletes-only-the-run's-files``: ``--overwrite`` of a finished run keeps a
  ``checkpoint_experiment/`` folder and a note in the run directory and a sibling run byte for byte
  (``files_deleted_outside_run``: 0).
* ``guard-halt-lr-1e10``: a diverging run ends with exit 3 and one error line naming the divergence
  check, max |Q|, the threshold and the iteration.
* ``sigterm-exit-143-then-resume``: SIGTERM mid-run: checkpoint, exit 143; ``--resume`` completes
  with rows 1..N once; ``--resume`` with another ``model.hidden`` is refused before anything is
  written (``settings.yaml`` unchanged).
* ``run-dir-deleted-mid-training``: the run directory removed while it trains: exit 2 and one error
  line at the next write.
* ``seeds-driver-kill-9``: the ``--seeds`` driver SIGKILLed alone: its child gets SIGTERM, writes its
  checkpoint and exits; ``seeds.json`` is marked partial.

Third round (data files and the state around them):

* ``data-file-changed-under-its-path``: a run trained on a 1,200-bar dated CSV, evaluated, then the
  file's last 300 bars removed: ``evaluate`` of the run's own segments is refused with one line
  naming the file (no evaluation written), ``train --resume`` is refused before anything is written,
  and ``evaluate --data FILE`` of the shortened file counts the bars inside the training period the
  run recorded (``overlapping_bars`` > 0, ``training_period_source`` "recorded by the run").
* ``export-full-disk``: ``export`` under a 2 KB file size limit (``RLIMIT_FSIZE``, the kernel's
  EFBIG: a real failed write) ends with exit 4 and one line, no ``.tmp`` left.
* ``evaluate-best-without-checkpoint_best``: a run directory holding ``checkpoint/`` but no
  ``checkpoint_best/``: ``evaluate`` and ``export`` (``--which best``, the default) are refused with
  one line naming ``--which last``; ``evaluate --which last`` completes.

The new bad inputs (two files of one stem, one file listed twice, assets at different bar rates,
a YAML alias bomb, a key given twice, a date after 2262) come from ``CASES`` like the others.

Fourth round (one writer per evaluation, damaged metrics rows, stops, the sweep's resume):

* ``concurrent-evaluations-one-out``: a second ``evaluate --out DIR`` started while the first writes
  ``DIR``: both complete, or the second is refused naming the first's pid (exit 2); ``DIR`` ends whole,
  no ``.tmp`` / ``.old`` / ``.lock`` beside it, never a raw "No such file".
* ``evaluation-of-another-checkpoint-replaced-with-a-warning``: ``--which last`` then ``--which best``
  into one ``--out``: the second warns naming both checkpoints.
* ``evaluate-full-disk``: ``evaluate`` under a 20 KB file size limit: exit 4, one line naming the
  evaluation's ``.tmp``, nothing left.
* ``metrics-row-damaged-before-the-checkpoint``: line 2 of ``metrics.jsonl`` cut in half: ``--resume``
  refused naming the line and iteration 2, before Ray, the file unchanged;
  ``metrics-row-torn-after-the-checkpoint``: a torn last line after the checkpoint's row: dropped with
  a warning naming it, the run completes with rows 1..N once.
* ``sighup-exit-129-then-resume``: SIGHUP (a closed terminal): checkpoint, lock released, exit 129;
  ``--resume`` completes 1..N once.
* ``sigterm-in-end-of-run-evaluation``: SIGTERM as the end-of-run evaluation starts (a launcher wraps
  ``evaluate_checkpoint``): one line naming the ``evaluate`` command, exit 143, no half evaluation;
  ``evaluate`` then writes it.
* ``run-lock-deleted-mid-training``: ``run.lock`` deleted: exit 2 at the next write saying the files
  stay (never "gone"); ``--resume`` completes 1..N once.
* ``seeds-sweep-sigterm-then-resume``: ``--seeds 0,1 --processes`` SIGTERMed while seed 1 trains
  (seed 0 finished): exit 143, ``seeds.json`` partial; ``--resume <sweep>``: seed 0 read back byte for
  byte, seed 1 resumed with rows 1..N once, ``seeds.json`` complete.
* ``rllib-log-folder-inside-the-run``: a run with ``HOME`` pointed at an empty folder writes nothing
  under ``$HOME/ray_results`` (``files_changed_outside_run``) and has ``<run>/rllib/``.

Fifth round (populations):

* ``population-sigterm-then-resume``: a population of 2 members (``smoke.yaml`` with
  ``population.seeds [0, 1]``) SIGTERMed mid-run: every member's checkpoint, exit 143,
  ``population.json`` partial; ``--resume <population>`` completes with each member's rows 1..N once
  in the one table; ``--resume`` again says there is nothing to resume (the table unchanged);
  ``--resume`` with another ``model.hidden`` or ``population.seeds`` is refused before Ray naming the
  key. Alone: ``python -m benchmarks.reliability --only population-sigterm-then-resume --out FILE``.

``COMMAND_CASES``: bad inputs of the commands after training (``export --out`` a directory or a
``.json``, ``evaluate --data ~/...``, ``--out`` a file, ``--set`` outside ``data``, a missing
checkpoint, ``--resume`` with ``--overwrite``, a sweep's ``--resume`` of another directory), named as
the train cases are and counted with them. ``summary.failed_or_interrupted_runs`` counts every
command that had to fail or was stopped (bad inputs, refusals, signals, kills, failed writes) and
``failed_or_interrupted_runs_nonzero`` those that exited non-zero (goal: all);
``bad_inputs_named_over_time_limit`` the bad inputs that failed only the wall-time limit (the right
one-line error, late: on a busy machine, see each case's ``cpu_s`` and ``load_avg_1m``).

Writes ``benchmarks/results/reliability.json`` (``--out``): date, hardware, versions, git (the
commit and the package files that differ from it), config, every
case (exit codes, wall times, the error line or the tail of the output, the checks that failed)
and ``summary``: ``bad_inputs_tried``, ``bad_inputs_named_error`` (goal: = tried),
``faults_tried``, ``faults_survived_or_named`` (goal: = tried), ``rows_lost_or_duplicated`` (goal
0: metrics rows missing from, or repeated in, 1..N after the faults with a row count),
``files_deleted_outside_run`` (goal 0), ``files_changed_outside_run`` (goal 0),
``failed_or_interrupted_runs_nonzero`` (goal: = ``failed_or_interrupted_runs``).

Every process a case starts runs in its own session; when a case ends, whatever is left of that
session (Ray's processes of a killed driver) is SIGKILLed by pid.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU benchmark, also on a GPU machine

from benchmarks.common import parser, result_header, results_path, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SMOKE = ROOT / "configs" / "smoke.yaml"
TEST_HELPERS = ("tiny_run",)
"""Modules of ``tests/`` that the imported test modules import by their bare names (pytest puts
``tests/`` on ``sys.path``; here they are loaded first, under those names)."""

RAY_BANNER = "Started a local Ray instance"
LIMIT_S = 10.0
"""Wall seconds within which a refusal (a bad input, a changed data file) must come."""
QUICK_BAD = ("yaml-type", "not-yaml", "nan-close", "gpu-learner", "gpu-env-runner", "run-name-dot", "bool-close",
             "close-above-high", "yaml-alias-bomb")
FULL_ITERS = 8
"""Iterations of the fault runs that must complete (the kill-mid-training run: 2 x this)."""

# Kill points inside a checkpoint write: the launcher wraps rl_zerosync.rundir.checkpoints functions, then
# runs the real command line. RELIABILITY_KILL_AT = "<point>:<iteration>".
KILL_LAUNCHER = r'''
import os, signal, sys
from pathlib import Path
from rl_zerosync.rundir import checkpoints as C
from rl_zerosync.cli import main

point, _, it = os.environ["RELIABILITY_KILL_AT"].partition(":")
it = int(it)

def die():
    sys.stdout.flush(); sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)

if point == "before-manifest":  # checkpoint.tmp/ holds RLlib's files and run_state.json, no manifest
    write_manifest = C.write_manifest
    def hooked_manifest(ckpt):
        if Path(ckpt).name == C.CHECKPOINT_DIR + ".tmp" and C.checkpoint_iteration(Path(ckpt)) == it:
            die()
        return write_manifest(ckpt)
    C.write_manifest = hooked_manifest
elif point == "between-renames":  # checkpoint/ moved to checkpoint.1/, checkpoint.tmp/ not yet in
    rotate, replace = C.rotate, os.replace
    def hooked_rotate(run_dir, name, tmp, keep):
        if name == C.CHECKPOINT_DIR and C.checkpoint_iteration(Path(tmp)) == it and (Path(run_dir) / name).exists():
            def replace_then_die(src, dst):
                replace(src, dst)
                if Path(src) == Path(run_dir) / name:
                    die()
            C.os.replace = replace_then_die
        return rotate(run_dir, name, tmp, keep)
    C.rotate = hooked_rotate
else:
    raise SystemExit(f"unknown kill point {point!r}")
sys.exit(main(sys.argv[1:]))
'''

# The command line under a file size limit: a write past RLIMIT_FSIZE fails with EFBIG (a real failed
# write, as on a full disk; SIGXFSZ ignored so that the write returns the error).
FSIZE_LAUNCHER = r'''
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from rl_zerosync.cli import main
sys.exit(main(sys.argv[2:]))
'''

# Training through the Python API (no CLI preflight); prints the exception as one JSON line.
API_TRAIN = r'''
import json, sys, traceback
from rl_zerosync.config.settings import load
from rl_zerosync.run.train import train
try:
    train(load(sys.argv[1]))
except BaseException as err:
    traceback.print_exc()
    print("RESULT " + json.dumps({"type": type(err).__name__, "module": type(err).__module__,
                                  "message": str(err)[:6000]}), flush=True)
    sys.exit(1)
print("RESULT " + json.dumps({"type": None}), flush=True)
'''


# ---- the project's test helpers, imported (not copied) -------------------------------------------

def _import_test(name: str):
    """``tests/<name>.py`` as a module named ``name``, after the helpers it may import
    (:data:`TEST_HELPERS`)."""
    for helper in TEST_HELPERS:
        if helper != name and helper not in sys.modules:
            _import_test(helper)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _fixture_function(fixture) -> Callable:
    """The plain function behind a ``@pytest.fixture`` (pytest forbids calling the fixture itself)."""
    for get in (lambda f: f._get_wrapped_function(), lambda f: f.__wrapped__, lambda f: f.__pytest_wrapped__.obj):
        try:
            fn = get(fixture)
        except AttributeError:
            continue
        if callable(fn):
            return fn
    return fixture


class _TmpFactory:
    """The part of pytest's ``tmp_path_factory`` the data fixture uses."""

    def __init__(self, base: Path):
        self.base = base

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name, dir=self.base))


def bad_input_cases(preflight) -> list[tuple[str, Callable, list[str]]]:
    """``CASES`` of test_preflight, plus GPU requests on a CPU machine that it does not hold yet."""
    cases = list(preflight.CASES)
    # (name, algo settings, already covered when a case's algo section satisfies this, needles)
    extra = [
        ("gpu-env-runner", {"num_env_runners": 1, "num_gpus_per_env_runner": 1},
         lambda a: a.get("num_gpus_per_env_runner") == 1 and a.get("num_env_runners", 0) >= 1,
         ["algo.num_gpus_per_env_runner", "1 GPU", "1 x 1 env runner", "this machine has none"]),
        ("gpu-remote-learner", {"num_learners": 1, "num_gpus_per_learner": 1},
         lambda a: a.get("num_gpus_per_learner") == 1 and a.get("num_learners", 0) >= 1,
         ["algo.num_gpus_per_learner", "1 GPU", "1 x 1 learner", "this machine has none"]),
    ]
    probe = Path(tempfile.gettempdir())
    algos = []
    for _, make, _ in cases:
        cfg = make(probe)
        algos.append(cfg.get("algo") or {} if isinstance(cfg, dict) else {})
    names = {c[0] for c in cases}
    for name, algo, covered, needles in extra:
        if name in names or any(covered(a) for a in algos):
            continue
        cases.append((name, lambda d, _a=algo: preflight._csv_cfg(d, algo=dict(_a)), needles))
    return cases


# ---- processes -----------------------------------------------------------------------------------

def _env(**extra: str) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    env.pop("RL_ZEROSYNC_DEBUG", None)
    return env


def _session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _kill_session(sid: int) -> int:
    """SIGKILL every process left in session ``sid`` (one this script started); returns how many."""
    pids = _session_pids(sid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


class Proc:
    """A command in its own session, stdout and stderr to files."""

    def __init__(self, cmd: list[str], log_dir: Path, tag: str, env: Optional[dict] = None):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = log_dir / f"{tag}.out", log_dir / f"{tag}.err"
        self.cmd = cmd
        self.t0 = time.perf_counter()
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env or _env(), cwd=ROOT,
                                      start_new_session=True)
        self.wall: Optional[float] = None

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def wait(self, timeout: float) -> Optional[int]:
        """Exit code, or None after SIGKILLing a run still going after ``timeout`` s."""
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self.wall = self.wall or time.perf_counter() - self.t0
        _kill_session(self.p.pid)  # whatever the run left behind
        return rc

    def kill(self) -> None:
        """kill -9 of the driver and everything of its session (Ray's processes too)."""
        _kill_session(self.p.pid)
        self.p.wait()
        self.wall = time.perf_counter() - self.t0
        time.sleep(0.2)
        _kill_session(self.p.pid)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")


def _run(cmd: list[str], log_dir: Path, tag: str, timeout: float = 300, env: Optional[dict] = None) -> dict:
    """Run ``cmd`` to its end: exit code, wall seconds, output, and its CPU seconds and the load
    average (a slow command tells itself from a busy machine)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = Proc(cmd, log_dir, tag, env)
    rc = proc.wait(timeout)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"rc": rc, "wall_s": round(proc.wall, 2), "stdout": proc.stdout, "stderr": proc.stderr,
            "cpu_s": round(cpu_s, 2), "load_avg_1m": round(os.getloadavg()[0], 2)}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rl_zerosync", *args]


def _train_args(run_root: Path, name: str, iterations: int, *sets: str) -> list[str]:
    args = ["train", "--config", str(SMOKE), "--set", f"run.dir={run_root}", "--set", f"run.name={name}",
            "--set", f"run.iterations={iterations}", "--set", "run.evaluate=false"]
    for s in sets:
        args += ["--set", s]
    return args


# ---- checks --------------------------------------------------------------------------------------

def _rows(run_dir: Path, member: Optional[int] = None) -> tuple[list[int], int]:
    """Iterations of ``metrics.jsonl`` in file order, and the number of unreadable lines; ``member``: a
    population's table, that member's rows only."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return [], 0
    its, torn = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if member is None or row["member"] == member:
                its.append(int(row["iteration"]))
        except (ValueError, KeyError, TypeError):
            torn += 1
    return its, torn


def _row_check(run_dir: Path, n: int, member: Optional[int] = None) -> dict:
    """Rows of 1..n lost and rows repeated (or outside 1..n, or unreadable); ``member``: of that member
    of a population's table."""
    its, torn = _rows(run_dir, member)
    want = set(range(1, n + 1))
    lost = len(want - set(its))
    duplicated = (len(its) - len(set(its) & want)) + torn
    return {"rows": len(its), "expected_rows": n, "rows_lost": lost, "rows_duplicated": duplicated,
            "in_order": its == list(range(1, n + 1))}


def _error_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("error: ")]


def _tail(text: str, n: int = 1500) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return text[-n:]


def _named_refusal(r: dict, needles: list[str], *, limit_s: Optional[float] = None,
                   one_line: bool = False) -> list[str]:
    """Failed checks of a refusal: exit 2, one ``error:`` line with every needle (and, with
    ``one_line``, nothing else on stderr), no traceback, Ray not started, within ``limit_s``."""
    failed = []
    r["expected_nonzero"] = True  # a refusal: counted among the failed runs that must exit non-zero
    lines = _error_lines(r["stderr"])
    if r["rc"] != 2:
        failed.append(f"exit code {r['rc']}, expected 2")
    if one_line and len(r["stderr"].strip().splitlines()) != 1:
        failed.append(f"stderr has {len(r['stderr'].strip().splitlines())} lines, expected 1")
    if len(lines) != 1:
        failed.append(f"{len(lines)} 'error: ' lines on stderr, expected 1")
    line = lines[0] if lines else ""
    missing = [n for n in needles if n not in line]
    if missing:
        failed.append(f"error line lacks {missing}")
    if "Traceback" in r["stderr"]:
        failed.append("traceback on stderr")
    if RAY_BANNER in r["stdout"] + r["stderr"]:
        failed.append("Ray started")
    if limit_s is not None and r["wall_s"] >= limit_s:
        failed.append(f"took {r['wall_s']:.1f} s, limit {limit_s:g} s")
    return failed


def _step(name: str, r: dict, failed: list[str], **extra: Any) -> dict:
    lines = _error_lines(r["stderr"])
    out = {"step": name, "ok": not failed, "rc": r["rc"], "wall_s": r["wall_s"],
           **({"expected_nonzero": True} if r.get("expected_nonzero") else {}), **extra}
    out.update({k: r[k] for k in ("cpu_s", "load_avg_1m") if k in r})
    if lines:
        out["error_line"] = lines[-1][:1000]
    if failed:
        out["failed_checks"] = failed
        out["stdout_tail"] = _tail(r["stdout"])
        out["stderr_tail"] = _tail(r["stderr"])
    return out


def _completed(r: dict, run_dir: Path, n: int, *, needles_out: tuple = (),
               needles_err: tuple = ()) -> tuple[list[str], dict]:
    """Failed checks of a run that must complete with rows 1..n, and the row check."""
    failed = []
    rows = _row_check(run_dir, n)
    if r["rc"] != 0:
        failed.append(f"exit code {r['rc']}, expected 0")
    if rows["rows_lost"] or rows["rows_duplicated"] or not rows["in_order"]:
        failed.append(f"metrics rows {_rows(run_dir)[0]}, expected 1..{n}")
    for needle in needles_out:
        if needle not in r["stdout"]:
            failed.append(f"stdout lacks {needle!r}")
    for needle in needles_err:
        if needle not in r["stderr"]:
            failed.append(f"stderr lacks {needle!r}")
    return failed, rows


def _fault(name: str, steps: list[dict], rows: Optional[dict] = None, **extra: Any) -> dict:
    ok = all(s["ok"] for s in steps)
    out = {"name": name, "tried": True, "ok": ok, "wall_s": round(sum(s["wall_s"] or 0 for s in steps), 2),
           **extra, "steps": steps}
    if rows is not None:
        out["rows"] = rows
        out["rows_lost_or_duplicated"] = rows["rows_lost"] + rows["rows_duplicated"]
    return out


# ---- bad inputs ----------------------------------------------------------------------------------

def run_bad_input(name: str, make: Callable, needles: list[str], data_dir: Path, work: Path,
                  preflight, limit_s: float) -> dict:
    case_dir = work / "bad" / name
    case_dir.mkdir(parents=True, exist_ok=True)
    cfg = preflight._yaml(case_dir / "pf.yaml", make(data_dir))
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = Proc(_cli("train", "--config", str(cfg)), case_dir, "cli")
    rc = proc.wait(60)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    r = {"rc": rc, "wall_s": round(proc.wall, 2), "stdout": proc.stdout, "stderr": proc.stderr}
    failed = _named_refusal(r, needles, limit_s=limit_s, one_line=True)
    runs = [p for p in (data_dir / "runs", case_dir / "runs") if p.exists()]
    if runs:
        failed.append(f"run directory created: {[str(p) for p in runs]}")
        for p in runs:
            shutil.rmtree(p, ignore_errors=True)
    lines = r["stderr"].strip().splitlines()
    # cpu_s (the command's own CPU seconds) and the load average tell a slow command from a busy machine.
    out = {"name": name, "named_error": not failed, "rc": rc, "wall_s": r["wall_s"], "cpu_s": round(cpu_s, 2),
           "load_avg_1m": round(os.getloadavg()[0], 2), "needles": needles,
           "error_line": (lines[0] if len(lines) == 1 else _tail(r["stderr"], 800))[:1000]}
    if failed:
        out["failed_checks"] = failed
        out["stdout_tail"] = _tail(r["stdout"], 800)
    return out


# ---- faults --------------------------------------------------------------------------------------

def fault_same_name(work: Path, iterations: int) -> dict:
    root = work / "same"
    run_dir = root / "r"
    a = Proc(_cli(*_train_args(root, "r", iterations)), root, "first")
    lock = run_dir / "run.lock"
    deadline = time.time() + 120
    while time.time() < deadline and a.alive() and not lock.is_file():
        time.sleep(0.05)
    holder = {}
    try:
        holder = json.loads(lock.read_text())
    except (OSError, ValueError):
        pass
    steps = []
    if not holder:
        a.kill()
        r = {"rc": a.p.returncode, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
        return _fault("same-name-concurrent", [_step("first run holds the lock", r, ["no run.lock appeared"])])
    b = _run(_cli(*_train_args(root, "r", iterations)), root, "second", timeout=60)
    first_alive = a.alive()
    needles = ["is in use by another run", f"pid {a.pid}", f"host {socket.gethostname()}"]
    failed = _named_refusal(b, needles, limit_s=10.0)
    if not first_alive:
        failed.append("the first run was not running while the second was refused")
    steps.append(_step("second train, same run name", b, failed, holder_pid=a.pid))
    rc = a.wait(300)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed, rows = _completed(r, run_dir, iterations)
    if lock.exists():
        failed.append("run.lock left behind")
    steps.insert(0, _step("first run completes", r, failed))
    return _fault("same-name-concurrent", steps, rows)


def fault_kill_mid_training(work: Path, iterations: int) -> dict:
    root = work / "kill_mid"
    run_dir = root / "k"
    every = 4
    sets = (f"run.checkpoint_every={every}",)
    a = Proc(_cli(*_train_args(root, "k", iterations, *sets)), root, "first")
    deadline = time.time() + 240
    while time.time() < deadline and a.alive():
        n = len(_rows(run_dir)[0])
        if n >= 6 and n % every:  # between two checkpoints: rows after the last checkpoint
            break
        time.sleep(0.05)
    a.kill()
    killed_at = len(_rows(run_dir)[0])
    r = {"rc": a.p.returncode, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    steps = [_step("kill -9 the run", r, [] if 0 < killed_at < iterations else
                   [f"{killed_at} rows at the kill, wanted a kill mid-run"], rows_at_kill=killed_at,
                   expected_nonzero=True)]
    again = _run(_cli(*_train_args(root, "k", iterations, *sets)), root, "rerun", timeout=60)
    failed = _named_refusal(again, ["already holds a run", "--resume", "--overwrite"], limit_s=10.0)
    if "taking over the stale lock" not in again["stderr"]:
        failed.append("no 'taking over the stale lock' warning")
    steps.append(_step("plain re-run refused", again, failed))
    res = _run(_cli(*_train_args(root, "k", iterations, *sets), "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(res, run_dir, iterations, needles_out=("resumed from",))
    steps.append(_step("--resume", res, failed))
    return _fault("kill-9-mid-training", steps, rows, rows_at_kill=killed_at)


def fault_kill_in_checkpoint(work: Path, point: str, iterations: int) -> dict:
    root = work / f"kill_ckpt_{point}"
    run_dir = root / "c"
    kill_it = 4
    args = _train_args(root, "c", iterations, "run.checkpoint_every=1")
    if point == "external":
        a = Proc(_cli(*args), root, "first")
        tmp = run_dir / "checkpoint.tmp"
        deadline = time.time() + 240
        while time.time() < deadline and a.alive():
            if tmp.exists() and len(_rows(run_dir)[0]) >= kill_it - 1:
                break
            time.sleep(0.002)
        a.kill()
        r = {"rc": a.p.returncode, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    else:
        a = Proc([sys.executable, "-c", KILL_LAUNCHER, *args], root, "first",
                 env=_env(RELIABILITY_KILL_AT=f"{point}:{kill_it}"))
        rc = a.wait(240)
        r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    left = sorted(p.name for p in run_dir.glob("checkpoint*"))
    state = {"rows_at_kill": len(_rows(run_dir)[0]), "checkpoint_dirs_after_kill": left}
    failed = []
    if r["rc"] not in (-signal.SIGKILL, None) and point != "external":
        failed.append(f"exit code {r['rc']}, expected -9 (killed)")
    if "checkpoint.tmp" not in left:
        failed.append("checkpoint.tmp/ not left behind: the kill did not land inside a checkpoint write")
    steps = [_step(f"kill -9 in a checkpoint write ({point})", r, failed, **state)]
    res = _run(_cli(*args, "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(res, run_dir, iterations, needles_out=("resumed from",))
    if (run_dir / "checkpoint.tmp").exists():
        failed.append("checkpoint.tmp/ still there after the resumed run")
    steps.append(_step("--resume", res, failed))
    return _fault(f"kill-9-in-checkpoint-write:{point}", steps, rows, **state)


def _base_run(work: Path) -> Path:
    """A finished 3-iteration run with a checkpoint after every iteration (checkpoint/, checkpoint.1/)."""
    root = work / "ckpt_base"
    r = _run(_cli(*_train_args(root, "run", 3, "run.checkpoint_every=1")), root, "train")
    if r["rc"] != 0:
        raise RuntimeError(f"the base run for the checkpoint cases failed: {_tail(r['stdout'] + r['stderr'])}")
    return root / "run"


def fault_checkpoint_damage(work: Path, base: Path, kind: str, damage, rel: str, what: str) -> dict:
    root = work / f"ckpt_{kind.replace(' ', '_')}"
    run_dir = root / "run"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(base, run_dir)
    damage(run_dir / "checkpoint" / rel)
    steps = []
    pattern = re.compile(re.escape(rel) + " " + what)
    for tag, args in (("evaluate the checkpoint directory",
                       ("evaluate", "--checkpoint", str(run_dir / "checkpoint"), "--out", str(root / "ev1"))),
                      ("evaluate the run directory --which last",
                       ("evaluate", "--checkpoint", str(run_dir), "--which", "last", "--out", str(root / "ev2")))):
        r = _run(_cli(*args), root, tag.split()[-1].replace("-", ""), timeout=120)
        failed = _named_refusal(r, [rel], one_line=True)
        lines = _error_lines(r["stderr"])
        if lines and not pattern.search(lines[0]):
            failed.append(f"error line does not say {pattern.pattern!r}")
        if (root / args[-1]).exists() and any((root / args[-1]).iterdir()):
            failed.append("evaluation output written from a damaged checkpoint")
        steps.append(_step(tag, r, failed))
    res = _run(_cli(*_train_args(root, "run", 5, "run.checkpoint_every=1"), "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(res, run_dir, 5, needles_out=(f"resumed from {run_dir / 'checkpoint.1'} at iteration 2",),
                              needles_err=(rel, "falling back to the previous good checkpoint"))
    steps.append(_step("--resume (falls back to checkpoint.1)", res, failed))
    return _fault(f"checkpoint-{kind.replace(' ', '-')}", steps, rows)


def fault_all_checkpoints_damaged(work: Path, base: Path, weights: str, scribble) -> dict:
    root = work / "ckpt_all_damaged"
    run_dir = root / "run"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copytree(base, run_dir)
    scribble(run_dir / "checkpoint" / weights)
    (run_dir / "checkpoint.1" / "run_state.json").unlink()
    before = _rows(run_dir)[0]
    r = _run(_cli(*_train_args(root, "run", 5, "run.checkpoint_every=1"), "--resume", str(run_dir)), root, "resume")
    failed = _named_refusal(r, [str(run_dir / "checkpoint"), weights], limit_s=10.0)
    if "run_state.json is missing" not in r["stderr"]:
        failed.append("checkpoint.1's missing run_state.json not named")
    if _rows(run_dir)[0] != before:
        failed.append("metrics.jsonl changed")
    return _fault("checkpoint-all-damaged", [_step("--resume refused", r, failed)])


def _tree(path: Path) -> dict[str, bytes]:
    """Every file below ``path`` (relative name -> bytes)."""
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def fault_kill_in_evaluate(work: Path, base: Path) -> dict:
    """``evaluate`` SIGKILLed while it writes its directory (``<out>.tmp/`` exists): the previous
    evaluation stays byte for byte, and the next ``evaluate`` replaces the leftover and completes."""
    root = work / "kill_evaluate"
    shutil.rmtree(root, ignore_errors=True)
    out = root / "ev"
    args = _cli("evaluate", "--checkpoint", str(base), "--out", str(out))
    first = _run(args, root, "first", timeout=240)
    steps = [_step("evaluate", first, [] if first["rc"] == 0 and (out / "metrics.json").is_file()
                   else [f"exit code {first['rc']}: {_tail(first['stderr'])}"])]
    before = _tree(out)
    a = Proc(args, root, "killed")
    tmp = out.parent / (out.name + ".tmp")
    deadline = time.time() + 240
    while time.time() < deadline and a.alive() and not tmp.exists():
        time.sleep(0.002)
    time.sleep(0.2)  # inside the write
    landed = tmp.exists() and a.alive()
    a.kill()
    r = {"rc": a.p.returncode, "wall_s": round(a.wall or 0.0, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if landed else ["the kill did not land while <out>.tmp/ was written"]
    if _tree(out) != before:
        failed.append("the previous evaluation changed")
    steps.append(_step("kill -9 while the evaluation directory is written", r, failed))
    again = _run(args, root, "again", timeout=240)
    failed = [] if again["rc"] == 0 else [f"exit code {again['rc']}: {_tail(again['stderr'])}"]
    if tmp.exists():
        failed.append("<out>.tmp/ still there after the next evaluate")
    if not (out / "metrics.json").is_file():
        failed.append("no metrics.json after the next evaluate")
    steps.append(_step("evaluate again", again, failed))
    return _fault("kill-9-in-evaluate", steps)


def fault_evaluate_other_data(work: Path, base: Path) -> dict:
    """``evaluate --data FILE`` without ``--out`` on a run that has its own evaluation: the run's
    ``evaluation/`` stays byte for byte, the file's goes to ``evaluation_<stem>/``; a stale file planted
    there is gone after the next evaluation of the same file (the directory is replaced whole)."""
    root = work / "evaluate_other_data"
    shutil.rmtree(root, ignore_errors=True)
    run_dir = root / "run"
    shutil.copytree(base, run_dir)
    data = ROOT / "benchmarks" / "data" / "STOCKS_GOOGL.csv"
    own = _run(_cli("evaluate", "--checkpoint", str(run_dir)), root, "own", timeout=240)
    steps = [_step("evaluate (the run's own segments)", own, [] if own["rc"] == 0 else
                   [f"exit code {own['rc']}: {_tail(own['stderr'])}"])]
    before = _tree(run_dir / "evaluation")
    args = _cli("evaluate", "--checkpoint", str(run_dir), "--data", str(data))
    first = _run(args, root, "data", timeout=240)
    out = run_dir / "evaluation_STOCKS_GOOGL"
    failed = [] if first["rc"] == 0 else [f"exit code {first['rc']}: {_tail(first['stderr'])}"]
    if _tree(run_dir / "evaluation") != before:
        failed.append("the run's own evaluation/ changed")
    if not (out / "metrics.json").is_file():
        failed.append(f"no {out.name}/metrics.json")
    steps.append(_step("evaluate --data FILE (no --out)", first, failed))
    if out.is_dir():
        (out / "bars_test.csv").write_text("stale\n")
    again = _run(args, root, "again", timeout=240)
    failed = [] if again["rc"] == 0 else [f"exit code {again['rc']}: {_tail(again['stderr'])}"]
    if (out / "bars_test.csv").exists():
        failed.append("a stale file of an earlier evaluation survived")
    if _tree(run_dir / "evaluation") != before:
        failed.append("the run's own evaluation/ changed")
    steps.append(_step("the same file again (stale file planted)", again, failed))
    return _fault("evaluate-other-data-keeps-the-run's-evaluation", steps)


def fault_runner_kill(work: Path, iterations: int) -> dict:
    root = work / "runner_kill"
    run_dir = root / "r"
    a = Proc(_cli(*_train_args(root, "r", iterations, "algo.num_env_runners=1", "run.checkpoint_every=0")),
             root, "run")
    deadline = time.time() + 240
    while time.time() < deadline and a.alive() and len(_rows(run_dir)[0]) < 3:
        time.sleep(0.05)
    victims = [pid for pid in _session_pids(a.pid) if _cmdline(pid).startswith("ray::GPUEnvRunner")]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    at = len(_rows(run_dir)[0])
    rc = a.wait(300)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed, rows = _completed(r, run_dir, iterations)
    if not victims:
        failed.insert(0, "no ray::GPUEnvRunner process found to kill")
    path = run_dir / "metrics.jsonl"
    rows_all = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    lifetime = [row.get("env_runners/num_env_steps_sampled_lifetime") for row in rows_all]
    empty = [row["iteration"] for i, row in enumerate(rows_all)  # no env steps sampled in that iteration
             if i and lifetime[i] is not None and lifetime[i] == lifetime[i - 1]]
    text = r["stdout"] + r["stderr"]
    step = _step("kill -9 the remote env runner, run completes", r, failed, killed_pids=len(victims),
                 rows_at_kill=at, iterations_without_samples=empty,
                 runner_restarted="back into service" in text)
    return _fault("remote-env-runner-kill-9", [step], rows)


def fault_data_error_remote_runners(work: Path, data_dir: Path, preflight) -> dict:
    root = work / "data_error"
    root.mkdir(parents=True, exist_ok=True)
    make, needles = {c[0]: (c[1], c[2]) for c in preflight.CASES}["nan-close"]
    cfg = make(data_dir)
    cfg["run"].update(dir=str(root / "runs"), num_cpus=2, evaluate=False, iterations=2)
    cfg["algo"].update(num_env_runners=2)
    path = preflight._yaml(root / "pf.yaml", cfg)
    steps = []
    r = _run([sys.executable, "-c", API_TRAIN, str(path)], root, "api", timeout=300)
    result = {}
    for line in r["stdout"].splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    message = result.get("message") or ""
    first = next((x for x in message.splitlines() if x.strip()), "")
    failed = []
    if not result.get("type"):
        failed.append("training did not fail")
    elif result["type"] in ("IndexError", "KeyError", "TypeError", "AttributeError", "AssertionError"):
        failed.append(f"raised {result['type']}, not an error naming the data")
    missing = [n for n in needles if n not in first]
    if missing:
        failed.append(f"the exception's first line lacks {missing}")
    steps.append(_step("train() through the Python API, 2 remote env runners", r, failed,
                       exception=f"{result.get('module')}.{result.get('type')}" if result.get("type") else None,
                       exception_first_line=first[:1000], needles=needles,
                       root_cause_in_output=all(n in r["stderr"] for n in needles[1:])))
    c = _run(_cli("train", "--config", str(path)), root, "cli", timeout=60)
    steps.append(_step("the same config through the CLI", c, _named_refusal(c, needles, limit_s=10.0, one_line=True)))
    return _fault("data-error-2-remote-runners", steps)


# ---- second round: ownership of files, exit codes, guard halts, resume against the run's settings --

def _files(root: Path) -> set[str]:
    """Every file under ``root`` (relative paths)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def _wait_rows(proc: "Proc", run_dir: Path, n: int, timeout: float = 240) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.alive() and len(_rows(run_dir)[0]) < n:
        time.sleep(0.1)
    return len(_rows(run_dir)[0])


def _exit_step(name: str, r: dict, rc: int, needles: list[str]) -> dict:
    """A run that must end with exit ``rc`` and (when ``needles``) one error line holding them."""
    if rc != 0:
        r["expected_nonzero"] = True
    failed = [] if r["rc"] == rc else [f"exit code {r['rc']}, expected {rc}"]
    if needles:
        lines = _error_lines(r["stderr"])
        if len(lines) != 1:
            failed.append(f"{len(lines)} 'error: ' lines on stderr, expected 1")
        missing = [x for x in needles if not lines or x not in lines[0]]
        if missing:
            failed.append(f"error line lacks {missing}")
        if "Traceback" in r["stderr"]:
            failed.append("traceback on stderr")
    return _step(name, r, failed)


def fault_overwrite_keeps_other_files(work: Path, iterations: int) -> dict:
    """``--overwrite`` of a finished run removes only what the run wrote: a folder named like a checkpoint
    (``checkpoint_experiment/``), a note in the run directory and a sibling run stay byte for byte."""
    root = work / "overwrite"
    first = _run(_cli(*_train_args(root, "o", iterations)), root, "first")
    steps = [_step("first run", first, [] if first["rc"] == 0 else [f"exit code {first['rc']}"])]
    keep = {root / "o" / "checkpoint_experiment" / "w.txt": "mine", root / "o" / "notes.txt": "mine",
            root / "other" / "checkpoint" / "rllib_checkpoint.json": "{}"}
    for path, text in keep.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    others = _files(root / "other")
    again = _run(_cli(*_train_args(root, "o", iterations), "--overwrite"), root, "overwrite")
    failed, rows = _completed(again, root / "o", iterations, needles_out=("overwrite: removed",))
    lost = [str(p) for p, text in keep.items() if not p.is_file() or p.read_text() != text]
    lost += sorted(others - _files(root / "other"))
    if lost:
        failed.append(f"deleted outside the run: {lost}")
    steps.append(_step("--overwrite", again, failed))
    return _fault("overwrite-deletes-only-the-run's-files", steps, rows, files_deleted_outside_run=len(lost))


def fault_guard_halt(work: Path) -> dict:
    """``algo.lr: 1e10`` diverges: one error line naming the check, max |Q|, the threshold and the
    iteration; exit 3; no checkpoint written after the halt."""
    root = work / "halt"
    r = _run(_cli(*_train_args(root, "h", 6, "algo.lr=1e10", "run.checkpoint_every=1")), root, "train")
    step = _exit_step("diverging run halted", r, 3, ["training halted by the divergence check", "max |Q| =",
                                                     "above the threshold", "; iteration "])
    return _fault("guard-halt-lr-1e10", [step])


def fault_sigterm(work: Path, iterations: int) -> dict:
    """SIGTERM mid-run: the checkpoint is written and the run exits 143; ``--resume`` completes 1..N once.
    Then ``--resume`` with another ``model.hidden`` is refused before anything is written."""
    root = work / "sigterm"
    run_dir = root / "t"
    a = Proc(_cli(*_train_args(root, "t", iterations, "run.checkpoint_every=0")), root, "first")
    at = _wait_rows(a, run_dir, 3)
    a.p.send_signal(signal.SIGTERM)
    rc = a.wait(120)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 143 else [f"exit code {rc}, expected 143"]
    if not (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file():
        failed.append("no checkpoint after SIGTERM")
    steps = [_step("SIGTERM", r, failed, rows_at_signal=at, expected_nonzero=True)]
    res = _run(_cli(*_train_args(root, "t", iterations), "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(res, run_dir, iterations, needles_out=("resumed from",))
    steps.append(_step("--resume", res, failed))
    before = (run_dir / "settings.yaml").read_text()
    changed = _run(_cli(*_train_args(root, "t", iterations, "model.hidden=[8]"), "--resume", str(run_dir)),
                   root, "resume_changed", timeout=60)
    failed = _named_refusal(changed, ["--resume", "model.hidden: [32, 32] in the run, [8] now"], limit_s=10.0)
    if (run_dir / "settings.yaml").read_text() != before:
        failed.append("settings.yaml rewritten by the refused resume")
    steps.append(_step("--resume with another model.hidden", changed, failed))
    return _fault("sigterm-exit-143-then-resume", steps, rows)


def fault_walkforward_resume(work: Path) -> dict:
    """``evaluate --walk-forward 2`` SIGTERMed while fold 1 trains (fold 0 finished): exit 143; then
    ``--resume`` reads fold 0 back (its files untouched), continues fold 1 and writes walk_forward.json."""
    import yaml

    root = work / "walkforward_resume"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    raw = yaml.safe_load(SMOKE.read_text())
    raw["run"].update({"dir": str(root), "name": "wf", "checkpoint_every": 1, "iterations": 40, "evaluate": True})
    raw["data"] = {"source": "csv", "paths": [str(ROOT / "benchmarks" / "data" / "STOCKS_GOOGL.csv")],
                   "features": {"warmup": 32, "median_window": 126}, "split": [0.7, 0.15, 0.15],
                   "periods_per_year": 252}
    config = root / "wf.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = _cli("evaluate", "--walk-forward", "2", "--config", str(config))
    a = Proc(args, root, "first")
    fold0, fold1 = root / "wf" / "fold0", root / "wf" / "fold1"
    at = _wait_rows(a, fold1, 2)
    files0 = {str(f.relative_to(fold0)): f.stat().st_mtime_ns for f in fold0.rglob("*") if f.is_file()}
    a.p.send_signal(signal.SIGTERM)
    rc = a.wait(180)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 143 else [f"exit code {rc}, expected 143"]
    if not (fold0 / "evaluation" / "metrics.json").is_file():
        failed.append("fold 0 had not finished when fold 1 was interrupted")
    if not (fold1 / "checkpoint" / "rllib_checkpoint.json").is_file():
        failed.append("no checkpoint of fold 1 after SIGTERM")
    steps = [_step("SIGTERM during fold 1", r, failed, rows_at_signal=at, expected_nonzero=True)]
    res = _run([*args, "--resume"], root, "resume", timeout=600)
    failed = [] if res["rc"] == 0 else [f"exit code {res['rc']}: {_tail(res['stderr'])}"]
    after0 = {str(f.relative_to(fold0)): f.stat().st_mtime_ns for f in fold0.rglob("*") if f.is_file()}
    if after0 != files0:
        failed.append("fold 0 was trained or evaluated again")
    if "reused" not in res["stdout"] or "resumed" not in res["stdout"]:
        failed.append("the resume line does not say fold 0 reused and fold 1 resumed")
    if not (root / "wf" / "walk_forward.json").is_file():
        failed.append("no walk_forward.json")
    rows = _row_check(fold1, 40)
    if rows["rows_lost"] or rows["rows_duplicated"]:
        failed.append(f"fold 1 rows: {rows}")
    steps.append(_step("--resume", res, failed))
    return _fault("walk-forward-sigterm-then-resume", steps, rows)


def fault_run_dir_deleted(work: Path) -> dict:
    """The run directory deleted during training: the run stops at its next write with one error line
    and exit 2 (not exit 0 with every output gone)."""
    root = work / "deleted"
    run_dir = root / "d"
    a = Proc(_cli(*_train_args(root, "d", 100000, "run.checkpoint_every=0")), root, "train")
    _wait_rows(a, run_dir, 2)
    shutil.rmtree(run_dir, ignore_errors=True)
    rc = a.wait(120)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    step = _exit_step("next write", r, 2, ["disappeared during the run"])
    if "intact" in r["stderr"]:  # nothing of the run is intact once its directory is gone
        step["ok"] = False
        step.setdefault("failed_checks", []).append("says a checkpoint is intact")
    return _fault("run-dir-deleted-mid-training", [step])


def fault_seeds_driver_kill(work: Path) -> dict:
    """kill -9 of a ``--seeds`` driver alone (not its session): its child gets SIGTERM, writes its
    checkpoint and exits; ``seeds.json`` says the sweep is partial."""
    root = work / "seeds"
    seed_dir = root / "s" / "seed0"
    a = Proc(_cli(*_train_args(root, "s", 100000, "run.checkpoint_every=0"), "--seeds", "0"), root, "driver")
    _wait_rows(a, seed_dir, 2)
    os.kill(a.pid, signal.SIGKILL)
    a.p.wait()
    deadline = time.time() + 120
    while time.time() < deadline and not (seed_dir / "checkpoint").is_dir():
        time.sleep(0.2)

    def training() -> list[int]:
        return [p for p in _session_pids(a.pid) if "rl_zerosync" in _cmdline(p) and "train" in _cmdline(p)]

    deadline = time.time() + 120  # the child's exit after its checkpoint (Ray's shutdown included)
    while time.time() < deadline and training():
        time.sleep(0.5)
    log = (seed_dir / "train.log").read_text(errors="replace") if (seed_dir / "train.log").is_file() else ""
    failed = []
    if "interrupt (SIGTERM)" not in log or not (seed_dir / "checkpoint" / "rllib_checkpoint.json").is_file():
        failed.append("the child did not stop with a checkpoint")
    alive = training()
    if alive:
        failed.append(f"child processes still training: {alive}")
    try:
        partial = json.loads((root / "s" / "seeds.json").read_text()).get("partial") is True
    except (OSError, ValueError):
        partial = False
    if not partial:
        failed.append("seeds.json not marked partial")
    a.wait(1)
    r = {"rc": -9, "wall_s": round(a.wall or 0, 2), "stdout": a.stdout + log[-1500:], "stderr": a.stderr}
    return _fault("seeds-driver-kill-9", [_step("child stops with its driver", r, failed)])


# ---- third round: data files changed under their path, a full disk, a missing best checkpoint -------

def _dated_csv(path: Path, n: int) -> Path:
    """``n`` dated business-day bars (Date, Close, High, Low) of a seeded random walk."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"Date": pd.bdate_range("2010-01-04", periods=n).strftime("%Y-%m-%d"), "Close": close,
                  "High": close * 1.004, "Low": close * 0.996}).to_csv(path, index=False)
    return path


def _report(out: Path) -> dict:
    try:
        return json.loads((out / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def fault_data_file_changed(work: Path) -> dict:
    """A run's CSV loses its last 300 bars after training (module doc): the run's own segments are
    refused by name, ``--resume`` too, and ``--data`` counts the bars inside the recorded training period."""
    import yaml

    root = work / "data_changed"
    shutil.rmtree(root, ignore_errors=True)
    csv = _dated_csv(root / "bars.csv", 1200)
    raw = yaml.safe_load(SMOKE.read_text())
    raw["run"].update({"dir": str(root), "name": "d", "iterations": 3, "checkpoint_every": 1, "evaluate": False})
    raw["data"] = {"source": "csv", "paths": [str(csv)], "periods_per_year": 252,
                   "columns": {"timestamp": "Date", "close": "Close", "high": "High", "low": "Low"}}
    config = root / "d.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = root / "d"
    first = _run(_cli("train", "--config", str(config)), root, "train")
    steps = [_step("train on 1,200 bars", first, [] if first["rc"] == 0 else
                   [f"exit code {first['rc']}: {_tail(first['stderr'])}"])]
    ev0 = _run(_cli("evaluate", "--checkpoint", str(run_dir), "--out", str(root / "ev0")), root, "ev0", timeout=240)
    overlap0 = _report(root / "ev0").get("overlap", {})
    failed = [] if ev0["rc"] == 0 else [f"exit code {ev0['rc']}: {_tail(ev0['stderr'])}"]
    if overlap0.get("overlapping_bars") != 0:
        failed.append(f"overlap of the run's own test segment: {overlap0}")
    steps.append(_step("evaluate (unchanged file)", ev0, failed))
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-300]))  # the last 300 bars removed
    needles = [f"data file {csv} changed since the run recorded it"]
    ev1 = _run(_cli("evaluate", "--checkpoint", str(run_dir), "--out", str(root / "ev1")), root, "ev1", timeout=240)
    failed = _named_refusal(ev1, needles + ["--data FILE"], limit_s=LIMIT_S, one_line=True)
    if (root / "ev1").exists():
        failed.append("an evaluation was written from the changed file")
    steps.append(_step("evaluate of the run's own segments (changed file)", ev1, failed))
    before = _tree(run_dir)
    res = _run(_cli("train", "--config", str(config), "--set", "run.iterations=5", "--resume", str(run_dir)),
               root, "resume", timeout=120)
    failed = _named_refusal(res, needles + ["--resume"], limit_s=LIMIT_S)
    if _tree(run_dir) != before:
        failed.append("the run directory changed")
    steps.append(_step("train --resume (changed file)", res, failed))
    ev2 = _run(_cli("evaluate", "--checkpoint", str(run_dir), "--data", str(csv), "--out", str(root / "ev2")),
               root, "ev2", timeout=240)
    overlap = _report(root / "ev2").get("overlap", {})
    failed = [] if ev2["rc"] == 0 else [f"exit code {ev2['rc']}: {_tail(ev2['stderr'])}"]
    if not overlap.get("overlapping_bars") or overlap.get("training_period_source") != "recorded by the run":
        failed.append(f"overlap not counted against the recorded training period: {overlap}")
    steps.append(_step("evaluate --data FILE (the shortened file)", ev2, failed,
                       overlapping_bars=overlap.get("overlapping_bars"), evaluated_bars=overlap.get("evaluated_bars")))
    return _fault("data-file-changed-under-its-path", steps)


def fault_export_full_disk(work: Path, base: Path) -> dict:
    """``export`` under a 2 KB file size limit: exit 4, one line naming the ``.tmp``, nothing left."""
    root = work / "export_full"
    shutil.rmtree(root, ignore_errors=True)
    out = root / "model" / "p.pt"
    out.parent.mkdir(parents=True)
    r = _run([sys.executable, "-c", FSIZE_LAUNCHER, "2048", "export", "--checkpoint", str(base), "--which", "last",
              "--out", str(out)], root, "export", timeout=240)
    step = _exit_step("export with a 2 KB file size limit", r, 4, ["write failed", "export: cannot write", "p.pt.tmp"])
    left = sorted(p.name for p in out.parent.iterdir())
    if left:
        step["ok"] = False
        step.setdefault("failed_checks", []).append(f"left behind: {left}")
    return _fault("export-full-disk", [step])


def fault_evaluate_without_best(work: Path, base: Path) -> dict:
    """A run without ``checkpoint_best/``: ``--which best`` (the default) is an error for evaluate and
    export, never the last checkpoint silently; ``--which last`` evaluates."""
    root = work / "no_best"
    shutil.rmtree(root, ignore_errors=True)
    run_dir = root / "run"
    shutil.copytree(base, run_dir, ignore=shutil.ignore_patterns("checkpoint_best"))
    steps = []
    needles = ["no checkpoint_best/", "--which last"]
    for tag, args, out in (("evaluate", ("evaluate", "--checkpoint", str(run_dir), "--out", str(root / "ev")), root / "ev"),
                           ("export", ("export", "--checkpoint", str(run_dir), "--out", str(root / "p.pt")),
                            root / "p.pt")):
        r = _run(_cli(*args), root, tag, timeout=120)
        failed = _named_refusal(r, needles, limit_s=LIMIT_S, one_line=True)
        if out.exists():
            failed.append(f"{out.name} written from another checkpoint")
        steps.append(_step(f"{tag} --which best", r, failed))
    last = _run(_cli("evaluate", "--checkpoint", str(run_dir), "--which", "last", "--out", str(root / "ev_last")),
                root, "last", timeout=240)
    failed = [] if last["rc"] == 0 and (root / "ev_last" / "metrics.json").is_file() else [
        f"exit code {last['rc']}: {_tail(last['stderr'])}"]
    steps.append(_step("evaluate --which last", last, failed))
    return _fault("evaluate-best-without-checkpoint_best", steps)


# ---- fourth round: one writer per evaluation, damaged metrics rows, stops, the sweep's resume -------

# The command line with the end-of-run evaluation interrupted by SIGTERM as it starts.
SIGTERM_IN_EVALUATION = r'''
import os, signal, sys, time
import rl_zerosync.evaluation.evaluate as E
from rl_zerosync.cli import main
real = E.evaluate_checkpoint
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the project's handler raises here
    return real(*args, **kwargs)
E.evaluate_checkpoint = interrupted
sys.exit(main(sys.argv[1:]))
'''


def _leftovers(out: Path) -> list[str]:
    """``<out>.tmp`` / ``.old`` / ``.lock`` left beside an evaluation directory."""
    return [p.name for p in (out.with_name(out.name + x) for x in (".tmp", ".old", ".lock")) if p.exists()]


def fault_concurrent_evaluations(work: Path, base: Path) -> dict:
    """Two ``evaluate --out DIR`` of one run at once: both complete, or the one that meets the other
    writing is refused by name (exit 2, the holder's pid); the directory ends whole, nothing left beside it."""
    root = work / "concurrent_evaluate"
    shutil.rmtree(root, ignore_errors=True)
    out = root / "ev"
    args = _cli("evaluate", "--checkpoint", str(base), "--which", "last", "--out", str(out))
    a = Proc(args, root, "first")
    lock = out.with_name(out.name + ".lock")
    deadline = time.time() + 240
    while time.time() < deadline and a.alive() and not lock.exists():
        time.sleep(0.01)
    b = _run(args, root, "second", timeout=240)
    rc = a.wait(240)
    first = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 0 else [f"the first evaluation: exit code {rc}: {_tail(a.stderr)}"]
    refused = b["rc"] == 2
    if refused:
        failed += _named_refusal(b, [f"{out}: another evaluation (pid {a.pid}) is writing this directory now",
                                     "--out DIR"])
    elif b["rc"] != 0:
        failed.append(f"the second evaluation: exit code {b['rc']}, expected 0 or a named refusal (2)")
    if "No such file" in b["stderr"] + a.stderr:
        failed.append("a raw 'No such file' error")
    if not (out / "metrics.json").is_file():
        failed.append("no metrics.json in the evaluation directory")
    if _leftovers(out):
        failed.append(f"left beside it: {_leftovers(out)}")
    steps = [_step("two evaluations into one --out", first, failed, second_rc=b["rc"],
                   second_refused_by_name=refused, second_error_line=(_error_lines(b["stderr"]) or [""])[0][:500])]
    return _fault("concurrent-evaluations-one-out", steps)


def fault_evaluation_of_another_checkpoint(work: Path, base: Path) -> dict:
    """``evaluate --which last`` then ``--which best`` into one ``--out``: the second replaces the first
    with a warning naming both checkpoints (not silently)."""
    root = work / "replace_evaluate"
    shutil.rmtree(root, ignore_errors=True)
    out = root / "ev"
    steps = []
    for which in ("last", "best"):
        r = _run(_cli("evaluate", "--checkpoint", str(base), "--which", which, "--out", str(out)), root, which,
                 timeout=240)
        failed = [] if r["rc"] == 0 else [f"exit code {r['rc']}: {_tail(r['stderr'])}"]
        warned = "replacing the evaluation of another checkpoint" in r["stderr"]
        if which == "best" and not (warned and "checkpoint_best" in r["stderr"]):
            failed.append("no warning naming the evaluation of another checkpoint being replaced")
        if which == "last" and warned:
            failed.append("a warning on a new directory")
        steps.append(_step(f"evaluate --which {which}", r, failed))
    return _fault("evaluation-of-another-checkpoint-replaced-with-a-warning", steps)


def fault_metrics_row_damaged(work: Path, base: Path, where: str) -> dict:
    """A damaged ``metrics.jsonl`` row at a resume: ``middle`` (line 2, before the checkpoint) is
    refused naming the line and the iteration, before Ray, nothing changed; ``torn-end`` (a torn last
    line after the checkpoint's row) is dropped with a warning naming it and the run completes 1..N."""
    root = work / f"metrics_{where}"
    shutil.rmtree(root, ignore_errors=True)
    run_dir = root / "run"
    shutil.copytree(base, run_dir)
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    args = _train_args(root, "run", 5, "run.checkpoint_every=1")
    if where == "middle":
        lines[1] = lines[1][: len(lines[1]) // 2] + "\n"
        path.write_text("".join(lines))
        before = path.read_text()
        r = _run(_cli(*args, "--resume", str(run_dir)), root, "resume", timeout=120)
        failed = _named_refusal(r, [f"{path}, line 2: a damaged row", "would leave iteration 2 without a row"],
                                limit_s=LIMIT_S)
        if path.read_text() != before:
            failed.append("metrics.jsonl changed")
        return _fault("metrics-row-damaged-before-the-checkpoint", [_step("--resume refused", r, failed,
                                                                         expected_nonzero=True)])
    path.write_text("".join(lines) + '{"iteration": 4, "trunc')
    r = _run(_cli(*args, "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(r, run_dir, 5, needles_out=("resumed from",),
                              needles_err=("dropped 1 damaged line(s) (line 4",))
    return _fault("metrics-row-torn-after-the-checkpoint", [_step("--resume", r, failed)], rows)


def fault_sighup(work: Path, iterations: int) -> dict:
    """SIGHUP (a closed terminal) mid-run: the checkpoint is written, the lock released, exit 129;
    ``--resume`` completes 1..N once."""
    root = work / "sighup"
    run_dir = root / "h"
    a = Proc(_cli(*_train_args(root, "h", iterations, "run.checkpoint_every=0")), root, "first")
    at = _wait_rows(a, run_dir, 2)
    a.p.send_signal(signal.SIGHUP)
    rc = a.wait(120)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 128 + signal.SIGHUP else [f"exit code {rc}, expected 129"]
    if not (run_dir / "checkpoint" / "rllib_checkpoint.json").is_file():
        failed.append("no checkpoint after SIGHUP")
    if (run_dir / "run.lock").exists():
        failed.append("run.lock left behind")
    steps = [_step("SIGHUP", r, failed, rows_at_signal=at, expected_nonzero=True)]
    res = _run(_cli(*_train_args(root, "h", iterations), "--resume", str(run_dir)), root, "resume")
    failed, rows = _completed(res, run_dir, iterations, needles_out=("resumed from",))
    steps.append(_step("--resume", res, failed))
    return _fault("sighup-exit-129-then-resume", steps, rows)


def fault_sigterm_in_evaluation(work: Path) -> dict:
    """SIGTERM as the end-of-run evaluation starts: one line, exit 143, the checkpoint kept, no half
    evaluation, the lock released; ``evaluate`` of the run then writes it."""
    root = work / "sigterm_evaluation"
    run_dir = root / "e"
    args = _train_args(root, "e", 2)
    args[args.index("run.evaluate=false")] = "run.evaluate=true"
    r = _run([sys.executable, "-c", SIGTERM_IN_EVALUATION, *args], root, "train")
    step = _exit_step("SIGTERM in the end-of-run evaluation", r, 143, [])
    text = r["stderr"]
    for needle in ("interrupt (SIGTERM) during the end-of-run evaluation", f"evaluate --checkpoint {run_dir}"):
        if needle not in text:
            step.setdefault("failed_checks", []).append(f"stderr lacks {needle!r}")
    if "Traceback" in text:
        step.setdefault("failed_checks", []).append("traceback on stderr")
    if (run_dir / "evaluation").exists() or (run_dir / "evaluation.tmp").exists() or (run_dir / "run.lock").exists():
        step.setdefault("failed_checks", []).append("an evaluation, its .tmp or run.lock left")
    step["ok"] = not step.get("failed_checks")
    step["expected_nonzero"] = True
    ev = _run(_cli("evaluate", "--checkpoint", str(run_dir)), root, "evaluate", timeout=240)
    failed = [] if ev["rc"] == 0 and (run_dir / "evaluation" / "metrics.json").is_file() else [
        f"exit code {ev['rc']}: {_tail(ev['stderr'])}"]
    return _fault("sigterm-in-end-of-run-evaluation", [step, _step("evaluate afterwards", ev, failed)])


def fault_lock_deleted(work: Path, iterations: int) -> dict:
    """``run.lock`` deleted during training: the run stops at its next write (exit 2) saying the files
    stay (they do), and ``--resume`` completes 1..N once."""
    root = work / "lock_deleted"
    run_dir = root / "l"
    a = Proc(_cli(*_train_args(root, "l", iterations, "run.checkpoint_every=1")), root, "train")
    _wait_rows(a, run_dir, 2)
    (run_dir / "run.lock").unlink(missing_ok=True)
    rc = a.wait(120)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    step = _exit_step("next write", r, 2, ["run.lock was deleted during the run", "the files written so far stay"])
    step["expected_nonzero"] = True
    if "are gone" in r["stderr"]:
        step["ok"] = False
        step.setdefault("failed_checks", []).append("says the files are gone")
    res = _run(_cli(*_train_args(root, "l", iterations, "run.checkpoint_every=1"), "--resume", str(run_dir)),
               root, "resume")
    failed, rows = _completed(res, run_dir, iterations, needles_out=("resumed from",))
    return _fault("run-lock-deleted-mid-training", [step, _step("--resume", res, failed)], rows)


def fault_seeds_resume(work: Path, iterations: int) -> dict:
    """``--seeds 0,1 --processes`` SIGTERMed while seed 1 trains (seed 0 finished): exit 143, seeds.json
    partial; ``--resume <sweep>`` reads seed 0 back (untouched), resumes seed 1 and completes seeds.json."""
    root = work / "seeds_resume"
    parent = root / "s"
    sets = ("run.checkpoint_every=1", "run.evaluate=true")
    a = Proc(_cli(*_train_args(root, "s", iterations, *sets), "--seeds", "0,1", "--processes"), root, "driver")
    deadline = time.time() + 400
    while time.time() < deadline and a.alive() and not (
            (parent / "seed0" / "evaluation" / "metrics.json").is_file()
            and (parent / "seed1" / "checkpoint").is_dir()):
        time.sleep(0.2)
    a.p.send_signal(signal.SIGTERM)
    rc = a.wait(300)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 143 else [f"exit code {rc}, expected 143"]
    try:
        partial = json.loads((parent / "seeds.json").read_text()).get("partial") is True
    except (OSError, ValueError):
        partial = False
    if not partial:
        failed.append("seeds.json not marked partial")
    steps = [_step("SIGTERM while seed 1 trains", r, failed, expected_nonzero=True,
                   seed1_rows_at_signal=len(_rows(parent / "seed1")[0]))]
    seed0 = _tree(parent / "seed0") if (parent / "seed0").is_dir() else {}
    res = _run(_cli(*_train_args(root, "s", iterations, *sets), "--seeds", "0,1", "--resume", str(parent)),
               root, "resume", timeout=600)
    failed, rows = _completed(res, parent / "seed1", iterations,
                              needles_out=("seed 0: reused", "seed 1: resumed"))
    after = {k: v for k, v in _tree(parent / "seed0").items() if k != "train.log"}
    if {k: v for k, v in seed0.items() if k != "train.log"} != after:
        failed.append("seed 0's run changed (retrained?)")
    try:
        report = json.loads((parent / "seeds.json").read_text())
    except (OSError, ValueError):
        report = {}
    if report.get("partial") is not False or sorted(report.get("per_seed", {})) != ["0", "1"]:
        failed.append(f"seeds.json not complete: partial={report.get('partial')}, seeds {sorted(report.get('per_seed', {}))}")
    steps.append(_step("--resume of the sweep", res, failed))
    return _fault("seeds-sweep-sigterm-then-resume", steps, rows)


def _json_file(path: Path) -> dict:
    """A JSON file's object, {} when it is missing or unreadable."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def fault_population_resume(work: Path, iterations: int) -> dict:
    """A population of 2 members (``configs/smoke.yaml`` with ``population.seeds [0, 1]``) SIGTERMed
    mid-run: every member's checkpoint, exit 143, ``population.json`` partial; ``--resume <population>``
    completes with each member's rows 1..N once in the one table and ``population.json`` complete;
    ``--resume`` again is a no-op saying so (the table unchanged); ``--resume`` with another
    ``model.hidden`` or ``population.seeds`` is refused before Ray, naming the key."""
    import yaml

    root = work / "population_resume"
    root.mkdir(parents=True, exist_ok=True)
    parent = root / "p"
    config = root / "pop.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(SMOKE.read_text()), "population": {"seeds": [0, 1]}}))

    def args(*sets: str) -> list[str]:
        return ["train", "--config", str(config), *[x for s in (f"run.dir={root}", "run.name=p",
                f"run.iterations={iterations}", "run.evaluate=false", "run.checkpoint_every=0", *sets)
                for x in ("--set", s)]]

    a = Proc(_cli(*args()), root, "first")
    deadline = time.time() + 300
    while time.time() < deadline and a.alive() and len(_rows(parent, 1)[0]) < 3:
        time.sleep(0.1)
    at = len(_rows(parent, 1)[0])
    a.p.send_signal(signal.SIGTERM)
    rc = a.wait(180)
    r = {"rc": rc, "wall_s": round(a.wall, 2), "stdout": a.stdout, "stderr": a.stderr}
    failed = [] if rc == 143 else [f"exit code {rc}, expected 143"]
    failed += [f"member{k}: no checkpoint after SIGTERM" for k in range(2)
               if not (parent / f"member{k}" / "checkpoint" / "rllib_checkpoint.json").is_file()]
    if _json_file(parent / "population.json").get("partial") is not True:
        failed.append("population.json not marked partial")
    steps = [_step("SIGTERM", r, failed, rows_at_signal=at, expected_nonzero=True)]
    res = _run(_cli(*args(), "--resume", str(parent)), root, "resume", timeout=600)
    failed = [] if res["rc"] == 0 else [f"exit code {res['rc']}, expected 0"]
    failed += [] if "resume: the population continues from iteration" in res["stdout"] else ["no resume line"]
    checks = [_row_check(parent, iterations, member=k) for k in range(2)]
    rows = {key: sum(c[key] for c in checks) for key in ("rows", "expected_rows", "rows_lost", "rows_duplicated")}
    rows["in_order"] = all(c["in_order"] for c in checks)
    if rows["rows_lost"] or rows["rows_duplicated"] or not rows["in_order"]:
        failed.append(f"metrics rows by member {[_rows(parent, k)[0] for k in range(2)]}, expected 1..{iterations}")
    if _json_file(parent / "population.json").get("partial") is not False:
        failed.append("population.json not complete after the resume")
    steps.append(_step("--resume", res, failed))
    table = (parent / "metrics.jsonl").read_bytes()
    again = _run(_cli(*args(), "--resume", str(parent)), root, "resume_again", timeout=120)
    failed = [] if again["rc"] == 0 and "nothing to resume" in again["stdout"] else [
        f"exit code {again['rc']}, or no 'nothing to resume' line"]
    if (parent / "metrics.jsonl").read_bytes() != table:
        failed.append("metrics.jsonl changed by the resume of a finished population")
    steps.append(_step("--resume of the finished population", again, failed))
    for name, change, needle in (("model.hidden", "model.hidden=[8]", "model.hidden: [32, 32] in the run, [8] now"),
                                 ("population.seeds", "population.seeds=[0,2]", "population.seeds: [0, 1] in the run")):
        changed = _run(_cli(*args(change), "--resume", str(parent)), root, f"resume_{name}", timeout=60)
        steps.append(_step(f"--resume with another {name}", changed,
                           _named_refusal(changed, ["--resume", needle], limit_s=LIMIT_S)))
    return _fault("population-sigterm-then-resume", steps, rows)


def fault_evaluate_full_disk(work: Path, base: Path) -> dict:
    """``evaluate`` under a 20 KB file size limit (a real failed write): exit 4, one line naming the
    evaluation's ``.tmp`` path; nothing left (no directory, ``.tmp`` or lock)."""
    root = work / "evaluate_full"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    out = root / "ev"
    r = _run([sys.executable, "-c", FSIZE_LAUNCHER, "20000", "evaluate", "--checkpoint", str(base), "--which",
              "last", "--out", str(out)], root, "evaluate", timeout=240)
    step = _exit_step("evaluate with a 20 KB file size limit", r, 4,
                      ["write failed", "cannot write the evaluation into", "ev.tmp"])
    step["expected_nonzero"] = True
    left = sorted(p.name for p in root.iterdir() if p.name in (out.name, *(out.name + x for x in (".tmp", ".old", ".lock"))))
    if left:
        step["ok"] = False
        step.setdefault("failed_checks", []).append(f"left behind: {left}")
    return _fault("evaluate-full-disk", [step])


def fault_rllib_logs(work: Path) -> dict:
    """A run with ``HOME`` pointed at an empty folder: RLlib's log folder is ``<run>/rllib/`` and nothing
    is written under ``$HOME/ray_results`` (``files_changed_outside_run``)."""
    root = work / "rllib_logs"
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    run_dir = root / "r"
    r = _run(_cli(*_train_args(root, "r", 2)), root, "train", env=_env(HOME=str(home)))
    failed, rows = _completed(r, run_dir, 2)
    outside = sorted(str(p.relative_to(home)) for p in home.rglob("*") if "ray_results" in p.parts)
    if outside:
        failed.append(f"written under $HOME/ray_results: {outside[:5]}")
    if not (run_dir / "rllib").is_dir():
        failed.append("no rllib/ in the run directory")
    return _fault("rllib-log-folder-inside-the-run", [_step("train", r, failed)], rows,
                  files_changed_outside_run=len(outside))


# Bad inputs of the commands after training (a finished run's checkpoints): (name, argv from the base run
# and a scratch folder, needles of the error line).
COMMAND_CASES = [
    ("export-out-a-directory", lambda b, d: ["export", "--checkpoint", str(b), "--which", "last", "--out", str(d)],
     ["export --out", "is a directory; expected a model file name"]),
    ("export-out-json", lambda b, d: ["export", "--checkpoint", str(b), "--which", "last", "--out", str(d / "m.json")],
     ["export --out", "expected a model file name, not .json"]),
    ("evaluate-data-tilde", lambda b, d: ["evaluate", "--checkpoint", str(b), "--data", "~/no_such_rl_zerosync/x.csv",
                                          "--out", str(d / "ev")],
     ["not found", "'~' is not expanded"]),
    ("evaluate-out-a-file", lambda b, d: ["evaluate", "--checkpoint", str(b), "--out", str(d / "a_file")],
     ["evaluate --out", "a_file is a file"]),
    ("evaluate-set-outside-data", lambda b, d: ["evaluate", "--checkpoint", str(b), "--set", "model.hidden=[8]",
                                                "--out", str(d / "ev")],
     ["model.hidden"]),
    ("evaluate-no-checkpoint", lambda b, d: ["evaluate", "--checkpoint", str(d / "no_such_run"), "--out", str(d / "ev")],
     ["no_such_run"]),
    ("train-resume-and-overwrite", lambda b, d: ["train", "--config", str(SMOKE), "--resume", str(b), "--overwrite"],
     ["--resume and --overwrite cannot be combined"]),
    ("seeds-resume-another-directory", lambda b, d: [*_train_args(d, "s", 2), "--seeds", "0,1", "--resume", str(b)],
     ["with --seeds: expected the sweep's directory"]),
]


def run_bad_command(name: str, make: Callable, needles: list[str], base: Path, work: Path) -> dict:
    """A bad input of a command after training (:data:`COMMAND_CASES`): named as the train cases are
    (exit 2, one ``error:`` line with the needles, no traceback, < ``LIMIT_S``, no Ray), and nothing
    new in its scratch folder but what the case put there."""
    case_dir = work / "bad_commands" / name
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    (case_dir / "a_file").write_text("not a folder")
    before = _files(case_dir)
    r = _run(_cli(*make(base, case_dir)), case_dir, "cli", timeout=60)
    # one stderr line for evaluate / export; train may warn first (its preflight's power line)
    failed = _named_refusal(r, needles, limit_s=LIMIT_S, one_line=make(base, case_dir)[0] != "train")
    new = sorted(_files(case_dir) - before - {"cli.out", "cli.err"})
    new += sorted(p.name for p in case_dir.iterdir() if p.is_dir())
    if new:
        failed.append(f"written: {new}")
    lines = r["stderr"].strip().splitlines()
    out = {"name": name, "command": True, "named_error": not failed, "rc": r["rc"], "wall_s": r["wall_s"],
           "cpu_s": r["cpu_s"], "load_avg_1m": r["load_avg_1m"], "needles": needles,
           "error_line": (lines[0] if len(lines) == 1 else _tail(r["stderr"], 800))[:1000]}
    if failed:
        out["failed_checks"] = failed
        out["stdout_tail"] = _tail(r["stdout"], 800)
    return out


def _over_time_only(case: dict) -> bool:
    """A bad input whose one failed check is the wall-time limit: the right error line and exit code,
    late (its ``cpu_s`` and ``load_avg_1m`` tell a slow command from a busy machine)."""
    checks = case.get("failed_checks") or []
    return bool(checks) and all(c.startswith("took ") and " limit " in c for c in checks)


def _nonzero(bad: list[dict], faults: list[dict]) -> dict:
    """Every failed or interrupted command (each bad input, each fault step marked ``expected_nonzero``:
    a refusal, a signal, a failed write) and how many of them ended with a non-zero exit code."""
    codes = [c["rc"] for c in bad] + [s.get("rc") for f in faults for s in f["steps"] if s.get("expected_nonzero")]
    return {"failed_or_interrupted_runs": len(codes),
            "failed_or_interrupted_runs_nonzero": sum(rc is not None and rc != 0 for rc in codes)}


def _git() -> dict:
    """The commit measured, and the files of the package that differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "rl_zerosync").splitlines()]
    return {"commit": git("rev-parse", "HEAD") or None, "rl_zerosync_uncommitted": dirty}


# ---- main ----------------------------------------------------------------------------------------

def _print_table(bad: list[dict], faults: list[dict]) -> None:
    print(f"\n{'case':<42} {'result':<9} {'wall s':>7}  note")
    for c in bad:
        note = c["error_line"][:70] if c["named_error"] else (
            "; ".join(c["failed_checks"])[:90] + f" (cpu {c['cpu_s']:.1f} s, load {c['load_avg_1m']:.1f})")
        print(f"{'bad: ' + c['name']:<42} {'named' if c['named_error'] else 'FAIL':<9} {c['wall_s']:>7.1f}  {note}")
    for f in faults:
        notes = [fc for s in f["steps"] for fc in s.get("failed_checks", [])]
        note = "; ".join(notes)[:110] if notes else (
            f"rows {f['rows']['rows']}/{f['rows']['expected_rows']}" if "rows" in f else "")
        print(f"{'fault: ' + f['name']:<42} {'ok' if f['ok'] else 'FAIL':<9} {f['wall_s']:>7.1f}  {note}")


def main(argv: Optional[list[str]] = None) -> dict:
    p = parser(__doc__, out=results_path("reliability"),
               quick="a few bad inputs and the concurrent-run fault (< 60 s)")
    p.add_argument("--work-dir", default=None, help="where the runs go (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs of every case)")
    p.add_argument("--only", default=None, metavar="NAME[,NAME]",
                   help=f"run only these faults ({', '.join(SELECTABLE)}), no bad inputs; the JSON is written "
                        "only to an --out given (the full benchmark's file is left as it is)")
    args = p.parse_args(argv)
    if args.only is not None:
        return run_only(args)
    t_start = time.perf_counter()

    preflight = _import_test("test_preflight")
    integrity = _import_test("test_checkpoint_integrity")
    limit_s = float(preflight.LIMIT_S)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="reliability_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data_dir = _fixture_function(preflight.data_dir)(_TmpFactory(work))

    cases = bad_input_cases(preflight)
    if args.quick:
        cases = [c for c in cases if c[0] in QUICK_BAD]
    bad = []
    for name, make, needles in cases:
        bad.append(run_bad_input(name, make, needles, data_dir, work, preflight, limit_s))
        c = bad[-1]
        print(f"bad input {name:<22} {'named' if c['named_error'] else 'FAIL':<6} {c['wall_s']:5.1f} s", flush=True)

    faults: list[dict] = []

    def fault(fn, *a) -> None:
        t0 = time.perf_counter()
        try:
            faults.append(fn(*a))
        except Exception as err:  # noqa: BLE001 - a harness failure is recorded as a failed case
            faults.append({"name": fn.__name__, "tried": True, "ok": False, "wall_s": 0.0, "steps": [
                {"step": "harness", "ok": False, "failed_checks": [f"{type(err).__name__}: {err}"]}]})
        f = faults[-1]
        f["wall_s"] = round(time.perf_counter() - t0, 2)  # the steps may overlap
        print(f"fault {f['name']:<40} {'ok' if f['ok'] else 'FAIL':<6} {f['wall_s']:5.1f} s", flush=True)

    if args.quick:
        fault(fault_same_name, work, 2)
    else:
        fault(fault_same_name, work, FULL_ITERS // 2)
        fault(fault_kill_mid_training, work, 2 * FULL_ITERS)
        for point in ("external", "before-manifest", "between-renames"):
            fault(fault_kill_in_checkpoint, work, point, FULL_ITERS // 2 + 2)
        try:
            base = _base_run(work)
        except RuntimeError as err:
            base = None
            for kind in [*integrity.DAMAGE, "all damaged"]:
                faults.append({"name": f"checkpoint-{kind.replace(' ', '-')}", "tried": True, "ok": False,
                               "wall_s": 0.0,
                               "steps": [{"step": "base run", "ok": False, "failed_checks": [str(err)[:1500]]}]})
        if base is not None:
            for kind, (damage, rel, what) in integrity.DAMAGE.items():
                fault(fault_checkpoint_damage, work, base, kind, damage, rel, what)
            fault(fault_all_checkpoints_damaged, work, base, integrity.WEIGHTS, integrity._scribble)
            fault(fault_kill_in_evaluate, work, base)
            fault(fault_evaluate_other_data, work, base)
            fault(fault_export_full_disk, work, base)
            fault(fault_evaluate_without_best, work, base)
            fault(fault_concurrent_evaluations, work, base)
            fault(fault_evaluation_of_another_checkpoint, work, base)
            fault(fault_evaluate_full_disk, work, base)
            for where in ("middle", "torn-end"):
                fault(fault_metrics_row_damaged, work, base, where)
            for name, make, needles in COMMAND_CASES:
                bad.append(run_bad_command(name, make, needles, base, work))
                c = bad[-1]
                print(f"bad input {name:<22} {'named' if c['named_error'] else 'FAIL':<6} {c['wall_s']:5.1f} s",
                      flush=True)
        fault(fault_runner_kill, work, FULL_ITERS)
        fault(fault_data_error_remote_runners, work, data_dir, preflight)
        fault(fault_overwrite_keeps_other_files, work, 2)
        fault(fault_guard_halt, work)
        fault(fault_sigterm, work, FULL_ITERS // 2)
        fault(fault_run_dir_deleted, work)
        fault(fault_walkforward_resume, work)
        fault(fault_seeds_driver_kill, work)
        fault(fault_data_file_changed, work)
        fault(fault_sighup, work, FULL_ITERS // 2)
        fault(fault_sigterm_in_evaluation, work)
        fault(fault_lock_deleted, work, FULL_ITERS // 2)
        fault(fault_seeds_resume, work, 4)
        fault(fault_rllib_logs, work)
        fault(fault_population_resume, work, FULL_ITERS)

    _print_table(bad, faults)
    summary = {
        "bad_inputs_tried": len(bad),
        "bad_inputs_named_error": sum(c["named_error"] for c in bad),
        "faults_tried": len(faults),
        "faults_survived_or_named": sum(f["ok"] for f in faults),
        "rows_lost_or_duplicated": sum(f.get("rows_lost_or_duplicated", 0) for f in faults),
        "files_deleted_outside_run": sum(f.get("files_deleted_outside_run", 0) for f in faults),
        "files_changed_outside_run": sum(f.get("files_changed_outside_run", 0) for f in faults),
        "bad_inputs_named_over_time_limit": sum(_over_time_only(c) for c in bad),
        **_nonzero(bad, faults),
    }
    wall = time.perf_counter() - t_start
    result = result_header("reliability", device="cpu", config={
        "quick": args.quick, "smoke_config": str(SMOKE.relative_to(ROOT)), "fault_iterations": FULL_ITERS,
        "bad_input_limit_s": limit_s, "bad_input_cases_from": "tests/test_preflight.py CASES (+ GPU requests)",
        "checkpoint_damage_from": "tests/test_checkpoint_integrity.py DAMAGE",
        "cuda_visible_devices": "", "named_error": "exit 2, one stderr line 'error: ...' holding the case's "
        "needles, no traceback, < limit, Ray not started, no run directory created",
        "command_cases": len(COMMAND_CASES) if not args.quick else 0,
        "ray_environment": {k: v for k, v in os.environ.items() if k.startswith("RAY_") and k != "RAY_ADDRESS"},
    })
    result["hardware"]["cores"] = os.cpu_count()
    result.update({
        "git": _git(),
        "bad_inputs": bad,
        "faults": faults,
        "summary": summary,
        "wall_s": round(wall, 1),
    })
    print(f"\nsummary: {json.dumps(summary)}  ({wall:.0f} s)")
    # scratch paths as <tmp> (the work directory is removed; the repository's own paths stay relative)
    result = json.loads(json.dumps(result).replace(str(work), "<tmp>").replace(str(ROOT) + "/", ""))
    write_json(result, args.out)
    if not args.keep and args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs: {work}")
    return result


SELECTABLE: dict[str, Callable[[Path], dict]] = {
    "population-sigterm-then-resume": lambda work: fault_population_resume(work, FULL_ITERS),
}
"""The faults ``--only`` runs by name (each needs nothing but its work directory)."""


def run_only(args) -> dict:
    """``--only``: the named faults of :data:`SELECTABLE` alone, their table printed; the JSON (faults and
    their counts, no bad inputs) written only to an ``--out`` other than the full benchmark's file."""
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SELECTABLE]
    if unknown or not names:
        raise SystemExit(f"--only: unknown fault(s) {unknown or names}; expected some of {', '.join(SELECTABLE)}")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="reliability_")).resolve()
    faults = []
    for name in names:
        t0 = time.perf_counter()
        faults.append(SELECTABLE[name](work))
        faults[-1]["wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"fault {name:<40} {'ok' if faults[-1]['ok'] else 'FAIL':<6} {faults[-1]['wall_s']:5.1f} s", flush=True)
    _print_table([], faults)
    result = {"only": names, "faults": faults, "git": _git(),
              "summary": {"faults_tried": len(faults), "faults_survived_or_named": sum(f["ok"] for f in faults),
                          "rows_lost_or_duplicated": sum(f.get("rows_lost_or_duplicated", 0) for f in faults)}}
    print(f"\nsummary: {json.dumps(result['summary'])}")
    result = json.loads(json.dumps(result).replace(str(work), "<tmp>").replace(str(ROOT) + "/", ""))
    if Path(args.out).resolve() != Path(results_path("reliability")).resolve():
        write_json(result, args.out)
    else:
        print(f"--only: {args.out} not written (it holds the full benchmark); pass --out FILE to keep this run")
    if not args.keep and args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
