"""Processes on this machine: liveness (zombies count as dead), identity beyond the pid,
and a job's leftovers.

A pid alone names a process only while it lives: once it has ended, the kernel hands
the number to the next process that needs one (``pid_max`` is often 32768). A
``Process`` is a pid with the moment it started (``/proc/<pid>/stat`` field 22, clock
ticks after boot), a pair the kernel never reuses: a record that keeps both tells its
process from a stranger that got the same pid later.

Every process of a job carries ``MXBATCH_JOB_ID=<job-id>`` in its environment
(the local manager, supervisors, roles and whatever roles start), so
``job_processes`` finds all of them through ``/proc/<pid>/environ``, and
``reap_job`` kills them and says what they were.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, List, NamedTuple, Optional, Sequence, Union

from .wire import JOB_ID

#: ``/proc/<pid>/stat`` fields, counted from 3 (the state) as the text after the
#: command name's ``)`` splits
_STATE, _PPID, _STARTTIME = 0, 1, 19
#: at most this much of a leftover's command line is shown
COMMAND_SHOWN = 80


def _stat_fields(pid: int) -> Optional[List[bytes]]:
    """The fields of ``/proc/<pid>/stat`` after the command name; None when unreadable
    (no such process, or no /proc)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            stat = handle.read()
        return stat[stat.rindex(b")") + 2:].split()
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    if fields:
        return fields[_STATE] not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not os.path.isdir("/proc")  # /proc exists but no entry: gone


def start_ticks(pid: int) -> Optional[int]:
    """When ``pid`` started (clock ticks after boot); None when it cannot be read."""
    fields = _stat_fields(pid)
    try:
        return int(fields[_STARTTIME]) if fields else None
    except (IndexError, ValueError):
        return None


class Process(NamedTuple):
    """One process, named by its pid and its start time (see the module docstring);
    ``started`` None (a record of an older mxbatch): the pid alone decides."""

    pid: int
    started: Optional[int] = None

    @classmethod
    def of(cls, pid: int) -> "Process":
        """The process that has ``pid`` now."""
        return cls(pid, start_ticks(pid))

    def alive(self) -> bool:
        """It still runs: the pid is alive and was not given to another process since."""
        if not pid_alive(self.pid):
            return False
        return self.started is None or start_ticks(self.pid) in (self.started, None)

    def stopped(self) -> bool:
        """It runs but is stopped (SIGSTOP, a debugger, a frozen cgroup)."""
        fields = _stat_fields(self.pid)
        return bool(fields) and fields[_STATE] in (b"T", b"t") and self.alive()


#: a process to wait for: a pid, or a ``Process`` (pid and start time)
Waitable = Union[int, Process]


def _ancestors() -> List[int]:
    chain, pid = [], os.getpid()
    while pid > 1:
        chain.append(pid)
        fields = _stat_fields(pid)
        try:
            pid = int(fields[_PPID]) if fields else 0
        except (IndexError, ValueError):
            break
    return chain


def processes_with_variable(matches: Callable[[bytes], bool], hint: bytes = b"") -> List[int]:
    """Pids of live processes (not this one nor its ancestors) that have an environment
    entry (``b"NAME=value"``) for which ``matches`` is true. ``hint``: bytes that every
    matching entry contains; an environment without them is skipped unsplit (most of
    the machine's, where each holds hundreds of entries)."""
    skip = set(_ancestors())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if hint not in environ:
            continue
        if any(matches(v) for v in environ.split(b"\0")) and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def job_processes(job_id: str) -> List[int]:
    """Pids of live processes whose environment has ``MXBATCH_JOB_ID=job_id``."""
    needle = f"{JOB_ID}={job_id}".encode()
    return processes_with_variable(lambda variable: variable == needle, hint=needle)


def command_line(pid: int) -> str:
    """What ``pid`` runs (its command line, at most ``COMMAND_SHOWN`` characters), for
    messages; "" once it is gone."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return ""
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    return text if len(text) <= COMMAND_SHOWN else text[:COMMAND_SHOWN - 3] + "..."


class Leftover(NamedTuple):
    """A process of a job that was still there when nothing of the job should be."""

    pid: int
    command: str

    def describe(self) -> str:
        return "pid %d (%s)" % (self.pid, self.command or "?")


def reap_job(job_id: str, timeout: float = 5.0) -> List[Leftover]:
    """SIGKILL every live process of ``job_id`` on this machine (``job_processes``: not
    this one nor its ancestors) and wait up to ``timeout`` for them to go; what they
    were."""
    pids = job_processes(job_id)
    found = [Leftover(pid, command_line(pid)) for pid in pids]
    if pids:
        kill_all(pids, signal.SIGKILL)
        wait_gone(pids, timeout)
    return found


def kill_all(pids: Sequence[Waitable], signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` to each (a ``Process`` only while it is still that process)."""
    for each in pids:
        if isinstance(each, Process) and not each.alive():
            continue
        try:
            os.kill(each.pid if isinstance(each, Process) else each, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(each: Waitable) -> bool:
    return each.alive() if isinstance(each, Process) else pid_alive(each)


def wait_gone(pids: Sequence[Waitable], timeout: float) -> List[Waitable]:
    """Poll until every process is dead or ``timeout`` passes; returns the survivors.
    A ``Process`` whose pid another process got meanwhile is gone."""
    deadline = time.time() + timeout
    alive = [p for p in pids if _alive(p)]
    while alive and time.time() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive
