"""The MPI backend on the namespace test hosts (ci/clusters/hosts-up.sh, Open MPI) with
stand-in roles: one mpirun for every task, placement, the environment (no secret on a
command line, the environment file gone once the ranks started), and every way a job
ends early, each ending fast, naming the cause and leaving nothing on any host.
Running mpirun as root is the tests' explicit choice (OMPI_ALLOW_RUN_AS_ROOT*)."""

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
    parent,
    records,
    ssh_session_of,
)

pytestmark = pytest.mark.mpi


def _options(hosts_env) -> str:
    return f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}"


def test_one_mpirun_runs_every_task_across_the_hosts(hosts_cli, hosts_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    secret = "s3cr3t-" + secrets.token_hex(8)
    spec = fake_spec(tmp_path, "mpi", _options(hosts_env), name="mpispread",
                     env={"FAKE_OUT": str(out), "FAKE_SLEEP": "4"})
    proc = hosts_cli.popen("submit", "--wait", "-b", "mpi", str(spec),
                           env={"AWS_SECRET_ACCESS_KEY": secret})
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    assert on_command_lines(secret) == []
    assert not (run_dir / "mpi" / "environ.json").exists()  # gone once every rank started
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    job = stdout.split()[0]
    hosts = {key: rec["host"] for key, rec in records(run_dir).items()}
    assert hosts == {"scheduler-0": "mxbh1", "server-0": "mxbh2", "server-1": "mxbh3",
                     "worker-0": "mxbh4", "worker-1": "mxbh1"}
    address = host_addresses(hosts_env)
    for rank, host in ((0, "mxbh4"), (1, "mxbh1")):
        env = json.loads((out / f"{rank}.json").read_text())["env"]
        assert env["AWS_SECRET_ACCESS_KEY"] == secret  # through the 0600 file
        assert env["DMLC_NODE_HOST"] == address[host]
        assert env["MXBATCH_JOB_ID"] == job
    assert hosts_cli.status(job)["state"] == "SUCCEEDED"
    assert_no_processes(job, timeout=10)


def test_failing_worker_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    spec = fake_spec(tmp_path, "mpi", _options(hosts_env), name="mpifail",
                     env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3"})
    result = hosts_cli.run("submit", "--wait", "-b", "mpi", str(spec))
    assert result.returncode == 1
    assert "FAILED: worker[" in result.stderr and "exited with code 3" in result.stderr
    job = result.stdout.split()[0]
    run_dir = hosts_cli.home / "runs" / job
    tasks = records(run_dir)
    failed = min(r["ended_at"] for r in tasks.values() if r["state"] == "FAILED")
    assert last_end(run_dir) - failed < 15
    # the others stopped their roles themselves (mpirun did not kill their agents)
    assert {r["state"] for r in tasks.values()} <= {"FAILED", "CANCELLED"}
    assert_no_processes(job, timeout=10)


def _start_long_job(cli, hosts_env, tmp_path, name: str):
    spec = fake_spec(tmp_path, "mpi", _options(hosts_env), name=name,
                     env={"FAKE_SLEEP": "300"})
    job = cli.submit(spec, "-b", "mpi")
    run_dir = cli.home / "runs" / job
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    return job, run_dir


def test_killed_sshd_of_a_host_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = _start_long_job(hosts_cli, hosts_env, tmp_path, "mpisshd")
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


def test_cancel_stops_every_rank_within_15s(hosts_cli, hosts_env, tmp_path):
    job, run_dir = _start_long_job(hosts_cli, hosts_env, tmp_path, "mpicancel")
    result = hosts_cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    status = hosts_cli.status(job)
    assert status["state"] == "CANCELLED"
    assert {t["state"] for t in status["tasks"]} == {"CANCELLED"}
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    assert_no_processes(job, timeout=10)


def test_ctrl_c_on_an_attached_launch(hosts_cli, hosts_env, tmp_path):
    proc = hosts_cli.popen("launch", "-n", "2", "-H", hosts_env["MXBATCH_TEST_HOSTFILE"],
                           "--launcher", "mpi", "--grace", "2s", sys.executable,
                           str(FAKEROLE), env={"FAKE_SLEEP": "300"}, cwd=tmp_path)
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "CANCELLED: interrupted (Ctrl-C)" in stderr
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    assert_no_processes(stdout.split()[0], timeout=10)


@pytest.mark.parametrize("variable,said", [
    ("MXBATCH_TEST_HOST_NOPYTHON", "python3: command not found"),
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
