"""Print the results tables of ``docs/results.md`` (markdown) from ``benchmarks/results/*.json``.

How to run: ``python -m benchmarks.tables [--dir benchmarks/results]`` prints every block;
``python -m benchmarks.tables --check`` compares them with ``docs/results.md`` and names what differs
(exit status 1).

Every table of ``docs/results.md`` is printed here, from the JSON named in :data:`TABLES`, with the
page's labels. ``tests/test_readme_tables.py`` checks that each printed table (a block of lines
starting with ``|``) is in the page verbatim, that every other line printed here (each block's first
line, naming the run's date, GPU and versions, and the summary lines) is a line of the page, and that
the page has no other table. The page's "Headlines" section holds one line per result, linking to
its section, with no number the rest of the page does not hold (the README quotes no results).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Callable, Dict, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS_DOC = REPO / "docs" / "results.md"
"""The page whose tables this module prints."""


def _load(d: Path, name: str):
    p = d / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _head(r: dict, gpu: Optional[str] = None) -> str:
    """``_date · GPU · versions_``: the line each printed block starts with."""
    hw = r.get("hardware", {})
    v = r.get("versions", {})
    gpu = gpu or hw.get("gpu") or hw.get("gpu_name") or "CPU (no GPU)"
    ver = ", ".join(f"{k} {v[k]}" for k in ("torch", "ray", "cupy")
                    if k in v and not str(v[k]).startswith(("unavailable", "not installed")))
    return f"_{str(r.get('date', '?'))[:10]} · {gpu}{' · ' + ver if ver else ''}_\n"


def _num(x: Optional[float], fmt: str = ",.0f") -> str:
    return "–" if x is None else format(x, fmt)


def _rate(x: Optional[float]) -> str:
    """Thousands separators from 100 up, one decimal below (1,159 and 1.9)."""
    return "–" if x is None else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}")


def _ci(x) -> str:
    return f"[{x[0]:+.2f}, {x[1]:+.2f}]"


# -------------------------------------------------------------------------------- out of sample
def learning(r) -> str:
    """Out-of-sample table: per budget the agent (best checkpoint by validation) vs the rules, with the
    calibrated intervals, PSR, and the DSR where the selection happened (``benchmarks/learning.py``)."""
    hw = r.get("hardware", {})
    gpu = None if hw.get("device") == "cuda" else (f"CPU (no GPU), {hw.get('cpu_count', '?')} cores, "
                                                   f"{hw.get('torch_threads', '?')} torch thread(s)")
    calibrated = "dsr_expected_max" in r["summary"]
    head = ("| PSR (test) | DSR (validation) | expected best of the trials | effective trials |" if calibrated
            else "| PSR | DSR | trials |")
    out = [_head(r, gpu=gpu), "| budget | iterations | seeds | held-out test series | test Sharpe [95% CI] "
           "| best rule (chosen on validation) | agent − best rule [95% CI] | buy-and-hold " + head,
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if calibrated else "")]
    for name, b in r["budgets"].items():
        s = b["summary"]
        best = {p["best_rule"] for p in b["per_seed"].values()}
        series = next(iter(b["per_seed"].values())).get("heldout_test_series", 0)
        tail = (f"| {s['psr']:.2f} | {s['deflated_sharpe']:.2f} (on {s['dsr_sharpe']:+.2f}) "
                f"| {s['dsr_expected_max']:+.2f} | {_trials(s['dsr_trials'])} |" if calibrated else
                f"| {s['psr']:.2f} | {s['deflated_sharpe']:.2f} | {_trials(s['trials'])} |")
        out.append(f"| {name} | {b['iterations']:,} | {s['seeds']} | {series} "
                   f"| {s['test_sharpe_mean']:+.2f} {_ci(s['test_sharpe_ci95'])} "
                   f"| {s['best_rule_test_sharpe_mean']:+.2f} ({', '.join(sorted(best))}) "
                   f"| {s['agent_minus_best_rule_mean']:+.2f} {_ci(s['agent_minus_best_rule_ci95'])} "
                   f"| {s['rules_test_sharpe_mean']['buy_and_hold']:+.2f} " + tail)
    sm = r["summary"]
    first = next(iter(r["budgets"].values()))
    out += ["", f"Verdict: {_verdict(sm['agent_minus_best_rule_ci95'], sm['agent_minus_best_rule'])}; "
                f"{first['wall_s']:.0f} s wall for {sm['seeds']} seeds.",
            f"Intervals: {sm['ci_method']}.", f"Trials counted: {sm['trials_counted']}."]
    cov = sm.get("coverage")
    if cov:
        out.append(f"Coverage of these intervals on the generator (`coverage.json`, {cov['level']['sets']} fresh "
                   f"sets): {cov['level']['coverage']:.3f} with {cov['level']['width_ratio']:.2f}x the true width "
                   f"(level), {cov['paired_difference']['coverage']:.3f} with "
                   f"{cov['paired_difference']['width_ratio']:.2f}x (paired difference).")
    spread = sm.get("test_sharpe_seed_spread")
    if spread:
        out.append(f"Over seeds alone (no bar noise) the test Sharpe's "
                   f"{'95% interval' if sm['seeds'] >= 5 else 'range'} is {spread[0]:+.2f} to {spread[1]:+.2f}.")
    t = r.get("validation_timing")
    if t:
        out += ["", f"Validation pass, {t['assets']} assets × {t['validation_bars']:,} bars: "
                f"{t['split_walk_s'] * 1e3:.0f} ms ({t['split_steps']} sequential steps in time splits; "
                f"one whole walk {t['whole_walk_s']:.2f} s, the rules' walk once per run {t['rules_walk_s']:.1f} s)."]
    return "\n".join(out)


def coverage(r) -> str:
    """Coverage of the evidence's intervals on the project's own generator (``coverage.json``)."""
    c, res = r["config"], r["results"]
    out = [_head(r), f"{c['sets']} fresh test sets of {c['series']} series × {c['bars']:,} bars (local.yaml's "
           f"generator), rule {c['rule']}; goal: coverage 0.90–0.98, width 0.8–1.25× the true width.", "",
           "| statistic | method | sets | coverage of the truth | mean width / true width |",
           "| --- | --- | ---: | ---: | ---: |"]
    names = {"calibrated": "cluster bootstrap, t-scaled percentile (the reports' method)",
             "cluster_percentile": "cluster bootstrap, plain percentile",
             "cluster_percentile_t": "cluster bootstrap, t-scaled percentile",
             "cluster_studentized": "cluster bootstrap, bootstrap-t",
             "old_bar_bootstrap": "bar bootstrap, Politis-White block (the method before)"}
    for stat in ("level", "paired_difference"):
        for k, v in res[stat].items():
            if isinstance(v, dict):
                out.append(f"| {stat.replace('_', ' ')} | {names.get(k, k)} | {v['sets']} | {v['coverage']:.3f} "
                           f"| {v['width_ratio']:.2f} |")
    return "\n".join(out)


def wholerun(r) -> str:
    """Whole runs from process start to exit beside their steady rates (``wholerun.json``)."""
    hw = r.get("hardware", {})
    gpu = None if hw.get("device") == "cuda" else f"CPU (no GPU), {hw.get('cpu_count', '?')} cores"
    out = [_head(r, gpu=gpu), "| case | wall s | start-up s | training s | validation s | after training s "
           "| between iterations s | env steps/s, whole run | env steps/s, steady | whole / steady "
           "| slowest iteration / median |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    f = lambda v, d=1: "–" if v is None else f"{v:,.{d}f}"  # noqa: E731
    for name, c in r["cases"].items():
        out.append(f"| {name.replace('_', ' ')} | {f(c['wall_s'])} | {f(c.get('startup_s'))} | {f(c.get('training_s'))} "
                   f"| {f(c.get('validation_s'))} | {f(c.get('end_s'))} | {f(c.get('other_s'))} "
                   f"| {f(c.get('whole_rate'), 0)} | {f(c.get('steady_rate'), 0)} | {f(c.get('whole_over_steady'), 2)} "
                   f"| {f(c.get('slowest_iteration_over_median'), 2)} |")
    return "\n".join(out)


def _trials(n) -> str:
    """A trial count: whole (the counted trials of older results) or effective (one decimal)."""
    return f"{n}" if isinstance(n, int) or float(n).is_integer() else f"{float(n):.1f}"


def _verdict(ci, estimate: Optional[float] = None) -> str:
    """What a 95% interval of agent − best rule (and its point ``estimate``) says."""
    if estimate is not None and estimate < 0 <= ci[1] and ci[0] <= 0:
        return "a miss: the agent is below the best rule, not significantly (interval contains 0)"
    if ci[0] > 0:
        return "the agent's edge over the best rule is significant (interval above 0)"
    if ci[1] < 0:
        return "the agent is significantly worse than the best rule (interval below 0)"
    return "the agent's edge over the best rule is not significant (interval contains 0)"


def learning_cpu_quick(r) -> str:
    """The CPU-sized learning run on sealed held-out series, with sample-noise intervals and the
    trial-adjusted figures (``python -m benchmarks.learning --quick``)."""
    hw = r.get("hardware", {})
    s = r["summary"]
    b = next(iter(r["budgets"].values()))
    best = sorted({p["best_rule"] for p in b["per_seed"].values()})
    config = f"`{Path(str(r['config'])).name}` " + " ".join(f"`{o}`" for o in r.get("overrides", []))
    out = [_head(r, gpu=f"CPU (no GPU), {hw.get('cpu_count', '?')} cores, {hw.get('torch_threads', '?')} torch "
                        f"thread(s)"),
           "| config | iterations | seeds | held-out test series | test Sharpe [95% CI] | best rule (chosen on "
           "validation) | agent − best rule [95% CI] | buy-and-hold | PSR (test) | DSR (validation) | expected best "
           "of the trials | effective trials | PBO (rule variants) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
           f"| {config} | {b['iterations']:,} | {s['seeds']} | {s['heldout_test_series']} "
           f"| {s['test_sharpe_mean']:+.2f} {_ci(s['test_sharpe_ci95'])} "
           f"| {s['best_rule_test_sharpe_mean']:+.2f} ({', '.join(best)}) "
           f"| {s['agent_minus_best_rule']:+.2f} {_ci(s['agent_minus_best_rule_ci95'])} "
           f"| {s['rules_test_sharpe_mean']['buy_and_hold']:+.2f} | {s['psr']:.2f} | {s['deflated_sharpe']:.2f} "
           f"(on {s['dsr_sharpe']:+.2f}) | {s['dsr_expected_max']:+.2f} | {_trials(s['dsr_trials'])} | {s['pbo']:.2f} |",
           "", f"Verdict: {_verdict(s['agent_minus_best_rule_ci95'])}; {b['wall_s']:.0f} s wall for both seeds.",
           f"Intervals: {s['ci_method']}.",
           f"Trials counted: {s['trials_counted']}."]
    return "\n".join(out)


SWEEP_LABELS = {
    "as_shipped_before": "as shipped before (fixed training segment, window 16, Adam)",
    "fresh_data": "fresh series every 10 iterations",
    "fresh_window64": "fresh + window 64",
    "fresh_window64_layernorm": "fresh + window 64 + LayerNorm",
    "fresh_window64_layernorm_wd": "fresh + window 64 + LayerNorm + AdamW 1e-4",
    "fixed_window64_layernorm": "fixed training segment + window 64 + LayerNorm",
}
"""Human labels of the ``learning_sweep.json`` variants (their overrides are in the JSON)."""


def _matches(overrides, config: Optional[dict]) -> bool:
    """True when every ``section.key=value`` override holds in ``config`` (a parsed YAML)."""
    import yaml

    if not config:
        return False
    for item in overrides:
        path, value = item.split("=", 1)
        node = config
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        if node != yaml.safe_load(value):
            return False
    return True


def _local_yaml() -> Optional[dict]:
    import yaml

    p = REPO / "configs" / "local.yaml"
    return yaml.safe_load(p.read_text()) if p.is_file() else None


def learning_sweep(r, current: Optional[dict] = None) -> str:
    """The validation-only sweep that chose ``local.yaml`` (no test segment read); the variant
    ``current`` (default: configs/local.yaml) matches in bold, the one chosen on validation named."""
    current = _local_yaml() if current is None else current
    out = [_head(r), "| variant (on top of the config) | seeds | best validation Sharpe, mean [range over seeds] "
           "| iteration of the best pass, per seed |", "| --- | ---: | ---: | ---: |"]
    for name, v in r["sweep"].items():
        label = SWEEP_LABELS.get(name, f"{name}: `{' '.join(v['overrides'])}`")
        if _matches(v["overrides"], current):
            label = f"**{label} (local.yaml now)**"
        if "summary" not in v:
            out.append(f"| {label} | – | failed | – |")
            continue
        s = v["summary"]
        spread = s.get("best_validation_sharpe_seed_range", s.get("best_validation_sharpe_seed_ci95"))
        its = ", ".join(str(p["checkpoint_iteration"]) for p in v["per_seed"].values())
        out.append(f"| {label} | {s['seeds']} | {s['best_validation_sharpe_mean']:+.3f} {_ci(spread)} | {its} |")
    trials = sum(len(p["validation_curve"]) for v in r["sweep"].values() if "summary" in v
                 for p in v["per_seed"].values())
    out += ["", f"Chosen on validation (highest mean): {SWEEP_LABELS.get(r['chosen_on_validation'], r['chosen_on_validation'])}; "
                f"the sweep read no test segment; its {trials} validation passes are counted in the DSR's trials "
                f"of the out-of-sample result."]
    return "\n".join(out)


# ------------------------------------------------------------------------------------- learner
LEARNER_LABELS = {"stock": "stock", "ours_eager": "ours, eager", "ours_graph": "ours, CUDA graph",
                  "ours_graph_torch_mlp": "ours, graph, torch forward + autograd",
                  "ours_graph_x8": "ours, graph, 8 updates per launch",
                  "ours_compiled": "ours, graph + compile", "ours_compiled_tf32": "ours, graph + compile + TF32"}


def learner(r) -> str:
    out = [_head(r), "| variant | batch | median µs/update | updates/s | syncs/update | device ops/update "
           "| host µs/update | × stock |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for x in r["results"]:
        syncs = "n/a" if x["syncs_per_update"] is None else f"{x['syncs_per_update']:.2f}"
        ops = x.get("kernels_per_update")
        host = x.get("host_enqueue_us")
        out.append(f"| {LEARNER_LABELS.get(x['variant'], x['variant'])} | {x['batch_size']:,} | {x['median_us']:,.0f} "
                   f"| {x['updates_per_s']:,.0f} | {syncs} | {'–' if ops is None else f'{ops:.0f}'} "
                   f"| {'–' if host is None else f'{host:,.0f}'} | {x['speedup_vs_stock']:.1f} |")
    return "\n".join(out)


PROFILE_LABELS = {"graph": "2×256, default (linear kernels)", "graph_torch_mlp": "2×256, torch forward + autograd",
                  "graph_compile": "2×256, compile", "graph_compile_tf32": "2×256, compile + TF32",
                  "graph_layernorm": "2×256 + LayerNorm (`local.yaml`'s), default",
                  "graph_layernorm_torch_mlp": "2×256 + LayerNorm, torch forward + autograd"}


def learner_profile(r) -> str:
    """Device ops and time of one update per variant (``learner_profile.json``, batch 512)."""
    out = [_head(r), "| network, update | device ops | µs of kernels | µs wall |", "| --- | ---: | ---: | ---: |"]
    for name, x in r["results"].items():
        out.append(f"| {PROFILE_LABELS.get(name, name)} | {x['ops_per_update']:.0f} | {x['kernel_us_per_update']:.1f} "
                   f"| {x['wall_us_per_update']:.1f} |")
    return "\n".join(out)


def throughput(r) -> str:
    """End to end with training beside the sampler alone (``throughput.json``)."""
    out = [_head(r), "| config | overlap | envs × T | replay ratio | env steps/s with training | sampler alone "
           "| fraction of sampler |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for x in r["results"]:
        out.append(f"| `{x['config']}` | {'on' if x['overlap'] else 'off'} | {x['num_envs']:,} × {x['rollout_length']} "
                   f"| {x['replay_ratio_trained']:.2f} | {_num(x['e2e_env_steps_per_s'])} "
                   f"| {_num(x['sampler_env_steps_per_s'])} | {x['fraction_of_sampler']:.2f} |")
    return "\n".join(out)


def synthetic_gen(r) -> str:
    """The synthetic generator, loop over bars against vectorised in the same run (``synthetic_gen.json``)."""
    out = [_head(r), "| series | assets × bars | loop, CPU s | vectorised, CPU s | × | same bits |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for x in r["generation"]:
        out.append(f"| {x['series'].replace('_', ' ')} | {x['assets']} × {x['bars']:,} | {x['loop_cpu_s']:.3f} "
                   f"| {x['vectorised_cpu_s']:.3f} | {x['speedup_cpu']:.1f} | {'yes' if x['bit_for_bit'] else 'no'} |")
    b, c, hw = r["build"], r["cadence"], r["hardware"]
    load = [hw[k][0] for k in ("load_average_at_start", "load_average_at_end") if k in hw]
    out += ["", f"One training generation built as the prefetch process builds it (series, features, checks; "
                f"wall medians): {b['vectorised_wall_s']:.3f} s, {b['vectorised_1_thread_wall_s']:.3f} s with the "
                f"features on one thread, {b['loop_wall_s']:.3f} s with the loop; swapped in every "
                f"{c['regenerate_every']} × {c['iteration_s'] * 1e3:.1f} ms: advance() median "
                f"{c['advance_median_s'] * 1e3:.1f} ms, max {c['advance_max_s'] * 1e3:.1f} ms"
                + (f" (load average {' to '.join(f'{x:.1f}' for x in load)} on {hw['cpu_count']} cores)." if load else ".")]
    return "\n".join(out)


SYNC_SITES = {
    "ray/rllib/core/learner/torch/torch_learner.py:204": "`not torch.isfinite(grad).all()` per parameter (NaN check)",
    "ray/rllib/core/learner/torch/torch_learner.py:263": "`all(torch.isfinite(param.grad).all() ...)` per parameter "
                                                         "(before `optim.step()`)",
    "ray/rllib/utils/metrics/stats/series.py:269": "`if torch.all(torch.isnan(stacked))` per mean metric "
                                                   "in `metrics.reduce()`",
    "ray/rllib/utils/metrics/stats/utils.py:38": "`value.detach().cpu()` per mean metric (then `.item()` on the host)",
    "ray/rllib/utils/metrics/stats/utils.py:65": "`stacked.detach().cpu()` of the TD errors (then `.tolist()`)",
}
"""What each sync site of ``stock_syncs.json`` does (sites not listed print their kind and source)."""

SYNC_LEARNERS = {"learner_bench_stock": "learner.py stock row", "cartpole_dqn": "CartPole DQN",
                 "cartpole_dqn_skipnan": "CartPole, `torch_skip_nan_gradients`"}


def _count(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}"


def stock_syncs(r) -> str:
    """Per sync site of stock's update, the count per update of each probed learner."""
    ls = r["learners"]
    names = list(ls)
    sites: Dict[str, dict] = {}
    for name in names:
        for s in ls[name]["sites"]:
            key = s["site"]
            sites.setdefault(key, {"desc": SYNC_SITES.get(key, f"`{s['kind']}`: `{s['code'][:60]}`"), "n": {}})
            sites[key]["n"][name] = sites[key]["n"].get(name, 0.0) + s["per_update"]

    def order(site: str):
        path, _, line = site.rpartition(":")
        return path, int(line) if line.isdigit() else 0

    head = " | ".join(f"{SYNC_LEARNERS.get(n, n)} ({ls[n]['param_tensors']} params)" for n in names)
    out = [_head(r, gpu="CPU sync probe"), f"| sync site (`file:line`, RLlib 2.60) | call | {head} |",
           "| --- | --- | " + " | ".join("---:" for _ in names) + " |"]
    for site in sorted(sites, key=order):
        v = sites[site]
        out.append(f"| `{site.removeprefix('ray/rllib/')}` | {v['desc']} | "
                   + " | ".join(_count(v["n"].get(n, 0.0)) for n in names) + " |")
    out.append("| **total per update** | | " + " | ".join(f"**{_count(ls[n]['syncs_per_update'])}**" for n in names)
               + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------- env runner
def env_runner(r) -> str:
    out = [_head(r), "| runner | envs × T | graph | env steps/s (`sample`) | env steps/s (`sample_device`) "
           "| syncs/sample | event waits/sample |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    cores = r.get("hardware", {}).get("cpu_count")
    for s in r.get("stock_runs") or [r["stock"]]:
        n, what = s.get("runners", 1), s.get("env", "gym twin")
        if what == "torch twin":
            what += ", reference only"
        elif n > 1 and n == cores:
            what += ", one per core"
        out.append(f"| stock SingleAgentEnvRunner × {n} ({what}) | {s['envs']} envs each | – "
                   f"| {s['env_steps_per_s']:,.0f} | – | – | – |")
    for x in r["rows"]:
        out.append(f"| GPUEnvRunner | {x['envs']:,} × {x['steps']} | {'on' if x['graph'] else 'off'} "
                   f"| {x['sample_env_steps_per_s']:,.0f} | {x['sample_device_env_steps_per_s']:,.0f} "
                   f"| {x['syncs_per_sample']} | {x['event_waits_per_sample']} |")
    return "\n".join(out)


# ------------------------------------------------------------------------------------- cartpole
def cartpole(r) -> str:
    t, l, sm = r["throughput"], r["learning"], r["summary"]
    out = [_head(r), "| runner | envs | env steps/s (`sample`) | env steps/s (`sample_device`) |",
           "| --- | ---: | ---: | ---: |"]
    for key in ("stock_1_runner", "stock_all_cores"):
        s = t[key]
        out.append(f"| stock SingleAgentEnvRunner × {s['runners']} (gymnasium CartPole-v1) | {s['envs']} each "
                   f"| {s['env_steps_per_s']:,.0f} | – |")
    o = t["ours"]
    out.append(f"| GPUEnvRunner (batched CartPole, graph {'on' if o['graph'] else 'off'}) | {o['envs']:,} × "
               f"{o['steps']} | {o['sample_env_steps_per_s']:,.0f} | {o['sample_device_env_steps_per_s']:,.0f} |")
    target = l["target_episode_return_mean"]
    out += ["", f"| training to episode return mean ≥ {target:.0f} | setup | train s to target | env steps "
            "| best return mean |", "| --- | --- | ---: | ---: | ---: |"]
    stock_as_published = "training_intensity" in l["stock"]["setup"]  # runs before that key: misconfigured
    rows = [("ZeroSyncDQN", l["ours"])] + ([("stock DQN", l["stock"])] if stock_as_published else [])
    for name, x in rows:
        st = x["setup"]
        runners = st.get("env_runners")
        runners = f"{runners or 'the local'} env runner{'' if runners in (0, 1) else 's'}"
        setup = (f"{st['envs']} envs × {st['steps']} steps, batch {st['train_batch_size_per_learner']}, replay "
                 f"ratio {st['replay_ratio']:g}" if name == "ZeroSyncDQN" else
                 f"{st['settings']}, {runners}, batch {st['train_batch_size_per_learner']}")
        t_s = f"{x['time_to_target_s']:.1f}" if x["reached"] else f"not reached in {x['budget_s']:.0f}"
        steps = x.get("env_steps_to_target") or (x["curve"][-1]["env_steps"] if x["curve"] else None)
        out.append(f"| {name} | {setup} | {t_s} | {_num(steps)} | {x['best_return_mean']:.1f} |")
    if not stock_as_published:
        out += ["", f"Stock DQN row withheld: this run gave RLlib's CartPole example "
                    f"{l['stock']['setup'].get('env_runners')} env runners, which cut its updates per env step "
                    f"to 1/{l['stock']['setup'].get('env_runners')} of the example's; `benchmarks/cartpole.py` "
                    f"now runs the example as published and has not been re-run on this host."]
    envs = t["stock_all_cores"]["envs"]
    if "stock_envs_sweep" in t:
        out += ["", f"Sampler: {sm['speedup_vs_stock_all_cores']:,.0f}× stock with all cores ({envs} envs per "
                    f"stock runner, the best of the sweep)."]
    else:
        out += ["", f"Sampler: {sm['speedup_vs_stock_all_cores']:,.0f}× stock with all cores, against {envs} envs "
                    f"per stock runner, not swept in this run: not a tuned baseline."]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ e2e
def _first(curve, target):
    return next((p["train_s"] for p in curve if p["val_sharpe"] >= target), None)


def e2e(r) -> str:
    """The end-to-end table: format 1 (one seed, untuned stock) or 2 (seeds, tuned stock + sweep)."""
    return e2e_seeds(r) if r.get("format", 1) >= 2 else e2e_v1(r)


def e2e_v1(r) -> str:
    s = r["summary"]
    target = s["target_val_sharpe"]
    out = [_head(r), f"| | env steps/s | updates/s | train s to val Sharpe ≥ {target:.2f} | best val Sharpe |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for name, x in (("ZeroSyncDQN (local.yaml)", r["ours"]), ("stock RLlib DQN", r["stock"])):
        t = _first(x["curve"], target)
        best = max(p["val_sharpe"] for p in x["curve"])
        out.append(f"| {name} | {_rate(x['env_steps'] / x['train_s'])} | {_rate(x['updates'] / x['train_s'])} "
                   f"| {f'{t:.1f}' if t is not None else 'not reached'} | {best:.2f} |")
    out += ["", f"target val Sharpe {target:.2f}; test Sharpe of our final policy "
            f"{s['out_of_sample_sharpe']:.2f} (flat 0.00, buy-and-hold {s['test_buy_and_hold_sharpe']:.2f})"]
    return "\n".join(out)


def _spread(x: Optional[dict], fmt: Callable[[float], str]) -> str:
    if x is None:
        return "–"
    if x["n"] == 1:
        return fmt(x["median"])
    return f"{fmt(x['median'])} [{fmt(x['min'])}, {fmt(x['max'])}]"


def e2e_seeds(r) -> str:
    s, c = r["summary"], r["config"]
    ch = r["stock_tuned"]["chosen"]
    n = c["seeds"]
    cfg = Path(c.get("config", "local.yaml")).name
    runners = f"{ch['num_env_runners']} runners" if ch["num_env_runners"] else "the local runner"
    stock_name = (f"stock RLlib DQN, tuned (fragment {ch['rollout_fragment_length']}, "
                  f"{runners} × {ch['envs_per_runner']} envs)")
    out = [_head(r), f"| median [range] over {n} seeds | env steps/s | updates/s "
           f"| train s to val Sharpe ≥ {s['target_val_sharpe']:.2f} | best val Sharpe | test Sharpe |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    if "ours" not in s:  # a --sweep-only run: the sweep alone
        out = [_head(r).rstrip("\n")]
    for name, x in ((f"ZeroSyncDQN ({cfg})", s["ours"]), (stock_name, s["stock"])) if "ours" in s else ():
        t = _spread(x["time_to_target_s"], lambda v: f"{v:.1f}")
        t = f"{t} ({x['reached_target']}/{n} reached)" if x["reached_target"] else f"not reached (0/{n})"
        two = lambda v: f"{v:.2f}"  # noqa: E731
        out.append(f"| {name} | {_spread(x['env_steps_per_s'], _rate)} | {_spread(x['updates_per_s'], _rate)} "
                   f"| {t} | {_spread(x['best_val_sharpe'], two)} | {_spread(x['test_sharpe'], two)} |")
    out += ["", "| stock sweep point (seed 0): fragment × runners × envs | env steps/s | updates/s | replay ratio "
            "| sustained env steps/s |", "| --- | ---: | ---: | ---: | ---: |"]
    for p in r["stock_tuned"]["sweep"]:
        key = (p["rollout_fragment_length"], p["num_env_runners"], p["envs_per_runner"])
        chosen = key == (ch["rollout_fragment_length"], ch["num_env_runners"], ch["envs_per_runner"])
        label = f"{key[0]} × {key[1]} × {key[2]}" + (" (chosen)" if chosen else "")
        out.append(f"| {label} | {_rate(p['env_steps_per_s'])} | {_rate(p['updates_per_s'])} "
                   f"| {_num(p['replay_ratio_achieved'], '.2f')} | {_rate(p['sustained_env_steps_per_s'])} |")

    def x(v):
        return "–" if v is None else f"{v:,.0f}×" if v >= 10 else f"{v:.1f}×"

    if "ours" not in s:
        return "\n".join(out)
    kind = s.get("time_to_target_speedup_is", "lower bound" if s["time_to_target_is_lower_bound"] else "exact")
    lb = "" if kind == "exact" else f" ({kind})"
    out += ["", f"Ratios of the medians, ours / tuned stock: env steps/s {x(s['env_steps_per_s_speedup'])}, "
            f"updates/s {x(s['updates_per_s_speedup'])}, time to target {x(s['time_to_target_speedup'])}{lb}; "
            f"target = {s['target_rule']} on validation ({s['target_val_sharpe']:.2f}); test buy-and-hold "
            f"{_num(s['test_buy_and_hold_sharpe'], '.2f')}, flat 0.00."]
    return "\n".join(out)


# ------------------------------------------------------------------------------ kernels and env
def kernels(r) -> str:
    out = [_head(r), "| kernel | torch twin, eager µs | CuPy kernel, eager µs | kernel in a CUDA graph µs |",
           "| --- | ---: | ---: | ---: |"]
    for x in r["launch"]:
        out.append(f"| {x['kernel']} | {_num(x['twin_eager_us'], '.1f')} | {_num(x['eager_us'], '.1f')} "
                   f"| {_num(x['graph_us'], '.2f')} |")
    a = r.get("config", {}).get("qstats_actions", 45)
    out += ["", f"| Q-stats rows × {a} | torch twin µs | kernel µs | kernel GB/s | × twin |",
            "| ---: | ---: | ---: | ---: | ---: |"]
    for x in r["qstats"]:
        out.append(f"| {x['rows']:,} | {x['twin_us']:,.0f} | {_num(x['kernel_us'], '.0f')} "
                   f"| {_num(x['kernel_gb_per_s'], ',.0f')} | {_num(x['speedup_vs_twin'], '.1f')} |")
    return "\n".join(out)


def env(r) -> str:
    out = [_head(r), "| envs | raw env steps/s, eager | in a CUDA graph |", "| ---: | ---: | ---: |"]
    for x in r["batched"]:
        out.append(f"| {x['num_envs']:,} | {x['env_steps_per_s']:,.0f} | {_num(x.get('graph_env_steps_per_s'))} |")
    # env.py steps TradingGymEnv, the torch twin (the numpy twin is timed in env_runner.json)
    out.append(f"| {r['twin'].get('env', 'torch twin')} (1 env, CPU) | {r['twin']['steps_per_s']:,.0f} | – |")
    return "\n".join(out)


# -------------------------------------------------------------------------------------- scaling
def _scaling_head(r) -> str:
    gpu = r.get("hardware", {}).get("gpu", "?")
    return _head(r, gpu=f"{r.get('gpu_count', '?')} × {gpu}")


def scaling(r) -> str:
    """End-to-end weak scaling (``scaling.json``); a learner-only run prints :func:`scaling_learner`."""
    if not r.get("e2e"):
        return scaling_learner(r)
    out = [_scaling_head(r), "| GPUs | env steps/s | updates/s | trained transitions/s "
           "| iteration: sample / add / train / sync weights (ms) |", "| ---: | ---: | ---: | ---: | --- |"]
    for x in r["e2e"]:
        ph = x["phase_median_s"]
        ms = " / ".join(f"{ph[k] * 1e3:.0f}" for k in ("sample", "add", "train", "sync_weights"))
        out.append(f"| {x['gpus']} | {x['env_steps_per_s']:,.0f} | {x['updates_per_s']:,.0f} "
                   f"| {x['trained_per_s']:,.0f} | {ms} |")
    sm = r["summary"]
    out += ["", f"Scaling efficiency with 2 GPUs: **{sm['scaling_efficiency_2gpu']:.2f}** end to end."]
    return "\n".join(out)


def _scaling_label(variant: str, gpus: int) -> str:
    if variant == "stock":
        return "stock DQNTorchLearner" + (", DDP" if gpus > 1 else "")
    if variant == "ours_graph":
        return "ours, CUDA graph" + (", DDP (NCCL)" if gpus > 1 else "")
    if variant == "ours_eager":
        return "ours, eager" + (" DDP" if gpus > 1 else "")
    return variant


def scaling_learner(r) -> str:
    """Learner alone on 1 and 2 GPUs (``scaling_learner.json``)."""
    out = [_scaling_head(r), "| learner | GPUs | µs/update | trained transitions/s | syncs/update |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for x in r["learner"]:
        out.append(f"| {_scaling_label(x['variant'], x['gpus'])} | {x['gpus']} | {x['us_per_update']:,.0f} "
                   f"| {x['trained_per_s']:,.0f} | {x['syncs_per_update']:.0f} |")
    sm = r["summary"]
    out += ["", f"Learner scaling efficiency, 2 GPUs: {sm['learner_scaling_efficiency_2gpu']:.2f} (stock "
            f"{sm['stock_learner_scaling_efficiency_2gpu']:.2f}); our DDP update is "
            f"{sm['ddp_update_speedup_vs_stock']:.1f}× stock's DDP update."]
    return "\n".join(out)


# ---------------------------------------------------------------------------------- populations
def population_cpu_quick(r) -> str:
    """P members as one population process vs the same members as processes (``population_cpu_quick.json``)."""
    cores = r.get("hardware", {}).get("cpu_count", "?")
    out = [_head(r, gpu=f"CPU (no GPU), {cores} cores"),
           f"| run | members | wall s (train + {'validate + ' if (r.get('settings') or {}).get('run', {}).get('eval_every', 1) else ''}test) "
           "| env steps/s, whole run | env steps/s, steady "
           "| agents/hour |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for x in r["runs"]:
        label = ("one population process" if x["side"] == "population"
                 else f"processes (--seeds --parallel {x.get('parallel', '?')})")
        out.append(f"| {label} | {x['p']} | {x['wall_s']:.1f} | {x['env_steps_per_s']:,.0f} "
                   f"| {x['steady_env_steps_per_s']:,.0f} | {x['agents_per_hour']:,.0f} |")
    c, sm = r["comparison"], r["summary"]
    validates = (r.get("settings") or {}).get("run", {}).get("eval_every", 1)
    what = "trains, validates and tests" if validates else "trains and tests (no validation passes: run.eval_every 0)"
    out += ["", f"{c['p']} members: one population process {what} "
            f"{c['agents_per_hour_vs_processes']:.2f}x the agents per hour of {c['p']} processes run "
            f"{c['parallel']} at a time (wall ratio {c['wall_ratio_vs_processes']:.2f}); one run of each, same machine."]
    return "\n".join(out)


def population_update(r) -> str:
    """The learner update of P members three ways, same run (``population_update.json``)."""
    names = {"alone": "each member's own graphed update", "per_member": "per_member (one graph, members' kernels)",
             "batched": "batched (one graph, batched GEMMs)"}
    c = r["config"]
    out = [_head(r), "| P | way | ms per population update | member updates/s | learner env steps/s at replay ratio 1 "
                     "| ms per population update, whole run (first call's warm-up and capture included) |",
           "| ---: | --- | ---: | ---: | ---: | ---: |"]
    k = c["updates_per_iteration_k"]
    for x in r["rows"]:
        whole = (x["first_call_s"] + sum(x["repeats_s"])) / (k * (1 + len(x["repeats_s"])))
        out.append(f"| {x['p']} | {names[x['way']]} | {x['ms_per_population_update']:.2f} | "
                   f"{x['updates_per_s']:,.0f} | {x['learner_env_steps_per_s']:,.0f} | {1e3 * whole:.2f} |")
    sm, top = r["summary"], max(r["summary"]["p"])
    out += ["", f"P = {top} at batch {c['batch_size']}, hidden {c['hidden']}, LayerNorm {c['layernorm']}: the batched "
            f"update is {sm[f'batched_vs_alone_p{top}']:.2f}x the members' own graphed updates and "
            f"{sm[f'batched_vs_per_member_p{top}']:.2f}x per_member; {sm['syncs_per_population_update']} syncs per "
            f"population update."]
    return "\n".join(out)


# ---------------------------------------------------------------------------------- reliability
def reliability(r) -> str:
    sm = r["summary"]
    slowest = max(r["bad_inputs"], key=lambda x: x["wall_s"])
    over = [x for x in r["bad_inputs"] if not x["named_error"]]
    out = [_head(r, gpu="CPU (no GPU), " + str(r.get("hardware", {}).get("cpu_count", "?")) + " cores"),
           "| what | tried | named error / survived | rows lost or duplicated |", "| --- | ---: | ---: | ---: |",
           f"| bad inputs (one-line error, exit 2, no Ray, < 10 s) | {sm['bad_inputs_tried']} "
           f"| {sm['bad_inputs_named_error']} | – |",
           f"| faults (kills, signals, damaged checkpoints and metrics rows, lost runners, runner data errors, guard "
           f"halts, --overwrite, deleted run directories and locks, full disks, concurrent evaluations, "
           f"resumed sweeps) | {sm['faults_tried']} | {sm['faults_survived_or_named']} | {sm['rows_lost_or_duplicated']} |",
           *([] if "files_deleted_outside_run" not in sm else
             ["", f"Files deleted outside the run: {sm['files_deleted_outside_run']}."
              + (f" Files written outside the run (RLlib's ~/ray_results): {sm['files_changed_outside_run']}."
                 if "files_changed_outside_run" in sm else "")
              + (f" Failed or interrupted commands that exited non-zero: {sm['failed_or_interrupted_runs_nonzero']} "
                 f"of {sm['failed_or_interrupted_runs']}." if "failed_or_interrupted_runs" in sm else "")]),
           "", f"Slowest bad-input case: {slowest['wall_s']:.1f} s"
           + (f" (its own CPU {slowest['cpu_s']:.1f} s, load average {slowest['load_avg_1m']:.1f})"
              if "cpu_s" in slowest else "") + "."
           + (f" Not named: {len(over)}"
              + (f", of which {sm['bad_inputs_named_over_time_limit']} gave the named one-line error but after the "
                 f"10 s limit (a busy machine: load average up to {max(x['load_avg_1m'] for x in over):.1f} on "
                 f"{r.get('hardware', {}).get('cores', '?')} cores, own CPU up to "
                 f"{max(x.get('cpu_s', 0.0) for x in over):.1f} s)" if sm.get("bad_inputs_named_over_time_limit") else "")
              + ": " + ", ".join(f"{x['name']} ({'; '.join(x.get('failed_checks', []))})" for x in over) + "."
              if over else "")
           + " Faults: " + ", ".join(f["name"] + ("" if f["ok"] else " (FAILED)") for f in r["faults"]) + "."]
    return "\n".join(out)


# ------------------------------------------------------------------------------------- real data
def realdata(r) -> str:
    """Real markets with the deployment decided on validation (``realdata.json``, ``benchmarks/realdata.py``):
    per dataset the agent, the deployed policy and the baselines on the test bars, pooled over folds."""
    hw, c = r.get("hardware", {}), r["config"]
    gpu = None if hw.get("device") == "cuda" else f"CPU (no GPU), {hw.get('cpu_count', '?')} cores"
    out = [_head(r, gpu=gpu), "| dataset | folds | agent: test Sharpe [95% CI] | deployed policy: test Sharpe [95% CI] "
           "| folds deploying the agent | deployed − buy-and-hold [95% CI] | buy-and-hold [95% CI] "
           "| rule chosen on validation (test) | agent train / validation / test Sharpe | agent turnover per bar |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    names = {"googl": "GOOGL daily 2009-2018, walk-forward", "panel": "10 US stocks daily, test 2015-2022"}
    for name, d in r["datasets"].items():
        sharpes = ((d["mean_train_sharpe"], d["mean_validation_sharpe"], d["mean_fold_test_sharpe"]) if name == "googl"
                   else (d["train_sharpe"], d["validation_sharpe"], d["test_sharpe"]))
        rules = d.get("best_rule_per_fold") or [d.get("best_rule")]
        rule = (f"{_num(d['best_rule_test_sharpe'], '+.2f')} ({', '.join(dict.fromkeys(rules))})")
        out.append(f"| {names.get(name, name)} | {d['folds']} | {_num(d['agent_test_sharpe'], '+.2f')} "
                   f"{_ci(d['agent_test_sharpe_ci95'])} | {_num(d['deployed_test_sharpe'], '+.2f')} "
                   f"{_ci(d['deployed_test_sharpe_ci95'])} | {d['folds_deploying_agent']} of {d['folds']} "
                   f"| {_num(d['deployed_minus_buy_and_hold'], '+.2f')} {_ci(d['deployed_minus_buy_and_hold_ci95'])} "
                   f"| {_num(d['buy_and_hold_test_sharpe'], '+.2f')} "
                   f"{_ci(d['buy_and_hold_test_sharpe_ci95'])} | {rule} "
                   f"| {' / '.join(_num(x, '+.2f') for x in sharpes)} | {_num(d['turnover_per_bar'], '.3f')} |")
    size = " (reduced)" if c.get("reduced") else " (as configured)"
    out += ["", f"Iterations: GOOGL {c['googl_iterations_per_fold']} per fold ({c['folds']} folds), panel "
                f"{c['panel_iterations']} (one sealed split){size}; seed {c['seed']} only; device {c['device']}. "
                "GOOGL's train / validation / test Sharpes are means over folds."]
    return "\n".join(out)


def realdata_sweep(r) -> str:
    """The panel's training variants read on validation only (``realdata_sweep.json``,
    ``benchmarks/panel_sweep.py``): per variant the mean over seeds of each run's best-validation
    checkpoint's Sharpe with the calibrated interval, paired against buy-and-hold, and turnover."""
    hw, c = r.get("hardware", {}), r["config"]
    gpu = None if hw.get("device") == "cuda" else f"CPU (no GPU), {hw.get('cpu_count', '?')} cores"
    out = [_head(r, gpu=gpu), "| variant | seeds | validation Sharpe [95% CI] | − buy-and-hold [95% CI] "
           "| turnover per bar | best iteration (per seed) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for v in r["variants"]:
        s, d = v["validation_sharpe"], v["validation_minus_buy_and_hold"]
        its = ", ".join(str(x["best_iteration"]) for x in v["per_seed"])
        out.append(f"| {v['variant']} | {v['seeds']} | {s['estimate']:+.2f} {_ci(s['ci95'])} | {d['estimate']:+.2f} "
                   f"{_ci(d['ci95'])} | {v['validation_turnover_per_bar']:.3f} | {its} |")
    ch, bh = r.get("chosen"), r["buy_and_hold_validation_sharpe"]
    out += ["", f"Buy-and-hold on validation: {bh['estimate']:+.2f} {_ci(bh['ci95'])}; 1x = "
                f"{c['one_x_iterations']} iterations, seeds {c['seeds']}, {c['design']}."]
    if ch:
        dsr = ch["deflated_sharpe"]
        out.append(f"Chosen on validation: {ch['variant']} ({ch['validation_sharpe']['estimate']:+.2f}), DSR "
                   f"{dsr['value']:.2f} over {ch['trials']['effective']:.1f} effective trials "
                   f"({ch['trials']['passes']} validation passes of {ch['runs']} runs).")
    ft = r.get("final_test")
    out.append("Test: not read." if not ft else f"Test read once for {ft['variant']} ({ft['date'][:10]}).")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------- main
TABLES = (
    ("learning_cpu_quick", learning_cpu_quick), ("learning", learning), ("coverage", coverage), ("wholerun", wholerun),
    ("wholerun_cpu", wholerun), ("synthetic_gen", synthetic_gen), ("learning_sweep", learning_sweep), ("throughput", throughput), ("e2e", e2e),
    ("learner", learner), ("learner_profile", learner_profile),
    ("stock_syncs", stock_syncs), ("env_runner", env_runner), ("cartpole", cartpole), ("scaling", scaling),
    ("scaling_learner", scaling_learner), ("kernels", kernels), ("env", env),
    ("population_cpu_quick", population_cpu_quick), ("population_update", population_update),
    ("reliability", reliability), ("realdata", realdata), ("realdata_sweep", realdata_sweep),
    ("realdata_sweep_gpu", realdata_sweep),
)
"""(JSON name in the results folder, printer), in the order of ``docs/results.md``."""


def render(d: Path | str = REPO / "benchmarks" / "results") -> Dict[str, str]:
    """``{json name: printed markdown}`` for every JSON of :data:`TABLES` present in ``d``."""
    d = Path(d)
    out = {}
    for name, fn in TABLES:
        r = _load(d, name)
        if r is not None:
            out[name] = fn(r)
    return out


def table_blocks(text: str) -> list:
    """The markdown tables of ``text``: each a maximal run of lines starting with ``|``, joined."""
    return [m.group(0) for m in re.finditer(r"(?m)^\|.*(?:\n\|.*)*", text)]


def other_lines(text: str) -> list:
    """The non-blank lines of ``text`` that are not table rows (block headers, summary lines)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("|")]


def differences(doc: str, printed: Dict[str, str]) -> list:
    """``(json name, what)`` for every printed table or line missing from ``doc`` and every table of
    ``doc`` that nothing here prints; empty when the page matches the printout."""
    doc_tables = table_blocks(doc)
    doc_lines = set(doc.splitlines())
    out = []
    for name, text in printed.items():
        out += [(name, block) for block in table_blocks(text) if block not in doc_tables]
        out += [(name, line) for line in other_lines(text) if line not in doc_lines]
    known = {b for text in printed.values() for b in table_blocks(text)}
    out += [("(no JSON)", block) for block in doc_tables if block not in known]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--check", action="store_true",
                   help=f"compare with {RESULTS_DOC.relative_to(REPO)} instead of printing; exit 1 on a difference")
    args = p.parse_args()
    printed = render(args.dir)
    if args.check:
        diffs = differences(RESULTS_DOC.read_text(), printed)
        for name, what in diffs:
            print(f"--- {name}: not in {RESULTS_DOC.relative_to(REPO)} as printed\n{what}\n")
        if diffs:
            raise SystemExit(1)
        print(f"{RESULTS_DOC.relative_to(REPO)}: every table and line matches benchmarks/results/")
        return
    for name, text in printed.items():
        print(f"### {name}\n\n{text}\n")


if __name__ == "__main__":
    main()
