"""The ssh backend on the namespace test hosts (ci/clusters/hosts-up.sh) with stand-in
roles, what only ssh does: a host's sshd killed mid-job ends the job within 15 s naming
the host, and that host's agent stops its roles without its session; a controller
killed with SIGKILL drops every session, and every host stops; bad hosts are named
before anything starts. (Placement, secrets, a failing worker, cancel and Ctrl-C:
test_host_backends.py.)"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time

import pytest

from .conftest import FAKEROLE, task_record, wait_for
from .hostjobs import (
    abort_record,
    assert_clean,
    kill,
    last_end,
    on_command_lines,
    remote_temp_dirs,
    ssh_session_of,
    start_long_job,
)

pytestmark = pytest.mark.ssh


def test_killed_sshd_of_a_host_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = start_long_job(hosts_cli, hosts_env, tmp_path, "ssh", "sshdkill")
    agent = task_record(run_dir, "server", 1)["supervisor_pid"]  # mxbh3's agent
    session = ssh_session_of(agent)
    assert session, "no sshd between mxbh3's agent and its listener"
    kill(session)
    killed = time.time()
    result = hosts_cli.run("wait", job, "--timeout", "60")
    assert result.returncode == 1
    assert "host mxbh3: the ssh connection to its agent was lost" in result.stderr
    assert abort_record(run_dir)["at"] - killed < 15
    assert last_end(run_dir) - killed < 15
    assert_clean(job)  # mxbh3's agent stopped its roles without its session


def test_killed_controller_leaves_nothing_on_any_host(hosts_cli, hosts_env, tmp_path):
    job, _ = start_long_job(hosts_cli, hosts_env, tmp_path, "ssh", "ctlkill")
    os.kill(hosts_cli.handle(job)["controller_pid"], signal.SIGKILL)
    assert_clean(job)  # within 15 s: every agent lost its session, stopped its roles
    status = wait_for(lambda: hosts_cli.status(job), 10, "the status")
    assert status["state"] == "FAILED" and "lost" in status["reason"]
    assert hosts_cli.run("cancel", job).returncode == 0


def test_bad_hosts_are_named_and_nothing_starts(hosts_cli, hosts_env, tmp_path):
    bad = {"MXBATCH_TEST_HOST_NOPYTHON": "python3 was not found",
           "MXBATCH_TEST_HOST_UNKNOWN_KEY": "host key is not in known_hosts",
           "MXBATCH_TEST_HOST_UNREACHABLE": "Connection refused",
           "MXBATCH_TEST_HOST_NOROUTE": "No route to host"}
    hostfile = tmp_path / "hosts"
    hostfile.write_text("mxbh1\n" + "".join(hosts_env[v] + "\n" for v in bad))
    name = "bad-" + secrets.token_hex(3)
    result = hosts_cli.run("launch", "--name", name, "-n", "2", "-H", str(hostfile),
                           sys.executable, str(FAKEROLE), cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    for variable, problem in bad.items():
        assert any(line.strip().startswith(hosts_env[variable] + ":") and problem in line
                   for line in lines), (variable, result.stderr)
    assert "mxbh1:" not in result.stderr and "nothing was started" in result.stderr
    assert "Traceback" not in result.stderr
    assert hosts_cli.run_dirs() == []
    assert on_command_lines(f"mxbatch-{name}-") == []  # no agent left waiting anywhere
    assert remote_temp_dirs(name + "-*") == []
