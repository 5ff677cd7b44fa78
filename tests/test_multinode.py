"""A two-node Ray cluster on one host, on the CPU: env runners on a worker node, the learner in the
driver on the head; a killed runner is restarted, a lost node fails the run with a clear error.

Both nodes are ``ray start --block`` processes, each the leader of its own process group with its
own ``--temp-dir``: SIGKILL to that group and to the processes below it takes one node down (a
crash) and is how the fixture cleans up, even when the test fails. The driver joins the head the way ``rl-zerosync
train`` does with ``RAY_ADDRESS`` set (:func:`rl_zerosync.run.train.init_ray`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import ray

from rl_zerosync.algorithm import EnvRunnersLostError, ZeroSyncDQNConfig, lost_runners_message
from rl_zerosync.config.settings import SettingsError, apply_overrides, from_dict, to_rllib_config
from tiny_run import tiny_raw

BIN = Path(sys.executable).parent
RAY_CLI = BIN / "ray"
RUNNER_RESOURCE = "runner_node"
"""The custom resource only the worker node offers; every env runner asks for one unit."""
RESTART_TIMEOUT_S = 35.0
"""``algo.env_runner_restart_timeout_s`` of the cluster run: above a runner's restart time on two
cores (6 to 13 s seen), and what the node-loss phase waits before the run fails."""


# ---------------------------------------------------------------- settings (no cluster)
def _settings(**algo):
    return from_dict(tiny_raw({"name": "multinode"}, algo={"num_env_runners": 1, **algo}))


def test_runner_placement_settings_reach_rllib():
    s = _settings(custom_resources_per_env_runner={RUNNER_RESOURCE: 1}, env_runner_restart_timeout_s=12)
    config = to_rllib_config(s)
    assert config.custom_resources_per_env_runner == {RUNNER_RESOURCE: 1}
    assert config.env_runner_restart_timeout_s == 12.0
    defaults = to_rllib_config(_settings())
    assert defaults.custom_resources_per_env_runner == {} and defaults.env_runner_restart_timeout_s == 300.0
    # The command-line form of the doc's recipe.
    raw = apply_overrides(tiny_raw({"name": "m"}), [f"algo.custom_resources_per_env_runner={{{RUNNER_RESOURCE}: 2}}"])
    assert from_dict(raw).algo.custom_resources_per_env_runner == {RUNNER_RESOURCE: 2}


@pytest.mark.parametrize("algo, words", [
    ({"custom_resources_per_env_runner": [RUNNER_RESOURCE]}, ["algo.custom_resources_per_env_runner", "dict"]),
    ({"custom_resources_per_env_runner": {"CPU": 1}}, ["algo.custom_resources_per_env_runner", "CPU"]),
    ({"custom_resources_per_env_runner": {RUNNER_RESOURCE: -1}}, ["algo.custom_resources_per_env_runner", ">= 0"]),
    ({"custom_resources_per_env_runner": {RUNNER_RESOURCE: "many"}}, [RUNNER_RESOURCE, "'many'"]),
    ({"env_runner_restart_timeout_s": 0}, ["algo.env_runner_restart_timeout_s", "> 0"]),
])
def test_runner_placement_settings_errors_name_the_key(algo, words):
    with pytest.raises(SettingsError) as err:
        _settings(**algo)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_rllib_config_rejects_a_bad_restart_timeout():
    with pytest.raises(ValueError, match="env_runner_restart_timeout_s"):
        ZeroSyncDQNConfig().fault_tolerance(env_runner_restart_timeout_s=0).validate()


def test_lost_runners_message_names_the_missing_resource():
    config = to_rllib_config(_settings(custom_resources_per_env_runner={RUNNER_RESOURCE: 1},
                                       num_gpus_per_env_runner=0))
    gone = lost_runners_message(config, 2, [{"Resources": {"CPU": 4.0}}])
    assert "none of the 2 remote env runner(s)" in gone and RUNNER_RESOURCE in gone
    assert "none of the 1 alive node(s) offers that" in gone and "--resume" in gone
    there = lost_runners_message(config, 1, [{"Resources": {"CPU": 1.0, RUNNER_RESOURCE: 1.0}}])
    assert "1 of the 1 alive node(s) offer that" in there


# ---------------------------------------------------------------- the cluster
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Pids of every process below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


@dataclass
class RayNode:
    """One ``ray start --block`` process, leader of a process group holding the node's processes."""

    name: str
    proc: subprocess.Popen
    temp_dir: Path
    log: Path

    def kill(self) -> None:
        """SIGKILL every process of the node (a crash: no graceful deregistration): its process group
        and, by pid, the processes below it in their own sessions (the raylet's workers)."""
        below = _descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def output(self) -> str:
        """The last lines ``ray start`` printed (for failure messages)."""
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def _node_env() -> dict:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update({
        "RAY_AUTH_MODE": "disabled",  # a cluster on this host only; the in-process driver joins without a token
        "RAY_USAGE_STATS_ENABLED": "0",
        # The head declares a silent node dead after 3 missed 1-s health checks (default: far longer).
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    })
    return env


