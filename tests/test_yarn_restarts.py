"""Restarts on YARN: a relaunch is a new skein application of the same job (same job id
and run directory), driven by the batch backends' driver of attempts.

Without a cluster: YARN's container exit statuses as end reasons, the skein
specification of a relaunched attempt (its variables, the NodeManagers left after node
failures), the container script's per-attempt log link, the abort record of an
application YARN ended by taking a container. On the real test cluster
(ci/clusters/yarn-up.sh) with stand-in roles (tests/fakerole.py): a worker killed at
attempt 0 relaunches the job as a new application that finishes, and a cancel during
the backoff between two attempts ends the job with nothing left; and one real MXNet job
(examples/resume-ps.yaml) that resumes from its checkpoint on a new application."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mxbatch.backends.records import JobRecord
from mxbatch.backends.yarn import appspec as yarn_spec
from mxbatch.backends.yarn.app import AppReport, abort_from_report, container_end
from mxbatch.backends.yarn.backend import YarnHandle, usable_nodes
from mxbatch.backends.yarn.exits import ContainerExitStatus, container_exit, exit_status_in
from mxbatch.backends.yarn.logs import ContainerInfo
from mxbatch.backends.yarn.states import AppState, FinalStatus
from mxbatch.runtime.attempts import AttemptEnd, AttemptRecord, AttemptsRecord, write_attempts
from mxbatch.runtime.layout import RunLayout
from mxbatch.runtime.roles import Role
from mxbatch.runtime.states import EndReason
from mxbatch.spec import plan as planning

from .clusterjobs import cancel_in_the_backoff
from .conftest import FAKEROLE, Cli, assert_no_processes, task_record, wait_for
from .test_mxnet_restarts import last_step
from .yarngolden import SPEC, WORKER, golden
from .yarnjobs import ENDED, app_id, live_containers, rm_app

RESTARTS_SPEC = SPEC + "restarts: {max: 2}\n"

# ------------------------------------------------------------------ exit statuses


@pytest.mark.parametrize("status,diagnostics,reason", [
    (-102, "", EndReason.PREEMPTED),
    (None, "Container preempted by scheduler", EndReason.PREEMPTED),
    (-100, "Container released on a *lost* node", EndReason.NODE_FAILURE),
    (None, "Container released on a *lost* node", EndReason.NODE_FAILURE),
    (-101, "", EndReason.NODE_FAILURE),
    (-100, "Container released by application", EndReason.FAILURE),
    (137, "", EndReason.FAILURE),
    (None, "Container killed on request. Exit code is 137\nContainer exited with a "
           "non-zero exit code 137. ", EndReason.FAILURE),
    (-105, "Container killed by the ApplicationMaster.", EndReason.FAILURE),
    (-106, "", EndReason.FAILURE),
    (-104, "Container is running beyond physical memory limits.", EndReason.FAILURE),
    (1, "Exception from container-launch.\nExit code: 1", EndReason.FAILURE),
], ids=["preempted", "preempted-words", "aborted-lost-node", "lost-node-words",
        "disks-failed", "aborted-released", "sigkill-137", "killed-words", "killed-by-am",
        "killed-by-rm", "pmem", "exit-1"])
def test_container_exit_statuses_are_end_reasons(status, diagnostics, reason):
    ended = container_exit(status, diagnostics)
    assert ended is not None and ended.reason is reason, ended
    assert ended.words


def test_successes_and_silence_are_no_end():
    assert container_exit(0, "") is None
    assert container_exit(None, "") is None
    assert exit_status_in("Container exited with a non-zero exit code 143. ") == 143
    assert exit_status_in("nothing here") is None
    assert ContainerExitStatus.PREEMPTED == -102 and ContainerExitStatus.ABORTED == -100
    assert "KILLED_BY_APPMASTER" in container_exit(-105, "").words


def test_a_preempted_or_lost_container_ends_the_attempt_with_its_reason():
    preempted = ContainerInfo("container_1_0001_01_000004", "node3:8042",
                              exit_message="Container preempted by scheduler")
    end = container_end((WORKER, 1), preempted)
    assert end is not None and end.reason is EndReason.PREEMPTED
    assert (end.role, end.rank, end.hosts) == ("worker", 1, ())
    assert "worker[1] lost: YARN says Container preempted by scheduler" in end.detail
    lost = ContainerInfo("container_1_0001_01_000003", "node2:8042",
                         exit_message="Container released on a *lost* node")
    assert container_end((Role.SERVER, 0), lost).hosts == ("node2",)
    # an application YARN failed after it took a container: that container's reason
    report = AppReport(state=AppState.FINISHED, final_status=FinalStatus.FAILED,
                       diagnostics="Failure in service worker, see logs for details")
    abort = abort_from_report(report, {(WORKER, 1): preempted,
                                       (WORKER, 0): ContainerInfo("c0", "node1:8042")})
    assert abort.end_reason is EndReason.PREEMPTED and (abort.role, abort.rank) == (WORKER, 1)
    abort = abort_from_report(report, {(Role.SERVER, 0): lost})
    assert abort.end_reason is EndReason.NODE_FAILURE and abort.hosts == ["node2"]
    plain = abort_from_report(report, {(WORKER, 0): ContainerInfo("c0", "node1:8042")})
    assert plain.end_reason is EndReason.FAILURE and "Failure in service worker" in plain.reason


def test_a_later_attempt_is_read_from_its_own_files_and_preemption_wins(home, tmp_path):
    """Attempt 1's application ended, YARN having preempted a container: status reads
    that attempt's mirrored report and containers (attempts/1/yarn/), shows both
    attempts, and the supervisors' SIGTERM failure becomes the preemption."""
    backend, plan = golden(tmp_path, RESTARTS_SPEC.replace("/shared/runs", str(tmp_path / "r")))
    layout = RunLayout(plan.run.run_dir)
    Path(layout.attempt(1).attempt_backend_file(yarn_spec.STATE_DIR, "x")).parent.mkdir(
        parents=True)
    Path(layout.plan).write_text(plan.run.to_json())
    Path(layout.attempt(1).attempt_backend_file(yarn_spec.STATE_DIR, "report.json")).write_text(
        json.dumps({"state": "FINISHED", "final_status": "FAILED",
                    "diagnostics": "Failure in service worker, see logs for details"}))
    Path(layout.attempt(1).attempt_backend_file(yarn_spec.STATE_DIR, "containers.json")
         ).write_text(json.dumps({"worker-1": {
             "container_id": "container_1_0002_01_000005", "node_http": "node4:8042",
             "state": "FAILED", "exit_message": "Container preempted by scheduler"}}))
    first = AttemptRecord(index=0, started_at=1.0, native={"app_id": "application_1_0001"})
    first.end_with(AttemptEnd(EndReason.FAILURE, "worker[0] was killed by SIGKILL"))
    second = AttemptRecord(index=1, started_at=2.0, restart_reason=EndReason.FAILURE,
                           native={"app_id": "application_1_0002"})
    write_attempts(layout.attempts_record,
                   AttemptsRecord(job_id=plan.job_id, max_restarts=2, attempts=[first, second]))
    record = JobRecord(job_id=plan.job_id, backend="yarn", run_dir=layout.root,
                       handle=YarnHandle(app_id="application_1_0001").to_dict())
    job = backend._job(record, 1)
    assert job.app_id == "application_1_0002" and backend._job(record).app_id == job.app_id
    job.driver = lambda: pytest.fail("the driver was asked")
    end = backend.native_end(record, YarnHandle(app_id="application_1_0002"), plan.run,
                             AttemptEnd(EndReason.FAILURE, "supervisor received SIGTERM"))
    assert end.reason is EndReason.PREEMPTED and (end.role, end.rank) == ("worker", 1)
    status = backend.status(record)
    assert status.attempt == 1 and [a.native["app_id"] for a in status.attempts] == [
        "application_1_0001", "application_1_0002"]
    assert "Container preempted by scheduler" in status.reason
    assert Path(layout.attempt(1).abort).is_file()  # mirrored into attempt 1's files
    assert not Path(layout.abort).is_file() or "preempted" not in Path(layout.abort).read_text()


