"""Where stock RLlib DQN's learner update synchronizes: a CPU probe of every would-be device->host sync.

How to run (CPU is enough; no GPU is used even when one is present)::

    python -m benchmarks.stock_syncs            # learner.py's stock row + CartPole DQN, ~1 min on 2 cores
    python -m benchmarks.stock_syncs --quick    # 6 updates each

The probe replaces ``torch.Tensor.__bool__ / item /
cpu / numpy / tolist / __float__ / __int__ / __index__ / __array__ / nonzero``, ``.to(cpu)``,
``torch.nonzero`` and bool-mask ``__getitem__`` with wrappers that record the Python call stack of
every call made inside ``LearnerGroup.update()`` (the call ``benchmarks/learner.py`` times and
sync-counts; with a local learner it is one ``Learner.update``). Each such call on a CUDA tensor
is a device->host synchronization, so the sites found on the CPU are the ones
``torch.cuda.set_sync_debug_mode("warn")`` counts on a GPU learner. Calls that would *not* sync
there are listed apart (``not_syncs_on_gpu``), with the reason:

* a read of a tensor that ``.cpu()`` already copied to the host (the ``.item()`` in
  ``value.cpu().item()``): the ``.cpu()`` is the sync;
* ``.item()`` of an optimizer's ``step`` counter (torch keeps it on the CPU for non-fused,
  non-capturable Adam);
* ``.to(<torch.device>)`` to the learner's device (``cpu`` here, ``cuda`` on a GPU learner: a no-op
  or a host->device copy there). Only ``.to("cpu")`` given as a string counts as a readback.

Blocking host->device copies (``torch.tensor(..., device="cuda")``, pageable ``.to("cuda")``) are
invisible on a CPU; ``learner.py`` passes a device-resident batch, so none are expected there.

Learners probed:

* ``learner_bench_stock``: the stock row of ``benchmarks/learner.py`` built by its own functions
  (``make_config`` / ``spaces`` / ``stock_updates``): ``DQNTorchLearner`` with our flat
  ``ZeroSyncQModule`` (obs 32 -> 2x256 ReLU -> 45 Q values, 6 parameter tensors), batch 256, one
  ``LearnerGroup.update(batch=MultiAgentBatch of tensors)`` per update.
* ``cartpole_dqn``: stock ``DQNConfig().environment("CartPole-v1")`` with RLlib's default module
  (``DefaultDQNTorchRLModule``, dueling, 8 parameter tensors), ``num_env_runners=0``, batch 256,
  driven by ``DQN.training_step()`` (episodes -> learner connector -> ``Learner.update``);
  ``cartpole_dqn_skipnan`` is the same with ``framework(torch_skip_nan_gradients=True)``.

Writes ``benchmarks/results/stock_syncs.json`` (``--out``): per learner the parameter tensors, the
tensor metrics logged per update, per site (``file:line`` relative to site-packages, the call kind,
the source, the RLlib callers, count per update over the updates after the first) and the total per
update (and of the first update), plus the calls that do not sync on a GPU.

Results to expect (RLlib 2.60): 2 syncs per parameter tensor (``torch_learner.py:204`` and ``:263``,
the ``isfinite(grad).all()`` checks) + 15 from ``metrics.reduce()`` (7 mean metrics x (``bool`` at
``stats/series.py:269`` + ``.cpu()`` at ``stats/utils.py:38``) + 1 ``.cpu()`` of the TD errors at
``stats/utils.py:65``): 2 x 6 + 15 = 27 for the learner benchmark's module (what the H200 run of
``learner.py`` counted), 2 x 8 + 15 = 31 for CartPole, 15 for CartPole with skip-NaN.
"""
from __future__ import annotations

import collections
import linecache
import logging
import os
import sysconfig
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU probe, also on a GPU machine

import torch  # noqa: E402

from benchmarks.common import parser, result_header, results_path, write_json  # noqa: E402
from rl_zerosync.algorithm import local_learner_of  # noqa: E402

_SITE = sysconfig.get_paths()["purelib"]
_THIS = os.path.abspath(__file__)
_OWN_FILES = (_THIS,)


TO_DEVICE_OBJECT = ("`.to(<torch.device>)` to the learner's device (CPU in this probe, CUDA on a GPU learner): "
                    "a no-op or a host->device copy there, not a readback")


def _short(path: str) -> str:
    """A path relative to site-packages (``ray/rllib/...``, ``torch/...``) or to the repo."""
    path = os.path.abspath(path)
    for root in (_SITE, str(Path(__file__).resolve().parents[1])):
        if path.startswith(root + os.sep):
            return os.path.relpath(path, root)
    return path


