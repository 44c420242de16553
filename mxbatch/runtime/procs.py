"""Processes on this machine: liveness (zombies count as dead) and a job's leftovers.

Every process of a job carries ``MXBATCH_JOB_ID=<job-id>`` in its environment
(the local manager, supervisors, roles and whatever roles start), so
``job_processes`` finds all of them through ``/proc/<pid>/environ``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, List

from .wire import JOB_ID


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] not in (b"Z", b"X")
    except (OSError, ValueError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not os.path.isdir("/proc")  # /proc exists but no entry: gone


def _ancestors() -> List[int]:
    chain, pid = [], os.getpid()
    while pid > 1:
        chain.append(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
            pid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def processes_with_variable(matches: Callable[[bytes], bool]) -> List[int]:
    """Pids of live processes (not this one nor its ancestors) that have an environment
    entry (``b"NAME=value"``) for which ``matches`` is true."""
    skip = set(_ancestors())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:
            continue
        if any(matches(v) for v in variables) and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def job_processes(job_id: str) -> List[int]:
    """Pids of live processes whose environment has ``MXBATCH_JOB_ID=job_id``."""
    needle = f"{JOB_ID}={job_id}".encode()
    return processes_with_variable(lambda variable: variable == needle)


def kill_all(pids: List[int], signum: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pids: List[int], timeout: float) -> List[int]:
    """Poll until every pid is dead or ``timeout`` passes; returns the survivors."""
    deadline = time.time() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.time() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if pid_alive(p)]
    return alive
