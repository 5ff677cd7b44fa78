"""A population's one metrics table (rundir/metrics_table.py): the single run's rows with a member column,
one TensorBoard writer with member<k>/ tags, and read_metrics serving a member's rows as its single run's."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rl_zerosync.rundir.metrics_table import MetricsTable, member_of, read_member_metrics, read_metrics
from rl_zerosync.rundir.run_dir import RunDir, metrics_row


def tb_scalars(tb_dir: Path) -> dict[tuple[str, int], float]:
    """Every scalar of the event files in ``tb_dir``: (tag, step) -> value (TFRecord framing read by hand)."""
    from tensorboardX.proto.event_pb2 import Event

    out = {}
    for path in sorted(tb_dir.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (n,) = struct.unpack("<Q", data[at:at + 8])
            event = Event.FromString(data[at + 12:at + 12 + n])
            at += 12 + n + 4
            for v in event.summary.value:
                out[(v.tag, event.step)] = v.simple_value
    return out


def _result(it: int, k: int) -> dict:
    return {"training_iteration": it, "config": {"lr": 1.0}, "evaluation": {"x": 1.0},
            "learners": {"default_policy": {"loss": 0.5 * it + k, "nan": float("nan")}}, "done": False,
            "eval": {"validation_sharpe": 0.25 * k}}


def test_one_table_holds_every_members_single_run_rows_and_one_tensorboard(tmp_path):
    parent = tmp_path / "pop"
    table = MetricsTable(parent).open()
    for it in (1, 2):
        table.write([{"member": k, **metrics_row(_result(it, k))} for k in (0, 1, 2)])
    table.close()
    rows = [json.loads(x) for x in (parent / "metrics.jsonl").read_text().splitlines()]
    assert [(r["member"], r["iteration"]) for r in rows] == [(k, it) for it in (1, 2) for k in (0, 1, 2)]
    # the single run's row (config / evaluation left out, NaN dropped), its names unchanged
    assert rows[4] == {"member": 1, "iteration": 2, "training_iteration": 2.0, "learners/default_policy/loss": 2.0,
                       "done": 0.0, "eval/validation_sharpe": 0.25}
    assert json.loads((parent / "run_files.json").read_text()) == ["metrics.jsonl", "tensorboard"]
    # one event file, every member's scalars under member<k>/
    assert len(list((parent / "tensorboard").iterdir())) == 1
    scalars = tb_scalars(parent / "tensorboard")
    assert scalars[("member2/learners/default_policy/loss", 1)] == 2.5
    assert scalars[("member0/eval/validation_sharpe", 2)] == 0.0
    assert len(scalars) == 3 * 2 * 4
    # a member's directory reads as its single run
    (parent / "member1").mkdir()
    assert member_of(parent / "member1") == 1 and member_of(parent) is None
    assert read_metrics(parent / "member1") == [{k: v for k, v in r.items() if k != "member"}
                                                for r in rows if r["member"] == 1]


def test_a_single_runs_rows_are_the_same_function(tmp_path):
    rd = RunDir(tmp_path / "single")
    rd.open_log()
    rd.log(_result(1, 3))
    rd.close_log()
    assert read_metrics(rd.path) == [metrics_row(_result(1, 3))]
    assert tb_scalars(rd.path / "tensorboard")[("learners/default_policy/loss", 1)] == 3.5


def test_missing_and_damaged_tables_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="member4.*no metrics.jsonl.*not a member of a population"):
        read_metrics(tmp_path / "member4")
    (tmp_path / "metrics.jsonl").write_text('{"member": 4, "iteration": 1}\n{"member": 4, "iter\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: not a JSON metrics row"):
        read_metrics(tmp_path / "member4")
    with pytest.raises(RuntimeError, match="not open"):
        MetricsTable(tmp_path / "x").write([{"member": 0, "iteration": 1}])


def test_every_members_rows_from_one_read_of_the_table(tmp_path):
    """read_member_metrics gives each directory what read_metrics gives it (members of a population's
    table, a single run's own table beside them, a member without rows), the table parsed once; a
    directory with neither table is named as read_metrics names it."""
    rows = [{"iteration": it, "member": k, "x": 10 * it + k} for it in (1, 2, 3) for k in (0, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for k in (0, 1, 2):
        (tmp_path / f"member{k}").mkdir()
    single = tmp_path / "single"
    single.mkdir()
    (single / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "x": 5}) + "\n")
    dirs = [tmp_path / "member2", single, tmp_path / "member0", tmp_path / "member1"]
    got = read_member_metrics(dirs)
    assert got == [read_metrics(d) for d in dirs]
    assert [r["x"] for r in got[0]] == [12, 22, 32] and got[3] == [] and "member" not in got[0][0]
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        read_member_metrics([tmp_path / "nowhere"])
