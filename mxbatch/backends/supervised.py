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
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Dict, Mapping, Optional

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
                           supervisor: procs.Process) -> JobStatus:
    """The job's status: its current attempt's task records merged with what the
    supervisor's liveness says of each task (alive: queued until its record says it
    started; gone, or silent past the heartbeat timeout: gone), then its attempts.
    Liveness is read before the records: a supervisor that has ended wrote its final
    records first, so they are read complete (never "gone without a record").
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
    return with_attempts(merge(plan, backend, records, rdv.read_abort(), native,
                               lost_note=lost_note), plan, attempts, alive)
