"""The ssh and MPI controller (supervised from this host like the local backend) against
broken state, on the namespace test hosts (ci/clusters/hosts-up.sh) with stand-in
roles: a stopped or killed controller, an emptied plan, a run directory removed
mid-job. The local backend's cases: test_liveness.py, test_leftovers.py,
test_broken_storage.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from mxbatch.runtime import procs
from mxbatch.runtime.layout import RunLayout

from .conftest import remove_live_directory, wait_for
from .hostjobs import all_running, assert_clean, fake_spec, start_long_job

BACKENDS = [pytest.param("ssh", marks=pytest.mark.ssh),
            pytest.param("mpi", marks=pytest.mark.mpi)]


def _controller_pid(cli, job: str) -> int:
    """The controller's pid, as the job's record keeps it."""
    return int(cli.handle(job)["controller_pid"])


@pytest.mark.ssh
def test_wait_ends_a_job_whose_controller_is_stopped(hosts_cli, hosts_env, tmp_path):
    """The ssh controller writes every task's record here: stopped, it writes none, and
    ``wait`` ends the job once the heartbeat timeout has passed. (Not MPI: its ranks
    write their own records, and the job runs on without its controller.)"""
    spec = fake_spec(tmp_path, "ssh", hosts_env, name="stopped", heartbeat="3s",
                     env={"FAKE_SLEEP": "300"})
    job = hosts_cli.submit(spec, "-b", "ssh")
    wait_for(lambda: all_running(hosts_cli.run_dir(job), 5), 90, "every task running")
    controller = _controller_pid(hosts_cli, job)
    os.kill(controller, signal.SIGSTOP)
    try:
        result = hosts_cli.run("wait", job, "--timeout", "120")
    finally:
        if procs.pid_alive(controller):
            os.kill(controller, signal.SIGCONT)
    assert result.returncode == 1, result.stderr  # not 124
    assert "no heartbeat for" in result.stderr and "is stopped" in result.stderr
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_after_the_controller_was_killed_says_what_it_killed(
        hosts_cli, hosts_env, tmp_path, backend):
    spec = fake_spec(tmp_path, backend, hosts_env, name="orphans",
                     env={"FAKE_SLEEP": "300"}, worker=["bash", "-c", "sleep 45 & wait"])
    job = hosts_cli.submit(spec, "-b", backend)
    run_dir = hosts_cli.run_dir(job)
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    os.kill(_controller_pid(hosts_cli, job), signal.SIGKILL)
    wait_for(lambda: hosts_cli.status(job)["state"] != "RUNNING", 60, "the job to be lost")
    # the test hosts share this pid namespace: what outlived it is visible from here
    left = [pid for pid in procs.job_processes(job) if procs.command_line(pid) == "sleep 45"]
    result = hosts_cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    # it names what it killed, all of it among what outlived the controller; one left
    # may also end by itself meanwhile (its host's agent stops its roles when the
    # controller's connection drops), and then cancel has nothing to say of it
    named = {int(pid) for pid in re.findall(r"pid (\d+) \(sleep 45\)", result.stderr)}
    assert named <= set(left), (left, result.stderr)
    if named:
        assert "had already ended (" not in result.stderr, result.stderr
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_emptied_plan_does_not_stop_a_cancel(hosts_cli, hosts_env, tmp_path, backend):
    job, run_dir = start_long_job(hosts_cli, hosts_env, tmp_path, backend, "noplan")
    Path(RunLayout(str(run_dir)).plan).write_text("")
    result = hosts_cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    assert f"cannot read the plan of job {job}" in result.stderr
    assert_clean(job)


@pytest.mark.ssh
def test_a_run_directory_removed_mid_job_stops_an_attached_ssh_job(hosts_cli, hosts_env,
                                                                    tmp_path):
    """The controller writes the records of every host here: a removed run directory
    stops the job, says why, and exits 1 (no traceback)."""
    spec = fake_spec(tmp_path, "ssh", hosts_env, name="gone", env={"FAKE_SLEEP": "300"})
    proc = hosts_cli.popen("submit", "--wait", "-b", "ssh", str(spec))
    job = proc.stdout.readline().strip()
    assert job, proc.communicate(timeout=60)[1]
    run_dir = hosts_cli.run_dir(job)
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    remove_live_directory(run_dir)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the attached controller still runs:\n{proc.communicate()}")
    assert proc.returncode == 1, err
    assert "run directory unwritable: No such file or directory" in err, err
    assert "Traceback" not in err, err
    assert_clean(job)
