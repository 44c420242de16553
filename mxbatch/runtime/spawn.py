"""Starting a role process without copying its supervisor.

``subprocess.Popen`` with a ``preexec_fn`` must ``fork``: the child is a copy of the
supervisor (for an attached ``mxbatch launch``, of the whole CLI) that runs Python code
before it execs, and until then the machine holds two of it. Without a ``preexec_fn``,
CPython (3.10 and later, Linux) starts the child with ``vfork``: it borrows the
supervisor's memory until its exec, nothing is copied, and the supervisor waits for
that exec only (tens of microseconds). What a role needs beyond what Popen does in C
(``cwd``, the environment, the pipe, a new session, closing other descriptors) is done
without Python code in the child:

- **death signal** (``PR_SET_PDEATHSIG``: the role dies with its supervisor): a tiny
  exec wrapper sets it and execs the role, keeping its pid: ``setpriv --pdeathsig SIG``
  (util-linux 2.33 and later, a millisecond) where there is one that has the option,
  else ``python3 -I -S -c DEATHSIG_WRAPPER`` (about ten, the time Python takes to
  start; it also ends itself should the supervisor have died before the signal was
  set); the setting survives the exec (only a set-user-ID program's clears it);
- **no core files** unless allowed (``RLIMIT_CORE`` 0, 0): the supervisor lowers its
  own soft limit to 0 around the spawn, so the child starts with it, then lowers the
  child's hard limit to 0 too (``prlimit``), as a ``setrlimit`` in the child did.

The command is looked up first, here, as Popen's child would (the role's ``PATH``,
relative to ``cwd``), so that a missing or non-executable program is the same
``OSError`` as before, before anything starts. Should the wrapper's own exec still fail
(the file changed meanwhile, a bad executable format), the wrapper writes why on the
role's stderr and exits 127.
"""

import os
import resource
import signal
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .cgroups import join_command

#: the exit status of a wrapper whose exec of the role failed (as a shell's)
EXEC_FAILED = 127
#: prctl(2)'s option that sets the calling process's death signal
PR_SET_PDEATHSIG = 1
#: the portable wrapper: ``python -I -S -c DEATHSIG_WRAPPER SIGNUM PARENT_PID ARGV...``
#: (a parent already gone before the death signal was set: the signal now)
DEATHSIG_WRAPPER = (
    "import os, sys\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None).prctl(" + str(PR_SET_PDEATHSIG) + ", int(sys.argv[1]))\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    os.kill(os.getpid(), int(sys.argv[1]))\n"
    "try:\n"
    "    os.execvp(sys.argv[3], sys.argv[3:])\n"
    "except OSError as exc:\n"
    "    os.write(2, ('mxbatch: cannot start %r: %s\\n'\n"
    "                 % (sys.argv[3], exc.strerror)).encode('utf-8', 'replace'))\n"
    "    os._exit(" + str(EXEC_FAILED) + ")\n"
)


#: where ``setpriv`` is looked for (before the supervisor's PATH)
SETPRIV_PLACES = ("/usr/bin/setpriv", "/bin/setpriv")

_setpriv_found: Dict[str, Optional[str]] = {}


def _working_setpriv() -> Optional[str]:
    """The path of a ``setpriv`` that takes ``--pdeathsig`` (its option table names it:
    read once per process, no program run), or None; ``spawn_role`` forgets it should
    it fail to start."""
    if "path" in _setpriv_found:
        return _setpriv_found["path"]
    found = None
    places = list(SETPRIV_PLACES) + [os.path.join(d, "setpriv")
                                     for d in os.get_exec_path() if d]
    for path in places:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            try:
                with open(path, "rb") as binary:
                    found = path if b"pdeathsig" in binary.read(4 << 20) else None
            except OSError:
                continue
            break
    _setpriv_found["path"] = found
    return found


