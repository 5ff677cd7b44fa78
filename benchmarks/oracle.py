"""The oracle reference (knows the generator) against momentum on series drawn like configs/local.yaml's.

How to run (CPU is enough; the GPU is used when present)::

    python -m benchmarks.oracle          # data seeds 0..4, 5 x (8 validation + 32 test series): ~12 min, 2 cores
    python -m benchmarks.oracle --quick  # data seed 0 only (local.yaml's own sealed sets), ~2 min

Per data seed ``s`` (``data.seed = s`` of ``configs/local.yaml``; ``s = 0`` gives local.yaml's own sealed
validation and test sets, the others fresh sets drawn the same way): validation = 8 and test = 32 whole
held-out series of 3,000 bars. On validation the oracle's grid
(:data:`rl_zerosync.evaluation.oracle.SCALES` x :data:`~rl_zerosync.evaluation.oracle.BANDS`, 20
variants) and the 51 rule variants are walked, and the oracle variant and the momentum variant with
the highest mean Sharpe over the series are chosen (:func:`~rl_zerosync.evaluation.oracle.oracle_baseline`
and :func:`~rl_zerosync.evaluation.rules.choose`, what ``rl-zerosync evaluate`` runs). On test, read
once: the chosen oracle, the chosen momentum and momentum(64,1), each through the project's
:class:`~rl_zerosync.evaluation.walk.SegmentWalk` (next-bar fills, routing, costs of ``local.yaml``'s
``env``). Per seed and pooled over seeds: the mean over test series of per-series annualized Sharpe,
its standard error over series, and the paired oracle - momentum(64,1) difference.

Results to expect: the oracle about +1.9 mean test Sharpe, momentum(64,1) about +1.55, the difference
about +0.3 with a standard error of about 0.05. The agent's recorded test Sharpe on seed 0's test
series (``benchmarks/results/learning.json``, a separate run) over the oracle's gives its efficiency.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from benchmarks.common import parser, print_summary, print_table, quick_path, result_header, results_path, write_json

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local.yaml"
LEARNING = Path(__file__).resolve().parent / "results" / "learning.json"
SEEDS = (0, 1, 2, 3, 4)
REFERENCE = "momentum(64,1)"


def _sharpes(recs: list, periods_per_year: float) -> np.ndarray:
    from rl_zerosync.evaluation.backtest import record_metrics

    return np.array([record_metrics(r, periods_per_year)["sharpe"] for r in recs])


def _stats(x: np.ndarray) -> dict:
    return {"mean": float(x.mean()), "se": float(x.std(ddof=1) / math.sqrt(x.size)), "series": int(x.size)}


def one_seed(data_cfg: dict, params, routing: dict, device: torch.device) -> dict:
    """Choose on validation, score on test (module doc) for one ``data.seed``."""
    from rl_zerosync.data import make_market
    from rl_zerosync.evaluation.backtest import rule_metrics
    from rl_zerosync.evaluation.oracle import oracle_baseline
    from rl_zerosync.evaluation.rules import RuleWalk, choose, parse_label

    t0 = time.perf_counter()
    val = make_market(data_cfg, "validation").to(device)
    oracle_val = oracle_baseline(data_cfg, val, params, routing, device=device)
    grid, _ = rule_metrics(RuleWalk(val, params, routing))
    momentum = choose({label: m["mean"] for label, m in grid.items()})["momentum"]
    test = make_market(data_cfg, "test").to(device)
    oracle_test = oracle_baseline(data_cfg, test, params, routing, device=device, variant=oracle_val["variant"])
    labels = list(dict.fromkeys((momentum, REFERENCE)))
    walked = RuleWalk(test, params, routing, rule_variants=[parse_label(x) for x in labels]).run()
    ppy = float(test.periods_per_year)
    oracle = np.array([oracle_test[name]["sharpe"] for name in test.asset_names])
    ref = _sharpes(walked[REFERENCE], ppy)
    return {
        "data_seed": data_cfg["seed"],
        "oracle_variant": oracle_val["variant"],
        "oracle_validation_sharpe": oracle_val["mean"]["sharpe"],
        "oracle_validation_grid": oracle_val["grid"],
        "momentum_variant": momentum,
        "momentum_validation_sharpe": grid[momentum]["mean"]["sharpe"],
        "test": {
            "oracle": _stats(oracle),
            "momentum_chosen": _stats(_sharpes(walked[momentum], ppy)),
            "momentum_64_1": _stats(ref),
            "oracle_minus_momentum_64_1": _stats(oracle - ref),
        },
        "per_series_test_sharpe": {"oracle": oracle.tolist(), REFERENCE: ref.tolist()},
        "wall_s": time.perf_counter() - t0,
    }


def recorded_agent() -> dict | None:
    """The agent's mean test Sharpe over seeds on data seed 0's test series, from learning.json."""
    if not LEARNING.exists():
        return None
    budget = json.loads(LEARNING.read_text())["budgets"]["1x"]
    sharpes = [s["test_sharpe"] for s in budget["per_seed"].values()]
    return {"source": "benchmarks/results/learning.json (budget 1x)", "seeds": len(sharpes),
            "test_sharpe_mean_over_seeds": float(np.mean(sharpes))}


def main() -> None:
    from rl_zerosync.envs.params import EnvParams
    from rl_zerosync.evaluation.oracle import BANDS, NUM_VARIANTS, ORACLE_LABEL, SCALES
    from rl_zerosync.kernels.route import routing_thresholds

    args = parser(__doc__, out=results_path("oracle"), quick="data seed 0 only").parse_args()
    out = quick_path("oracle") if args.quick and args.out == results_path("oracle") else args.out
    settings = yaml.safe_load(CONFIG.read_text())
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    params = EnvParams.from_dict(settings["env"])
    routing = routing_thresholds(settings.get("runner"))
    seeds = SEEDS[:1] if args.quick else SEEDS
    t0 = time.perf_counter()
    per_seed = []
    for seed in seeds:
        per_seed.append(one_seed({**settings["data"], "seed": seed}, params, routing, device))
        row = per_seed[-1]
        print(f"data seed {seed}: oracle {row['oracle_variant']} test {row['test']['oracle']['mean']:+.3f}, "
              f"{REFERENCE} {row['test']['momentum_64_1']['mean']:+.3f} ({row['wall_s']:.0f} s)", flush=True)
    oracle = np.concatenate([r["per_series_test_sharpe"]["oracle"] for r in per_seed])
    ref = np.concatenate([r["per_series_test_sharpe"][REFERENCE] for r in per_seed])
    agent = recorded_agent()
    seed0 = per_seed[0]["test"]["oracle"]["mean"]
    summary = {
        "label": ORACLE_LABEL,
        "pooled_test": {"oracle": _stats(oracle), "momentum_64_1": _stats(ref),
                        "oracle_minus_momentum_64_1": _stats(oracle - ref)},
        "data_seed_0_test": per_seed[0]["test"],
        "recorded_agent_on_data_seed_0": agent,
        "recorded_agent_efficiency": (agent["test_sharpe_mean_over_seeds"] / seed0) if agent and seed0 > 0 else None,
    }
    rows = [{"data seed": r["data_seed"], "oracle variant": r["oracle_variant"],
             "oracle": r["test"]["oracle"]["mean"], "momentum chosen": r["test"]["momentum_chosen"]["mean"],
             "chosen variant": r["momentum_variant"], REFERENCE: r["test"]["momentum_64_1"]["mean"],
             "difference": r["test"]["oracle_minus_momentum_64_1"]["mean"],
             "se": r["test"]["oracle_minus_momentum_64_1"]["se"]} for r in per_seed]
    print_table(rows, list(rows[0]), width=15, title="\nmean test Sharpe over 32 held-out series of 3,000 bars")
    print_summary(summary)
    config = {"config": "configs/local.yaml", "data_seeds": list(seeds), "device": str(device),
              "validation_series": settings["data"]["heldout_validation_series"],
              "test_series": settings["data"]["heldout_test_series"], "bars": settings["data"]["heldout_bars"],
              "env": settings["env"], "oracle_grid": {"scales": list(SCALES), "bands": list(BANDS),
                                                      "variants": NUM_VARIANTS},
              "reference_rule": REFERENCE, "quick": bool(args.quick)}
    result = {**result_header("oracle", device=device, config=config), "per_seed": per_seed, "summary": summary,
              "wall_s": time.perf_counter() - t0}
    write_json(result, out)


if __name__ == "__main__":
    main()
