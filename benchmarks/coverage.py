"""Coverage of the evidence's intervals on the project's own market (configs/local.yaml's generator).

How to run (CPU is enough; the GPU walks faster)::

    python -m benchmarks.coverage            # 200 fresh test sets of 32 series x 3,000 bars (local.yaml's test)
    python -m benchmarks.coverage --quick    # 60 sets of 16 series x 1,000 bars (what the CI test runs)

Test sets are drawn like ``local.yaml``'s sealed test set: ``series`` whole series of ``bars`` bars
from the synthetic generator with ``local.yaml``'s settings, from generator seeds that are not the
sealed ones (one draw of ``sets x series`` independent series, cut into sets). Two fixed rules are
walked through the project's own :class:`~rl_zerosync.evaluation.rules.RuleWalk` (next-bar fills,
routing, ``local.yaml``'s costs): momentum(64,1) and buy-and-hold. Per set, the calibrated interval
(:func:`rl_zerosync.evidence.calibrated.panel_interval`, what every report prints) of

* the mean over series of momentum(64,1)'s per-series Sharpe, and
* the paired difference momentum(64,1) - buy-and-hold.

The truth for set ``k`` is the mean of the statistic over all the other sets (its expectation under
the generator); the true width is ``2 * 1.96 * sd`` of the statistic over sets. Reported: coverage
(share of sets whose interval holds the truth; goal 0.90-0.98) and the mean interval width over the
true width (goal 0.8-1.25), beside the old method (a bar bootstrap with Politis-White blocks, one
shared draw: what the reports used before) on the same sets, and the cluster bootstrap's other
interval constructions (:data:`~rl_zerosync.evidence.calibrated.CLUSTER_INTERVALS`; ``calibrated``
is the one the reports use, :data:`~rl_zerosync.evidence.calibrated.CLUSTER_INTERVAL`).

Results to expect: coverage ~0.95 and width ratio ~1.0 for the cluster bootstrap; the old method's
width ratio ~0.65.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.common import parser, print_summary, quick_path, result_header, results_path, write_json

QUICK = (60, 16, 1000)
"""(sets, series, bars) of the quick run and of the CI test."""
FULL = (200, 32, 3000)
"""(sets, series, bars) of the full run: local.yaml's test set is 32 series of 3,000 bars."""
QUICK_HELP = "60 sets of 16 series x 1,000 bars (the CI test's size)"

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local.yaml"
RULE = "momentum(64,1)"
SEED = 9_000_017
"""Generator seed of the pool (not a held-out seed of any data.seed: those come from SeedSequence)."""


def walk_pool(sets: int, series: int, bars: int, device: str | None = None) -> dict[str, list[np.ndarray]]:
    """Per rule (momentum(64,1), buy_and_hold) the net returns of ``sets * series`` fresh series."""
    import torch

    from rl_zerosync.data.data_settings import SYNTHETIC_PERIODS_PER_YEAR, DataSettings
    from rl_zerosync.data.synthetic import synthetic_market
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.evaluation.backtest import rule_metrics
    from rl_zerosync.evaluation.rules import RuleWalk, variants

    cfg = yaml.safe_load(CONFIG.read_text())
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    d = DataSettings.from_dict(cfg["data"])  # what heldout_market draws the sealed sets with
    market = synthetic_market(sets * series, bars, SEED, features=d.features, periods_per_year=SYNTHETIC_PERIODS_PER_YEAR,
                              device=dev, **d.synthetic)
    chosen = [v for v in variants() if v.label in (RULE, "buy_and_hold")]
    _, nets = rule_metrics(RuleWalk(market, EnvParams.from_dict(cfg.get("env", {})), {}, rule_variants=chosen))
    return {label: [np.asarray(n, dtype=np.float64) for n in nets[label]] for label in (RULE, "buy_and_hold")}


def _mean_sharpe(nets: list[np.ndarray], p: float) -> float:
    return float(np.mean([x.mean() / x.std(ddof=1) * np.sqrt(p) for x in nets]))


