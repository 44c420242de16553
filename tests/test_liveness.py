"""A job's supervisor is alive only while its process is (its pid *and* start time) and
it keeps its records: a SIGSTOPped agent does not leave the job RUNNING for ever, and a
pid the kernel gave to another process does not make an ended job look RUNNING. Local
backend, stand-in roles, real signals and a real reuse of the pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mxbatch.runtime import procs
from mxbatch.runtime.layout import RunLayout

from .conftest import FAKEROLE, assert_no_processes, task_record, wait_for

HEARTBEAT_TIMEOUT_S = 3


def spec(tmp_path: Path, name: str = "live") -> Path:
    role = [sys.executable, str(FAKEROLE)]
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ncommand: {json.dumps(role)}\n"
                    "roles:\n  server: {count: 1}\n  worker: {count: 1}\n"
                    "rendezvous: {startup_timeout: 60s, grace: 1s, "
                    f"heartbeat_timeout: {HEARTBEAT_TIMEOUT_S}s}}\n"
                    "env: {FAKE_SLEEP: '600'}\n")
    return path


def _manager_of_running_job(cli, tmp_path: Path):
    job = cli.submit(spec(tmp_path))
    run_dir = cli.run_dir(job)
    record = wait_for(lambda: (task_record(run_dir, "worker", 0) or {}).get("state")
                      == "RUNNING" and task_record(run_dir, "worker", 0), 60,
                      "the worker to run")
    return job, run_dir, record["supervisor_pid"]


def test_wait_ends_a_job_whose_agent_is_stopped(cli, tmp_path):
    job, run_dir, manager = _manager_of_running_job(cli, tmp_path)
    os.kill(manager, signal.SIGSTOP)
    try:
        result = cli.run("wait", job, "--timeout", "90")
    finally:
        os.kill(manager, signal.SIGCONT) if procs.pid_alive(manager) else None
    assert result.returncode == 1, result.stderr  # not 124: wait applied the heartbeat
    assert "no heartbeat for" in result.stderr and f"pid {manager}, is stopped" \
        in result.stderr, result.stderr
    status = cli.status(job)
    assert status["state"] == "FAILED" and "is stopped" in status["reason"], status
    # the abort came within the heartbeat timeout (and the wait's polling) of the last
    # record the agent wrote: the job's own clock
    layout = RunLayout(str(run_dir))
    abort = json.loads(Path(layout.abort).read_text())
    last_write = max(entry.stat().st_mtime for entry in os.scandir(layout.tasks_dir))
    assert abort["at"] - last_write < HEARTBEAT_TIMEOUT_S + 15, abort
    assert_no_processes(job)


def _take_pid(pid: int) -> subprocess.Popen:
    """A new process (``sleep``) that the kernel gives ``pid``: the next pid it hands out
    is ``ns_last_pid`` + 1 (other processes starting meanwhile may take it: retried)."""
    for _ in range(200):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
                handle.write(str(pid - 1))
        except OSError as exc:
            pytest.skip(f"cannot choose the next pid here: {exc}")
        proc = subprocess.Popen(["sleep", "120"])
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.skip(f"pid {pid} was taken by others 200 times in a row")


def test_a_pid_given_to_another_process_is_not_the_job_s_agent(cli, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("choosing the next pid (ns_last_pid) needs root")
    job, _, manager = _manager_of_running_job(cli, tmp_path)
    os.kill(manager, signal.SIGKILL)  # no final record: its roles die with it
    wait_for(lambda: not os.path.exists(f"/proc/{manager}"), 30,
             "the agent's pid to be free (reaped)")
    impostor = _take_pid(manager)
    try:
        assert procs.pid_alive(manager)  # the pid lives: another process has it
        status = cli.status(job)
        assert status["state"] == "FAILED", status
        assert "its supervisor is gone without a final record" in status["reason"]
        result = cli.run("wait", job, "--timeout", "60")
        assert result.returncode == 1, result.stderr
        assert_no_processes(job)
        assert impostor.poll() is None, "cancel killed a process that is not the job's"
    finally:
        impostor.kill()
        impostor.wait()
