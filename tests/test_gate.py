"""The start gate: a member's Python is held where MXNet's ps-lite would connect (the
create of a dist kvstore) until its supervisor opens the gate; nothing else is held; a
descriptor that is no longer the gate's holds nothing. And the job: members start with
the scheduler, go on when it listens (and start again when it moves to another port:
``test_local.py``), and wait for it with ``member_start: after_listen``."""

import json
import os
import subprocess
import sys

from mxbatch.runtime import gate, pyhook, rolehook, wire

from .conftest import assert_no_processes, task_record, wait_for
from .test_agent import many_task_spec

#: the number of the read(2) system call on x86-64 (/proc/PID/syscall's first field)
SYS_READ = 0


def fake_mxnet(root):
    """A package tree laid out as MXNet 1.9's kvstore: ``base.create`` (which says when
    ps-lite would connect), taken by ``kvstore_server`` and re-exported."""
    package = root / "mxnet" / "kvstore"
    package.mkdir(parents=True, exist_ok=True)
    (root / "mxnet" / "__init__.py").write_text("from . import kvstore as kv\n")
    (package / "__init__.py").write_text("from .base import *\nfrom .kvstore_server import *\n")
    (package / "base.py").write_text(
        "__all__ = ['create']\n"
        "def create(name='local'):\n"
        "    print('ps-lite starts' if name.startswith('dist') else 'local', flush=True)\n")
    (package / "kvstore_server.py").write_text("from .base import create\n"
                                               "CREATE = create\n__all__ = []\n")
    return root


def start_held(tmp_path, code, the_gate=None, value=None):
    """``code`` in a Python with the hook and (by default) ``the_gate`` named."""
    hook = pyhook.install(str(tmp_path / "hook"))
    packages = fake_mxnet(tmp_path / "site")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([hook, str(packages)]))
    fds = ()
    if the_gate is not None:
        env.update(the_gate.environment())
        fds = (the_gate.read_fd,)
    if value is not None:
        env[wire.GATE] = value
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=fds,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if the_gate is not None:
        the_gate.started()
    return proc


def blocked_reading(pid, fd):
    """Whether process ``pid`` is inside read(2) on ``fd`` (the kernel's word)."""
    try:
        with open(f"/proc/{pid}/syscall") as handle:
            fields = handle.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == str(SYS_READ) and int(fields[1], 16) == fd


def release_when_held(proc, held, fd):
    """Wait until ``proc`` reads the gate (held), open it, and return its output."""
    try:
        wait_for(lambda: blocked_reading(proc.pid, fd), 30, "the role to wait at the gate")
        assert proc.poll() is None
        held.open()
        out, err = proc.communicate(timeout=30)
    finally:
        held.close()
        proc.kill()
    assert proc.returncode == 0, err
    return out


def test_the_dist_kvstore_create_waits_until_the_gate_opens(tmp_path):
    held = gate.Gate()
    fd = held.read_fd
    proc = start_held(tmp_path, "import mxnet; print('imported', flush=True); "
                                "mxnet.kv.create('local'); "
                                "assert mxnet.kvstore.kvstore_server.CREATE is mxnet.kv.create; "
                                "mxnet.kv.create('dist_sync')", held)
    assert proc.stdout.readline() == "imported\n"  # the import is not held
    assert proc.stdout.readline() == "local\n"  # nor a local kvstore
    assert release_when_held(proc, held, fd) == "ps-lite starts\n"