def _source(frame) -> str:
    """The source line a frame is at, continued while its brackets are open (at most 4 lines)."""
    if frame is None:
        return ""
    lines, depth = [], 0
    for i in range(frame.lineno, frame.lineno + 4):
        line = linecache.getline(frame.filename, i).strip()
        lines.append(line)
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
        if depth <= 0:
            break
    return " ".join(x for x in lines if x)


class SyncProbe:
    """Record every would-be device->host sync made while :attr:`active` is true.

    Args:
        host_tensor_ids: returns ids of tensors that live on the host even on a GPU learner
            (optimizer ``step`` counters); reads of them are recorded as not syncing.
    """

    KINDS = ("__bool__", "item", "cpu", "numpy", "tolist", "__float__", "__int__", "__index__", "__array__",
             "nonzero")

    def __init__(self, host_tensor_ids: Callable[[], set]) -> None:
        self.host_tensor_ids = host_tensor_ids
        self.active = False
        self.events: List[dict] = []
        self._inside = False
        self._saved: Dict[str, object] = {}
        self._host_results: set = set()  # ids of tensors returned by .cpu()/.to(cpu) while active
        self._keep: List[torch.Tensor] = []
        self.update_index = -1

    # ---- recording -------------------------------------------------------------------------
    def _record(self, kind: str, t: torch.Tensor, why_not: Optional[str] = None) -> None:
        frames = [f for f in traceback.extract_stack()[:-2] if os.path.abspath(f.filename) not in _OWN_FILES]
        inner = frames[-1] if frames else None
        if why_not is not None:
            sync, why = False, why_not
        elif id(t) in self._host_results:
            sync, why = False, "reads a tensor .cpu() already copied to the host (the .cpu() is the sync)"
        elif id(t) in self.host_tensor_ids():
            sync, why = False, "optimizer step counter, kept on the CPU by non-fused Adam"
        else:
            sync, why = True, None
        self.events.append({
            "update": self.update_index, "kind": kind, "sync": sync, "why_not": why,
            "site": f"{_short(inner.filename)}:{inner.lineno}" if inner else "?",
            "code": _source(inner),
            "via": " <- ".join(f"{_short(f.filename)}:{f.lineno}"
                               for f in [f for f in frames[:-1] if "/ray/rllib/" in f.filename][-4:][::-1]),
        })

    def _wrap(self, name: str, orig, *, returns_host: bool = False, kind: Optional[str] = None):
        probe = self

        def wrapper(t, *args, _why_not=None, **kwargs):
            if not probe.active or probe._inside:
                return orig(t, *args, **kwargs)
            probe._inside = True
            try:
                probe._record(kind or name, t, _why_not)
            finally:
                probe._inside = False
            out = orig(t, *args, **kwargs)
            if returns_host and _why_not is None and isinstance(out, torch.Tensor):
                if out is t:  # already a CPU tensor here: an alias so that marking it marks only the copy
                    out = t.view_as(t)
                probe._host_results.add(id(out))
                probe._keep.append(out)  # keep ids unique while the probe runs
            return out

        wrapper.__name__ = name
        return wrapper

    def __enter__(self) -> "SyncProbe":
        T = torch.Tensor
        self._keep: List[torch.Tensor] = []
        self.update_index = -1
        for name in self.KINDS:
            self._saved[name] = getattr(T, name)
            setattr(T, name, self._wrap(name, getattr(T, name), returns_host=(name == "cpu")))
        orig_to, orig_getitem, orig_nonzero = T.to, T.__getitem__, torch.nonzero
        self._saved.update(to=orig_to, __getitem__=orig_getitem)
        probe = self
        wrapped_to = self._wrap("to", orig_to, returns_host=True, kind="to(cpu)")

        def to(t, *args, **kwargs):
            dev = kwargs.get("device", args[0] if args else None)
            if isinstance(dev, str) and torch.device(dev).type == "cpu":  # an explicit .to("cpu"): a readback
                return wrapped_to(t, *args, **kwargs)
            if isinstance(dev, torch.device) and dev.type == "cpu":  # a device object: the learner's, here
                return wrapped_to(t, *args, _why_not=TO_DEVICE_OBJECT, **kwargs)
            return orig_to(t, *args, **kwargs)

        wrapped_mask = self._wrap("__getitem__", orig_getitem, kind="bool-mask index")

        def getitem(t, idx):
            if isinstance(idx, torch.Tensor) and idx.dtype == torch.bool:
                return wrapped_mask(t, idx)
            return orig_getitem(t, idx)

        def nonzero(t, *args, **kwargs):
            if probe.active and not probe._inside:
                probe._inside = True
                try:
                    probe._record("torch.nonzero", t)
                finally:
                    probe._inside = False
            return orig_nonzero(t, *args, **kwargs)

        T.to, T.__getitem__ = to, getitem
        self._saved["torch.nonzero"] = orig_nonzero
        torch.nonzero = nonzero
        return self

    def __exit__(self, *exc) -> None:
        if hasattr(self, "_restore_metrics"):
            self._restore_metrics()
        T = torch.Tensor
        for name, orig in self._saved.items():
            if name == "torch.nonzero":
                torch.nonzero = orig
            else:
                setattr(T, name, orig)
        self._keep.clear()

    def watch_metrics(self) -> None:
        """Also record the keys of the tensors logged into the MetricsLogger during an update (the
        values ``metrics.reduce()`` reads back)."""
        from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

        orig, probe = MetricsLogger.log_value, self
        self.metric_keys: List[str] = []

        def log_value(logger, key, value, *args, **kwargs):
            if probe.active and isinstance(value, torch.Tensor):
                name = "/".join(key) if isinstance(key, (tuple, list)) else str(key)
                if name not in probe.metric_keys:
                    probe.metric_keys.append(name)
            return orig(logger, key, value, *args, **kwargs)

        MetricsLogger.log_value = log_value
        self._restore_metrics = lambda: setattr(MetricsLogger, "log_value", orig)

    def watch_update(self, group) -> None:
        """Make ``group.update`` (a ``LearnerGroup``'s, one update per call with one local learner)
        switch the probe on for its duration: the call ``learner.py`` times and sync-counts."""
        orig = group.update
        probe = self

        def update(*args, **kwargs):
            probe.update_index += 1
            probe.active = True
            try:
                return orig(*args, **kwargs)
            finally:
                probe.active = False
                probe._host_results.clear()
                probe._keep.clear()

        group.update = update


