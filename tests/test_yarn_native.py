"""YARN's native view without a cluster: status rules, reading NodeManager log answers,
the status of a finished job without skein's driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mxbatch.backends.status import NativeState
from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.backends.yarn.backend import YarnHandle, native_states, settle
from mxbatch.backends.yarn.kv import diagnostics_for
from mxbatch.backends.yarn.logs import ContainerInfo, LogFollower, unwrap
from mxbatch.backends.yarn.states import AppState, ContainerState, FinalStatus
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.states import (
    AbortKind,
    AbortRecord,
    TaskRecord,
    TaskState,
)

from .yarngolden import SCHEDULER, SERVER, WORKER, golden

# ------------------------------------------------------------------ status rules


def test_native_states_follow_the_containers(tmp_path):
    _, plan = golden(tmp_path)
    containers = {(SCHEDULER, 0): ContainerState.RUNNING, (SERVER, 0): ContainerState.SUCCEEDED,
                  (WORKER, 0): ContainerState.REQUESTED}
    native = native_states(plan.run, AppState.RUNNING, containers)
    assert native[(SCHEDULER, 0)] is NativeState.ACTIVE
    assert native[(SERVER, 0)] is NativeState.GONE
    assert native[(WORKER, 0)] is NativeState.QUEUED
    assert native[(WORKER, 2)] is NativeState.QUEUED  # no container yet
    assert set(native_states(plan.run, AppState.ACCEPTED, containers).values()) == {
        NativeState.QUEUED}


def test_settle_after_the_application_ended(tmp_path):
    _, plan = golden(tmp_path)
    running = {(t.role, t.rank): TaskRecord(role=t.role, rank=t.rank, state=TaskState.RUNNING)
               for t in plan.run.tasks}
    done = settle(plan.run, running, FinalStatus.SUCCEEDED)
    assert {r.state for r in done.values()} == {TaskState.SUCCEEDED}
    assert settle(plan.run, {}, FinalStatus.SUCCEEDED)[(WORKER, 2)].state is TaskState.SUCCEEDED
    abort = AbortRecord(kind=AbortKind.FAILED, reason="worker[1] exited with code 3",
                        role=WORKER, rank=1, exit_code=3)
    failed = settle(plan.run, running, FinalStatus.FAILED, abort)
    assert failed[(WORKER, 1)].state is TaskState.FAILED
    assert failed[(WORKER, 1)].exit_code == 3
    assert failed[(WORKER, 0)].state is TaskState.CANCELLED
    assert (WORKER, 0) not in settle(plan.run, {}, FinalStatus.FAILED, abort)


# ------------------------------------------------------------------ logs


NM_ANSWER = (b"Container: container_1_0001_01_000002 on localhost:34175\n"
             b"LogAggregationType: LOCAL\n" + b"=" * 68 + b"\n"
             b"LogType:worker-0.log\nLogLastModifiedTime:Sun Nov 29 19:49:27 +0000 2026\n"
             b"LogLength:14\nLogContents:\nline 1\nline 2\n"
             b"End of LogType:worker-0.log.\n" + b"*" * 77 + b"\n\n")


def test_nodemanager_log_answer_is_unwrapped():
    assert unwrap(NM_ANSWER) == b"line 1\nline 2\n"
    assert unwrap(b"plain text") == b"plain text"
    info = ContainerInfo("container_1_0001_01_000002", "node7:8042")
    assert info.log_url("worker-0.log") == ("http://node7:8042/ws/v1/node/containerlogs/"
                                            "container_1_0001_01_000002/worker-0.log")


def test_log_follower_fetches_at_most_once_a_second(monkeypatch):
    fetched = []
    clock = [100.0]
    monkeypatch.setattr("mxbatch.backends.yarn.logs.fetch",
                        lambda container, name: fetched.append(name) or b"abcdef")
    follower = LogFollower(lambda: ContainerInfo("c", "n:1"), "worker-0.log",
                           clock=lambda: clock[0])
    assert follower(2, False) == b"cdef"
    assert follower(6, False) is None  # too soon
    assert follower(6, True) == b""    # final reads anyway
    clock[0] += 1.5
    assert follower(3, False) == b"def"
    assert len(fetched) == 3
    assert LogFollower(lambda: None, "x.log")(0, True) is None


def test_status_of_a_finished_job_needs_no_driver(home, tmp_path):
    backend, plan = golden(tmp_path, "command: x\nrendezvous: {dir: %s}\n" % (tmp_path / "r"))
    layout = RunLayout(plan.run.run_dir)
    Path(layout.backend_dir(yarn_spec.STATE_DIR)).mkdir(parents=True)
    Path(layout.plan).write_text(plan.run.to_json())
    abort = AbortRecord(kind=AbortKind.CANCELLED, reason="cancelled by the user")
    Path(layout.backend_file(yarn_spec.STATE_DIR, "report.json")).write_text(json.dumps(
        {"state": "FINISHED", "final_status": "KILLED",
         "diagnostics": diagnostics_for(abort.to_dict())}))
    from mxbatch.backends.records import JobRecord

    record = JobRecord(job_id=plan.job_id, backend="yarn", run_dir=layout.root,
                       handle=YarnHandle(app_id="application_1_0001").to_dict())
    backend._job(record).driver = lambda: pytest.fail("the driver was asked")
    status = backend.status(record)
    assert status.state.value == "CANCELLED" and status.terminal
    assert status.reason == "cancelled by the user"
    backend.cancel(record)  # idempotent, no driver either
