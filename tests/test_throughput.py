"""Live throughput (issue 21): Speedometer and MXBATCH_METRIC lines read from the roles'
output as it streams, the latest value per worker in its task record, shown by
``status``, ``status --json`` and the live line, and a straggler flagged."""

from __future__ import annotations

from mxbatch.backends.status import TaskStatus, throughput
from mxbatch.runtime.metrics import MetricReader, parse_line
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import TaskState

from .conftest import assert_no_processes, wait_for
from .test_local import fake_spec


def test_metric_lines():
    assert parse_line(b"INFO:root:Epoch[3] Batch [100-150]\tSpeed: 1764.83 samples/sec\t"
                      b"accuracy=0.9") == {"samples_per_sec": 1764.83}
    assert parse_line(b"Iter[0] Batch [20]\tSpeed: inf samples/sec") == {}
    assert parse_line(b"MXBATCH_METRIC samples_per_sec=12.5 loss=0.25 bad=x") == {
        "samples_per_sec": 12.5, "loss": 0.25}
    assert parse_line(b"no metric here") == {}
    reader = MetricReader()
    assert not reader.feed(b"MXBATCH_METRIC samples_per_sec=", 1.0)  # half a line
    assert reader.feed(b"7\nmore", 2.0) and reader.latest == {"samples_per_sec": 7.0}
    assert not reader.feed(b"x" * 10000 + b"Speed: 5 samples/sec\n", 3.0)  # too long a line


def _worker(rank: int, speed, state=TaskState.RUNNING) -> TaskStatus:
    return TaskStatus(Role.WORKER, rank, state,
                      metrics={} if speed is None else {"samples_per_sec": speed})


def test_stragglers_are_far_below_their_peers():
    total, slow = throughput([_worker(0, 400.0), _worker(1, 380.0), _worker(2, 90.0),
                              _worker(3, None)])
    assert total == 870.0 and slow == ["worker[2]"]
    assert throughput([_worker(0, 400.0), _worker(1, 300.0)]) == (700.0, [])
    ended = [_worker(0, 400.0, TaskState.SUCCEEDED), _worker(1, 100.0, TaskState.SUCCEEDED)]
    assert throughput(ended) == (500.0, [])  # the last values; no straggler once ended


def test_status_shows_each_workers_throughput_and_the_straggler(cli, tmp_path):
    spec = fake_spec(tmp_path, workers=3, extra=(
        "env: {FAKE_SLEEP: '120', FAKE_TICK: '0.2', FAKE_SPEED: '400,380,40', "
        "FAKE_METRIC_RANKS: '1'}\n"))
    job = cli.submit(spec)
    try:
        status = wait_for(lambda: (lambda s: s if s.get("stragglers") else None)(
            cli.status(job)), 60, "the throughput of every worker in the records")
        workers = [t for t in status["tasks"] if t["role"] == "worker"]
        assert [t["metrics"]["samples_per_sec"] for t in workers] == [400.0, 380.0, 40.0]
        assert workers[1]["metrics"]["loss"] == 0.25  # MXBATCH_METRIC's other metrics
        assert status["samples_per_sec"] == 820.0 and status["stragglers"] == ["worker[2]"]
        table = cli.run("status", job).stdout
        assert ("throughput: 820.0 samples/s from 3 workers (latest values); straggler: "
                "worker[2] (40.0 samples/s)") in table, table
        assert "SAMPLES/S" in table and "40.0 (straggler)" in table
    finally:
        cli.run("cancel", job)
    assert_no_processes(job)


def test_the_live_line_shows_the_total_and_stragglers():
    from mxbatch.backends.status import JobState, JobStatus
    from mxbatch.cli.progress import summary

    tasks = [_worker(0, 400.0), _worker(1, 30.0), _worker(2, 420.0)]
    total, slow = throughput(tasks)
    status = JobStatus("j-1", "local", JobState.RUNNING, tasks, samples_per_sec=total,
                       stragglers=slow)
    line = summary(status, 0.0, 65.0)
    assert "| worker: 3 running | 850 samples/s (straggler: worker[1]) | queued" in line, line