def optimizer_step_ids(learner) -> Callable[[], set]:
    """Ids of the optimizers' ``step`` tensors (host-resident for non-fused, non-capturable Adam)."""
    def ids() -> set:
        out = set()
        optimizers = [opt for mid in learner.module.keys() for _, opt in learner.get_optimizers_for_module(mid)]
        for opt in optimizers:
            for st in opt.state.values():
                s = st.get("step")
                if isinstance(s, torch.Tensor) and s.device.type == "cpu" and not _device_step(opt):
                    out.add(id(s))
        return out
    return ids


def _device_step(opt) -> bool:
    """True when the optimizer keeps ``step`` on the parameters' device (fused / capturable)."""
    d = opt.defaults
    return bool(d.get("fused") or d.get("capturable"))


def summarize(probe: SyncProbe, *, warmup: int) -> dict:
    """Per-site counts per update over the updates after ``warmup``; first-update total apart."""
    updates = probe.update_index + 1
    steady = [e for e in probe.events if e["update"] >= warmup]
    n = max(1, updates - warmup)
    per_update = collections.Counter(e["update"] for e in probe.events if e["sync"])
    totals = [per_update.get(u, 0) for u in range(warmup, updates)]

    def table(events, sync: bool) -> List[dict]:
        c = collections.Counter((e["site"], e["kind"], e["code"], e["via"], e["why_not"])
                                for e in events if e["sync"] == sync)
        rows = [{"site": s, "kind": k, "per_update": v / n, "code": code, "via": via,
                 **({} if sync else {"why_not_a_sync": why})}
                for (s, k, code, via, why), v in c.items()]
        return sorted(rows, key=lambda r: (-r["per_update"], r["site"]))

    return {
        "tensor_metrics_logged": list(getattr(probe, "metric_keys", [])),
        "updates_probed": updates,
        "warmup_updates_excluded": warmup,
        "syncs_per_update": sum(totals) / n,
        "syncs_per_update_min": min(totals) if totals else None,
        "syncs_per_update_max": max(totals) if totals else None,
        "syncs_first_update": per_update.get(0, 0),
        "sites": table(steady, True),
        "not_syncs_on_gpu": table(steady, False),
    }


