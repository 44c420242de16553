"""What outlives a job's supervisor, and jobs whose records are broken, on the local
backend with stand-in roles: grandchildren of a role after a SIGKILL of the attached
CLI or the detached agent (with cgroups the agent's keeper ends them by itself; without,
``MXBATCH_CGROUPS=off``, ``cancel`` kills them and says so), a role's child that left
its process group (the agent's last act kills it), an emptied plan or job record
(``cancel`` still stops the job; ``list`` shows the record it cannot read)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from mxbatch.runtime import cgroups, procs
from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, assert_no_processes, task_record, wait_for


def spec(tmp_path: Path, worker: Optional[List[str]] = None, name: str = "left",
         extra: str = "") -> Path:
    role = [sys.executable, str(FAKEROLE)]
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: {json.dumps(role)}\n"
                    f"roles:\n  server: {{count: 1}}\n"
                    f"  worker: {{count: 1, command: {json.dumps(worker or role)}}}\n"
                    "rendezvous: {startup_timeout: 60s, grace: 1s}\n"
                    f"env: {{FAKE_SLEEP: '600'}}\n{extra}")
    return path


needs_cgroups = pytest.mark.skipif(
    cgroups.probe().containment is not cgroups.Containment.CGROUP,
    reason="this machine gives this user no cgroup v2 to make")

#: a role whose own child (in its process group) outlives it when it is SIGKILLed
SLEEPER = ["bash", "-c", "sleep 45 & wait"]


def _sleeper(job: str) -> int:
    """The pid of the worker's ``sleep 45``, once it runs."""
    def find():
        return next((pid for pid in procs.job_processes(job)
                     if procs.command_line(pid) == "sleep 45"), None)
    return wait_for(find, 60, f"the worker of {job} to start its sleep")


def _cancel_reports_the_orphan(cli, job: str, orphan: int) -> None:
    assert procs.pid_alive(orphan), "the grandchild died with its parent: nothing to test"
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert "had already ended (" not in result.stderr, result.stderr
    assert f"still ran without its supervisor: killed pid {orphan} (sleep 45)" \
        in result.stderr, result.stderr
    assert_no_processes(job, timeout=0)
    again = cli.run("cancel", job, "--json")  # now there is nothing left to say
    assert json.loads(again.stdout)["killed"] == []


def _orphan_ends(cli, job: str, orphan: int, containment: str) -> None:
    """With cgroups the killed agent's keeper ends the grandchild by itself; without,
    ``cancel`` finds it by its environment, kills it and says so."""
    if containment == "cgroup":
        wait_for(lambda: not procs.pid_alive(orphan), 10, "the keeper to end the orphan")
        result = cli.run("cancel", job, "--json")
        assert result.returncode == 0 and json.loads(result.stdout)["killed"] == []
        assert_no_processes(job, timeout=0)
    else:
        _cancel_reports_the_orphan(cli, job, orphan)


CONTAINMENTS = [pytest.param("cgroup", marks=needs_cgroups), "off"]


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_grandchildren_of_a_killed_detached_agent_end(cli, tmp_path, containment):
    env = {"MXBATCH_CGROUPS": "off"} if containment == "off" else {}
    job = cli.submit(spec(tmp_path, SLEEPER), env=env)
    orphan = _sleeper(job)
    manager = task_record(cli.run_dir(job), "worker", 0)["supervisor_pid"]
    os.kill(manager, signal.SIGKILL)  # its roles die with it (PR_SET_PDEATHSIG)...
    wait_for(lambda: not procs.pid_alive(manager), 30, "the agent to die")
    _orphan_ends(cli, job, orphan, containment)  # ...and the worker's own child


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_grandchildren_of_a_killed_attached_cli_end(cli, tmp_path, containment):
    env = {"MXBATCH_CGROUPS": "off"} if containment == "off" else None
    proc = cli.popen("submit", "--wait", str(spec(tmp_path, SLEEPER)), env=env)
    job = proc.stdout.readline().strip()
    assert job, proc.communicate(timeout=60)[1]
    orphan = _sleeper(job)
    proc.kill()
    proc.communicate(timeout=30)
    _orphan_ends(cli, job, orphan, containment)


def test_a_child_that_left_its_role_s_group_ends_with_the_job(cli, tmp_path):
    """A worker that starts a child in a session of its own and exits 0: the job
    succeeds, and its agent's last act kills the child (it carries the job's id), with
    no ``wait`` or ``cancel`` to clean up after it."""
    escapee = ["bash", "-c", "setsid sleep 45 < /dev/null > /dev/null 2>&1 & exit 0"]
    job = cli.submit(spec(tmp_path, escapee))
    wait_for(lambda: cli.status(job)["state"] == "SUCCEEDED", 60, f"{job} to succeed")
    assert_no_processes(job, timeout=30)


def _running(cli, job: str) -> None:
    wait_for(lambda: (task_record(cli.run_dir(job), "worker", 0) or {}).get("state")
             == "RUNNING", 60, f"the worker of {job} to run")


def test_an_emptied_plan_does_not_stop_a_cancel(cli, tmp_path):
    job = cli.submit(spec(tmp_path))
    _running(cli, job)
    Path(RunLayout(str(cli.run_dir(job))).plan).write_text("")
    status = cli.run("status", job)
    assert status.returncode == 4 and "cannot read the plan" in status.stderr
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert f"cannot read the plan of job {job}" in result.stderr
    assert_no_processes(job, timeout=0)
    # the agent had the plan in memory: it read the cancel and stopped its roles itself
    assert task_record(cli.run_dir(job), "worker", 0)["state"] == "CANCELLED"


def test_an_emptied_record_is_listed_and_its_job_still_cancelled(cli, tmp_path):
    job = cli.submit(spec(tmp_path))
    _running(cli, job)
    (cli.home / "jobs" / f"{job}.json").write_text("")
    listed = cli.run("list")
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(job))
    assert row[:3] == [job, "?", "UNREADABLE"]
    assert f"cannot read the record of job {job}" in listed.stderr
    rows = json.loads(cli.run("list", "--json").stdout)
    assert [(r["job_id"], r["state"]) for r in rows] == [(job, "UNREADABLE")]
    result = cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert f"cannot read the record of job {job!r}" in result.stderr
    assert "found by MXBATCH_JOB_ID" in result.stderr and "killed" in result.stderr
    assert_no_processes(job, timeout=0)
    gone = cli.run("cancel", job)  # nothing runs and nothing can be read: not found
    assert gone.returncode == 4, gone.stderr
