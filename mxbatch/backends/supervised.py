"""What backends whose job is supervised from this host (local's job manager, the ssh
and MPI controller) share: the job's status from its records and the supervisor's
liveness."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

from ..runtime import procs
from ..runtime.attempts import read_attempts
from ..runtime.rendezvous import FileRendezvous, TaskKey
from ..runtime.states import TaskState
from .base import load_run_plan
from .records import JobRecord

if TYPE_CHECKING:  # pragma: no cover
    from .status import JobStatus


def status_supervised_here(backend: str, record: JobRecord, supervisor_pid: int) -> JobStatus:
    """The job's status: its current attempt's task records merged with what the
    supervisor's liveness says of each task (alive: queued until its record says it
    started; gone: gone), then its attempts. Liveness is read before the records: a
    supervisor that has ended wrote its final records first, so they are read complete
    (never "gone without a record"). (``status`` is imported here: a job's first role
    starts before anyone asks for its status.)"""
    from .status import NativeState, merge, with_attempts

    plan = load_run_plan(record)
    alive = procs.pid_alive(supervisor_pid)
    attempts = read_attempts(record.layout.attempts_record)
    rdv = FileRendezvous(record.run_dir, attempts.current.index if attempts else 0)
    records = rdv.read_tasks(plan.task_keys())
    native: Dict[TaskKey, NativeState] = {}
    for key in plan.task_keys():
        rec = records.get(key)
        started = rec is not None and rec.state is not TaskState.PENDING  # not queued
        native[key] = (NativeState.GONE if not alive
                       else NativeState.ACTIVE if started else NativeState.QUEUED)
    return with_attempts(merge(plan, backend, records, rdv.read_abort(), native), plan,
                         attempts, alive)
