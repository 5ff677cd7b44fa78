"""Print the README's performance tables (markdown) from ``benchmarks/results/*.json``.

How to run: ``python benchmarks/tables.py [--dir benchmarks/results]``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def _load(d: Path, name: str):
    p = d / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _head(r: dict) -> str:
    hw = r.get("hardware", {})
    v = r.get("versions", {})
    gpu = hw.get("gpu") or hw.get("gpu_name") or "?"
    ver = ", ".join(f"{k} {v[k]}" for k in ("torch", "ray", "cupy") if k in v)
    return f"_{r.get('date', '?')} · {gpu}{' · ' + ver if ver else ''}_\n"


def learner(r) -> str:
    out = [_head(r), "| variant | batch | median µs/update | updates/s | syncs/update | × stock |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for x in r["results"]:
        out.append(f"| {x['variant']} | {x['batch_size']} | {x['median_us']:.0f} | {x['updates_per_s']:,.0f} "
                   f"| {x['syncs_per_update']:.2f} | {x['speedup_vs_stock']:.1f} |")
    return "\n".join(out)


def env_runner(r) -> str:
    out = [_head(r), "| runner | envs × T | graph | env steps/s (sample) | env steps/s (sample_device) "
           "| syncs/sample | event waits/sample |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for s in r.get("stock_runs") or [r["stock"]]:
        who = f"stock SingleAgentEnvRunner × {s.get('runners', 1)} ({s.get('env', 'gym twin')})"
        out.append(f"| {who} | {s['envs']} envs each | – | {s['env_steps_per_s']:,.0f} | – | – | – |")
    for x in r["rows"]:
        out.append(f"| GPUEnvRunner | {x['envs']:,} × {x['steps']} | {'on' if x['graph'] else 'off'} "
                   f"| {x['sample_env_steps_per_s']:,.0f} | {x['sample_device_env_steps_per_s']:,.0f} "
                   f"| {x['syncs_per_sample']} | {x['event_waits_per_sample']} |")
    return "\n".join(out)


def kernels(r) -> str:
    out = [_head(r), "| kernel | torch twin eager µs | CuPy kernel eager µs | in a CUDA graph µs |",
           "| --- | ---: | ---: | ---: |"]
    for x in r["launch"]:
        out.append(f"| {x['kernel']} | {x['twin_eager_us']:.1f} | {x['eager_us']:.1f} | {x['graph_us']:.2f} |")
    out += ["", "| Q-stats rows × 45 | twin µs | kernel µs | kernel GB/s | × twin |", "| ---: | ---: | ---: | ---: | ---: |"]
    for x in r["qstats"]:
        out.append(f"| {x['rows']:,} | {x['twin_us']:.0f} | {x['kernel_us']:.0f} | {x['kernel_gb_per_s']:.0f} "
                   f"| {x['speedup_vs_twin']:.1f} |")
    return "\n".join(out)


def env(r) -> str:
    out = [_head(r), "| envs | eager env steps/s | graphed env steps/s |", "| ---: | ---: | ---: |"]
    for x in r["batched"]:
        out.append(f"| {x['num_envs']:,} | {x['env_steps_per_s']:,.0f} | {x.get('graph_env_steps_per_s', 0):,.0f} |")
    out.append(f"| gymnasium twin (1 env, CPU) | {r['twin']['steps_per_s']:,.0f} | – |")
    return "\n".join(out)


def e2e(r) -> str:
    s = r["summary"]
    o, k = r["ours"], r["stock"]

    def first(curve, target):
        return next((p["train_s"] for p in curve if p["val_sharpe"] >= target), None)

    out = [_head(r), "| | env steps/s | updates/s | train s to val Sharpe ≥ target | best val Sharpe |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for name, x in (("ZeroSyncDQN (local.yaml)", o), ("stock RLlib DQN", k)):
        t = first(x["curve"], s["target_val_sharpe"])
        best = max(p["val_sharpe"] for p in x["curve"])
        out.append(f"| {name} | {x['env_steps'] / x['train_s']:,.0f} | {x['updates'] / x['train_s']:,.1f} "
                   f"| {f'{t:.1f}' if t is not None else 'not reached'} | {best:.2f} |")
    out.append("")
    out.append(f"target val Sharpe {s['target_val_sharpe']:.2f}; test Sharpe of our final policy "
               f"{s['out_of_sample_sharpe']:.2f} (flat 0.00, buy-and-hold {s['test_buy_and_hold_sharpe']:.2f})")
    return "\n".join(out)


def _ci(x) -> str:
    return f"[{x[0]:+.2f}, {x[1]:+.2f}]"


def learning(r) -> str:
    """Out-of-sample table: per budget the agent (best checkpoint by validation) vs the rules."""
    out = [_head(r), "| budget | iterations | seeds | test Sharpe, mean [95% CI] | best rule (chosen on validation) "
           "| agent − best rule [95% CI] | buy-and-hold | mean reversion | flat | train − test Sharpe |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, b in r["budgets"].items():
        s = b["summary"]
        rules = s["rules_test_sharpe_mean"]
        best = {p["best_rule"] for p in b["per_seed"].values()}
        out.append(f"| {name} | {b['iterations']:,} | {s['seeds']} | {s['test_sharpe_mean']:+.2f} {_ci(s['test_sharpe_ci95'])} "
                   f"| {s['best_rule_test_sharpe_mean']:+.2f} ({', '.join(sorted(best))}) "
                   f"| {s['agent_minus_best_rule_mean']:+.2f} {_ci(s['agent_minus_best_rule_ci95'])} "
                   f"| {rules['buy_and_hold']:+.2f} | {rules['mean_reversion']:+.2f} | {rules['flat']:+.2f} "
                   f"| {s['train_minus_test_sharpe_mean']:+.2f} |")
    t = r.get("validation_timing")
    if t:
        out += ["", f"Validation pass, {t['assets']} assets × {t['validation_bars']:,} bars: "
                f"{t['split_walk_s'] * 1e3:.0f} ms ({t['split_steps']} sequential steps in time splits; "
                f"one whole walk {t['whole_walk_s']:.2f} s, the rules' walk once per run {t['rules_walk_s']:.1f} s)."]
    real = r.get("real")
    if real:
        n = len(real["per_seed"])
        out += ["", f"| real data ({real['config']}, {real['folds']} walk-forward folds, {n} seeds) | mean [95% CI] |",
                "| --- | ---: |",
                f"| agent test Sharpe (mean over folds) | {real['test_sharpe_mean']:+.2f} {_ci(real['test_sharpe_ci95'])} |",
                f"| best rule chosen on validation | {real['best_rule_test_sharpe_mean']:+.2f} |",
                f"| agent − best rule | {real['agent_minus_best_rule_mean']:+.2f} {_ci(real['agent_minus_best_rule_ci95'])} |",
                f"| buy-and-hold | {real['buy_and_hold_test_sharpe_mean']:+.2f} |"]
    return "\n".join(out)


def learning_sweep(r) -> str:
    out = [_head(r), "| variant (on top of the config) | seeds | best validation Sharpe | test Sharpe [95% CI] "
           "| agent − best rule |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, v in r["sweep"].items():
        if "summary" not in v:
            out.append(f"| {name} | – | failed | – | – |")
            continue
        s = v["summary"]
        out.append(f"| {name}: `{' '.join(v['overrides'])}` | {s['seeds']} | {s['best_validation_sharpe_mean']:+.2f} "
                   f"| {s['test_sharpe_mean']:+.2f} {_ci(s['test_sharpe_ci95'])} | {s['agent_minus_best_rule_mean']:+.2f} |")
    return "\n".join(out)


def scaling(r) -> str:
    gpu = r.get("hardware", {}).get("gpu", "?")
    out = [_head(r).replace(gpu, f"{r.get('gpu_count', '?')} × {gpu}", 1),
           "**Learner alone** (per-learner batch {b}, 2×256 MLP; slowest rank):\n".format(
               b=r["config"]["batch"]),
           "| variant | GPUs | µs/update | trained transitions/s | syncs/update |", "| --- | ---: | ---: | ---: | ---: |"]
    for x in r["learner"]:
        out.append(f"| {x['variant']} | {x['gpus']} | {x['us_per_update']:.0f} | {x['trained_per_s']:,.0f} "
                   f"| {x['syncs_per_update']:.0f} |")
    c = r["config"]
    sm = r["summary"]
    if not r.get("e2e"):
        out += ["", f"Learner scaling efficiency, 2 GPUs: {sm['learner_scaling_efficiency_2gpu']:.2f} (stock "
                f"{sm['stock_learner_scaling_efficiency_2gpu']:.2f}); our DDP update is "
                f"{sm['ddp_update_speedup_vs_stock']:.1f}× stock's DDP update."]
        return "\n".join(out)
    out += ["", f"**End to end** (per GPU: 1 GPU env runner × {c['envs']:,} envs × T={c['rollout']} + 1 learner, "
            f"replay ratio {c['replay_ratio']}; median seconds per iteration phase):\n",
            "| GPUs | env steps/s | updates/s | trained transitions/s | sample | add | train | sync weights | placement (runners / learners) |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for x in r["e2e"]:
        ph = x["phase_median_s"]
        place = f"{x['placement']['runners']} / {x['placement']['learners']}".replace("'", "")
        out.append(f"| {x['gpus']} | {x['env_steps_per_s']:,.0f} | {x['updates_per_s']:,.0f} | {x['trained_per_s']:,.0f} "
                   f"| {ph['sample']:.3f} | {ph['add']:.3f} | {ph['train']:.3f} | {ph['sync_weights']:.3f} | {place} |")
    sm = r["summary"]
    out += ["", f"Scaling efficiency, 2 GPUs: end to end **{sm['scaling_efficiency_2gpu']:.2f}**, learner alone "
            f"{sm['learner_scaling_efficiency_2gpu']:.2f} (stock RLlib learner {sm['stock_learner_scaling_efficiency_2gpu']:.2f}); "
            f"our DDP update is {sm['ddp_update_speedup_vs_stock']:.1f}× stock's DDP update."]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="benchmarks/results")
    d = Path(p.parse_args().dir)
    for name, fn in (("learning", learning), ("learning_sweep", learning_sweep),
                     ("learner", learner), ("env_runner", env_runner), ("e2e", e2e),
                     ("kernels", kernels), ("env", env), ("scaling", scaling), ("scaling_learner", scaling)):
        r = _load(d, name)
        if r is not None:
            print(f"### {name}\n\n{fn(r)}\n")


if __name__ == "__main__":
    main()