def test_a_dist_kvstore_create_reports_connecting_first_with_or_without_a_gate(tmp_path):
    """The scheduler's supervisor looks for its listening socket often from this report
    on (ps-lite binds next); a local kvstore is no report."""
    hook = pyhook.install(str(tmp_path / "hook"))
    packages = fake_mxnet(tmp_path / "site")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([hook, str(packages)]))
    code = "import mxnet; mxnet.kv.create('local'); mxnet.kv.create('dist_sync')"
    result = subprocess.run([sys.executable, "-u", "-c", code], env=env, timeout=30,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode == 0, result.stdout
    lines = [line for line in result.stdout.splitlines()
             if "started" not in line and "finished" not in line]
    assert len(lines) == 3 and lines[0] == "local", lines
    report = rolehook.parse_line(lines[1].encode())
    assert report is not None and report.event is wire.HookEvent.CONNECTING, lines
    assert lines[2] == "ps-lite starts"


def test_no_gate_and_a_stale_descriptor_hold_nothing(tmp_path):
    code = "import mxnet; mxnet.kv.create('dist_sync')"
    assert start_held(tmp_path, code).communicate(timeout=30)[0] == "ps-lite starts\n"
    # fd 0 is the role's stdin, not a pipe of this inode: the hook must not wait on it
    stale = start_held(tmp_path, code, value="0:1")
    assert stale.communicate(timeout=30)[0] == "ps-lite starts\n"


def test_a_program_of_the_role_may_wait_at_the_gate_itself(tmp_path):
    held = gate.Gate()
    fd = held.read_fd
    code = ("import os, sitecustomize; sitecustomize.mxbatch_wait_for_scheduler(); "
            "print(%r in os.environ)" % wire.GATE)
    proc = start_held(tmp_path, code, held)
    # once open, the role's later programs are not held
    assert release_when_held(proc, held, fd) == "False\n"


def records(run_dir):
    roles = [("scheduler", 0), ("server", 0), ("worker", 0), ("worker", 1)]
    return {f"{role}-{rank}": task_record(run_dir, role, rank) for role, rank in roles}


def test_members_start_with_the_scheduler_and_go_on_when_it_listens(cli, tmp_path):
    bind = tmp_path / "bind"
    spec = many_task_spec(tmp_path, servers=1, workers=2, name="early",
                          extra_env=f", FAKE_SCHEDULER_BIND_AFTER: '{bind}'")
    (tmp_path / "go").touch()
    job = cli.submit(spec)
    run_dir = cli.run_dir(job)

    def held():
        found = records(run_dir)
        return found if all((r or {}).get("exec_at") for r in found.values()) else None
    started = wait_for(held, 60, "every role to start before the scheduler listens")
    assert all(r["joined_at"] is None and r["reached_at"] is None
               for r in started.values()), started
    assert "held before ps-lite" in started["worker-1"]["note"]
    bind.touch()
    assert cli.run("wait", job, "--timeout", "120").returncode == 0
    final = records(run_dir)
    listening = final["scheduler-0"]["reached_at"]
    for name in ("server-0", "worker-0", "worker-1"):
        member = final[name]
        assert member["exec_at"] < listening <= member["joined_at"]
    assert_no_processes(job)


def test_after_listen_starts_members_once_the_scheduler_listens(cli, tmp_path):
    spec = many_task_spec(tmp_path, servers=1, workers=2, name="late")
    text = spec.read_text().replace("grace: 2s", "grace: 2s, member_start: after_listen")
    assert text != spec.read_text()
    spec.write_text(text)
    (tmp_path / "go").touch()
    job = cli.submit(spec)
    assert cli.run("wait", job, "--timeout", "120").returncode == 0
    final = records(cli.run_dir(job))
    listening = final["scheduler-0"]["reached_at"]
    for name in ("server-0", "worker-0", "worker-1"):
        assert final[name]["joined_at"] == listening <= final[name]["exec_at"]
        assert wire.GATE not in json.dumps(final[name])
    assert_no_processes(job)


def test_members_that_end_while_held_end_the_job_cleanly(cli, tmp_path):
    """Members that are not Python (not held) end before the scheduler listens: the agent
    observes their groups gone while they count as held, and goes on (it once crashed)."""
    command = "case $DMLC_ROLE in scheduler) sleep 2;; *) echo hi;; esac"
    result = cli.run("launch", "-n", "4", "-s", "1", "--", "sh", "-c", command,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_no_processes(result.stdout.split()[0])
