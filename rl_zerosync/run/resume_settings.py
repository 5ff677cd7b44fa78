"""``--resume`` against the run's own settings: the keys that change what the network is or what it
is trained and selected on (``model``, ``env``, ``data`` but its device) must equal the run's
``settings.yaml``; any other change (iterations, eval cadence, ...) is allowed and listed.

The run's data files are checked too (:func:`check_data`): a file whose size or SHA-256 is not the
one in the run's ``data_record.json`` (:mod:`rl_zerosync.data.identity`) is refused by name, as is a
missing one: the same path no longer holds the bars the run trained and selected on.

Checked before the run directory is claimed or Ray starts, so a refused resume writes nothing: the
run's ``settings.yaml`` stays, and ``checkpoint_best/`` is never scored on data it was not selected on.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

FIXED_SECTIONS = ("model", "env", "data")
"""Sections a resume may not change: the Q network's shape, the env (observation window, actions,
costs) and the data (files, columns, split, features)."""
FREE_DATA_KEYS = ("device",)
"""``data`` keys a resume may change (where the market tensors live, not what they hold)."""


class ResumeSettingsError(ValueError):
    """A ``--resume`` whose settings change a fixed key of the run (named with both values)."""


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: list(d) if isinstance(d, tuple) else d}


def _view(settings) -> dict[str, Any]:
    """Every value of a Settings object, defaults filled in (typed sections), flattened to ``a.b.c``."""
    d: dict[str, Any] = {"run": dataclasses.asdict(settings.run), "algo": dataclasses.asdict(settings.algo),
                         "model": dataclasses.asdict(settings.model)}
    for name in ("data", "env", "runner", "learner"):
        typed = getattr(settings, name).typed
        d[name] = dataclasses.asdict(typed) if dataclasses.is_dataclass(typed) else dict(getattr(settings, name))
    return _flat(yaml.safe_load(yaml.safe_dump(d)))  # tuples and numbers as settings.yaml holds them


def run_settings_file(settings, resume: str | Path) -> Path | None:
    """The settings the run was trained with: ``settings.yaml`` of the resumed directory (a run or a
    checkpoint), else of the run directory; None when neither has one."""
    from rl_zerosync.rundir.checkpoints import SETTINGS_FILE

    for d in (Path(resume), settings.run_dir):
        if (d / SETTINGS_FILE).is_file():
            return d / SETTINGS_FILE
    return None


def _fixed(key: str) -> bool:
    section, _, rest = key.partition(".")
    return section in FIXED_SECTIONS and not (section == "data" and rest.split(".")[0] in FREE_DATA_KEYS)


def compare(settings, resume: str | Path) -> list[str]:
    """Check ``settings`` against the resumed run's; returns the allowed changes as ``key old -> new``
    lines (empty when none); :class:`ResumeSettingsError` naming every fixed key that differs."""
    from rl_zerosync.config.settings import SettingsError, from_dict

    path = run_settings_file(settings, resume)
    if path is None:
        return []
    try:
        old = _view(from_dict(yaml.safe_load(path.read_text()) or {}, source=str(path)))
    except (SettingsError, yaml.YAMLError) as err:
        raise ResumeSettingsError(f"--resume: cannot read the run's settings {path}: {err}") from None
    new = _view(settings)
    keys = sorted(set(old) | set(new))
    changed = [k for k in keys if old.get(k) != new.get(k) and k not in ("run.name", "run.dir")]
    fixed = [k for k in changed if _fixed(k)]
    if fixed:
        shown = "; ".join(f"{k}: {old.get(k)!r} in the run, {new.get(k)!r} now" for k in fixed)
        raise ResumeSettingsError(
            f"--resume {resume}: the settings change what the run's checkpoints were trained and selected on "
            f"({shown}); {', '.join(FIXED_SECTIONS)} keys must match {path}: train a new run (another run.name) "
            "or --overwrite")
    check_data(settings, resume)
    return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in changed]


def check_data(settings, resume: str | Path) -> None:
    """The run's recorded data files (``data_record.json`` of the resumed directory, else of the run
    directory) against the files at those paths now: :class:`~rl_zerosync.data.identity.DataChangedError`
    naming the first one changed or missing; nothing for a run without a record."""
    from rl_zerosync.data.identity import check_unchanged, data_paths, read_record

    record = read_record(Path(resume), settings.run_dir)
    check_unchanged(record, "the run's checkpoints were trained and selected on the recorded file; --resume "
                    "continues only on the same bars: restore the file, or train a new run (another run.name) "
                    "or --overwrite", paths=data_paths(settings.data))