def coverage(sets: int, series: int, bars: int, *, reps: int = 1000, old: bool = True,
             device: str | None = None) -> dict[str, Any]:
    """Coverage and width ratio of the calibrated intervals (module doc) over ``sets`` fresh sets."""
    from rl_zerosync.data.data_settings import SYNTHETIC_PERIODS_PER_YEAR
    from rl_zerosync.evidence.calibrated import CLUSTER_INTERVAL, CLUSTER_INTERVALS, panel_interval

    p = float(SYNTHETIC_PERIODS_PER_YEAR)
    t0 = time.perf_counter()
    pool = walk_pool(sets, series, bars, device)
    walk_s = time.perf_counter() - t0
    cut = lambda nets, k: nets[k * series: (k + 1) * series]  # noqa: E731
    out: dict[str, Any] = {}
    for name, side_b in (("level", None), ("paired_difference", "buy_and_hold")):
        stat = np.array([_mean_sharpe(cut(pool[RULE], k), p) - (_mean_sharpe(cut(pool[side_b], k), p) if side_b else 0.0)
                         for k in range(sets)])
        true_width = 2.0 * 1.959964 * float(stat.std(ddof=1))
        rows = {"calibrated": [], **{f"cluster_{h}": [] for h in CLUSTER_INTERVALS if h != CLUSTER_INTERVAL},
                "old_bar_bootstrap": []}
        for k in range(sets):
            truth = float((stat.sum() - stat[k]) / (sets - 1))
            b = cut(pool[side_b], k) if side_b else None
            for h in CLUSTER_INTERVALS:
                iv = panel_interval(cut(pool[RULE], k), b, p, independent_series=True, reps=reps, seed=k,
                                    cluster_interval=h)
                name_h = "calibrated" if h == CLUSTER_INTERVAL else f"cluster_{h}"
                rows[name_h].append((iv["low"] <= truth <= iv["high"], iv["high"] - iv["low"], iv["method"]))
            if old and k < max(10, sets // 10):  # the old method on a subset of the sets
                from rl_zerosync.evidence.significance import block_length_for

                cols = cut(pool[RULE], k) + (b or [])
                block, _ = block_length_for(np.column_stack(cols))
                wide = _old_interval(cut(pool[RULE], k), b, p, block, reps, k)
                rows["old_bar_bootstrap"].append((wide[0] <= truth <= wide[1], wide[1] - wide[0], f"block {block:.1f}"))
        out[name] = {"statistic": ("mean over series of momentum(64,1)'s Sharpe" if side_b is None else
                                   "mean over series of momentum(64,1) - buy_and_hold Sharpe (paired)"),
                     "truth_mean": float(stat.mean()), "true_width": true_width}
        for method, r in rows.items():
            if r:
                out[name][method] = {"sets": len(r), "coverage": float(np.mean([c for c, _, _ in r])),
                                     "mean_width": float(np.mean([w for _, w, _ in r])),
                                     "width_ratio": float(np.mean([w for _, w, _ in r]) / true_width),
                                     "method": r[0][2]}
    out["walk_s"] = walk_s
    out["total_s"] = time.perf_counter() - t0
    return out


def _old_interval(a, b, p, block, reps, seed):
    """The old reports' interval: one shared stationary bar draw for all series, Politis-White block."""
    import torch

    from rl_zerosync.evidence.resample import generator, stationary_counts, weighted_sharpes

    gen = generator(seed, torch.device("cpu"))
    cols = a + (b or [])
    x = torch.as_tensor(np.column_stack(cols))
    sr = weighted_sharpes(stationary_counts(x.shape[0], block, reps, gen), x, p)
    m = len(a)
    stat = (sr[:, :m] - (sr[:, m:] if b else 0.0)).mean(dim=1).numpy()
    return np.quantile(stat, [0.025, 0.975])


def main() -> int:
    import torch

    args = parser(__doc__, out=results_path("coverage"), quick=QUICK_HELP).parse_args()
    sets, series, bars = QUICK if args.quick else FULL
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = coverage(sets, series, bars, device=device)
    config = {"sets": sets, "series": series, "bars": bars, "rule": RULE, "pool_seed": SEED,
              "generator": "configs/local.yaml data (synthetic, its model and features)"}
    report = {**result_header("coverage", device=device, config=config), "results": res}
    write_json(report, quick_path("coverage") if args.quick else args.out)
    print_summary({k: {m: {x: v[m][x] for x in ("coverage", "width_ratio")} for m in v if isinstance(v[m], dict)}
                   for k, v in res.items() if isinstance(v, dict)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
