"""The shared-file rendezvous: atomic records, first abort wins, polling with a deadline."""

import os
import threading
import time

from mxbatch.runtime.peers import HeartbeatWatch, missing_at_deadline
from mxbatch.runtime.planfile import RunPlan, TaskInfo
from mxbatch.runtime.rendezvous import FileRendezvous, poll_until, read_json
from mxbatch.runtime.states import AbortKind, AbortRecord, TaskRecord, TaskState


def test_scheduler_publish_and_read(tmp_path):
    rdv = FileRendezvous(str(tmp_path))
    assert rdv.read_scheduler() is None
    rdv.publish_scheduler({"ip": "127.0.0.1", "port": 9000})
    assert rdv.read_scheduler() == {"ip": "127.0.0.1", "port": 9000}
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_half_written_file_reads_as_absent(tmp_path):
    (tmp_path / "scheduler.json").write_text('{"ip": "127.')
    assert FileRendezvous(str(tmp_path)).read_scheduler() is None
    assert read_json(str(tmp_path / "missing.json")) is None


def test_first_abort_wins_under_contention(tmp_path):
    rdv = FileRendezvous(str(tmp_path))
    wins = []

    def write(i):
        wins.append(rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason=f"r{i}")))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1
    assert rdv.read_abort().reason.startswith("r")


def test_task_records_round_trip(tmp_path):
    rdv = FileRendezvous(str(tmp_path))
    rdv.write_task(TaskRecord(role="worker", rank=1, state=TaskState.RUNNING, pid=5))
    records = rdv.read_tasks()
    assert records[("worker", 1)].state is TaskState.RUNNING


def test_poll_until_honours_deadline():
    start = time.time()
    assert poll_until(lambda: None, time.time() + 0.5) is None
    assert 0.45 < time.time() - start < 1.5
    values = iter([None, None, 7])
    assert poll_until(lambda: next(values), time.time() + 5) == 7


def test_heartbeat_watch_flags_only_unchanging_active_tasks():
    watch = HeartbeatWatch(timeout_s=10)
    running = TaskRecord(role="worker", rank=0, state=TaskState.RUNNING, heartbeat=1)
    done = TaskRecord(role="worker", rank=1, state=TaskState.SUCCEEDED, heartbeat=1)
    records = {("worker", 0): running, ("worker", 1): done}
    assert watch.stale(records, now=0) == []
    assert watch.stale(records, now=11) == [running]
    running.heartbeat = 2
    assert watch.stale(records, now=12) == []


def test_missing_at_deadline():
    plan = RunPlan(job_id="j", run_dir="/r", workdir="/", python="p", created_at=0,
                   startup_timeout_s=10,
                   tasks=[TaskInfo(0, "scheduler", 0, ["x"], {}),
                          TaskInfo(1, "worker", 0, ["x"], {})])
    started = {("scheduler", 0): TaskRecord(role="scheduler", rank=0, state=TaskState.RUNNING)}
    assert missing_at_deadline(plan, started, now=5) == []
    assert missing_at_deadline(plan, started, now=11) == ["worker[0]"]