# ------------------------------------------------------------------ relaunched specifications


def test_a_relaunch_is_the_first_specification_with_the_attempt(tmp_path):
    backend, plan = golden(tmp_path, RESTARTS_SPEC)
    backend.check(plan)  # restarts are no spec error on YARN any more
    first = yarn_spec.application_spec(plan, backend.options)
    again = yarn_spec.attempt_spec(first, 1, "failure")
    assert again["name"] == first["name"] and again["tags"] == first["tags"]
    for name, service in again["services"].items():
        assert service["env"]["MXBATCH_ATTEMPT"] == "1"
        assert service["env"]["MXBATCH_RESTART_REASON"] == "failure"
        assert service["env"]["MXBATCH_JOB_ID"] == plan.job_id
        assert "nodes" not in service
        assert service["script"] == first["services"][name]["script"]
    assert "MXBATCH_ATTEMPT" not in first["services"]["worker"]["env"]  # not changed
    held = yarn_spec.attempt_spec(first, 2, "node_failure", ["node1", "node3"])
    assert held["services"]["worker"]["nodes"] == ["node1", "node3"]
    assert held["services"]["worker"]["relax_locality"] is False
    skein = pytest.importorskip("skein")
    spec = skein.ApplicationSpec.from_dict(held)
    assert spec.services["worker"].nodes == ["node1", "node3"]
    assert spec.services["worker"].env["MXBATCH_ATTEMPT"] == "2"


