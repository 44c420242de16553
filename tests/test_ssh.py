"""The ssh backend on the namespace test hosts (ci/clusters/hosts-up.sh) with stand-in
roles, what only ssh does: a host's sshd killed mid-job ends the job within 15 s naming
the host, and that host's agent stops its roles without its session; a controller
killed with SIGKILL drops every session, and every host stops; bad hosts are named,
and a host that fails after the others have started their roles stops them all, with
nothing left running when the CLI exits; ``sync_dst_dir`` copies the working directory
to each host over its session's master connection. (Placement, secrets, a failing worker, cancel
and Ctrl-C: test_host_backends.py.)"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mxbatch.runtime.procs import processes_with_variable
from mxbatch.runtime.wire import JOB_ID

from .conftest import FAKEROLE, Cli, assert_no_processes, task_record, wait_for
from .hostjobs import (
    abort_record,
    assert_clean,
    fake_spec,
    kill,
    last_end,
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
    # the agent runs under the roles' Python, named by its path: the host lacks it
    bad = {"MXBATCH_TEST_HOST_NOPYTHON": f"{sys.executable} was not found",
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
    assert "mxbh1:" not in result.stderr
    # mxbh1 may have started its roles before the last bad host failed: stopped then
    assert ("nothing was started" in result.stderr
            or "the roles that had started on mxbh1 were stopped" in result.stderr)
    assert "Traceback" not in result.stderr
    assert hosts_cli.run_dirs() == []
    # no agent left waiting anywhere (each runs with its job's id in its environment)
    assert processes_with_variable(lambda v: v.startswith(f"{JOB_ID}={name}-".encode())) == []
    assert remote_temp_dirs(name + "-*") == []


#: the ssh client of ``test_a_host_failing_after_the_others_started_stops_them_all``: the
#: session to the bad host (argv[1]) starts only once every task of the good hosts runs
#: (their records, in the run directory), then fails there; it writes the job id it saw
#: to argv[2]
LATE_SSH = """#!{python}
import json, os, sys
sys.path.insert(0, {tests!r})
from polling import poll
bad, said = {bad!r}, {said!r}
args = sys.argv[1:]
if args[args.index("--") + 1] == bad:
    job = os.environ["MXBATCH_JOB_ID"]
    tasks = os.path.join(os.environ["MXBATCH_HOME"], "runs", job, "tasks")
    def running():
        found = 0
        for name in os.listdir(tasks) if os.path.isdir(tasks) else []:
            try:
                with open(os.path.join(tasks, name)) as handle:
                    found += json.load(handle).get("state") == "RUNNING"
            except (OSError, ValueError):
                pass
        return found
    poll(running, lambda n: n >= 4, 120, 0.05)
    with open(said, "w") as handle:
        handle.write(job)
os.execv("/usr/bin/ssh", ["ssh"] + args)
"""


def test_a_host_failing_after_the_others_started_stops_them_all(hosts_cli, hosts_env,
                                                                  tmp_path):
    """mxbh1-3 start their roles as soon as each is ready; the fourth host (no python3)
    fails only once they all run: the submission fails naming it (exit 3), the roles
    were stopped, and no process of the job is left on any host when the CLI exits."""
    bad = hosts_env["MXBATCH_TEST_HOST_NOPYTHON"]
    said = tmp_path / "job"
    wrapper = tmp_path / "ssh"
    wrapper.write_text(LATE_SSH.format(python=sys.executable, bad=bad, said=str(said),
                                       tests=str(Path(__file__).parent)))
    wrapper.chmod(0o755)
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"mxbh1\nmxbh2\nmxbh3\n{bad}\n")  # worker[0] on the bad host
    spec = fake_spec(tmp_path, "ssh", hosts_env, name="late", env={"FAKE_SLEEP": "300"})
    spec.write_text(spec.read_text().replace(
        f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}",
        f"hostfile: {hostfile}, ssh: {wrapper}"))
    result = hosts_cli.run("submit", "--wait", "-b", "ssh", str(spec), timeout=240)
    assert said.exists(), "the bad host's session never started: " + result.stderr
    job = said.read_text()
    assert_no_processes(job, timeout=0)  # at once: the CLI has exited
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.strip().startswith(f"{bad}: {sys.executable} was not found")
               for line in lines), \
        result.stderr
    assert "the roles that had started on mxbh1, mxbh2, mxbh3 were stopped" in result.stderr
    assert "Traceback" not in result.stderr
    assert hosts_cli.run_dirs() == []  # the submission was rolled back
    assert remote_temp_dirs(job) == []


def test_sync_dst_dir_copies_the_workdir_over_each_hosts_master(hosts_env, tmp_path):
    """Each host's rsync shares its session's connection (ControlMaster, the socket in
    the run directory: a short $MXBATCH_HOME, as ~/.mxbatch is, keeps its path short
    enough); the copy is in each host's private storage, the sockets are gone after."""
    home = Path(tempfile.mkdtemp(prefix="mxb-", dir="/tmp"))
    dst = f"{hosts_env['MXBATCH_TEST_PRIVATE_DIR']}/sync-{secrets.token_hex(4)}"
    copies = [Path(hosts_env["MXBATCH_TEST_PRIVATE_DIR"]).parent / host / "private"
              / Path(dst).name for host in ("mxbh1", "mxbh2", "mxbh3", "mxbh4")]
    try:
        cli = Cli(home, base_env=hosts_env)
        (tmp_path / "marker.txt").write_text("copied")
        spec = fake_spec(tmp_path, "ssh", hosts_env, name="synced", env={"FAKE_SLEEP": "1"})
        spec.write_text(spec.read_text().replace(
            f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}",
            f"hostfile: {hosts_env['MXBATCH_TEST_HOSTFILE']}, sync_dst_dir: {dst}"))
        result = cli.run("submit", "--wait", "-b", "ssh", str(spec), timeout=240)
        assert result.returncode == 0, result.stderr
        job = result.stdout.split()[0]
        run_dir = cli.run_dir(job)
        setup = json.loads((run_dir / "ssh" / "controller.json").read_text())
        assert all(host["control_path"] for host in setup["hosts"])
        assert sorted((run_dir / "ssh").glob("cm-*")) == []  # the masters ended with the job
        for copy in copies:
            assert (copy / "marker.txt").read_text() == "copied"
        assert_clean(job)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
