"""Every process of a job is contained (issue 34, section 2), with real processes: a daemon
that left the role's session and cleared its environment, grandchildren of roles whose
attached CLI was SIGKILLed (no other command run), a role that moved to a process group
of its own. Nothing is left within 10 s, locally and on the ssh test hosts; where the
machine has no cgroup v2 (``MXBATCH_CGROUPS=off`` stands for it), ``doctor`` says
that such processes can escape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from mxbatch.runtime import cgroups, procs

from .conftest import FAKEROLE, assert_no_processes, wait_for, write_spec
from .hostjobs import fake_spec

ROLE = [sys.executable, str(FAKEROLE)]
#: how long whatever is left may take to go
GONE_S = 10

needs_cgroups = pytest.mark.skipif(
    cgroups.probe().containment is not cgroups.Containment.CGROUP,
    reason="this machine gives this user no cgroup v2 to make")


def alive(pid: int) -> bool:
    return procs.pid_alive(pid)


def daemon_command(pid_file: Path) -> str:
    """Start a daemon that leaves the session and clears its environment (only its pid,
    in ``pid_file``, says it is there), then run the stand-in role."""
    return (f"env -i setsid sh -c 'echo $$ > {pid_file}; exec sleep 92' "
            f"</dev/null >/dev/null 2>&1 & exec {' '.join(ROLE)}")


def read_pids(pid_file: Path) -> List[int]:
    try:
        return [int(p) for p in pid_file.read_text().split()]
    except (OSError, ValueError):
        return []


def mxbatch_cgroups(job: str) -> List[str]:
    """This job's agents' cgroups that still exist on this machine."""
    base = cgroups.own_directory()
    return [] if base is None else [n for n in os.listdir(base)
                                    if n.startswith(f"mxbatch.{job}.")]


@needs_cgroups
def test_a_daemon_with_a_cleared_environment_ends_with_its_job(cli, tmp_path):
    pid_file = tmp_path / "daemon.pid"
    worker = json.dumps(["sh", "-c", daemon_command(pid_file)])
    spec = write_spec(tmp_path / "daemon.yaml",
                      f"name: daemon\ncommand: {json.dumps(ROLE)}\nworkdir: {tmp_path}\n"
                      "env: {FAKE_SLEEP: '1'}\n"
                      f"roles: {{server: {{count: 1}}, worker: {{count: 1, command: {worker}}}}}\n"
                      "rendezvous: {grace: 2s}\n")
    result = cli.run("submit", "--wait", str(spec), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    job = result.stdout.split()[0]
    daemon = wait_for(lambda: read_pids(pid_file), 10, "the daemon's pid")[0]
    wait_for(lambda: not alive(daemon), GONE_S, "the daemon to end with its job")
    assert cli.status(job)["state"] == "SUCCEEDED"
    assert "already ended" in cli.run("cancel", job).stdout + cli.run("cancel", job).stderr
    assert not mxbatch_cgroups(job)
    assert_no_processes(job)


def kill_attached_launch(cli, tmp_path: Path, moved: str, options=()) -> None:
    """SIGKILL an attached ``launch`` (nothing else run) once each role runs its
    grandchildren (``sleep 97 & sleep 98 & wait``) or a process that moved to a session
    of its own; every one of them must end within seconds (``GONE_S``)."""
    pid_file = tmp_path / "pids"
    script = (f"sleep 97 & echo $! >> {pid_file}; sleep 98 & echo $! >> {pid_file}; wait"
              if moved == "grandchildren" else
              f"setsid sleep 95 & echo $! >> {pid_file}; wait")
    proc = subprocess.Popen([sys.executable, "-m", "mxbatch", "launch", "-n", "1", "-s", "1",
                             "--quiet", *options, "--", "sh", "-c", script], env=cli.env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        expected = 6 if moved == "grandchildren" else 3
        pids = wait_for(lambda: len(read_pids(pid_file)) >= expected and read_pids(pid_file),
                        120, f"{expected} processes of the roles")
        assert all(alive(pid) for pid in pids)
        proc.kill()
        proc.wait(timeout=30)
        for pid in pids:
            wait_for(lambda pid=pid: not alive(pid), GONE_S, f"process {pid} to end")
        job = proc.stdout.read().split()[0]
        wait_for(lambda: not mxbatch_cgroups(job), GONE_S, "the job's cgroups to go")
        assert_no_processes(job)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_cgroups
@pytest.mark.parametrize("moved", ["grandchildren", "own process group"])
def test_sigkill_of_the_attached_cli_ends_every_process_of_its_job(cli, tmp_path, moved):
    """Locally ``launch`` is the job's agent: its keeper ends its cgroups."""
    kill_attached_launch(cli, tmp_path, moved)