def test_excluded_hosts_leave_their_nodemanagers_out():
    nodes = ["node1.example:45454", "node2.example:45454", "node3:41000"]
    assert usable_nodes(nodes, ["node2"]) == ["node1.example", "node3"]
    assert usable_nodes(nodes, ["node1.example", "node3"]) == ["node2.example"]
    assert usable_nodes(nodes, []) == ["node1.example", "node2.example", "node3"]


@pytest.mark.parametrize("attempt,link", [("", "logs"), ("0", "logs"),
                                          ("2", "attempts/2/logs")])
def test_a_relaunched_container_links_its_attempts_logs(tmp_path, attempt, link):
    """The container script of a job with restarts (run by bash, a stand-in supervisor):
    attempt k's supervisor writes into attempts/<k>/logs, which must be YARN's log
    directory for the NodeManager to serve it."""
    work, logs = tmp_path / "container", tmp_path / "yarn-logs"
    work.mkdir()
    logs.mkdir()
    (work / yarn_spec.ENV_FILE).write_text("")
    _, plan = golden(tmp_path, RESTARTS_SPEC)
    plan = planning.make(plan.spec, "yarn", job_id="golden-00000001", created_at=0,
                         python="true")
    script = yarn_spec.container_script(plan.run, WORKER)
    env = {"PATH": "/usr/bin:/bin", "SKEIN_CONTAINER_ID": "worker_0", "LOG_DIRS": str(logs)}
    if attempt:
        env["MXBATCH_ATTEMPT"] = attempt
    result = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert os.path.realpath(work / link) == str(logs)
    if attempt == "2":
        assert (work / "attempts" / "2" / "tasks").is_dir()
    plain = yarn_spec.container_script(golden(tmp_path)[1].run, WORKER)
    assert "MXBATCH_ATTEMPT" not in plain  # without restarts: as it always was


# ------------------------------------------------------------------ on the cluster


def restart_spec(tmp_path: Path, name: str, restarts: str) -> Path:
    """Stand-in roles in place (one NodeManager on this host), workers that end when the
    file ``end`` exists, short timeouts, ``restarts``."""
    role = json.dumps([sys.executable, str(FAKEROLE)])
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ncommand: {role}\nworkdir: {tmp_path}\n"
        f"env: {{FAKE_TICK: '0.5', FAKE_BARRIER: '{tmp_path / 'end'}'}}\n"
        "resources: {memory: 256M}\n"
        "roles: {server: {count: 1}, worker: {count: 2}}\n"
        "rendezvous: {startup_timeout: 3m, grace: 2s, heartbeat_timeout: 6s}\n"
        f"restarts: {restarts}\n"
        "backends:\n  yarn: {ship_workdir: false}\n")
    return path


def running_with_worker_reached(cli: Cli, job: str) -> dict:
    """The task record of worker[0] once every task runs and it reached the scheduler
    (read through ``status``, which mirrors the key-value store into the run dir)."""
    def ready():
        status = cli.status(job)
        if not all(t["state"] == "RUNNING" for t in status["tasks"]):
            return None
        record = task_record(cli.run_dir(job), "worker", 0)
        return record if record and record.get("pid") and record.get("reached_at") else None
    return wait_for(ready, 180, "every task running, worker[0] at the scheduler", interval=1)


def app_ids(status: dict) -> list:
    return [a["native"].get("app_id") for a in status["attempts"]]


def assert_nothing_left(cli: Cli, job: str, apps: list) -> None:
    """No application of the job is RUNNING or ACCEPTED any more, no NodeManager runs a
    container of them, and no process of the job runs here."""
    for app in apps:
        wait_for(lambda app=app: rm_app(cli, app)["state"] in ENDED, 60, f"{app} to end",
                 interval=0.5)
        wait_for(lambda app=app: not live_containers(cli, app), 60,
                 f"the containers of {app} to end", interval=0.5)
    assert_no_processes(job, timeout=30)


