"""What backends whose job is supervised from this host (local's job manager, the ssh
and MPI controller) share: the job's status from its records and the supervisor's
liveness.

A supervisor is alive when its process is (``procs.Process``: its pid and start time,
so a pid another process got since is not it) and it keeps its records: while a task
is active, the supervisor rewrites its record at least every heartbeat
(``agent.Schedule``), so active records that no one has written for the job's
``heartbeat_timeout`` mean a supervisor that is stopped (SIGSTOP) or hung, which would
otherwise leave the job RUNNING for ever. The records' modification times are this
host's clock: the supervisor writes them here.

Except an attached supervisor (``submit --wait``, ``launch``: the command in the user's
terminal) that is stopped: Ctrl-Z stops it, ``fg`` or ``bg`` continues it, and its
roles run on meanwhile (they have process groups of their own). Its job is paused, not
lost: RUNNING, with a note that says so, and no ``wait`` or ``clean`` takes it for
ended; once continued, it rewrites its records in its first turn.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Tuple

from ..runtime import procs
from ..runtime.attempts import read_attempts
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import FileRendezvous, TaskKey
from ..runtime.states import TaskRecord, TaskState
from .base import load_run_plan
from .records import JobRecord

if TYPE_CHECKING:  # pragma: no cover
    from .status import JobStatus

#: how much longer than the heartbeat timeout a supervisor's records may stay unwritten
#: (a loaded machine delays a write by a moment)
HEARTBEAT_MARGIN_S = 2.0
#: how long an attached supervisor that runs again after a stop may take to rewrite its
#: records before their silence makes its tasks lost
CONTINUED_GRACE_S = 2.0


def silence_s(plan: RunPlan, rdv: FileRendezvous, records: Mapping[TaskKey, TaskRecord],
              now: Optional[float] = None) -> Optional[float]:
    """How long no active task record of the attempt has been written, once that is
    longer than the heartbeat timeout (plus ``HEARTBEAT_MARGIN_S``); None while some
    is written in time, or no task is active."""
    times = []
    for key, record in records.items():
        if record.state.active:
            try:
                times.append(os.stat(rdv.layout.task_record(key[0].value, key[1])).st_mtime)
            except OSError:
                continue
    if not times:
        return None
    quiet = (time.time() if now is None else now) - max(times)
    return quiet if quiet > plan.heartbeat_timeout_s + HEARTBEAT_MARGIN_S else None


def status_supervised_here(backend: str, record: JobRecord,
                           supervisor: procs.Process, attached: bool = False) -> JobStatus:
    """The job's status: its current attempt's task records merged with what the
    supervisor's liveness says of each task (alive: queued until its record says it
    started; gone, or silent past the heartbeat timeout: gone), then its attempts.
    Liveness is read before the records: a supervisor that has ended wrote its final
    records first, so they are read complete (never "gone without a record").

    ``attached``: the supervisor is a command in a user's terminal (``submit --wait``,
    ``launch``), which the shell's job control stops (Ctrl-Z) and continues (``fg``,
    ``bg``): while it is stopped (``pause``) its job is not lost, whatever its silence;
    the status says so in its ``note``, and once continued it writes its records at
    once (a silence is given ``CONTINUED_GRACE_S`` to end before it counts).
    (``status`` is imported here: a job's first role starts before anyone asks for its
    status.)"""
    from .status import NativeState, merge, with_attempts

    plan = load_run_plan(record)
    alive = supervisor.alive()
    attempts = read_attempts(record.layout.attempts_record)
    rdv = FileRendezvous(record.run_dir, attempts.current.index if attempts else 0)
    records = rdv.read_tasks(plan.task_keys())
    lost_note = ""
    quiet = silence_s(plan, rdv, records) if alive else None
    paused = pause(supervisor, quiet) if attached and alive else None
    if attached and paused is None and quiet is not None:
        if supervisor.pid == os.getpid():  # it asks itself: it runs, and beats next turn
            quiet = None
        else:
            quiet, records = _silence_after_grace(plan, rdv, supervisor)
            paused = pause(supervisor, quiet) if quiet is not None else None
    if paused is not None:
        quiet = None  # stopped by its terminal: not lost
    if quiet is not None:
        alive = False
        how = "is stopped" if supervisor.stopped() else "does not write its records"
        lost_note = (f"no heartbeat for {quiet:.0f}s (heartbeat_timeout "
                     f"{plan.heartbeat_timeout_s:g}s): its supervisor, pid "
                     f"{supervisor.pid}, {how}")
    native: Dict[TaskKey, NativeState] = {}
    for key in plan.task_keys():
        rec = records.get(key)
        started = rec is not None and rec.state is not TaskState.PENDING  # not queued
        native[key] = (NativeState.GONE if not alive
                       else NativeState.ACTIVE if started else NativeState.QUEUED)
    status = with_attempts(merge(plan, backend, records, rdv.read_abort(), native,
                                 lost_note=lost_note), plan, attempts, alive)
    if paused is not None and not status.terminal:
        status.note = "; ".join(filter(None, [paused.describe(), status.note]))
    return status


@dataclasses.dataclass(frozen=True)
class Pause:
    """An attached supervisor stopped by its terminal's job control (Ctrl-Z), and how
    long its records have been silent (None: less than the heartbeat timeout)."""

    pid: int
    silent_s: Optional[float] = None

    def describe(self) -> str:
        """What ``status`` says of the job meanwhile."""
        since = f" ({self.silent_s:.0f}s without a heartbeat)" if self.silent_s else ""
        return (f"its supervisor, the attached mxbatch (pid {self.pid}), is stopped{since}: "
                "the roles run on; `fg` or `bg` in its shell continues it, `mxbatch cancel` "
                "ends the job")


def pause(supervisor: procs.Process, quiet: Optional[float]) -> Optional[Pause]:
    """The pause of an attached ``supervisor`` that is stopped now; None if it runs."""
    return Pause(supervisor.pid, quiet) if supervisor.stopped() else None


def _silence_after_grace(plan: RunPlan, rdv: FileRendezvous, supervisor: procs.Process
                         ) -> Tuple[Optional[float], Dict[TaskKey, TaskRecord]]:
    """The records' silence, and the records, once an attached supervisor that runs
    (not stopped) had ``CONTINUED_GRACE_S`` to write them: one continued a moment ago
    rewrites them in its first turn. Returns as soon as they are written in time again
    (silence None), or it is stopped again."""
    deadline = time.monotonic() + CONTINUED_GRACE_S
    while True:
        records = rdv.read_tasks(plan.task_keys())
        quiet = silence_s(plan, rdv, records)
        if quiet is None or supervisor.stopped() or time.monotonic() >= deadline:
            return quiet, records
        time.sleep(0.05)
