"""The shared-file rendezvous (every name exists before tasks look, atomic records,
first abort wins) and the watcher's decisions (deadline, lost, stalled, digest)."""

import dataclasses
import json
import os
import threading

from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.planfile import RunPlan, TaskInfo
from mxbatch.runtime.rendezvous import FileRendezvous, MirroredRendezvous, read_json
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    DigestRecord,
    EndReason,
    SchedulerRecord,
    TaskRecord,
    TaskState,
)
from mxbatch.runtime.watch import (
    DigestFollower,
    HeartbeatWatch,
    JobWatch,
    missing_at_deadline,
)

WORKER, SERVER, SCHEDULER = Role.WORKER, Role.SERVER, Role.SCHEDULER


def small_plan(run_dir: str = "/r", **overrides) -> RunPlan:
    values = dict(job_id="j", run_dir=run_dir, workdir="/", python="p", created_at=0,
                  startup_timeout_s=10, heartbeat_timeout_s=30, stall_timeout_s=20,
                  tasks=[TaskInfo(0, SCHEDULER, 0, ["x"], {}), TaskInfo(1, SERVER, 0, ["x"], {}),
                         TaskInfo(2, WORKER, 0, ["x"], {}), TaskInfo(3, WORKER, 1, ["x"], {})])
    values.update(overrides)
    return RunPlan(**values)


def prepared(tmp_path) -> FileRendezvous:
    rdv = FileRendezvous(str(tmp_path))
    rdv.prepare(small_plan(str(tmp_path)))
    return rdv


def test_every_name_a_task_reads_exists_before_tasks_run(tmp_path):
    rdv = prepared(tmp_path)
    layout = RunLayout(str(tmp_path))
    for path in (layout.scheduler, layout.digest, layout.abort):
        assert read_json(path) == {}
    assert rdv.read_scheduler() is None and rdv.read_abort() is None
    assert rdv.read_digest() is None
    records = rdv.read_tasks(small_plan().task_keys())
    assert {r.state for r in records.values()} == {TaskState.PENDING} and len(records) == 4


def test_scheduler_publish_and_read(tmp_path):
    rdv = prepared(tmp_path)
    record = SchedulerRecord(job_id="j", ip="127.0.0.1", port=9000, attempt=2)
    rdv.publish_scheduler(record)
    assert rdv.read_scheduler() == record
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_half_written_file_reads_as_absent(tmp_path):
    with open(RunLayout(str(tmp_path)).scheduler, "w") as handle:
        handle.write('{"job_id": "j", "ip": "127.')
    assert FileRendezvous(str(tmp_path)).read_scheduler() is None
    assert read_json(str(tmp_path / "missing.json")) is None


def test_records_from_a_newer_version_still_read():
    data = dict(TaskRecord(role=WORKER, rank=0, state=TaskState.RUNNING).to_dict(),
                future_field=1)
    assert TaskRecord.parse(data).state is TaskState.RUNNING
    assert TaskRecord.parse({"role": "nosuch", "rank": 0, "state": "RUNNING"}) is None


def test_first_abort_wins_under_contention(tmp_path):
    rdv = prepared(tmp_path)
    wins = []

    def write(i):
        wins.append(FileRendezvous(str(tmp_path)).write_abort(
            AbortRecord(kind=AbortKind.FAILED, reason=f"r{i}")))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1
    winner = rdv.read_abort()
    assert winner.reason == read_json(RunLayout(str(tmp_path)).abort_lock)["reason"]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_loser_republishes_the_winners_abort(tmp_path):
    """The winner linked abort.lock but died before renaming it over abort.json."""
    rdv = prepared(tmp_path)
    layout = RunLayout(str(tmp_path))
    with open(layout.abort_lock, "w") as handle:
        json.dump(AbortRecord(kind=AbortKind.FAILED, reason="first").to_dict(), handle)
    assert rdv.read_abort() is None
    assert rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason="second")) is False
    assert rdv.read_abort().reason == "first"


