"""Containment by cgroup v2: every process a role starts is known by construction, daemons
that left its session and cleared their environment included.

Where the machine allows it (a cgroup2 hierarchy, and the part of it that holds the agent
writable by the agent: root, or a subtree delegated to the user), an agent makes one
cgroup of its own below the one it runs in (``mxbatch.<job>.<pid>.<n>``: under a batch
system's cgroup of the task, so its accounting still holds the roles) and one per task
below that. Each role joins its task's cgroup before its program runs: the exec wrapper
is a shell that writes ``0`` (itself) into the cgroup's ``cgroup.procs`` and execs the
rest (``join_command``), so no process of the role can start outside it, whatever it
does to its session, process group or environment afterwards.

At the agent's end (success, failure, cancel) ``JobCgroup.close`` ends whatever is still
in those cgroups (``cgroup.kill``; SIGKILL of each listed process where the kernel has no
``cgroup.kill``), waits until they are empty and removes them. A **keeper** (a shell in a
session of its own, reading a pipe only the agent holds) does the same when the agent
dies without its end (SIGKILL of an attached ``mxbatch launch``): the pipe's end of file
wakes it within milliseconds.

Where it cannot (no cgroup2 mounted, no write access, ``wire.CGROUPS`` off),
``JobCgroup.make`` answers None and the agent falls back to process groups and the scan
of ``MXBATCH_JOB_ID`` in environments (``procs``), which a process that clears its
environment escapes; ``probe`` says which is in force (``mxbatch doctor``). Only cgroups
this module made are ever written to or removed; nothing here touches a cgroup v1
hierarchy. Standard library only.
"""

import enum
import itertools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from . import wire

#: the shell that runs the join wrapper and the keeper
SHELL = "/bin/sh"
#: ``sh -c JOIN sh PROCS_FILE ARGV...``: join the cgroup whose ``cgroup.procs`` is
#: PROCS_FILE (quietly, as best it can), then become ARGV, keeping the pid
JOIN = '{ echo 0 > "$1"; } 2>/dev/null; shift; exec "$@"'
#: ``sh -c KEEPER keeper DIR`` with the agent's pipe as stdin: at its end of file, kill
#: what is left in DIR's subtree and remove DIR and its children (for up to 5 s)
KEEPER = (
    'while read -r _; do :; done\n'
    'cg=$1\n'
    '[ -d "$cg" ] || exit 0\n'
    '{ echo 1 > "$cg/cgroup.kill"; } 2>/dev/null\n'
    'i=0\n'
    'while [ $i -lt 100 ]; do\n'
    '  for d in "$cg"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done\n'
    '  rmdir "$cg" 2>/dev/null && exit 0\n'
    '  [ -d "$cg" ] || exit 0\n'
    '  for d in "$cg" "$cg"/*/; do\n'
    '    [ -f "$d/cgroup.procs" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p"; done\n'
    '  done 2>/dev/null\n'
    '  sleep 0.05; i=$((i + 1))\n'
    'done\n'
)
#: how long ``close`` waits for the cgroups to empty after the kill
EMPTY_WAIT_S = 5.0

_names = itertools.count()


class Containment(str, enum.Enum):
    """How an agent finds every process of its roles (``probe``)."""

    CGROUP = "cgroup"            # a cgroup v2 per task: everything a role starts
    PROCESS_GROUP = "process_group"  # process groups and the environment scan


@dataclass(frozen=True)
class Probe:
    """What ``probe`` found: the containment in force and why (a sentence)."""

    containment: Containment
    detail: str


def _unified_mount() -> Optional[str]:
    """Where this process sees the cgroup2 hierarchy mounted (``/sys/fs/cgroup`` on a
    unified machine, ``/sys/fs/cgroup/unified`` on a hybrid one), or None."""
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split(" - ", 1)
                if len(fields) == 2 and fields[1].split(" ", 1)[0] == "cgroup2":
                    return fields[0].split()[4]
    except OSError:
        pass
    return None


