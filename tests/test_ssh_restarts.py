"""Restarts through the ssh backend on the namespace test hosts: a real MXNet job whose
worker is SIGKILLed at attempt 0 resumes from its checkpoint on attempt 1 (must-show 1,
ssh), and a host whose ssh session drops (ssh: its agent's; MPI: its orted's) is a node
failure: the job relaunches without it, on the other hosts of the hostfile, and status
names the excluded host."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from .conftest import FAKEROLE, task_record, wait_for
from .hostjobs import assert_clean, kill, parent, records, ssh_session_of
from .test_mxnet_restarts import (
    BATCHES,
    assert_every_epoch_once,
    copy_resume_example,
    last_step,
    read,
)

pytestmark = pytest.mark.ssh


@pytest.mark.mxnet
def test_killed_worker_resumes_on_the_hosts(hosts_cli, hosts_env, tmp_path):
    workdir = tmp_path / "resume"
    hostfile = hosts_env["MXBATCH_TEST_HOSTFILE"]
    spec = copy_resume_example(workdir, lambda text: text.replace(
        "restarts:", f"backend: ssh\nbackends:\n  ssh: {{hostfile: {hostfile}}}\nrestarts:"))
    job = hosts_cli.submit(spec, env={"EPOCHS": "3", "STEP_SLEEP": "0.03"})
    run = hosts_cli.run_dir(job)
    log0 = run / "logs" / "worker-0.log"
    wait_for(lambda: re.search(r"epoch 0 loss .* checkpoint saved", read(log0)), 300,
             "the first epoch's checkpoint")
    wait_for(lambda: last_step(read(log0)) >= BATCHES + 10, 120, "steps into epoch 1")
    os.kill(task_record(run, "worker", 0)["pid"], signal.SIGKILL)  # the pid namespace is shared
    result = hosts_cli.run("wait", job, "--timeout", "400", timeout=420)
    assert result.returncode == 0, result.stderr
    status = hosts_cli.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["failure", "succeeded"]
    assert status["state"] == "SUCCEEDED" and status["excluded_hosts"] == []
    final = assert_every_epoch_once(workdir, 3)
    assert final["resumed"][0]["steps"] == BATCHES
    assert_clean(job)


#: per backend: what the detail of attempt 0 says, and a file only attempt 1 writes
DROPPED = {
    "ssh": ("host mxbh3: the ssh connection to its agent was lost",
            Path("attempts", "1", "logs", "ssh-mxbh4.log")),
    "mpi": ("host mxbh3: mpirun lost its daemon there (mpirun exited with",
            Path("attempts", "1", "mpi", "hostfile")),
}


@pytest.mark.parametrize("backend", ["ssh", pytest.param("mpi", marks=pytest.mark.mpi)])
def test_a_dropped_host_is_left_out_of_the_relaunch(hosts_cli, hosts_env, tmp_path, backend):
    """The ssh session to mxbh3 (ssh: its agent's; MPI: its orted's) is killed: a node
    failure of mxbh3, and attempt 1 runs on the other three hosts."""
    role = [sys.executable, str(FAKEROLE)]
    spec = tmp_path / "drop.yaml"
    spec.write_text(
        f"name: drop\ncommand: {json.dumps(role)}\nworkdir: {tmp_path}\n"
        "env: {FAKE_SLEEP: '25'}\nroles:\n  server: {count: 1}\n  worker: {count: 3}\n"
        "rendezvous: {startup_timeout: 120s, grace: 2s}\n"
        "restarts: {max: 1, backoff: 0}\n"
        f"backends:\n  {backend}: {{hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}}}\n")
    job = hosts_cli.submit(spec, "-b", backend)
    run = hosts_cli.run_dir(job)
    wait_for(lambda: all(r.get("state") == "RUNNING" for r in records(run).values())
             and len(records(run)) == 5, 90, "every task running")
    victim = task_record(run, "worker", 0)  # task 2: the third host, mxbh3
    assert victim["host"] == "mxbh3"
    agent = victim["supervisor_pid"]
    session = ssh_session_of(agent if backend == "ssh" else parent(agent))  # MPI: orted's
    assert session, f"no sshd above the {backend} agent of worker 0 on mxbh3"
    kill(session)
    result = hosts_cli.run("wait", job, "--timeout", "200", timeout=220)
    assert result.returncode == 0, result.stderr
    status = hosts_cli.status(job)
    assert [a["reason"] for a in status["attempts"]] == ["node_failure", "succeeded"]
    detail, attempt_file = DROPPED[backend]
    assert detail in status["attempts"][0]["detail"], status["attempts"][0]
    assert status["excluded_hosts"] == ["mxbh3"]
    assert status["attempts"][1]["excluded"] == ["mxbh3"]
    hosts = {t["host"] for t in status["tasks"]}
    assert "mxbh3" not in hosts and len(hosts) == 3, status["tasks"]
    assert "excluded hosts (node failures): mxbh3" in hosts_cli.run("status", job).stdout
    assert (run / attempt_file).is_file()
    if backend == "mpi":
        assert "mxbh3" not in (run / attempt_file).read_text()
    assert_clean(job)