def test_task_records_round_trip_and_count_operations(tmp_path):
    rdv = prepared(tmp_path)
    before = rdv.ops
    rdv.write_task(TaskRecord(role=WORKER, rank=1, state=TaskState.RUNNING, pid=5))
    assert rdv.read_task(WORKER, 1).state is TaskState.RUNNING
    assert rdv.ops - before == 3  # temporary file + rename, one open to read


def test_mirrored_rendezvous_keeps_what_it_saw_after_the_live_one_is_gone(tmp_path):
    live = prepared(tmp_path / "live")
    mirror = prepared(tmp_path / "mirror")
    reachable = [True]

    def attempt(call):
        return call(live) if reachable[0] else None

    rdv = MirroredRendezvous(attempt, mirror)
    live.write_task(TaskRecord(role=WORKER, rank=0, state=TaskState.RUNNING))
    assert rdv.read_task(WORKER, 0).state is TaskState.RUNNING
    assert rdv.write_abort(AbortRecord(kind=AbortKind.FAILED, reason="first"))
    reachable[0] = False
    assert rdv.read_task(WORKER, 0).state is TaskState.RUNNING
    assert rdv.read_abort().reason == "first"


# ------------------------------------------------------------------ the watcher


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
    plan = small_plan()
    started = {(SCHEDULER, 0): TaskRecord(role=SCHEDULER, rank=0, state=TaskState.RUNNING)}
    assert missing_at_deadline(plan, started, now=5) == []
    assert missing_at_deadline(plan, started, now=11) == ["server[0]", "worker[0]",
                                                          "worker[1]"]


def running(role, rank, **fields) -> TaskRecord:
    return TaskRecord(role=role, rank=rank, state=TaskState.RUNNING, **fields)


def test_watch_names_the_stalled_task_and_everyones_idle_time():
    plan = small_plan()
    watch = JobWatch(plan, by="scheduler[0]")
    records = {(SCHEDULER, 0): running(SCHEDULER, 0, idle_s=50),   # idle is fine for it
               (SERVER, 0): running(SERVER, 0, idle_s=3),
               (WORKER, 0): running(WORKER, 0, idle_s=21),
               (WORKER, 1): running(WORKER, 1, idle_s=22, stopped_s=22)}
    abort = watch.check(records, wall=5, mono=0)
    assert abort.role is WORKER and abort.rank == 1
    assert abort.reason.startswith("worker[1] stalled: its process has been stopped")
    assert "idle time of each task: scheduler[0] 50s, worker[1] 22s, worker[0] 21s, " \
           "server[0] 3s" in abort.reason
    quiet = {key: running(*key) for key in records}
    assert watch.check(quiet, wall=5, mono=1) is None
    assert watch.check({**quiet, (SCHEDULER, 0): running(SCHEDULER, 0, idle_s=99)},
                       wall=5, mono=2) is None


def test_a_worker_seen_stopped_just_after_its_last_progress_is_named_stopped():
    """Under load the sampler sees the stop a moment after the last CPU tick, so the
    idle time reaches the timeout before the stopped time: still a stopped process."""
    plan = small_plan()
    records = {(WORKER, 1): running(WORKER, 1, idle_s=20.4, stopped_s=19.6)}
    abort = JobWatch(plan, by="scheduler[0]").check(records, wall=5, mono=0)
    assert abort.reason.startswith("worker[1] stalled: its process has been stopped "
                                   "(SIGSTOP or frozen): no CPU and no output for 20s")
    server = {(SERVER, 0): running(SERVER, 0, idle_s=50, stopped_s=1)}
    assert JobWatch(plan, by="scheduler[0]").check(server, wall=5, mono=0) is None