def _own_cgroup() -> Optional[str]:
    """This process's cgroup in the cgroup2 hierarchy (``0::/path``), or None."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def own_directory() -> Optional[str]:
    """The directory of this process's cgroup2 cgroup, below which an agent of it makes
    its own (``JobCgroup.make``), or None without one."""
    mount, own = _unified_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    path = os.path.join(mount, own.lstrip("/"))
    return path if os.path.isdir(path) else None


def enabled(environ: Optional[Dict[str, str]] = None) -> bool:
    """Whether cgroups may be used (``wire.CGROUPS`` set to ``off`` turns them off)."""
    value = (os.environ if environ is None else environ).get(wire.CGROUPS, "")
    return value.strip().lower() not in ("off", "0", "no", "false")


def probe() -> Probe:
    """Which containment an agent of this user would get here, by making (and removing)
    a cgroup as an agent would."""
    if not enabled():
        return Probe(Containment.PROCESS_GROUP, f"cgroups are off ({wire.CGROUPS}=off): "
                     "processes that leave their session and clear their environment "
                     "can escape a job's teardown")
    base = own_directory()
    if base is None:
        return Probe(Containment.PROCESS_GROUP, "no cgroup v2 hierarchy here: processes "
                     "that leave their session and clear their environment can escape a "
                     "job's teardown")
    path = os.path.join(base, "mxbatch.probe.%d.%d" % (os.getpid(), next(_names)))
    try:
        os.mkdir(path)
    except OSError as exc:
        return Probe(Containment.PROCESS_GROUP, "cannot make a cgroup in %s (%s; no "
                     "delegation to this user): processes that leave their session and "
                     "clear their environment can escape a job's teardown"
                     % (base, exc.strerror))
    try:
        os.rmdir(path)
    except OSError:
        pass
    return Probe(Containment.CGROUP, "a cgroup v2 per task under %s: every process a "
                 "role starts ends with its job" % base)


class JobCgroup:
    """The cgroups of one agent (see the module docstring). ``make`` them; ``join`` a
    task's argv to its cgroup; ``close`` at the agent's end."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._keeper: Optional[subprocess.Popen] = None
        self._keeper_pipe: Optional[int] = None

    @classmethod
    def make(cls, job_id: str) -> Optional["JobCgroup"]:
        """The agent's cgroup, made, with its keeper running; None where cgroups cannot
        be used (then nothing was made)."""
        if not enabled():
            return None
        base = own_directory()
        if base is None:
            return None
        path = os.path.join(base, "mxbatch.%s.%d.%d" % (job_id, os.getpid(), next(_names)))
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return None
        made = cls(path)
        try:
            made._start_keeper()
        except OSError:
            made.close()
            return None
        return made

    def _start_keeper(self) -> None:
        read_end, write_end = os.pipe()  # neither is inherited by what the agent starts
        try:
            self._keeper = subprocess.Popen(
                [SHELL, "-c", KEEPER, "keeper", self.path], stdin=read_end,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
        except OSError:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._keeper_pipe = write_end

    def task_procs(self, name: str) -> Optional[str]:
        """The ``cgroup.procs`` file of the task cgroup ``name`` (made if need be), for
        ``join_command``; None when it cannot be made."""
        path = os.path.join(self.path, name)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        except OSError:
            return None
        return os.path.join(path, "cgroup.procs")

    def pids(self) -> List[int]:
        """The processes in this agent's cgroups now."""
        found: List[int] = []
        for directory in self._directories():
            try:
                with open(os.path.join(directory, "cgroup.procs")) as handle:
                    found.extend(int(line) for line in handle if line.strip())
            except (OSError, ValueError):
                continue
        return found

    def _directories(self) -> List[str]:
        try:
            children = [os.path.join(self.path, n) for n in sorted(os.listdir(self.path))]
        except OSError:
            return []
        return [d for d in children if os.path.isdir(d)] + [self.path]

    def kill(self) -> None:
        """End every process in this agent's cgroups (the whole subtree)."""
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as handle:
                handle.write("1")
            return
        except OSError:
            pass
        for pid in self.pids():  # a kernel without cgroup.kill (before 5.14)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self, wait_s: float = EMPTY_WAIT_S) -> List[int]:
        """End what is left, wait (at most ``wait_s``) until the cgroups are empty,
        remove them and let the keeper go; the pids that were still there."""
        left = self.pids()
        deadline = time.monotonic() + wait_s
        if left:
            self.kill()
        while True:
            for directory in self._directories():
                try:
                    os.rmdir(directory)
                except OSError:
                    pass
            if not os.path.isdir(self.path) or time.monotonic() > deadline:
                break
            self.kill()
            time.sleep(0.02)
        if self._keeper_pipe is not None:
            os.close(self._keeper_pipe)  # the keeper finds nothing left and exits
            self._keeper_pipe = None
        if self._keeper is not None:
            try:
                self._keeper.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
            self._keeper = None
        return left


def join_command(procs_file: str, argv: List[str]) -> List[str]:
    """``argv`` behind the wrapper that joins the cgroup of ``procs_file`` first."""
    return [SHELL, "-c", JOIN, "sh", procs_file, *argv]
