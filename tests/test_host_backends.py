"""The ssh and MPI backends on the namespace test hosts (ci/clusters/hosts-up.sh) with
stand-in roles, what both must do alike: placement across the hosts, the environment
(secrets never on a command line), a failing worker, cancel and Ctrl-C each ending
the job within 15 s (from the job's own records) with nothing left on any host, and
workers hanging at exit ended on their hosts.
Backend-specific failures (a host's sshd killed, bad hosts) are in test_ssh.py and
test_mpi.py."""

from __future__ import annotations

import json
import re
import secrets
import sys
from pathlib import Path

import pytest

from .conftest import FAKEROLE, interrupt, wait_for
from .faultmatrix import free_port, occupy_on_test_hosts
from .hostjobs import (
    abort_record,
    all_running,
    assert_clean,
    fake_spec,
    host_addresses,
    last_end,
    on_command_lines,
    records,
    start_long_job,
)


def first_word(pid: int) -> str:
    """The first word of a process's command line."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


BACKENDS = [pytest.param("ssh", marks=pytest.mark.ssh),
            pytest.param("mpi", marks=pytest.mark.mpi)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_job_spans_the_hosts_and_secrets_never_reach_a_command_line(hosts_cli, hosts_env,
                                                                     tmp_path, backend):
    out = tmp_path / "out"
    out.mkdir()
    secret = "s3cr3t-" + secrets.token_hex(8)
    spec = fake_spec(tmp_path, backend, hosts_env, name="spread",
                     env={"FAKE_OUT": str(out), "FAKE_SLEEP": "4"})
    proc = hosts_cli.popen("submit", "--wait", "-b", backend, str(spec),
                           env={"AWS_SECRET_ACCESS_KEY": secret})
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    assert on_command_lines(secret) == []
    # the roles name their Python by its path: the agents run under it, not the hosts'
    # python3 (a pyenv shim on the test VM)
    agents = {rec["supervisor_pid"] for rec in records(run_dir).values()}
    assert {first_word(pid) for pid in agents} == {sys.executable}
    # MPI: the environment file is gone once every rank's agent started
    # (the controller sees the agents' start records within its polling interval)
    wait_for(lambda: not (run_dir / "mpi" / "environ.json").exists(), 30,
             "the MPI environment file removed")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    job = stdout.split()[0]
    # round-robin from the first host: scheduler, servers, then workers
    hosts = {key: rec["host"] for key, rec in records(run_dir).items()}
    assert hosts == {"scheduler-0": "mxbh1", "server-0": "mxbh2", "server-1": "mxbh3",
                     "worker-0": "mxbh4", "worker-1": "mxbh1"}
    # one agent a host (MPI too: one rank a host, the agent of the host's tasks)
    supervisors = {key: rec["supervisor_pid"] for key, rec in records(run_dir).items()}
    assert supervisors["scheduler-0"] == supervisors["worker-1"]
    assert len(set(supervisors.values())) == 4
    address = host_addresses(hosts_env)
    for rank, host in ((0, "mxbh4"), (1, "mxbh1")):
        env = json.loads((out / f"{rank}.json").read_text())["env"]
        assert env["AWS_SECRET_ACCESS_KEY"] == secret  # ssh's stdin, or MPI's 0600 file
        assert env["DMLC_NODE_HOST"] == address[host]
        assert env["DMLC_PS_ROOT_URI"] == address["mxbh1"]
        assert env["MXBATCH_JOB_ID"] == job
    # logs and status work here, on the submit host
    assert "exited with code 0" in (run_dir / "logs" / "worker-1.log").read_text()
    assert hosts_cli.status(job)["state"] == "SUCCEEDED"
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_worker_ends_the_job_within_15s(hosts_cli, hosts_env, tmp_path, backend):
    spec = fake_spec(tmp_path, backend, hosts_env, name="failing",
                     env={"FAKE_SLEEP": "3", "FAKE_EXIT": "3"})
    result = hosts_cli.run("submit", "--wait", "-b", backend, str(spec))
    assert result.returncode == 1
    assert "FAILED: worker[" in result.stderr and "exited with code 3" in result.stderr
    job = result.stdout.split()[0]
    run_dir = hosts_cli.run_dir(job)
    tasks = records(run_dir)
    failed = min(r["ended_at"] for r in tasks.values() if r["state"] == "FAILED")
    assert last_end(run_dir) - failed < 15
    # the others stopped their roles themselves (mpirun did not kill their agents)
    assert {r["state"] for r in tasks.values()} <= {"FAILED", "CANCELLED"}
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_foreign_listener_on_the_chosen_port_is_never_joined(hosts_cli, hosts_env, tmp_path,
                                                               backend):
    # the scheduler's role (on mxbh1) binds only once "bind" exists: before that, a
    # foreign listener takes the port on every host; members must not join it
    port = free_port()
    spec = fake_spec(tmp_path, backend, hosts_env, name="stolen",
                     env={"FAKE_JOIN": "1", "FAKE_SCHEDULER_BIND_AFTER": str(tmp_path / "bind"),
                          "FAKE_SLEEP": "300"})
    spec.write_text(spec.read_text() + f"network: {{ports: {port}-{port}}}\n")
    job = hosts_cli.submit(spec, "-b", backend)
    run_dir = hosts_cli.run_dir(job)
    wait_for(lambda: json.loads((run_dir / "scheduler.json").read_text()).get("port") == port,
             90, "the scheduler's port chosen")
    occupied = occupy_on_test_hosts(port)
    try:
        (tmp_path / "bind").touch()
        result = hosts_cli.run("wait", job, "--timeout", "60")
    finally:
        joined = occupied.release()
    assert result.returncode == 1, result.stderr
    assert joined == 0, f"the foreign listener accepted {joined} connection(s)"
    reason = abort_record(run_dir)["reason"]
    assert re.search(rf"scheduler\[0\]: no free port in {port}-{port}; .*port {port}\b", reason)
    # its members never went past their start gate (held before ps-lite, then stopped)
    assert not any(r.get("joined_at") or r.get("reached_at")
                   for key, r in records(run_dir).items() if key != "scheduler-0")
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_stops_every_host_within_15s(hosts_cli, hosts_env, tmp_path, backend):
    job, run_dir = start_long_job(hosts_cli, hosts_env, tmp_path, backend, "cancelled")
    result = hosts_cli.run("cancel", job)
    assert result.returncode == 0, result.stderr
    status = hosts_cli.status(job)
    assert status["state"] == "CANCELLED"
    assert {t["state"] for t in status["tasks"]} == {"CANCELLED"}
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    assert_clean(job)
    assert hosts_cli.run("cancel", job).returncode == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_on_an_attached_launch(hosts_cli, hosts_env, tmp_path, backend):
    proc = _foreground_launch(hosts_cli, hosts_env, tmp_path, backend)
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory")
    wait_for(lambda: all_running(run_dir, 5), 90, "every task running")
    stdout, stderr = interrupt(proc, 60)
    assert proc.returncode == 130, stderr
    assert "CANCELLED: interrupted (Ctrl-C)" in stderr
    assert last_end(run_dir) - abort_record(run_dir)["at"] < 15
    assert_clean(stdout.split()[0])


def _foreground_launch(hosts_cli, hosts_env, tmp_path, backend):
    """``mxbatch launch`` of a long stand-in job as a terminal's foreground command
    (SIGINT at its default even where the tests run with it ignored)."""
    return hosts_cli.foreground("launch", "-n", "2", "-H", hosts_env["MXBATCH_TEST_HOSTFILE"],
                                "--launcher", backend, "--grace", "2s", sys.executable,
                                str(FAKEROLE), env={"FAKE_SLEEP": "300"}, cwd=tmp_path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_while_the_hosts_start(hosts_cli, hosts_env, tmp_path, backend):
    """SIGINT as soon as the run directory exists: the controller is still reaching the
    hosts (ssh: the agents' hellos; MPI: mpirun starting the ranks, whose roles may
    already run). The job is cancelled all the same: exit 130, nothing left on any host."""
    proc = _foreground_launch(hosts_cli, hosts_env, tmp_path, backend)
    run_dir = wait_for(lambda: next(iter(hosts_cli.run_dirs()), None), 60, "the run directory",
                       interval=0.01)
    stdout, stderr = interrupt(proc, 90)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr, stderr
    job = run_dir.name
    if stdout.strip():  # submitted, then cancelled
        assert stdout.split()[0] == job
        assert "CANCELLED: interrupted (Ctrl-C)" in stderr, stderr
    else:  # interrupted before the submission ended: rolled back, nothing kept
        assert not run_dir.exists(), stderr
    assert_clean(job)


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_hanging_at_exit_are_ended_on_their_hosts(hosts_cli, hosts_env, tmp_path,
                                                          backend):
    """The role hook's report crosses the hosts' agents: both workers (on mxbh4 and mxbh1)
    hang after their code finished and are ended there; the job succeeds naming them."""
    spec = fake_spec(tmp_path, backend, hosts_env, name="exithang",
                     env={"FAKE_SLEEP": "2", "FAKE_HANG_AT_EXIT_RANKS": "0,1"})
    spec.write_text(spec.read_text().replace("grace: 2s", "grace: 2s, exit_timeout: 4s"))
    result = hosts_cli.run("submit", "--wait", "-b", backend, str(spec))
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"note: MXNet's exit hang: worker\[0\] \(hung \d+s\) and worker\[1\] "
                     r"\(hung \d+s\) were ended", result.stderr), result.stderr[-2000:]
    job = result.stdout.split()[0]
    tasks = records(hosts_cli.run_dir(job))
    for name in ("worker-0", "worker-1"):
        assert 4 <= tasks[name]["ended_at"] - tasks[name]["code_finished_at"] < 4 + 10
        assert tasks[name]["environment"]["python"]
    assert_clean(job)
