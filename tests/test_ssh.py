"""The ssh backend on the namespace test hosts (ci/clusters/hosts-up.sh) with stand-in
roles: placement, the environment (secrets never on a command line), and every way a
job ends early (a failing worker, a host's sshd killed, cancel, Ctrl-C, bad hosts),
each ending fast, naming the cause and leaving nothing on any host."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time

import pytest

from .conftest import FAKEROLE, assert_no_processes, task_record, wait_for
from .hostjobs import (
    abort_record,
    all_running,
    fake_spec,
    host_addresses,
    kill,
    last_end,
    on_command_lines,
    records,
    remote_temp_dirs,
    ssh_session_of,
)

pytestmark = pytest.mark.ssh


def _options(hosts_env) -> str:
    return f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}"


def _assert_clean(job: str) -> None:
    assert_no_processes(job, timeout=10)
    assert remote_temp_dirs(job) == []


def test_job_spans_the_hosts_and_secrets_never_reach_a_command_line(hosts_cli, hosts_env,
                                                                     tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    secret = "s3cr3t-" + secrets.token_hex(8)
    spec = fake_spec(tmp_path, "ssh", _options(hosts_env), name="spread",
                     env={"FAKE_OUT": str(out), "FAKE_SLEEP": "4"})
    proc = hosts_cli.popen("submit", "--wait", "-b", "ssh", str(spec),
                           env={"AWS_SECRET_ACCESS_KEY": secret})
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    assert on_command_lines(secret) == []
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    job = stdout.split()[0]
    # round-robin from the first host: scheduler, servers, then workers
    hosts = {key: rec["host"] for key, rec in records(run_dir).items()}
    assert hosts == {"scheduler-0": "mxbh1", "server-0": "mxbh2", "server-1": "mxbh3",
                     "worker-0": "mxbh4", "worker-1": "mxbh1"}
    address = host_addresses(hosts_env)
    for rank, host in ((0, "mxbh4"), (1, "mxbh1")):
        env = json.loads((out / f"{rank}.json").read_text())["env"]
        assert env["AWS_SECRET_ACCESS_KEY"] == secret  # through the ssh session's stdin
        assert env["DMLC_NODE_HOST"] == address[host]
        assert env["DMLC_PS_ROOT_URI"] == address["mxbh1"]
        assert env["MXBATCH_JOB_ID"] == job
    # logs and status work here, on the submit host
    assert "exited with code 0" in (run_dir / "logs" / "worker-1.log").read_text()
    assert hosts_cli.status(job)["state"] == "SUCCEEDED"
    _assert_clean(job)


def test_failing_worker_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    spec = fake_spec(tmp_path, "ssh", _options(hosts_env), name="failing",
                     env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3"})
    result = hosts_cli.run("submit", "--wait", "-b", "ssh", str(spec))
    assert result.returncode == 1
    assert "FAILED: worker[" in result.stderr and "exited with code 3" in result.stderr
    job = result.stdout.split()[0]
    run_dir = hosts_cli.home / "runs" / job
    failed = min(r["ended_at"] for r in records(run_dir).values() if r["state"] == "FAILED")
    assert last_end(run_dir) - failed < 15
    _assert_clean(job)


def _start_long_job(cli, hosts_env, tmp_path, name: str):
    spec = fake_spec(tmp_path, "ssh", _options(hosts_env), name=name,
                     env={"FAKE_SLEEP": "300"})
    job = cli.submit(spec, "-b", "ssh")
    run_dir = cli.home / "runs" / job
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    return job, run_dir


def test_killed_sshd_of_a_host_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = _start_long_job(hosts_cli, hosts_env, tmp_path, "sshdkill")
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
    _assert_clean(job)  # mxbh3's agent stopped its roles without its session


def test_cancel_stops_every_host_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = _start_long_job(hosts_cli, hosts_env, tmp_path, "cancelled")
    result = hosts_cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    status = hosts_cli.status(job)
    assert status["state"] == "CANCELLED"
    assert {t["state"] for t in status["tasks"]} == {"CANCELLED"}
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    _assert_clean(job)
    assert hosts_cli.run("cancel", job).returncode == 0


def test_ctrl_c_on_an_attached_launch(hosts_cli, hosts_env, tmp_path):
    proc = hosts_cli.popen("launch", "-n", "2", "-H", hosts_env["MXBATCH_TEST_HOSTFILE"],
                           "--launcher", "ssh", "--grace", "2s", sys.executable, str(FAKEROLE),
                           env={"FAKE_SLEEP": "300"}, cwd=tmp_path)
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "CANCELLED: interrupted (Ctrl-C)" in stderr
    job = stdout.split()[0]
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    _assert_clean(job)


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
