"""runtime.spawn: roles start without a copy of their supervisor (vfork and a tiny exec
wrapper), yet with everything the fork-and-preexec start gave them: the death signal,
no core files, their own session, exactly their environment, directory and pipe, and
the same OSError when the program cannot be started."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mxbatch.runtime import spawn
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent

#: what a role reports of itself: its directory, session, group, limits, death signal...
REPORT = textwrap.dedent("""
    import ctypes, json, os, resource, sys
    signum = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(signum))  # PR_GET_PDEATHSIG
    print(json.dumps({
        "cwd": os.getcwd(), "pid": os.getpid(), "sid": os.getsid(0), "pgrp": os.getpgrp(),
        "core": resource.getrlimit(resource.RLIMIT_CORE), "deathsig": signum.value,
        "argv0": open("/proc/self/cmdline", "rb").read().split(b"\\0")[0].decode(),
        "stdin": os.readlink("/proc/self/fd/0"), "marker": os.environ.get("SPAWN_MARKER"),
        "inherited": "SPAWN_NOT_GIVEN" in os.environ,
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))}))
""")

WRAPPERS = ["python", "setpriv"]


@pytest.fixture(params=WRAPPERS)
def wrapper(request, monkeypatch) -> str:
    """Which exec wrapper sets the death signal: each of them, where it exists."""
    if request.param == "python":
        monkeypatch.setitem(spawn._setpriv_found, "path", None)
    else:
        monkeypatch.delitem(spawn._setpriv_found, "path", raising=False)
        if spawn._working_setpriv() is None:
            pytest.skip("no setpriv with --pdeathsig here (util-linux >= 2.33)")
    return request.param


def _run(argv, tmp_path, **kwargs):
    read_end, write_end = os.pipe()
    try:
        proc = spawn.spawn_role(argv, cwd=str(tmp_path), output_fd=write_end, **kwargs)
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as output:
        text = output.read().decode()
    return proc.wait(timeout=60), text


@pytest.mark.parametrize("core_dumps", [False, True])
def test_a_role_gets_its_session_directory_environment_and_limits(wrapper, tmp_path,
                                                                   monkeypatch, core_dumps):
    monkeypatch.setenv("SPAWN_NOT_GIVEN", "1")  # the supervisor's, not the role's
    before = resource.getrlimit(resource.RLIMIT_CORE)
    env = {"PATH": os.environ["PATH"], "SPAWN_MARKER": "x y $z"}
    code, text = _run([sys.executable, "-c", REPORT], tmp_path, env=env,
                      core_dumps=core_dumps, deathsig=signal.SIGTERM)
    assert code == 0, text
    seen = json.loads(text)
    assert seen["cwd"] == str(tmp_path)
    assert seen["sid"] == seen["pgrp"] == seen["pid"]  # a session and group of its own
    assert seen["deathsig"] == signal.SIGTERM
    assert seen["core"] == (list(before) if core_dumps else [0, 0])
    assert resource.getrlimit(resource.RLIMIT_CORE) == before  # the supervisor's own
    assert seen["argv0"] == sys.executable  # the role's argv, not the wrapper's
    assert seen["stdin"] == "/dev/null"
    assert seen["marker"] == "x y $z" and not seen["inherited"]
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) == 4  # + listdir's own


def test_a_role_dies_with_its_supervisor(wrapper, tmp_path):
    """The supervisor is SIGKILLed (no chance to stop anything): its role dies too."""
    force = "None" if wrapper == "python" else "spawn._working_setpriv()"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, signal, sys, time
            from mxbatch.runtime import spawn
            spawn._setpriv_found["path"] = {force}
            proc = spawn.spawn_role([sys.executable, "-c", "import time; time.sleep(600)"],
                                    cwd=".", env=dict(os.environ), output_fd=2,
                                    core_dumps=False, deathsig=signal.SIGKILL)
            print(proc.pid, flush=True)
            time.sleep(600)
        """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    role = int(supervisor.stdout.readline())
    # the role runs its own program (the wrapper has exec'd it), then its supervisor dies
    wait_for(lambda: Path(f"/proc/{role}/cmdline").read_bytes().split(b"\0")[:3]
             == [sys.executable.encode(), b"-c", b"import time; time.sleep(600)"],
             30, "the role to run")
    supervisor.kill()
    supervisor.wait()
    wait_for(lambda: _gone(role), 30, "the role to die with its supervisor")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_a_program_that_cannot_start_is_the_oserror_popen_gave(tmp_path):
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    kwargs = dict(env=env, output_fd=1, core_dumps=False, deathsig=signal.SIGKILL)
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(FileNotFoundError) as missing:
        spawn.spawn_role(["/no/such/program"], cwd=str(tmp_path), **kwargs)
    with pytest.raises(FileNotFoundError):
        spawn.spawn_role(["no-such-program-on-path"], cwd=str(tmp_path), **kwargs)
    with pytest.raises(PermissionError) as denied:
        spawn.spawn_role(["./not-executable"], cwd=str(tmp_path), **kwargs)
    with pytest.raises(PermissionError):
        spawn.spawn_role(["not-executable"], cwd=str(tmp_path), **kwargs)  # found on PATH
    with pytest.raises(FileNotFoundError):
        spawn.spawn_role(["true"], cwd=str(tmp_path / "no-such-dir"), **kwargs)
    # the words Popen used, which the task's failure quotes ("cannot start 'x': ...")
    with pytest.raises(FileNotFoundError) as popen_missing:
        subprocess.Popen(["/no/such/program"])
    assert missing.value.strerror == popen_missing.value.strerror
    with pytest.raises(PermissionError) as popen_denied:
        subprocess.Popen(["./not-executable"], cwd=tmp_path)
    assert denied.value.strerror == popen_denied.value.strerror


