"""The shared-file rendezvous: atomic records, first abort wins, polling with a deadline."""

import os
import threading
import time

from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.peers import HeartbeatWatch, missing_at_deadline
from mxbatch.runtime.planfile import RunPlan, TaskInfo
from mxbatch.runtime.rendezvous import (
    FileRendezvous,
    MirroredRendezvous,
    poll_until,
    read_json,
)
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)

WORKER, SCHEDULER = Role.WORKER, Role.SCHEDULER


def test_scheduler_publish_and_read(tmp_path):
    rdv = FileRendezvous(str(tmp_path))
    assert rdv.read_scheduler() is None
    record = SchedulerRecord(job_id="j", ip="127.0.0.1", port=9000, attempt=2)
    rdv.publish_scheduler(record)
    assert rdv.read_scheduler() == record
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_half_written_file_reads_as_absent(tmp_path):
    with open(RunLayout(str(tmp_path)).scheduler, "w") as handle:
        handle.write('{"job_id": "j", "ip": "127.')
    assert FileRendezvous(str(tmp_path)).read_scheduler() is None
    assert read_json(str(tmp_path / "missing.json")) is None


def test_records_from_a_newer_version_still_read(tmp_path):
    data = dict(TaskRecord(role=WORKER, rank=0, state=TaskState.RUNNING).to_dict(),
                future_field=1)
    assert TaskRecord.parse(data).state is TaskState.RUNNING
    assert TaskRecord.parse({"role": "nosuch", "rank": 0, "state": "RUNNING"}) is None


def test_mirrored_rendezvous_keeps_what_it_saw_after_the_live_one_is_gone(tmp_path):
    live = FileRendezvous(str(tmp_path / "live"))
    mirror = FileRendezvous(str(tmp_path / "mirror"))
    reachable = [True]

    def attempt(call):
        return call(live) if reachable[0] else None

    rdv = MirroredRendezvous(attempt, mirror)
    live.write_task(TaskRecord(role=WORKER, rank=0, state=TaskState.RUNNING))
    assert rdv.read_tasks()[(WORKER, 0)].state is TaskState.RUNNING
    assert rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason="first"))
    reachable[0] = False
    assert rdv.read_tasks()[(WORKER, 0)].state is TaskState.RUNNING
    assert rdv.read_abort().reason == "first"


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
    rdv.write_task(TaskRecord(role=WORKER, rank=1, state=TaskState.RUNNING, pid=5))
    records = rdv.read_tasks()
    assert records[(WORKER, 1)].state is TaskState.RUNNING


def test_poll_until_honours_deadline():
    start = time.time()
    assert poll_until(lambda: None, time.time() + 0.5) is None
    assert 0.45 < time.time() - start < 1.5
    values = iter([None, None, 7])
    assert poll_until(lambda: next(values), time.time() + 5) == 7


def test_heartbeat_watch_flags_only_unchanging_active_tasks():
    watch = HeartbeatWatch(timeout_s=10)
    running = TaskRecord(role=WORKER, rank=0, state=TaskState.RUNNING, heartbeat=1)
    done = TaskRecord(role=WORKER, rank=1, state=TaskState.SUCCEEDED, heartbeat=1)
    records = {(WORKER, 0): running, (WORKER, 1): done}
    assert watch.stale(records, now=0) == []
    assert watch.stale(records, now=11) == [running]
    running.heartbeat = 2
    assert watch.stale(records, now=12) == []


def test_missing_at_deadline():
    plan = RunPlan(job_id="j", run_dir="/r", workdir="/", python="p", created_at=0,
                   startup_timeout_s=10,
                   tasks=[TaskInfo(0, SCHEDULER, 0, ["x"], {}),
                          TaskInfo(1, WORKER, 0, ["x"], {})])
    started = {(SCHEDULER, 0): TaskRecord(role=SCHEDULER, rank=0, state=TaskState.RUNNING)}
    assert missing_at_deadline(plan, started, now=5) == []
    assert missing_at_deadline(plan, started, now=11) == ["worker[0]"]
