"""Policy export (TorchScript, ONNX) and ``Policy.act`` on raw bars, against the in-process policy and the env.

One real tiny ``train`` run (routed, CSV data, 1 iteration, ~20 s) gives a checkpoint with RLlib's
real layout; flat and branching checkpoints are built directly (a fresh module saved where
``evaluate`` loads it, the run's settings and a manifest), which takes milliseconds.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
BARS = 1200
SETTINGS = {
    "run": {"name": "r", "iterations": 1, "checkpoint_every": 1, "seed": 0, "evaluate": False, "num_cpus": 2},
    "model": {"action_mode": "routed", "hidden": [16, 16]},
    "algo": {"lr": 1e-3, "batch_size": 32, "replay_ratio": 0.5, "learning_starts": 64, "target_update_freq": 10,
             "epsilon": [[0, 1.0], [600, 0.1]], "num_envs_per_runner": 8, "rollout_length": 16,
             "num_gpus_per_learner": 0},
    "data": {"source": "csv", "features": {"warmup": 32, "median_window": 64}},
    "env": {"episode_len": 32, "window": 8},
    "runner": {"device": "cpu", "wide": 1.3},
    "learner": {"replay_capacity": 2000, "graph": False},
}


def _write_csv(path: Path) -> pd.DataFrame:
    from rl_zerosync.data.synthetic import synthetic_series

    raw = synthetic_series(1, BARS, seed=3)
    close, spread = raw["close"][0], raw["spread"][0]
    frame = pd.DataFrame({
        "timestamp": pd.date_range("2020-01-01", periods=BARS, freq="D").strftime("%Y-%m-%d"),
        "close": close, "bid": close * (1 - spread / 2), "ask": close * (1 + spread / 2),
    })
    frame.to_csv(path, index=False)
    return pd.read_csv(path)  # what the loaders read


@pytest.fixture(scope="module")
def setup(tmp_path_factory, ray_instance):
    """{"frame": the bars, "routed"/"flat"/"branching": run directories}."""
    tmp = tmp_path_factory.mktemp("export")
    frame = _write_csv(tmp / "bars.csv")
    raw = json.loads(json.dumps(SETTINGS))
    raw["data"]["paths"] = [str(tmp / "bars.csv")]
    raw["run"]["dir"] = str(tmp)
    from rl_zerosync.config.settings import from_dict
    from rl_zerosync.run.train import train

    with ray_instance(address="local", num_cpus=2):
        train(from_dict(raw))
    runs = {"frame": frame, "routed": tmp / "r"}
    for mode in ("flat", "branching"):
        runs[mode] = _fabricate(tmp / mode, raw, mode)
    return runs


def _fabricate(run_dir: Path, raw: dict, mode: str) -> Path:
    """A checkpoint holding a fresh module of ``mode`` where ``evaluate`` loads it (no Ray run)."""
    from rl_zerosync.rundir.checkpoints import write_manifest
    from rl_zerosync.envs import EnvParams
    from rl_zerosync.data import make_market
    from rl_zerosync.envs.gym_twin import observation_space_for
    from rl_zerosync.rundir.checkpoints import MODULE_PATH
    from rl_zerosync.module import make_module_spec
    from rl_zerosync.config.settings import from_dict

    raw = {**raw, "model": {"action_mode": mode, "hidden": [16, 16], "dueling": True}}
    settings = from_dict(raw).to_dict()
    space = observation_space_for(make_market(settings["data"], "train"), EnvParams.from_dict(settings["env"]))
    torch.manual_seed(7)
    module = make_module_spec(action_mode=mode, hidden=[16, 16], dueling=True, observation_space=space).build()
    ckpt = run_dir / "checkpoint"
    module.save_to_path(str(ckpt / MODULE_PATH))
    (ckpt / "rllib_checkpoint.json").write_text("{}")
    (ckpt / "settings.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    (ckpt / "run_state.json").write_text(json.dumps({"iteration": 0}))
    write_manifest(ckpt)
    shutil.copytree(ckpt, run_dir / "checkpoint_best")  # its best validation pass too (what --which best reads)
    return run_dir


def _inputs(n: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random observations and routing inputs whose ratios straddle every routing threshold."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, dim, generator=g) * 2.0
    obs[:, -4] = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0])[torch.randint(0, 5, (n,), generator=g)]
    obs[:, -1] = torch.rand(n, generator=g)
    med_s = torch.rand(n, generator=g) * 1e-3 + 1e-4
    med_v = torch.rand(n, generator=g) * 1e-2 + 1e-3
    ratios = torch.tensor([0.5, 0.75, 1.0, 1.3, 1.5, 2.0])
    rs = ratios[torch.randint(0, 6, (n,), generator=g)] * (1 + 0.01 * torch.randn(n, generator=g))
    rv = ratios[torch.randint(0, 6, (n,), generator=g)] * (1 + 0.01 * torch.randn(n, generator=g))
    market = torch.stack((rs * med_s, med_s, rv * med_v, med_v), dim=1)
    market[:8] = torch.tensor([3.0, 2.0, 3.0, 2.0])  # ratios exactly 1.5 (the >= boundaries)
    market[8:12] = torch.tensor([3.0, 4.0, 3.0, 4.0])  # exactly 0.75 (the <= boundary)
    market[12:16, 1] = 0.0  # median 0: ratio 1
    return obs, market


def _reference(module, routing: dict, obs: torch.Tensor, market: torch.Tensor) -> torch.Tensor:
    """The in-process policy: the module's greedy actions, routed by the route kernel's torch twin."""
    from rl_zerosync.kernels.reference import route

    action = module.greedy_actions(module.q_values(obs))
    if module.action_mode == "routed":
        out = torch.empty_like(action)
        route(action, *market.unbind(1), out, **routing)
        action = out
    return action


def _module(run_dir: Path):
    from rl_zerosync.rundir.checkpoints import find_checkpoint, load_module

    return load_module(find_checkpoint(run_dir, "best"))


@pytest.mark.parametrize("mode", ["routed", "flat", "branching"])
def test_torchscript_matches_in_process_policy(setup, mode, tmp_path):
    from rl_zerosync.serving.export import METADATA_FILE, export_policy

    res = export_policy(setup[mode], "torchscript", tmp_path / "p.pt")
    meta = json.loads(Path(res["metadata_path"]).read_text())
    assert res["metadata_path"] == str(tmp_path / "p.pt.json")
    assert meta["action_mode"] == mode and meta["window"] == 8 and meta["episode_len"] == 32
    assert meta["routing"] == {"wide": 1.3, "high_vol": 1.5, "low_vol": 0.75}
    assert meta["inputs"]["market"]["used"] == (mode == "routed")
    assert meta["features"]["warmup"] == 32 and meta["data"]["spread_source"] == "auto"
    assert meta["inputs"]["obs"]["columns"][-5:] == ["ret_norm[t]", "position", "obs_spread", "obs_vol",
                                                    "episode_progress"]
    extra = {METADATA_FILE: ""}
    net = torch.jit.load(str(tmp_path / "p.pt"), _extra_files=extra)
    assert json.loads(extra[METADATA_FILE])["action_mode"] == mode
    obs, market = _inputs(1000, 12)
    out = net(obs, market)
    expected = _reference(_module(setup[mode]), meta["routing"], obs, market)
    assert out.dtype == torch.int64 and out.shape == (1000, 4)
    assert torch.equal(out[:, 0], expected)
    assert torch.equal(out[:, 1:], torch.stack((expected // 9, expected // 3 % 3, expected % 3), dim=1))
    assert torch.equal(net(obs[:1], market[:1]), out[:1])  # any batch size
    if mode == "routed":
        assert len({tuple(r) for r in out[:, 2:].tolist()}) == 6  # every routing outcome is exercised


@pytest.mark.parametrize("mode", ["routed", "flat"])
def test_policy_observation_and_action_match_the_env(setup, mode):
    """Step the numpy env with Policy.act on the CSV's bars up to the env's bar: same observation,
    same routing inputs, and the env executes the same factored action."""
    from rl_zerosync.envs.numpy_twin import NumpyTradingEnv
    from rl_zerosync.serving.policy import Policy

    policy = Policy.from_checkpoint(setup[mode])
    settings = yaml.safe_load((setup[mode] / "checkpoint" / "settings.yaml").read_text())
    routing = policy.metadata["routing"]
    env = NumpyTradingEnv(data=settings["data"], env=settings["env"], action_mode=mode, routing=routing)
    module = _module(setup[mode])
    frame = setup["frame"]
    obs, info = env.reset(seed=0)
    step, positions = 0, set()
    d = env.data
    for _ in range(40):
        a, t = info["asset"], info["bar"]
        bars = frame.iloc[: d.offsets[a] + t + 1]
        ob = policy.observe(bars, position=info["position"], step=step)
        assert ob.obs.dtype == np.float32 and np.array_equal(ob.obs, obs), (t, ob.obs, obs)
        env_market = np.array([float(x[a, t]) for x in (d.spread, d.median_spread, d.vol, d.median_vol)], np.float32)
        assert np.array_equal(ob.market, env_market)
        action = policy.act(bars, position=info["position"], step=step)
        expected = _reference(module, routing, torch.from_numpy(obs)[None], torch.from_numpy(env_market)[None])
        assert action.index == int(expected[0])
        obs, _, term, trunc, info = env.step(action.exposure if mode == "routed" else action.index)
        assert info["action"] == action.index  # the env's own routing agrees
        positions.add(round(info["position"], 6))
        step += 1
        if term or trunc:  # the env returned the episode's final observation; start the next one
            obs, info = env.reset()
            step = 0
    assert len(positions) > 1 or mode == "flat"


def test_policy_from_export_and_array_inputs(setup, tmp_path):
    from rl_zerosync.serving.export import export_policy
    from rl_zerosync.serving.policy import Action, Policy

    export_policy(setup["routed"], "torchscript", tmp_path / "p.pt")
    live = Policy.from_export(tmp_path / "p.pt")
    ref = Policy.from_checkpoint(setup["routed"])
    bars = setup["frame"].iloc[:700]
    arrays = {"close": bars["close"].to_numpy(), "bid": bars["bid"].to_numpy(), "ask": bars["ask"].to_numpy()}
    for kw in ({"position": 0.0, "step": 0}, {"position": -0.37, "step": 45}):
        a = ref.act(bars, **kw)
        assert isinstance(a, Action) and live.act(bars, **kw) == a == live.act(arrays, **kw)
        exposure, order_type, urgency = a
        assert ref.target_position(a) == [-1.0, -0.5, 0.0, 0.5, 1.0][exposure]
    assert live.min_bars == 34 and live.recommended_bars >= 400
    # the run recorded env.execution_lag (default 1): the policy says it expects next-bar execution
    assert live.execution_lag == ref.execution_lag == 1 and "NEXT bar" in live.execution["how"]
    assert Policy(live.net, {k: v for k, v in ref.metadata.items() if k != "execution"}).execution_lag == 0
    # A policy of synthetic data, closes only: it needs a spread (here a fixed one).
    synth = {**ref.metadata, "data": {**ref.metadata["data"], "spread_source": "auto", "spread_bps": None}}
    with pytest.raises(ValueError, match="no bid/ask or high/low columns"):
        Policy(live.net, synth).act(arrays["close"])
    assert isinstance(Policy(live.net, synth, spread_bps=5.0).act(arrays["close"]), Action)


def test_bad_bars_are_named(setup):
    from rl_zerosync.serving.policy import Policy

    policy = Policy.from_checkpoint(setup["flat"])
    bars = setup["frame"].iloc[:300].copy()
    with pytest.raises(ValueError, match=r"bars: 20 bars, expected at least 34"):
        policy.act(bars.iloc[:20])
    nan = bars.copy()
    nan.loc[57, "close"] = np.nan
    with pytest.raises(ValueError, match=r"bars, column 'close', row 57: expected a finite price > 0, got nan"):
        policy.act(nan)
    crossed = bars.copy()
    crossed.loc[12, "bid"] = crossed.loc[12, "ask"] * 1.01
    with pytest.raises(ValueError, match=r"column 'bid', row 12: bid .* is above ask"):
        policy.act(crossed)
    spike = bars.copy()
    spike.loc[100:, ["close", "bid", "ask"]] *= 2.0
    with pytest.raises(ValueError, match=r"row 100: .*max_abs_log_return"):
        policy.act(spike)
    with pytest.raises(ValueError, match=r"bars: missing column 'close'"):
        policy.act(bars.rename(columns={"close": "last"}))
    with pytest.raises(ValueError, match=r"bars: expected columns of equal length"):
        policy.act({"close": bars["close"].to_numpy(), "bid": bars["bid"].to_numpy()[:-1]})
    with pytest.raises(ValueError, match=r"bars: expected a pandas DataFrame"):
        policy.act("prices.csv")
    with pytest.raises(ValueError, match=r"position: expected a finite number"):
        policy.act(bars, position=float("nan"))
    with pytest.raises(ValueError, match=r"step: expected None \(live\) or an int >= 0"):
        policy.act(bars, step=-1)


def test_export_errors(setup, tmp_path, monkeypatch, capsys):
    import importlib.util

    from rl_zerosync.rundir.checkpoints import CheckpointError
    from rl_zerosync.cli import main
    from rl_zerosync.serving.export import export_policy
    from rl_zerosync.serving.policy import Policy

    with pytest.raises(ValueError, match="export format: expected one of"):
        export_policy(setup["flat"], "tflite")
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        export_policy(tmp_path / "nowhere")
    damaged = tmp_path / "damaged"
    shutil.copytree(setup["flat"], damaged)
    (damaged / "checkpoint_best" / "settings.yaml").write_text("model: {action_mode: routed}\n")
    with pytest.raises(CheckpointError, match="settings.yaml"):
        export_policy(damaged)
    (tmp_path / "not.pt").write_bytes(b"no")
    with pytest.raises(ValueError, match="not a TorchScript file"):
        Policy.from_export(tmp_path / "not.pt")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"needs the package\(s\) onnx \(pip install onnx\)"):
        export_policy(setup["flat"], "onnx", tmp_path / "p.onnx")
    assert main(["export", "--checkpoint", str(setup["flat"]), "--format", "onnx"]) == 2
    assert "error: ONNX export needs the package(s) onnx" in capsys.readouterr().err


def test_cli_export(setup, tmp_path, capsys):
    from rl_zerosync.cli import main

    assert main(["export", "--checkpoint", str(setup["flat"]), "--which", "last", "--format", "torchscript",
                 "--out", str(tmp_path / "f.pt")]) == 0
    assert (tmp_path / "f.pt").is_file() and (tmp_path / "f.pt.json").is_file()
    assert str(tmp_path / "f.pt") in capsys.readouterr().out
    assert main(["export", "--checkpoint", str(setup["flat"])]) == 0  # default: <run>/export/<ckpt>.pt
    assert (setup["flat"] / "export" / "checkpoint_best.pt").is_file()
    assert main(["export", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "error:" in capsys.readouterr().err


def test_onnx_matches_torchscript(setup, tmp_path):
    from rl_zerosync.serving.export import export_policy, missing_onnx_packages

    missing = missing_onnx_packages()
    if missing:
        pytest.skip(f"ONNX export needs {', '.join(missing)} (not installed)")
    import onnx
    from onnx.reference import ReferenceEvaluator

    export_policy(setup["routed"], "torchscript", tmp_path / "p.pt")
    res = export_policy(setup["routed"], "onnx", tmp_path / "p.onnx")
    model = onnx.load(res["path"])
    onnx.checker.check_model(model)
    assert json.loads({p.key: p.value for p in model.metadata_props}["rl_zerosync"])["format"] == "onnx"
    obs, market = _inputs(300, 12, seed=1)
    feeds = {"obs": obs.numpy(), "market": market.numpy()}
    expected = torch.jit.load(str(tmp_path / "p.pt"))(obs, market).numpy()
    outputs = [ReferenceEvaluator(model).run(None, feeds)[0]]
    one = ReferenceEvaluator(model).run(None, {k: v[:1] for k, v in feeds.items()})[0]
    assert np.array_equal(one, expected[:1])
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is not None:
        outputs.append(onnxruntime.InferenceSession(res["path"]).run(None, feeds)[0])
    for out in outputs:
        assert out.dtype == np.int64 and np.array_equal(out, expected)


# ---------------------------------------------------------------------------------------- the sidecar
USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"


def _usage_snippet() -> dict:
    """The serving snippet of docs/usage.md (the python block after ``serve-onnx-snippet``), executed:
    its names (``sidecar_inputs``, ``act``). What the page shows is what these tests run."""
    import re
    import textwrap

    text = USAGE.read_text()
    m = re.search(r"serve-onnx-snippet.*?\n\s*```python\n(.*?)\n\s*```", text, re.S)
    assert m, "docs/usage.md lacks the serve-onnx-snippet python block"
    names: dict = {}
    exec(compile(textwrap.dedent(m.group(1)), str(USAGE), "exec"), names)  # noqa: S102 - the page's own code
    return names


def _sidecar_inputs(sidecar: dict, bars: dict, position: float) -> tuple[np.ndarray, np.ndarray]:
    """(obs f32[D], market f32[4]) at the last of ``bars`` ({column: float64 array}, oldest first),
    live, computed from the sidecar's fields alone by docs/usage.md's snippet: numpy and the formulas
    of ``series`` and ``inputs.*.elements``, no package code (how another language would serve the export)."""
    obs, market = _usage_snippet()["sidecar_inputs"](sidecar, bars, position)
    assert obs.dtype == market.dtype == np.float32 and not np.isnan(obs).any() and not np.isnan(market).any()
    return obs, market


def _windows(count: int, seed: int, ohlc: bool):
    """``count`` random windows (bars as {column: array}, position) of a fresh synthetic series:
    lengths from min_bars to past recommended_bars, closes with bid/ask or with open/high/low."""
    from rl_zerosync.data.synthetic import synthetic_series

    raw = synthetic_series(1, 1500, seed=seed)
    close, spread = raw["close"][0], raw["spread"][0]
    rng = np.random.default_rng(seed)
    if ohlc:
        high = close * (1 + spread * rng.uniform(0.2, 3.0, len(close)))
        low = close * (1 - spread * rng.uniform(0.2, 3.0, len(close)))
        cols = {"open": np.clip(close * (1 + spread * rng.normal(0, 1, len(close))), low, high), "high": high,
                "low": low, "close": close}
    else:
        cols = {"close": close, "bid": close * (1 - spread / 2), "ask": close * (1 + spread / 2)}
    out = []
    for _ in range(count):
        n = int(rng.integers(34, 700))
        end = int(rng.integers(n, len(close) + 1))
        pos = float(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0])) if rng.random() < 0.7 else float(rng.uniform(-1, 1))
        out.append(({k: v[end - n: end] for k, v in cols.items()}, pos))
    return out


@pytest.mark.parametrize("mode", ["routed", "flat"])
def test_onnx_served_from_the_sidecar_matches_policy_act(setup, mode, tmp_path):
    """The ONNX export in onnxruntime, fed inputs built from raw bars by the sidecar's formulas alone,
    gives Policy.act's actions (live: no step) on 500 random windows with bid/ask and 200 with OHLC."""
    ort = pytest.importorskip("onnxruntime")
    from rl_zerosync.serving.export import export_policy, missing_onnx_packages
    from rl_zerosync.serving.policy import Policy

    if missing_onnx_packages():
        pytest.skip(f"ONNX export needs {', '.join(missing_onnx_packages())} (not installed)")
    res = export_policy(setup[mode], "onnx", tmp_path / "p.onnx")
    sidecar = json.loads(Path(res["metadata_path"]).read_text())
    policy = Policy.from_checkpoint(setup[mode])
    windows = _windows(500, seed=11, ohlc=False) + _windows(200, seed=12, ohlc=True)
    feeds = [_sidecar_inputs(sidecar, bars, pos) for bars, pos in windows]
    obs = np.stack([f[0] for f in feeds])
    market = np.stack([f[1] for f in feeds])
    out = ort.InferenceSession(res["path"]).run(None, {"obs": obs, "market": market})[0]
    expected = [policy.act(bars, position=pos) for bars, pos in windows]
    assert out.dtype == np.int64 and out.shape == (len(windows), 4)
    got = [tuple(int(x) for x in row[1:]) for row in out]
    assert got == [tuple(int(x) for x in a) for a in expected]
    assert out[:, 0].tolist() == [a.index for a in expected]
    levels = sidecar["actions"]["exposure_levels"]
    assert [levels[e] for e, _, _ in got] == [policy.target_position(a) for a in expected]
    # the windows exercise different actions; the inputs are the policy's own to float32 rounding
    assert len(set(out[:, 1].tolist())) > 1 or mode == "flat"
    for (bars, pos), (ob, mk) in zip(windows[:50] + windows[-50:], feeds[:50] + feeds[-50:]):
        ref = policy.observe(bars, position=pos)
        np.testing.assert_allclose(ob, ref.obs, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(mk, ref.market, rtol=1e-6, atol=0)
    if mode == "routed":
        assert len({(o, u) for _, o, u in got}) > 1
    serve = _usage_snippet()["act"]  # the page's whole serving path: sidecar file, inputs, onnxruntime
    for (bars, pos), want in list(zip(windows, expected))[::70]:
        assert serve(res["path"], bars, pos) == tuple(int(x) for x in want)


def test_sidecar_formulas_are_the_codes(setup, tmp_path):
    """Every constant of the sidecar is the code's and the run's; the live progress is Policy.act's."""
    import dataclasses

    from rl_zerosync.actions import OrderType, Urgency
    from rl_zerosync.data.market import TINY, FeatureConfig
    from rl_zerosync.envs.params import EnvParams
    from rl_zerosync.serving.export import MARKET_COLUMNS, OUTPUT_COLUMNS, export_policy
    from rl_zerosync.serving.policy import Policy

    res = export_policy(setup["routed"], "torchscript", tmp_path / "p.pt")
    side = json.loads(Path(res["metadata_path"]).read_text())
    settings = yaml.safe_load((setup["routed"] / "checkpoint" / "settings.yaml").read_text())
    feats = FeatureConfig.from_dict(settings["data"]["features"])
    params = EnvParams.from_dict(settings["env"])
    s = side["series"]
    assert side["format_version"] == 2
    assert s["vol"]["params"] == {"vol_halflife": feats.vol_halflife, "decay": 0.5 ** (1 / feats.vol_halflife),
                                  "vol_floor": feats.vol_floor}
    assert s["ret_norm"]["params"] == {"vol_floor": feats.vol_floor, "ret_clip": feats.ret_clip}
    assert s["median_spread"]["params"] == s["median_vol"]["params"] == {"median_window": feats.median_window}
    assert s["obs_spread"]["params"] == {"tiny": TINY, "ratio_clip": feats.ratio_clip}
    assert s["obs_vol"]["params"] == {"vol_floor": feats.vol_floor, "ratio_clip": feats.ratio_clip}
    assert s["spread"]["spread_source"] == side["data"]["spread_source"] == "auto"
    assert s["spread"]["params"] == {k: side["data"][k] for k in s["spread"]["params"]}
    assert side["bars"]["min_bars"] == side["min_bars"] == max(feats.warmup, params.window) + 2
    # the elements tile each input in order, as observe() and route_inputs() lay them out
    for name, width in (("obs", params.observation_dim), ("market", len(MARKET_COLUMNS))):
        spans = [el["index"] for el in side["inputs"][name]["elements"]]
        assert [a for a, _ in spans] == [0] + [b for _, b in spans[:-1]] and spans[-1][1] == width
    names = [el["name"] for el in side["inputs"]["obs"]["elements"]]
    assert names == ["ret_norm", "position", "obs_spread", "obs_vol", "episode_progress"]
    assert [el["name"] for el in side["inputs"]["market"]["elements"]] == list(MARKET_COLUMNS)
    a = side["actions"]
    assert [c["name"] for c in a["columns"]] == list(OUTPUT_COLUMNS)
    assert a["exposure_levels"] == list(params.exposure_levels)
    assert {k: v["name"] for k, v in a["order_types"].items()} == {str(int(o)): o.name for o in OrderType}
    assert a["urgencies"] == {str(int(u)): u.name for u in Urgency}
    for table in ("fill_prob", "spread_frac", "impact"):
        assert a["tables"][table] == [list(r) for r in getattr(params, table)]
    assert all(f">= {side['routing'][k]}" in a["routing_rule"] for k in ("wide", "high_vol"))
    # live episode_progress: the sidecar's value is what Policy.act feeds when given no step
    prog = side["inputs"]["obs"]["elements"][-1]
    assert prog["live_step"] == params.episode_len // 2 and prog["live_value"] == 0.5 and prog["why"]
    policy = Policy.from_export(res["path"])
    assert policy.live_step == prog["live_step"]
    bars = setup["frame"].iloc[:600]
    assert policy.observe(bars, position=0.5).obs[-1] == np.float32(prog["live_value"])
    assert policy.observe(bars, position=0.5, step=3).obs[-1] == np.float32(3 / 32)
    assert policy.act(bars, position=0.5) == policy.act(bars, position=0.5, step=prog["live_step"])
    # exports written before the live value existed get the same one
    old = {k: v for k, v in policy.metadata.items() if k != "inputs"}
    assert Policy(policy.net, old).live_step == prog["live_step"]
    # the reference implementation reads its constants from the sidecar: another one gives other inputs
    cols = {c: bars[c].to_numpy(dtype=np.float64) for c in ("close", "bid", "ask")}
    obs, _ = _sidecar_inputs(side, cols, 0.5)
    np.testing.assert_allclose(obs, policy.observe(bars, position=0.5).obs, rtol=1e-6, atol=1e-6)
    changed = json.loads(json.dumps(side))
    changed["series"]["vol"]["params"]["decay"] = 0.5
    assert not np.allclose(_sidecar_inputs(changed, cols, 0.5)[0], obs)
    assert dataclasses.asdict(feats) == side["features"]


@pytest.mark.parametrize("fmt, fails", [("torchscript", "model"), ("torchscript", "sidecar"), ("onnx", "model")])
def test_a_full_disk_is_exit_4_and_leaves_the_previous_export(setup, tmp_path, monkeypatch, capsys, fmt, fails):
    """A disk that fills up in the middle of the model file (or of its sidecar): one error line, exit 4,
    no ``.tmp`` left, the previous export as it was (TorchScript is written by Python's file I/O too)."""
    import errno

    from rl_zerosync import cli
    from rl_zerosync.serving import export

    if fmt == "onnx" and export.missing_onnx_packages():
        pytest.skip("onnx / onnxscript not installed")
    out = tmp_path / ("p.pt" if fmt == "torchscript" else "p.onnx")
    args = ["export", "--checkpoint", str(setup["flat"]), "--which", "last", "--format", fmt, "--out", str(out)]
    assert cli.main(args) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real = export.write_file

    def full_disk(path, data):
        if (fails == "model") == (not path.name.endswith(".json.tmp")):
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])  # what fitted
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(export, "write_file", full_disk)
    capsys.readouterr()
    assert cli.main(args) == cli.EXIT_WRITE
    err = capsys.readouterr().err
    tmp = out.name + (".tmp" if fails == "model" else ".json.tmp")
    assert err.count("\n") == 1 and err.startswith(f"error: write failed: export: cannot write "
                                                   f"{tmp_path / tmp}: No space left on device (ENOSPC)"), err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no .tmp, the old export intact


def test_a_real_write_limit_is_exit_4_not_an_abort(setup, tmp_path):
    """The process may write no file past 2 KB (``RLIMIT_FSIZE``, the kernel's EFBIG: a real failed
    write, no monkeypatch): export exits 4 with one line and leaves no ``.tmp``. torch's own file
    writer aborted the process here (a C++ exception, exit 134, ``p.pt.tmp`` left behind)."""
    import subprocess
    import sys

    pytest.importorskip("resource")  # POSIX
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # the write fails with EFBIG instead of a signal
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))\n"
            "from rl_zerosync.cli import main\n"
            f"sys.exit(main(['export', '--checkpoint', {str(setup['flat'])!r}, '--which', 'last', "
            f"'--out', {str(tmp_path / 'p.pt')!r}]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 4, out.stderr[-2000:]
    assert out.stderr.count("\n") == 1 and "export: cannot write" in out.stderr and "p.pt.tmp" in out.stderr
    assert list(tmp_path.iterdir()) == []