def test_a_failed_exec_behind_the_wrapper_is_exit_127_with_the_reason(wrapper, tmp_path):
    """A program that passes the check but cannot be exec'd (its interpreter is missing):
    the wrapper says why on the role's output and exits 127."""
    script = tmp_path / "orphan.sh"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    code, text = _run([str(script)], tmp_path, env={"PATH": "/usr/bin:/bin"},
                      core_dumps=False, deathsig=signal.SIGKILL)
    assert code == spawn.EXEC_FAILED
    assert "orphan.sh" in text and "No such file or directory" in text


def test_the_wrapper_is_argv_itself_where_there_is_no_death_signal(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert spawn.deathsig_command(["x", "-y"], signal.SIGKILL) == ["x", "-y"]


def test_the_python_wrapper_ends_the_role_whose_supervisor_is_already_gone():
    """Its supervisor died before the death signal was set (the wrapper was told of
    another parent): the wrapper sends itself the signal rather than run an orphan."""
    argv = [sys.executable, "-I", "-S", "-c", spawn.DEATHSIG_WRAPPER, str(int(signal.SIGTERM)),
            "1", sys.executable, "-c", "print('ran')"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == -signal.SIGTERM and "ran" not in result.stdout


def test_a_setpriv_that_cannot_run_gives_way_to_the_python_wrapper(tmp_path, monkeypatch):
    broken = tmp_path / "setpriv"
    broken.write_text("not a program\n")  # not executable: its exec fails
    monkeypatch.setitem(spawn._setpriv_found, "path", str(broken))
    code, text = _run([sys.executable, "-c", REPORT], tmp_path, env={"PATH": "/usr/bin:/bin"},
                      core_dumps=False, deathsig=signal.SIGKILL)
    assert code == 0, text
    assert json.loads(text)["deathsig"] == signal.SIGKILL
    assert spawn._setpriv_found["path"] is None  # and the next roles go straight there


def test_a_controllers_program_gets_its_death_signal_and_pipes(wrapper, tmp_path, monkeypatch):
    """``start_dying_with_parent`` (the ssh sessions, rsyncs and mpirun of the host
    controllers): Popen's arguments as given, the inherited environment by default, the
    death signal set, and the OSError of a program that is not there."""
    monkeypatch.setenv("SPAWN_MARKER", "inherited")
    proc = spawn.start_dying_with_parent([sys.executable, "-c", REPORT], signal.SIGKILL,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         cwd=str(tmp_path), start_new_session=True)
    out, _ = proc.communicate(timeout=60)
    seen = json.loads(out)
    assert proc.returncode == 0
    assert seen["deathsig"] == signal.SIGKILL and seen["argv0"] == sys.executable
    assert seen["marker"] == "inherited" and seen["cwd"] == str(tmp_path)
    assert seen["stdin"].startswith("pipe:")
    with pytest.raises(FileNotFoundError):
        spawn.start_dying_with_parent(["no-such-program-on-path"], stdout=subprocess.DEVNULL)
