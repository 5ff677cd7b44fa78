"""The training-period overlap check of an evaluation: are the evaluated bars ones the run trained on?

An evaluated asset is one the run trained on when its name is a trained asset's name, or when the
SHA-256 of its file is one of the run's training files (:mod:`rl_zerosync.data.identity`: a
renamed copy of a training file). Only such assets are compared by time: their evaluated bars
(those with a return) inside the training period (of that asset, matched by name; of all the
run's assets, matched by file only) are counted, and any gives a warning (results partly in
sample). Another asset over the same dates is not in sample.

The trained side is the run's record (``data_record.json``: per asset its first and last training
bar, the files' hashes) or, for runs without one, the ``train`` segment rebuilt from the data
settings with the hashes of those files as they are now. Either side without timestamps is not
checked (``checked`` false, with the reason).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

COMPARED = "assets (name, or the SHA-256 of the file) and time"
"""What the check compares (``overlap.compared`` of ``metrics.json``)."""


def naive_times(stamps: Sequence[np.ndarray]):
    """All ``stamps`` as one pandas DatetimeIndex without time zone (aware ones in UTC)."""
    import pandas as pd

    values = np.concatenate([np.asarray(t) for t in stamps]) if len(stamps) else np.array([], "datetime64[ns]")
    try:
        idx = pd.DatetimeIndex(pd.to_datetime(values))
    except (TypeError, ValueError):  # mixed time zones
        idx = pd.DatetimeIndex(pd.to_datetime(values, utc=True))
    return idx.tz_convert("UTC").tz_localize(None) if idx.tz is not None else idx


def show_time(t) -> str:
    return t.strftime("%Y-%m-%d") if t == t.normalize() else t.isoformat()


def trained_assets_from_record(record: Mapping[str, Any]) -> tuple[dict[str, tuple], set[str]]:
    """(asset name -> (first, last) training timestamps, the training files' SHA-256) of a run's record."""
    import pandas as pd

    periods = {}
    for row in (record.get("segments") or {}).get("train") or []:
        if "first" in row and "last" in row:
            periods[str(row["asset"])] = (pd.Timestamp(row["first"]), pd.Timestamp(row["last"]))
    return periods, {f["sha256"] for f in record.get("files") or []}


def trained_assets_from_market(train_market, hashes: set[str]) -> tuple[dict[str, tuple], set[str]]:
    """The same from a rebuilt ``train`` segment (and the hashes of its files as they are now)."""
    starts = train_market.valid_start.cpu().tolist()  # host read: once per evaluation
    lengths = train_market.length.cpu().tolist()  # host read: once per evaluation
    periods = {}
    for a, name in enumerate(train_market.asset_names):
        times = naive_times([train_market.timestamps[a][starts[a]:lengths[a]]])
        if len(times):
            periods[str(name)] = (times.min(), times.max())
    return periods, set(hashes)


def file_hashes_per_asset(assets: Sequence[str], files: Sequence[Mapping[str, Any]]) -> list[set[str]]:
    """Per evaluated asset the SHA-256 of the file(s) it may come from: one file -> every asset; one
    file per asset -> its own; otherwise any of them."""
    hashes = [f["sha256"] for f in files]
    if len(hashes) == len(assets):
        return [{h} for h in hashes]
    return [set(hashes) for _ in assets]


def training_overlap(results: list, trained: tuple[dict[str, tuple], set[str]] | None,
                     files: Sequence[Mapping[str, Any]] = (), why_unchecked: str | None = None
                     ) -> tuple[dict[str, Any], str | None]:
    """Compare the evaluated bars of ``results`` (per asset, the bars with a return) with the run's
    training data ``trained`` (:func:`trained_assets_from_record` / :func:`trained_assets_from_market`;
    None: not checked, ``why_unchecked`` says why) by asset and time (module doc); ``files``: the
    evaluated data's file identities (:func:`rl_zerosync.data.identity.file_identity`). Returns
    ``(info for metrics.json, the warning or None)``."""
    if trained is None or not trained[0]:
        return {"checked": False, "reason": f"the run's training data has no timestamps ({why_unchecked or 'none recorded'})"}, None
    if not all(t is not None for res in results for t in res.timestamps):
        return {"checked": False, "reason": "the evaluated data has no timestamps"}, None
    periods, train_hashes = trained
    lo = min(p[0] for p in periods.values())
    hi = max(p[1] for p in periods.values())
    assets: dict[str, dict[str, Any]] = {}
    inside, total, stamps = 0, 0, []
    for res in results:
        per_file = file_hashes_per_asset(res.assets, files)
        for a, name in enumerate(res.assets):
            traded = naive_times([res.timestamps[a][1:]])
            stamps.append(res.timestamps[a])
            total += len(traded)
            if name in periods:
                how, (first, last) = "name", periods[name]
            elif per_file[a] & train_hashes:
                how, (first, last) = "file SHA-256", (lo, hi)
            else:
                assets.setdefault(name, {"trained_on": False, "overlapping_bars": 0})
                continue
            n = int(((traded >= first) & (traded <= last)).sum())
            entry = assets.setdefault(name, {"trained_on": True, "matched_by": how, "overlapping_bars": 0})
            entry["overlapping_bars"] += n
            inside += n
    shown = naive_times(stamps)
    info = {
        "checked": True,
        "compared": COMPARED,
        "training_period": [show_time(lo), show_time(hi)],
        "evaluated_period": [show_time(shown.min()), show_time(shown.max())],
        "evaluated_bars": int(total),
        "overlapping_bars": int(inside),
        "assets": assets,
    }
    if not any(v["trained_on"] for v in assets.values()):
        info["note"] = "no evaluated asset is one the run trained on (other names, other files): out of sample by asset"
    if not inside:
        return info, None
    names = [k for k, v in assets.items() if v["overlapping_bars"]]
    shown_names = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return info, (f"the evaluated period {info['evaluated_period'][0]} .. {info['evaluated_period'][1]} overlaps "
                  f"the run's training period {info['training_period'][0]} .. {info['training_period'][1]} for "
                  f"asset(s) the run trained on ({shown_names}: {inside} of {total} evaluated bars inside it): "
                  f"these results are partly in sample")