def test_watch_names_a_worker_blocked_after_another_finished():
    """The uneven-batch deadlock: only a worker that reached the scheduler, idle (not
    stopped) for exit_timeout, while another worker's code has finished."""
    plan = small_plan(exit_timeout_s=10, stall_timeout_s=None)
    done = TaskRecord(role=WORKER, rank=0, state=TaskState.SUCCEEDED)
    blocked = running(WORKER, 1, idle_s=11, reached_at=1.0)
    abort = JobWatch(plan, by="scheduler[0]").check({(WORKER, 0): done, (WORKER, 1): blocked},
                                                    wall=5, mono=0)
    assert (abort.role, abort.rank, abort.end) == (WORKER, 1, EndReason.EXIT_HANG)
    # nothing measured where it blocks nor how many batches each ran: nothing claimed
    assert abort.reason == ("worker[0] finished; worker[1] blocked 11s (its stack is not "
                            "known) (no CPU and no output; rendezvous.exit_timeout 10s)")
    in_push = {"frames": [{"path": "/v/site-packages/mxnet/kvstore/kvstore.py", "line": 240,
                           "function": "push"},
                          {"path": "/w/train.py", "line": 30, "function": "main",
                           "text": "kv.push(3, x)"}]}
    counted = dataclasses.replace(blocked, stack=in_push, batches=26)
    abort = JobWatch(plan, "s").check(
        {(WORKER, 0): dataclasses.replace(done, batches=24), (WORKER, 1): counted}, 5, 0)
    assert abort.reason == (
        "worker[0] finished; worker[1] blocked 11s in a kvstore call (mxnet/kvstore/kvstore.py"
        ":240 in push), from train.py:30 in main (kv.push(3, x)) (no CPU and no output; "
        "rendezvous.exit_timeout 10s); batches pushed (the most pushes of one kvstore key): "
        "worker[0] 24, worker[1] 26: the workers ran different numbers of batches")
    # idle in its own code (a sleep of the script): no deadlock of the kvstore's
    sleeping = dataclasses.replace(blocked, stack={"frames": [
        {"path": "/w/train.py", "line": 41, "function": "main", "text": "time.sleep(600)"}]})
    assert JobWatch(plan, "s").check({(WORKER, 0): done, (WORKER, 1): sleeping}, 5, 0) is None
    hung = running(WORKER, 0, code_finished_at=2.0)  # finished, hanging at exit itself
    assert JobWatch(plan, "s").check({(WORKER, 0): hung, (WORKER, 1): blocked}, 5, 0)
    for other in (running(WORKER, 1, idle_s=9, reached_at=1.0),    # not long enough
                  running(WORKER, 1, idle_s=11),                    # never reached it
                  running(WORKER, 1, idle_s=11, reached_at=1.0, stopped_s=11),  # a stall
                  running(WORKER, 1, idle_s=11, reached_at=1.0, code_finished_at=3.0)):
        assert JobWatch(plan, "s").check({(WORKER, 0): done, (WORKER, 1): other}, 5, 0) is None
    off = small_plan(exit_timeout_s=None, stall_timeout_s=None)
    assert JobWatch(off, "s").check({(WORKER, 0): done, (WORKER, 1): blocked}, 5, 0) is None


def test_watch_decides_when_workers_are_done_and_digests_say_so():
    plan = small_plan()
    watch = JobWatch(plan, by="scheduler[0]")
    records = {key: running(*key) for key in plan.task_keys()}
    assert watch.check(records, wall=5, mono=0) is None
    assert watch.digest(records, wall=5).workers_done_at is None
    for rank in (0, 1):
        records[(WORKER, rank)] = TaskRecord(role=WORKER, rank=rank, state=TaskState.SUCCEEDED)
    assert watch.check(records, wall=7, mono=2) is None
    digest = watch.digest(records, wall=7)
    assert digest.workers_done_at == 7 and digest.seq == 2
    assert digest.states == {"RUNNING": 2, "SUCCEEDED": 2}


def test_follower_loses_a_watcher_whose_digest_stops_changing():
    plan = small_plan()
    follower = DigestFollower(plan)
    follower.observe(None, mono=0)
    assert follower.watcher_lost(mono=100) is None  # no watcher yet: nothing to lose
    follower.observe(DigestRecord(job_id="j", seq=1), mono=10)
    follower.observe(DigestRecord(job_id="j", seq=1), mono=35)
    assert follower.watcher_lost(mono=35) is None
    assert "digest has not changed for 31s" in follower.watcher_lost(mono=41)
    follower.observe(DigestRecord(job_id="j", seq=2, final=True, workers_done_at=40), mono=42)
    assert follower.watcher_lost(mono=500) is None and follower.workers_done_seen == 42
