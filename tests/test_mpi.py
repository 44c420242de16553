"""The MPI backend on the namespace test hosts (ci/clusters/hosts-up.sh, Open MPI) with
stand-in roles, what only MPI does: a host's sshd (orted's session) killed mid-job ends
the job within 15 s in mpirun's words, which name the host; a killed orted is a node
failure of its host (the relaunch without it: test_ssh_restarts.py); a bad host fails the
submission naming the tasks and host that never started, and so does mpirun slower than
backends.mpi.start_timeout, saying so. (Placement, secrets, a failing
worker, cancel and Ctrl-C: test_host_backends.py.) Running mpirun as root is the tests'
explicit choice (OMPI_ALLOW_RUN_AS_ROOT*)."""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

import pytest

from .conftest import FAKEROLE, Cli, assert_no_processes, task_record
from .hostjobs import (
    abort_record,
    fake_spec,
    host_addresses,
    kill,
    on_command_lines,
    parent,
    ssh_session_of,
    start_long_job,
)

pytestmark = pytest.mark.mpi


def test_killed_sshd_of_a_host_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = start_long_job(hosts_cli, hosts_env, tmp_path, "mpi", "mpisshd")
    orted = parent(task_record(run_dir, "server", 1)["supervisor_pid"])  # on mxbh3
    session = ssh_session_of(orted)
    assert session, "no sshd between mxbh3's orted and its listener"
    kill(session)
    killed = time.time()
    result = hosts_cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1
    assert "mpirun exited with" in result.stderr
    assert host_addresses(hosts_env)["mxbh3"] in result.stderr  # in mpirun's own words
    assert abort_record(run_dir)["at"] - killed < 15
    assert_no_processes(job, timeout=15)


def test_killed_orted_is_a_node_failure_of_its_host(hosts_cli, hosts_env, tmp_path):
    """Open MPI's "lost communication with a remote daemon ... on node mxbh3": the job
    (no restarts) ends node_failure blaming mxbh3 as the hostfile names it."""
    job, run_dir = start_long_job(hosts_cli, hosts_env, tmp_path, "mpi", "mpiorted")
    kill([parent(task_record(run_dir, "server", 1)["supervisor_pid"])])  # mxbh3's orted
    result = hosts_cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1
    assert "host mxbh3: mpirun lost its daemon there" in result.stderr
    assert "ORTE has lost communication with a remote daemon" in result.stderr
    attempt = hosts_cli.status(job)["attempts"][0]
    assert attempt["reason"] == "node_failure", attempt
    assert abort_record(run_dir)["hosts"] == ["mxbh3"]
    assert_no_processes(job, timeout=15)


@pytest.mark.parametrize("variable,said", [
    # the agent runs under the roles' Python, named by its path: the host lacks it
    ("MXBATCH_TEST_HOST_NOPYTHON", f"{Path(sys.executable).name}: command not found"),
    ("MXBATCH_TEST_HOST_UNKNOWN_KEY", "Host key verification failed"),
    ("MXBATCH_TEST_HOST_UNREACHABLE", "Connection refused"),
])
def test_bad_host_is_named_and_nothing_is_left(hosts_cli, hosts_env, tmp_path, variable, said):
    bad = hosts_env[variable]
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"mxbh1\n{bad}\n")
    name = "mpibad-" + secrets.token_hex(3)
    result = hosts_cli.run("launch", "--name", name, "-n", "1", "-H", str(hostfile),
                           "--launcher", "mpi", sys.executable, str(FAKEROLE), cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert f"{bad}: the agent of" in result.stderr and said in result.stderr
    assert "Traceback" not in result.stderr
    assert hosts_cli.run_dirs() == []
    assert on_command_lines(f"/{name}-") == []


def test_mpirun_refusing_root_says_how_to_allow_it(home, hosts_env, tmp_path):
    """Without OMPI_ALLOW_RUN_AS_ROOT* mpirun refuses root: exit 3 in its words plus
    what to set (the tests run as root; mxbatch never allows it by itself)."""
    env = {k: v for k, v in hosts_env.items() if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    cli = Cli(home, base_env=env)
    result = cli.run("launch", "-n", "1", "-H", hosts_env["MXBATCH_TEST_HOSTFILE"],
                     "--launcher", "mpi", sys.executable, str(FAKEROLE), cwd=tmp_path)
    if result.returncode == 0:
        pytest.skip("not running as root")
    assert result.returncode == 3, result.stderr
    assert "mpirun has detected an attempt to run as root" in result.stderr
    assert "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in result.stderr
    assert "Traceback" not in result.stderr and cli.run_dirs() == []


def test_start_timeout_passed_is_said_and_nothing_is_left(hosts_cli, hosts_env, tmp_path):
    """mpirun slower than backends.mpi.start_timeout (bench/scale.py: 840 ranks, each
    its own agent then, on 2 cores took longer than the default 120 s): the error names
    the option and its value
    (it said only "mpirun could not start the job"), names 10 tasks and counts the
    rest, rather than a line for each of hundreds."""
    name = "mpislow-" + secrets.token_hex(3)
    spec = fake_spec(tmp_path, "mpi", hosts_env, name=name, workers=13)
    spec.write_text(spec.read_text().replace("mpi: {hostfile:", "mpi: {start_timeout: 0.1s, "
                                                                 "hostfile:"))
    result = hosts_cli.run("submit", "--wait", "-b", "mpi", str(spec), cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "mpirun had not started every host's agent after backends.mpi.start_timeout " \
           "(0.1 s)" in result.stderr
    assert "raise backends.mpi.start_timeout" in result.stderr
    named = result.stderr.count("never started\n")
    assert named <= 10, result.stderr
    if named == 10:  # 11 or more of the 16 had not started
        assert "more: their agents never started either" in result.stderr
    assert "Traceback" not in result.stderr and hosts_cli.run_dirs() == []
    assert on_command_lines(f"/{name}-") == []