def _start_node(name: str, root: Path, args: list[str]) -> RayNode:
    """``ray start --block`` with this node's own temp dir, in a new process group."""
    temp_dir = root / name
    log = root / f"{name}.log"
    cmd = [str(RAY_CLI), "start", "--block", "--node-ip-address=127.0.0.1", "--num-gpus=0",
           "--object-store-memory=100000000", f"--dashboard-agent-listen-port={_free_port()}",
           "--disable-usage-stats", f"--temp-dir={temp_dir}", *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=_node_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return RayNode(name, proc, temp_dir, log)


def _wait_for(what: str, ready: Callable[[], object], timeout_s: float, nodes: list[RayNode]) -> object:
    """Poll ``ready()`` until it returns something truthy; fail naming ``what`` (and a dead node's output)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        for node in nodes:
            assert node.proc.poll() is None, f"{node.name} node exited: {node.output()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.2)


@dataclass
class Cluster:
    head: RayNode
    head_address: str
    root: Path
    nodes: list[RayNode]

    def add_worker(self) -> tuple[RayNode, str]:
        """Start a worker node offering 1 CPU and one ``runner_node``; returns it and its Ray node id."""
        worker = _start_node("worker", self.root, [f"--address={self.head_address}", "--num-cpus=1",
                                                   f'--resources={{"{RUNNER_RESOURCE}": 1}}'])
        self.nodes.append(worker)

        def worker_id():
            return next((n["NodeID"] for n in ray.nodes()
                         if n["Alive"] and n["Resources"].get(RUNNER_RESOURCE)), None)

        node_id = _wait_for("the worker node joining", worker_id, 90, self.nodes)
        # Alive in the GCS is not yet ready to start workers: run one task there first (under load a
        # runner actor created right after the join was cancelled before it started).
        probe = ray.remote(num_cpus=1, resources={RUNNER_RESOURCE: 1})(lambda: ray.get_runtime_context().get_node_id())
        assert ray.get(probe.remote(), timeout=90) == node_id
        return worker, node_id


@contextlib.contextmanager
def _time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the (main) thread when the block runs longer than ``seconds``."""
    def expire(signum, frame):
        raise TimeoutError(f"{what}: still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def cluster(monkeypatch) -> Iterator[Cluster]:
    """A head node (1 CPU, no ``runner_node``) with this process joined as the driver, the way
    ``rl-zerosync train`` joins with ``RAY_ADDRESS``; worker nodes come from ``add_worker``.
    Finalizer: disconnect, then SIGKILL every node's process group, then remove the temp dirs."""
    if ray.is_initialized():
        ray.shutdown()
    root = Path(tempfile.mkdtemp(prefix="rzs-mn-", dir="/tmp"))  # short: Ray's socket paths live below it
    port = _free_port()
    head = _start_node("head", root, ["--head", f"--port={port}", "--include-dashboard=false",
                                      f"--ray-client-server-port={_free_port()}", "--num-cpus=1"])
    nodes = [head]
    try:
        _wait_for("the head node", (head.temp_dir / "ray_current_cluster").exists, 90, nodes)
        address = (head.temp_dir / "ray_current_cluster").read_text().strip()
        monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        from rl_zerosync.run.train import init_ray

        init_ray(_settings())  # joins before any worker node exists: the driver is on the head
        yield Cluster(head, address, root, nodes)
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for node in reversed(nodes):
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


def _runners(algo) -> list[tuple[int, str]]:
    """(pid, Ray node id) of every healthy remote env runner."""
    return algo.env_runner_group.foreach_env_runner(
        lambda runner: (os.getpid(), ray.get_runtime_context().get_node_id()), local_env_runner=False)


def _steps(result: dict) -> int:
    return int(result["env_runners"]["num_env_steps_sampled_lifetime"])


def _updates(result: dict) -> int:
    return int(result["learners"]["default_policy"]["zerosync"]["updates_lifetime"])


def _train_until(algo, done: Callable[[dict], bool], timeout_s: float) -> dict:
    """``algo.train()`` until ``done(result)``; fails after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = algo.train()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"not done within {timeout_s:g} s: {result.get('fault_tolerance')}"


CHILD = "RL_ZEROSYNC_TWO_NODE_CHILD"
"""Set in the fresh pytest process that runs :func:`test_two_node_cluster_body`."""


@pytest.mark.skipif(not RAY_CLI.exists(), reason=f"`ray start` unavailable: no ray CLI at {RAY_CLI}")
@pytest.mark.slow
def test_runner_on_a_worker_node_recovers_and_a_lost_node_fails_the_run():
    """Runs :func:`test_two_node_cluster_body` in a fresh Python process whose environment says
    ``RAY_AUTH_MODE=disabled`` before Ray is imported: an earlier ``ray.init`` in this pytest process
    leaves ``RAY_AUTH_MODE=token`` in ``os.environ``, and a driver that imported Ray under it could
    not start the runner actor on the auth-disabled test cluster (it was cancelled before it ran).
    A fresh driver process is also what ``rl-zerosync train`` on a cluster is."""
    env = {**os.environ, CHILD: "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          f"{Path(__file__).resolve()}::test_two_node_cluster_body"],
                         capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1],
                         timeout=300)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-6000:] + out.stderr[-3000:]
    print("\n".join(line for line in out.stdout.splitlines() if line.startswith(("runner killed", "worker node"))))


@pytest.mark.skipif(os.environ.get(CHILD) != "1", reason="run in a fresh process by "
                    "test_runner_on_a_worker_node_recovers_and_a_lost_node_fails_the_run")
def test_two_node_cluster_body(cluster):
    """Runner on the worker node, learner in the driver on the head. kill -9 of the runner: Ray
    restarts it on the worker node and training continues. The worker node crashes: no node offers
    ``runner_node``, the runner cannot come back and the run raises EnvRunnersLostError naming it."""
    with _time_limit(150, "two-node test"):
        worker, worker_id = cluster.add_worker()
        settings = _settings(custom_resources_per_env_runner={RUNNER_RESOURCE: 1}, num_gpus_per_env_runner=0,
                             env_runner_restart_timeout_s=RESTART_TIMEOUT_S)
        algo = to_rllib_config(settings).build_algo()
        try:
            # Placement: the runner on the worker node; the learner in this process, on the head.
            head_id = ray.get_runtime_context().get_node_id()
            assert head_id != worker_id and algo.learner_group.is_local
            [(pid, node)] = _runners(algo)
            assert node == worker_id and pid != os.getpid()

            first = _train_until(algo, lambda r: r["training_iteration"] >= 2, 60)
            assert _steps(first) == 2 * 8 * 16 and _updates(first) > 0

            # kill -9 of the runner's process (between iterations): dropped, restarted by Ray.
            os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            back = _train_until(algo, lambda r: _steps(r) > _steps(first), 60)
            print(f"runner killed: training again after {time.monotonic() - t0:.1f} s, "
                  f"{back['training_iteration'] - first['training_iteration']} iteration(s)")
            [(new_pid, new_node)] = _runners(algo)
            assert new_pid != pid and new_node == worker_id
            assert back["fault_tolerance"]["num_remote_worker_restarts"] >= 1
            again = _train_until(algo, lambda r: True, 30)
            assert _steps(again) == _steps(back) + 8 * 16 and _updates(again) > _updates(back)

            # The worker node crashes: nothing can host the runner; the run fails, naming why.
            worker.kill()
            t0 = time.monotonic()
            with pytest.raises(EnvRunnersLostError) as lost:
                _train_until(algo, lambda r: False, RESTART_TIMEOUT_S + 60)
            waited = time.monotonic() - t0
            print(f"worker node killed: run failed after {waited:.1f} s: {lost.value}")
            message = str(lost.value)
            assert RUNNER_RESOURCE in message and "algo.env_runner_restart_timeout_s" in message
            assert "none of the 1 alive node(s) offers that" in message
            assert RESTART_TIMEOUT_S <= waited < RESTART_TIMEOUT_S + 45
        finally:
            algo.stop()


POPULATION_CHILD = "RL_ZEROSYNC_TWO_NODE_POPULATION_CHILD"
"""Set in the fresh pytest process that runs :func:`test_population_shards_body`."""


@pytest.mark.skipif(not RAY_CLI.exists(), reason=f"`ray start` unavailable: no ray CLI at {RAY_CLI}")
@pytest.mark.slow
def test_population_shards_on_two_nodes_match_one_shard():
    """Runs :func:`test_population_shards_body` in a fresh process (as the test above, for the same reason)."""
    env = {**os.environ, POPULATION_CHILD: "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          f"{Path(__file__).resolve()}::test_population_shards_body"],
                         capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1],
                         timeout=400)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-6000:] + out.stderr[-3000:]


@pytest.mark.skipif(os.environ.get(POPULATION_CHILD) != "1", reason="run in a fresh process by "
                    "test_population_shards_on_two_nodes_match_one_shard")
def test_population_shards_body(cluster, tmp_path):
    """A 4-member population with PBT as 2 shards, one on each node of the cluster, ends with the
    members of the same population as 1 shard in the driver, bit for bit (weights, Adam state, rows)."""
    import numpy as np
    import torch

    from rl_zerosync.population.drive import train_population
    from rl_zerosync.population.shards import ShardedPopulation

    seen_nodes: list[str] = []
    start = ShardedPopulation.__init__

    def spy(self, *args, **kwargs):
        start(self, *args, **kwargs)
        seen_nodes.extend(ray.get([s.node.remote() for s in self.shards]))

    with _time_limit(300, "two-node population test"):
        cluster.add_worker()

        def raw(shards: int) -> dict:
            r = tiny_raw({"name": "pop", "dir": str(tmp_path / f"s{shards}"), "iterations": 10, "checkpoint_every": 0,
                          "eval_every": 5, "evaluate": False})
            r["population"] = {"seeds": [0, 1, 2, 3], "pbt_every": 1, "pbt_quantile": 0.5, "shards": shards}
            return r

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the shards' actors run one thread each: the same float sums
        try:
            one = train_population(from_dict(raw(1), "pop.yaml"))
        finally:
            torch.set_num_threads(threads)
        ShardedPopulation.__init__ = spy
        try:
            two = train_population(from_dict(raw(2), "pop.yaml"))
        finally:
            ShardedPopulation.__init__ = start
        assert len(set(seen_nodes)) == 2, seen_nodes  # one shard on each node
        assert [r["lineage"] for r in one["per_member"]] == [r["lineage"] for r in two["per_member"]]
        assert any(e for r in two["per_member"] for e in r["lineage"])  # PBT ran
        from test_population import _arrays, _rows

        for k in range(4):
            a, b = tmp_path / "s1" / "pop" / f"member{k}", tmp_path / "s2" / "pop" / f"member{k}"
            sa, sb = _arrays(a / "checkpoint"), _arrays(b / "checkpoint")
            assert sa.keys() == sb.keys() and all(np.array_equal(sa[x], sb[x]) for x in sa), f"member{k}"
            assert _rows(a) == _rows(b), f"member{k}"