@pytest.mark.yarn
def test_a_killed_worker_relaunches_as_a_new_application(yarn, tmp_path):
    job = yarn.submit(restart_spec(tmp_path, "yarn-restart", "{max: 1, backoff: 1s}"),
                      "--backend", "yarn")
    run = yarn.run_dir(job)
    try:
        worker = running_with_worker_reached(yarn, job)
        os.kill(worker["pid"], signal.SIGKILL)  # the role in its container, for real
        # attempt 1's workers tick until the test lets them end (their log shows it)
        wait_for(lambda: (lambda s: s["attempt"] == 1 and s["attempts"][1]["native"] and all(
            t["state"] == "RUNNING" for t in s["tasks"]))(yarn.status(job)),
                 180, "attempt 1 running", interval=1)
        (tmp_path / "end").touch()
        result = yarn.run("wait", job, "--timeout", "180", timeout=210)
        assert result.returncode == 0, result.stderr
        status = yarn.status(job)
        assert status["state"] == "SUCCEEDED", status
        assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
        assert "worker[0] was killed by SIGKILL" in status["attempts"][0]["detail"]
        assert "restarting as attempt 1" in status["attempts"][0]["decision"]
        first, second = app_ids(status)
        assert first == app_id(yarn, job)
        assert second and second != first
        assert rm_app(yarn, first)["finalStatus"] == "FAILED"
        assert rm_app(yarn, second)["finalStatus"] == "SUCCEEDED"
        assert status["attempts"][1]["restart_reason"] == "failure"
        text = yarn.run("status", job).stdout
        assert "attempt 1 (MXBATCH_ATTEMPT; at most 2 attempts" in text, text
        assert "failure" in text and "succeeded" in text
        # each attempt's logs, from its own application's NodeManager
        for attempt in ("0", "1"):
            logs = yarn.run("logs", job, "--role", "worker", "--rank", "0",
                            "--attempt", attempt)
            assert logs.returncode == 0 and "tick" in logs.stdout, (attempt, logs.stderr)
        env = json.loads((run / "attempts.json").read_text())
        assert env["final"] and env["outcome"] == "succeeded"
        assert_nothing_left(yarn, job, [first, second])
    finally:
        yarn.run("cancel", job)


@pytest.mark.yarn
def test_cancel_during_the_backoff_ends_the_job(yarn, tmp_path):
    job = yarn.submit(restart_spec(tmp_path, "yarn-backoff", "{max: 2, backoff: 30s}"),
                      "--backend", "yarn")
    run = yarn.run_dir(job)
    try:
        worker = running_with_worker_reached(yarn, job)
        os.kill(worker["pid"], signal.SIGKILL)
        cancel_in_the_backoff(yarn, job, run, timeout=120)
        assert yarn.status(job)["state"] == "CANCELLED"
        assert_nothing_left(yarn, job, app_ids(yarn.status(job)))
    finally:
        yarn.run("cancel", job)


@pytest.mark.yarn
@pytest.mark.mxnet
def test_a_real_mxnet_job_resumes_on_a_new_application(yarn, tmp_path):
    """examples/resume-ps.yaml on YARN (in place, 1G containers, ps-lite on loopback, 2
    epochs): worker[0] SIGKILLed in epoch 1 of attempt 0; attempt 1, a new application, resumes
    from the checkpoint and every epoch's updates are applied exactly once."""
    from .test_mxnet_restarts import BATCHES, assert_every_epoch_once, copy_resume_example

    workdir = tmp_path / "resume"
    spec = copy_resume_example(workdir, lambda text: text.replace("memory: 4G", "memory: 1G")
                               .replace("grace: 10s", "grace: 2s")
                               + "network: {interface: lo}\n"
                               "backends:\n  yarn: {ship_workdir: false}\n")
    # 0.1 s a step: epoch 1 lasts longer than the logs take to say it began (NodeManager)
    job = yarn.submit(spec, "--backend", "yarn", env={"EPOCHS": "2", "STEP_SLEEP": "0.1"})
    try:
        def worker_log(attempt: str = "0") -> str:
            return yarn.run("logs", job, "--role", "worker", "--rank", "0",
                            "--attempt", attempt).stdout

        wait_for(lambda: "checkpoint saved" in worker_log(), 300,
                 "the first epoch's checkpoint", interval=1)
        wait_for(lambda: last_step(worker_log()) >= BATCHES + 10, 120, "steps into epoch 1",
                 interval=1)
        yarn.status(job)  # mirrors the task records
        os.kill(task_record(yarn.run_dir(job), "worker", 0)["pid"], signal.SIGKILL)
        result = yarn.run("wait", job, "--timeout", "400", timeout=420)
        assert result.returncode == 0, result.stderr
        status = yarn.status(job)
        assert status["state"] == "SUCCEEDED" and status["attempt"] == 1
        assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
        assert "killed by SIGKILL" in status["attempts"][0]["detail"]
        final = assert_every_epoch_once(workdir, 2)
        assert final["resumed"][0]["attempt"] == 1 and final["resumed"][0]["steps"] == BATCHES
        resumed = worker_log("1")
        assert "attempt=1 restart_reason=failure" in resumed
        assert f"resumed from the checkpoint: epoch 1 batch 0 ({BATCHES} steps)" in resumed
        first, second = app_ids(status)
        assert first != second and rm_app(yarn, second)["finalStatus"] == "SUCCEEDED"
        assert_nothing_left(yarn, job, [first, second])
    finally:
        yarn.run("cancel", job)