@pytest.mark.ssh
@needs_cgroups
@pytest.mark.parametrize("moved", ["grandchildren", "own process group"])
def test_sigkill_of_the_attached_cli_ends_every_process_on_ssh_hosts(
        hosts_cli, hosts_env, tmp_path, moved):
    """On ssh hosts ``launch`` is the controller: each host's agent loses its session and
    ends its job, its cgroups with everything in them."""
    kill_attached_launch(hosts_cli, tmp_path, moved,
                         ("--launcher", "ssh", "-H", hosts_env["MXBATCH_TEST_HOSTFILE"],
                          "--grace", "2s"))


@pytest.mark.ssh
@needs_cgroups
def test_a_daemon_with_a_cleared_environment_ends_with_its_job_on_ssh_hosts(
        hosts_cli, hosts_env, tmp_path):
    pid_file = tmp_path / "daemon.pids"
    worker = ["sh", "-c", daemon_command(pid_file).replace(" > ", " >> ")]
    spec = fake_spec(tmp_path, "ssh", hosts_env, name="sshdaemon", env={"FAKE_SLEEP": "1"},
                     workers=2, servers=1, worker=worker)
    result = hosts_cli.run("submit", "--wait", "-b", "ssh", str(spec), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    job = result.stdout.split()[0]
    daemons = wait_for(lambda: len(read_pids(pid_file)) == 2 and read_pids(pid_file), 10,
                       "both daemons' pids")
    for pid in daemons:  # the hosts share this machine's kernel and pid namespace
        wait_for(lambda pid=pid: not alive(pid), GONE_S, f"daemon {pid} to end")
    assert not mxbatch_cgroups(job)
    assert_no_processes(job)


def test_doctor_says_which_containment_is_in_force(cli, tmp_path):
    found = cgroups.probe()
    result = cli.run("doctor", "--json", timeout=120)
    document = json.loads(result.stdout)
    checks = {c["name"]: c for c in document["checks"]}
    assert "containment" in checks, sorted(checks)
    if found.containment is cgroups.Containment.CGROUP:
        assert "cgroup v2 per task" in checks["containment"]["detail"]
    off = cli.run("doctor", "--json", env={"MXBATCH_CGROUPS": "off"}, timeout=120)
    check = {c["name"]: c for c in json.loads(off.stdout)["checks"]}["containment"]
    assert "can escape" in check["detail"] and check["outcome"] == "warn"


@needs_cgroups
def test_without_cgroups_the_scan_still_ends_what_keeps_the_job_id(cli, tmp_path):
    """``MXBATCH_CGROUPS=off``: today's fallback, process groups and the environment
    scan: a grandchild that keeps the environment is still ended with the job."""
    pid_file = tmp_path / "pids"
    worker = json.dumps(["sh", "-c", f"setsid sleep 91 & echo $! > {pid_file}; "
                                     f"exec {' '.join(ROLE)}"])
    spec = write_spec(tmp_path / "scan.yaml",
                      f"name: scan\ncommand: {json.dumps(ROLE)}\nworkdir: {tmp_path}\n"
                      "env: {FAKE_SLEEP: '1'}\n"
                      f"roles: {{server: {{count: 1}}, worker: {{count: 1, command: {worker}}}}}\n"
                      "rendezvous: {grace: 2s}\n")
    result = cli.run("submit", "--wait", str(spec), env={"MXBATCH_CGROUPS": "off"},
                     timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    job = result.stdout.split()[0]
    assert not mxbatch_cgroups(job)
    pid = wait_for(lambda: read_pids(pid_file), 10, "the grandchild's pid")[0]
    wait_for(lambda: not alive(pid), GONE_S, "the grandchild to end")
    assert_no_processes(job)