def probe_learner_bench(updates: int, batch: int) -> dict:
    """The stock row of ``benchmarks/learner.py``, built with its own functions."""
    from benchmarks import learner as lb

    device = torch.device("cpu")
    hidden = [256, 256]
    group = lb.make_config(batch=batch, hidden=hidden, cuda=False).build_learner_group(spaces=lb.spaces())
    learner = local_learner_of(group)
    with SyncProbe(optimizer_step_ids(learner)) as probe:
        probe.watch_update(group)
        probe.watch_metrics()
        run_k = lb.stock_updates(group.update, batch, updates, device)
        t0 = time.perf_counter()
        run_k()
        wall = time.perf_counter() - t0
    out = {
        "what": "benchmarks/learner.py stock row: DQNTorchLearner via LearnerGroup.update(batch=MultiAgentBatch "
                "of tensors), flat ZeroSyncQModule obs 32 -> 2x256 -> 45, grad_clip 40 (global_norm)",
        "module": type(learner.module[lb.MID].unwrapped()).__name__,
        "param_tensors": sum(1 for _ in learner.module[lb.MID].parameters() if _.requires_grad),
        "batch": batch, "obs_dim": lb.OBS_DIM, "num_actions": lb.NUM_ACTIONS, "hidden": hidden,
        "torch_skip_nan_gradients": bool(learner.config.torch_skip_nan_gradients),
        "cpu_wall_s": wall,
        **summarize(probe, warmup=1),
    }
    group.shutdown()
    return out


def probe_cartpole(updates: int, batch: int, *, skip_nan: bool) -> dict:
    """Stock DQN on CartPole-v1 (default module), ``training_step()`` until ``updates`` updates."""
    from ray.rllib.algorithms.dqn import DQNConfig

    cfg = (DQNConfig().environment("CartPole-v1")
           .env_runners(num_env_runners=0)
           .learners(num_learners=0, num_gpus_per_learner=0)
           .training(train_batch_size_per_learner=batch, num_steps_sampled_before_learning_starts=1000)
           .framework(torch_skip_nan_gradients=skip_nan)
           .debugging(seed=0))
    algo = cfg.build_algo()
    learner = local_learner_of(algo.learner_group)
    mid = next(iter(learner.module.keys()))
    steps = 0
    try:
        with SyncProbe(optimizer_step_ids(learner)) as probe:
            probe.watch_update(algo.learner_group)
            probe.watch_metrics()
            t0 = time.perf_counter()
            while probe.update_index + 1 < updates:
                algo.training_step()
                steps += 1
            wall = time.perf_counter() - t0
        out = {
            "what": "stock DQNConfig().environment('CartPole-v1'), default DefaultDQNTorchRLModule (dueling, "
                    "double Q), num_env_runners=0, DQN.training_step() -> Learner.update(episodes)",
            "module": type(learner.module[mid].unwrapped()).__name__,
            "param_tensors": sum(1 for _ in learner.module[mid].parameters() if _.requires_grad),
            "batch": batch,
            "torch_skip_nan_gradients": skip_nan,
            "training_steps": steps,
            "cpu_wall_s": wall,
            **summarize(probe, warmup=1),
        }
    finally:
        algo.stop()
    return out


def _print(name: str, r: dict) -> None:
    print(f"\n{name}: {r['module']}, {r['param_tensors']} parameter tensors, {r['updates_probed']} updates; "
          f"would-be syncs per update {r['syncs_per_update']:.2f} (first update {r['syncs_first_update']})")
    for s in r["sites"]:
        print(f"  {s['per_update']:5.2f}  {s['kind']:<10} {s['site']:<55} {s['code'][:70]}")
    for s in r["not_syncs_on_gpu"]:
        print(f"  ({s['per_update']:4.2f}  {s['kind']:<10} {s['site']:<55} not a sync on a GPU: {s['why_not_a_sync']})")


def main(argv: Optional[List[str]] = None) -> dict:
    p = parser(__doc__, out=results_path("stock_syncs"), quick="fewer updates")
    p.add_argument("--updates", type=int, default=None, help="updates probed per learner (default 50, quick 6)")
    args = p.parse_args(argv)
    n = args.updates or (6 if args.quick else 50)
    logging.getLogger("ray").setLevel(logging.ERROR)
    import ray

    # an own local instance (RLlib would otherwise join whatever cluster /tmp/ray points at)
    ray.init(address="local", num_cpus=2, include_dashboard=False, ignore_reinit_error=True,
             logging_level=logging.ERROR)
    learners = {
        "learner_bench_stock": probe_learner_bench(n, 256),
        "cartpole_dqn": probe_cartpole(n, 256, skip_nan=False),
        "cartpole_dqn_skipnan": probe_cartpole(n, 256, skip_nan=True),
    }
    if ray.is_initialized():
        ray.shutdown()
    for name, r in learners.items():
        _print(name, r)
    result = {
        **result_header("stock_syncs", device="cpu",
                        config={"quick": args.quick, "updates": n, "warmup_updates_excluded": 1}),
        "probe": "CPU sync probe: calls that force a device->host sync when the "
                 "tensor is on CUDA, recorded on the CPU; the sites are the same on a GPU learner",
        "learners": learners,
        "summary": {name: r["syncs_per_update"] for name, r in learners.items()},
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
