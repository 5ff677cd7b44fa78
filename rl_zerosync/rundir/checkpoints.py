"""Checkpoints of a run directory: where they are, their manifests and rotation, whether they are
whole, and the trained Q module inside one (:func:`load_module`, :data:`MODULE_PATH`: what evaluation,
export and serving load). Saving one, finding the one to resume from and setting damaged ones aside belong to the run
directory (:class:`~rl_zerosync.rundir.run_dir.RunDir`).

Layout of a run directory ``<run.dir>/<run.name>/``::

    checkpoint/          the newest checkpoint (what ``--resume`` and ``evaluate --which last`` use)
    checkpoint.1/ ...    older ones, ``checkpoint.1`` the next newest (``KEEP_LAST`` in all)
    checkpoint_best/     the best validation pass so far
    checkpoint.tmp/      a checkpoint being written (never read)
    checkpoint.old/      only from runs of older versions, or a run killed between two renames

Every checkpoint holds RLlib's files, ``settings.yaml``, ``run_state.json`` and, written last,
``manifest.json``: the size and SHA-256 of every other file (paths relative to the checkpoint).
:func:`verify_checkpoint` checks it and names the first missing, short/long or altered file; a
checkpoint without a manifest (written by an older version) is accepted with a warning.

Checkpoints are pickles: loading one runs code. Load only checkpoints from a trusted source.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "checkpoint_best"
"""The checkpoint with the best validation metric so far."""
SETTINGS_FILE = "settings.yaml"
RUN_STATE_FILE = "run_state.json"
"""Written into every checkpoint: iteration, best validation so far, evaluations since the best."""
MANIFEST_FILE = "manifest.json"
"""Written last into every checkpoint: ``{"files": {relative path: {"size", "sha256"}}}``."""
KEEP_LAST = 2
"""Checkpoints kept besides ``checkpoint_best/``: ``checkpoint/`` and ``checkpoint.1/`` ... (at least 1).
(The default of a future ``run.keep_checkpoints`` setting.)"""
MARKER = "rllib_checkpoint.json"
"""The file that makes a directory a (complete or damaged) RLlib checkpoint."""
MODULE_PATH = Path("learner_group") / "learner" / "rl_module" / "default_policy"
"""Inside a checkpoint: the trained Q module (RLlib's RLModule checkpoint of the default policy)."""

_CHUNK = 1 << 20


class CheckpointError(RuntimeError):
    """A damaged checkpoint (a file missing, of the wrong size or with the wrong SHA-256), or none."""


class NoBestCheckpointError(CheckpointError):
    """The best checkpoint of a run directory asked for (``--which best``) where the run saved none:
    never silently the last one instead."""


def warn(message: str) -> None:
    """A one-line warning on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(ckpt: Path) -> list[str]:
    """Every regular file under ``ckpt`` (relative POSIX paths, sorted), the manifest excluded."""
    out = []
    for root, dirs, files in os.walk(ckpt):
        dirs.sort()
        for name in files:
            rel = (Path(root) / name).relative_to(ckpt).as_posix()
            if rel not in (MANIFEST_FILE, MANIFEST_FILE + ".tmp"):
                out.append(rel)
    return sorted(out)


def write_manifest(ckpt: str | Path) -> Path:
    """Hash every file of ``ckpt`` into ``ckpt/manifest.json`` (written to a temporary file, synced,
    then renamed: a manifest is either whole or absent)."""
    ckpt = Path(ckpt)
    files = {}
    for rel in _files(ckpt):
        p = ckpt / rel
        files[rel] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    manifest = {"version": 1, "hash": "sha256", "files": files}
    tmp, final = ckpt / (MANIFEST_FILE + ".tmp"), ckpt / MANIFEST_FILE
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return final


def verify_checkpoint(ckpt: str | Path, quiet: bool = False) -> bool:
    """Check ``ckpt`` against its manifest: True when every listed file is there with its size and
    SHA-256; False (with a warning unless ``quiet``) for a checkpoint without a manifest (older
    versions); :class:`CheckpointError` naming the first bad file otherwise. Files not in the
    manifest are ignored."""
    ckpt = Path(ckpt)
    path = ckpt / MANIFEST_FILE
    if not path.is_file():
        if not quiet:
            warn(f"{ckpt}: no {MANIFEST_FILE} (a checkpoint from an older version): loading it unverified")
        return False
    try:
        files = json.loads(path.read_text())["files"]  # host read: checkpoint metadata
        entries = sorted((str(rel), int(v["size"]), str(v["sha256"])) for rel, v in files.items())
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{ckpt}: damaged checkpoint: {MANIFEST_FILE} is unreadable ({err})") from None
    for rel, size, digest in entries:
        p = ckpt / rel
        if not p.is_file():
            raise CheckpointError(f"{ckpt}: damaged checkpoint: {rel} is missing")
        actual = p.stat().st_size
        if actual != size:
            raise CheckpointError(f"{ckpt}: damaged checkpoint: {rel} has {actual} bytes, the manifest says {size}")
        if _sha256(p) != digest:
            raise CheckpointError(f"{ckpt}: damaged checkpoint: {rel} does not match its SHA-256 in the manifest")
    return True


def _numbered(run_dir: Path, name: str) -> list[Path]:
    """``<name>.1``, ``<name>.2``, ... in ``run_dir``, newest (lowest number) first."""
    pattern = re.compile(re.escape(name) + r"\.(\d+)$")
    found = []
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            m = pattern.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def checkpoint_candidates(path: str | Path, which: str = "last") -> list[Path]:
    """The checkpoints of a run directory (or ``[path]`` for a checkpoint directory), newest first.

    ``which="last"``: ``checkpoint/``, ``checkpoint.old/``, ``checkpoint.1/``, ``checkpoint.2/`` ...;
    ``"best"``: ``checkpoint_best/`` (and ``.old``) first, then those. Only directories holding
    ``rllib_checkpoint.json`` are listed (``checkpoint.tmp/`` never).
    """
    path = Path(path)
    if which not in ("best", "last"):
        raise ValueError(f"checkpoint: expected 'best' or 'last', got {which!r}")
    if (path / MARKER).is_file():
        return [path]
    # checkpoint.old exists only if a run of an older version died between its two renames.
    names = [path / CHECKPOINT_DIR, path / (CHECKPOINT_DIR + ".old"), *_numbered(path, CHECKPOINT_DIR)]
    if which == "best":
        names = [path / BEST_DIR, path / (BEST_DIR + ".old")] + names
    return [c for c in names if (c / MARKER).is_file()]


def _require_best(path: str | Path, which: str, found: list[Path]) -> None:
    """:class:`NoBestCheckpointError` when ``which`` is ``"best"``, ``path`` is a run directory (not a
    checkpoint) and it holds no ``checkpoint_best/``: the caller asked for the best validation pass."""
    if which != "best" or not found or (Path(path) / MARKER).is_file():
        return
    if found[0].name not in (BEST_DIR, BEST_DIR + ".old"):
        raise NoBestCheckpointError(
            f"{path}: no {BEST_DIR}/: the run saved no best validation pass (it stopped before its first "
            f"validation, or no pass scored a number); use --which last (which='last') for its newest "
            f"checkpoint {found[0].name}/")


def best_or_last(path: str | Path, which: str) -> str:
    """``which`` for the end of a run: ``"last"`` with a warning when ``"best"`` is asked of a run
    directory without ``checkpoint_best/`` (a run evaluates what it has; a user's ``--which best``
    is an error instead, :class:`NoBestCheckpointError`)."""
    try:
        _require_best(path, which, checkpoint_candidates(path, which))
    except NoBestCheckpointError:
        warn(f"run.eval_checkpoint best: {path} has no {BEST_DIR}/ (no validation pass was saved as a best); "
             "evaluating the last checkpoint instead")
        return "last"
    return which


def find_checkpoint(path: str | Path, which: str = "last") -> Path:
    """A run directory or a checkpoint directory -> the checkpoint directory (not verified).

    ``which``: for a run directory, ``"best"`` (``checkpoint_best/``, by validation;
    :class:`NoBestCheckpointError` when the run has none) or ``"last"``.
    """
    found = checkpoint_candidates(path, which)
    if not found:
        raise FileNotFoundError(f"{path}: no checkpoint found (expected {MARKER} in it "
                                f"or in {Path(path) / CHECKPOINT_DIR})")
    _require_best(path, which, found)
    return found[0]


def verified_checkpoint(path: str | Path, which: str = "last", fallback: bool = False) -> Path:
    """:func:`find_checkpoint`, verified against its manifest (:class:`CheckpointError` when damaged).

    ``fallback=True`` (resume): a damaged checkpoint is skipped with a warning for the next older
    good one of the run; the error of the newest is raised when none is good."""
    found = checkpoint_candidates(path, which)
    if not found:
        raise FileNotFoundError(f"{path}: no checkpoint found (expected {MARKER} in it "
                                f"or in {Path(path) / CHECKPOINT_DIR})")
    _require_best(path, which, found)
    first_error = None
    for i, ckpt in enumerate(found):
        try:
            verify_checkpoint(ckpt)
        except CheckpointError as err:
            if not fallback:
                raise
            first_error = first_error or err
            nxt = f"trying {found[i + 1]}" if i + 1 < len(found) else "no older checkpoint left"
            warn(f"{err}; {nxt}")
            continue
        if first_error is not None:
            warn(f"falling back to the previous good checkpoint {ckpt} (iteration "
                 f"{read_run_state(ckpt).get('iteration', '?')})")
        return ckpt
    raise first_error


def read_run_state(ckpt: Path) -> dict:
    """The training-loop state saved with a checkpoint (``{}`` for checkpoints without one)."""
    f = Path(ckpt) / RUN_STATE_FILE
    return json.loads(f.read_text()) if f.is_file() else {}  # host read: checkpoint metadata


def load_module(ckpt: str | Path):
    """The trained Q module of a checkpoint, on the CPU, in eval mode (RLlib's repeated notices while
    it loads quieted for the call: :func:`rl_zerosync.rundir.ray_notices.notices_quieted`)."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from rl_zerosync.rundir.ray_notices import notices_quieted

    path = Path(ckpt) / MODULE_PATH
    if not path.is_dir():
        raise FileNotFoundError(f"{ckpt}: no RLModule at {MODULE_PATH}")
    with notices_quieted():
        module = RLModule.from_checkpoint(str(path.resolve()))
    return module.to("cpu").eval()


def checkpoint_iteration(ckpt: Path) -> int | None:
    """The iteration of a checkpoint, None when it has none or it cannot be read."""
    try:
        return read_run_state(ckpt).get("iteration")
    except (OSError, ValueError, AttributeError):
        return None


def rotate(run_dir: Path, name: str, tmp: Path, keep: int) -> Path:
    """Swap the finished ``tmp`` in as ``<name>`` of ``run_dir``; the previous ones move down one place
    (``<name>`` -> ``<name>.1`` -> ``<name>.2`` ...), keeping ``keep`` in all.

    Every step is one rename, and a whole checkpoint exists at every moment: killed between two
    renames, the run resumes from ``<name>.1`` (or ``<name>.old`` when ``keep == 1``)."""
    final = run_dir / name
    if keep <= 1:
        old = run_dir / (name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        return final
    if final.exists():
        for p in _numbered(run_dir, name):  # the oldest kept one (and any surplus of a larger keep)
            if int(p.name.rsplit(".", 1)[1]) >= keep - 1:
                shutil.rmtree(p, ignore_errors=True)
        for i in range(keep - 2, 0, -1):
            src = run_dir / f"{name}.{i}"
            if src.exists():
                os.replace(src, run_dir / f"{name}.{i + 1}")
        os.replace(final, run_dir / f"{name}.1")
    os.replace(tmp, final)
    shutil.rmtree(run_dir / (name + ".old"), ignore_errors=True)  # left by an older version
    return final


def policy_only_excludes() -> list[str]:
    """Algorithm state components a policy checkpoint leaves out: the learner's replay buffer and
    counters (the learner's ``zerosync`` component) and, with DDP learners, every rank's replay
    shard (the algorithm's ``zerosync_replay_shards``)."""
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP

    from rl_zerosync.algorithm import REPLAY_SHARDS
    from rl_zerosync.learner.dqn_learner import COMPONENT_ZEROSYNC

    return [f"{COMPONENT_LEARNER_GROUP}/{COMPONENT_LEARNER}/{COMPONENT_ZEROSYNC}", REPLAY_SHARDS]