def deathsig_command(argv: Sequence[str], deathsig: int,
                     setpriv: Optional[str] = None) -> List[str]:
    """``argv`` behind the exec wrapper that gives it ``deathsig`` as its death signal
    (``setpriv`` when given, else the Python one); ``argv`` alone where there is no
    death signal to set (not Linux)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    if setpriv is not None:
        return [setpriv, "--pdeathsig", signal.Signals(deathsig).name[3:], "--", *argv]
    return [sys.executable, "-I", "-S", "-c", DEATHSIG_WRAPPER, str(int(deathsig)),
            str(os.getpid()), *argv]


def check_executable(program: str, env: Mapping[str, str], cwd: str) -> None:
    """Raise the ``OSError`` Popen's child would for ``program`` (looked up in ``env``'s
    ``PATH`` unless it has a slash; relative to ``cwd``): FileNotFoundError when it is
    nowhere, PermissionError when it is there but cannot be executed."""
    if os.sep in program:
        candidates = [program]
    else:
        candidates = [os.path.join(d, program) for d in os.get_exec_path(dict(env))]
    denied = None
    for candidate in candidates:
        path = os.path.join(cwd, candidate)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return
        if os.path.exists(path) and denied is None:
            denied = candidate
    if denied is not None:
        raise PermissionError(13, os.strerror(13), denied)
    raise FileNotFoundError(2, os.strerror(2), program)


def start_dying_with_parent(argv: Sequence[str], deathsig: int = signal.SIGKILL,
                            cgroup_procs: Optional[str] = None,
                            **popen_args: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_args)`` whose child dies by ``deathsig`` with this
    process, started without copying this process (no ``preexec_fn``: the exec wrapper of
    the module docstring sets the signal, and Popen can ``vfork``; a ``preexec_fn`` that
    sets it costs a fork and a ``ctypes`` import in the child, 4 ms each on the test VM).
    ``argv[0]`` is looked up first (``check_executable``, in ``popen_args``' ``env`` and
    ``cwd``), so a missing program is the ``OSError`` Popen's child would raise.
    ``cgroup_procs``: the child joins that cgroup (``cgroups.join_command``) before
    anything else runs."""
    env = popen_args.get("env")
    check_executable(argv[0], os.environ if env is None else env,
                     popen_args.get("cwd") or os.getcwd())

    def wrapped(setpriv: Optional[str]) -> List[str]:
        command = deathsig_command(argv, deathsig, setpriv)
        return command if cgroup_procs is None else join_command(cgroup_procs, command)

    try:
        return subprocess.Popen(wrapped(_working_setpriv()), **popen_args)
    except OSError:
        if _setpriv_found.get("path") is None:
            raise
        _setpriv_found["path"] = None  # setpriv cannot run here: the Python wrapper
        return subprocess.Popen(wrapped(None), **popen_args)


def spawn_role(argv: Sequence[str], *, cwd: str, env: Dict[str, str], output_fd: int,
               core_dumps: bool, deathsig: int, pass_fds: Sequence[int] = (),
               cgroup_procs: Optional[str] = None,
               data_limit: Optional[int] = None) -> subprocess.Popen:
    """Start ``argv`` as a role (see the module docstring): in ``cwd`` with exactly
    ``env``, stdin from /dev/null, stdout and stderr to ``output_fd``, ``pass_fds``
    open (under the same numbers; every other descriptor closed), in a session and
    process group of its own, dying with this process by ``deathsig``, and writing no
    core file unless ``core_dumps``, in the cgroup of ``cgroup_procs`` if given (from
    before its program runs), its ``RLIMIT_DATA`` ``data_limit`` bytes if given (soft
    and hard, by ``prlimit`` as soon as it runs: ``runtime.limits``). Raises ``OSError``
    when it cannot start (nothing is left running then)."""
    if not os.path.isdir(cwd):
        raise FileNotFoundError(2, os.strerror(2), cwd)
    limit = None
    if not core_dumps:
        try:
            limit = resource.getrlimit(resource.RLIMIT_CORE)
            resource.setrlimit(resource.RLIMIT_CORE, (0, limit[1]))
        except (OSError, ValueError):
            limit = None
    try:
        proc = start_dying_with_parent(argv, deathsig, cgroup_procs, cwd=cwd, env=env,
                                       stdin=subprocess.DEVNULL, stdout=output_fd,
                                       stderr=output_fd, start_new_session=True,
                                       pass_fds=tuple(pass_fds))
    finally:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_CORE, limit)
    if not core_dumps:
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
        except (OSError, ValueError, AttributeError):
            pass  # it has ended already, or changed its credentials: soft 0 stays
    if data_limit is not None:
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_DATA, (data_limit, data_limit))
        except (OSError, ValueError, AttributeError):
            pass  # it has ended already
    return proc
