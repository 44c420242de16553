"""A job's state, merged from the supervisors' task records and the backend's view.

Backends report, per task, only what they can see natively (``NativeState``:
queued, active, gone); the supervisors' records say what happened inside.
``merge`` combines both with one set of rules for every backend.
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..runtime.metrics import SAMPLES_PER_SEC
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import TaskKey
from ..runtime.roles import Role
from ..runtime.states import AbortKind, AbortRecord, TaskRecord, TaskState
from ..runtime.watch import workers_succeeded
from ..spec.typed import to_data
from .psrank import kv_ranks

#: a running worker below this fraction of its peers' median throughput is a straggler
STRAGGLER_RATIO = 0.5


class NativeState(str, enum.Enum):
    """What the backend sees of one task, without looking inside."""

    QUEUED = "QUEUED"
    ACTIVE = "ACTIVE"
    GONE = "GONE"
    UNKNOWN = "UNKNOWN"


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


@dataclasses.dataclass
class TaskStatus:
    role: Role
    rank: int
    state: TaskState
    host: str = ""
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    note: str = ""
    log: str = ""
    native: Optional[str] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    #: the latest metrics the role printed (``runtime.metrics``)
    metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    #: MXNet's rank of a worker (``kv.rank``) when known: see ``psrank``
    kv_rank: Optional[int] = None

    @property
    def samples_per_sec(self) -> Optional[float]:
        return self.metrics.get(SAMPLES_PER_SEC)

    @property
    def label(self) -> str:
        return f"{self.role.value}[{self.rank}]"


@dataclasses.dataclass
class JobStatus:
    job_id: str
    backend: str
    state: JobState
    tasks: List[TaskStatus]
    reason: str = ""
    log: Optional[str] = None
    terminal: bool = False
    #: the task whose failure ended the job (``worker[1]``), when one did
    cause_task: str = ""
    #: the workers' latest throughput together (running workers; all of them once none
    #: runs), None while no worker reported one
    samples_per_sec: Optional[float] = None
    #: running workers far slower than their peers (``stragglers``)
    stragglers: List[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return to_data(self)

    def task(self, label: str) -> Optional[TaskStatus]:
        """The task called ``label`` (``worker[1]``), if the job has it."""
        return next((t for t in self.tasks if t.label == label), None)

    @property
    def ended_at(self) -> Optional[float]:
        """When the job's last task ended (epoch seconds), once the job has ended."""
        ends = [t.ended_at for t in self.tasks if t.ended_at]
        return max(ends) if self.terminal and ends else None


def merge(plan: RunPlan, backend: str, records: Mapping[TaskKey, TaskRecord],
          abort: Optional[AbortRecord], native: Mapping[TaskKey, NativeState],
          native_ids: Optional[Mapping[TaskKey, str]] = None) -> JobStatus:
    """The job's status from records, abort record and native task states."""
    tasks = []
    for info in plan.tasks:
        key = (info.role, info.rank)
        tasks.append(_task_status(info.role, info.rank, records.get(key),
                                  native.get(key, NativeState.UNKNOWN), abort,
                                  (native_ids or {}).get(key)))
    _set_kv_ranks(tasks, records)
    active = any(t.state.active for t in tasks)
    queued = any(t.state is TaskState.PENDING for t in tasks)
    total, slow = throughput(tasks)
    lost = [t for t in tasks if t.state is TaskState.LOST]
    status = JobStatus(job_id=plan.job_id, backend=backend, state=JobState.RUNNING,
                       tasks=tasks, samples_per_sec=total, stragglers=slow)
    if abort is not None:
        status.state = (JobState.CANCELLED if abort.kind is AbortKind.CANCELLED
                        else JobState.FAILED)
        status.reason = abort.reason
        status.log = abort.log
        status.terminal = not active
        if abort.kind is AbortKind.FAILED:
            status.cause_task = _cause_task(abort, tasks)
    elif workers_succeeded(plan, records) and not active:
        status.state = JobState.SUCCEEDED
        status.terminal = not queued
    elif lost:
        status.state = JobState.FAILED
        status.reason = "; ".join(f"{t.label} lost: {t.note or 'its process is gone'}"
                                  for t in lost)
        status.log = lost[0].log or None
        status.terminal = not active
        status.cause_task = lost[0].label
    elif not active:
        status.state = JobState.PENDING
    return status


def _set_kv_ranks(tasks: List[TaskStatus], records: Mapping[TaskKey, TaskRecord]) -> None:
    """Each worker's ``kv_rank``, once every worker has an address (``psrank``)."""
    workers = [t for t in tasks if t.role is Role.WORKER]
    addresses = []
    for task in workers:
        record = records.get((task.role, task.rank))
        addresses.append((task.label, record.address if record is not None else ""))
    ranks = kv_ranks(addresses)
    for task in workers:
        task.kv_rank = ranks.get(task.label)


def throughput(tasks: List[TaskStatus]) -> Tuple[Optional[float], List[str]]:
    """The workers' samples/s together, and the stragglers: running workers whose
    throughput is below ``STRAGGLER_RATIO`` of the median of the other running
    workers' (at least two workers must report one)."""
    workers = [t for t in tasks if t.role is Role.WORKER and t.samples_per_sec is not None]
    running = [t for t in workers if t.state is TaskState.RUNNING]
    counted = running or workers
    total = round(sum(t.samples_per_sec or 0.0 for t in counted), 2) if counted else None
    slow = []
    if len(running) >= 2:
        for task in running:
            peers = [t.samples_per_sec or 0.0 for t in running if t is not task]
            if (task.samples_per_sec or 0.0) < STRAGGLER_RATIO * statistics.median(peers):
                slow.append(task.label)
    return total, slow


def _cause_task(abort: AbortRecord, tasks: List[TaskStatus]) -> str:
    """The task a failure abort names, else the first task that failed by itself."""
    if abort.role is not None and abort.rank is not None:
        return f"{abort.role.value}[{abort.rank}]"
    failed = [t for t in tasks if t.state is TaskState.FAILED]
    return failed[0].label if failed else ""


def _task_status(role: Role, rank: int, record: Optional[TaskRecord], native: NativeState,
                 abort: Optional[AbortRecord], native_id: Optional[str]) -> TaskStatus:
    if record is None:
        record = TaskRecord(role=role, rank=rank, state=TaskState.PENDING)
    state = record.state
    note = record.note
    if state.active and native is NativeState.GONE:
        state, note = TaskState.LOST, note or "its supervisor is gone without a final record"
    elif state is TaskState.PENDING and native is NativeState.GONE:
        if abort is not None:
            state, note = TaskState.CANCELLED, "never started: " + abort.reason
        else:
            state, note = TaskState.LOST, ("left the queue without starting (can its node "
                                           "see the run directory? `mxbatch doctor` checks)")
    elif state is TaskState.PENDING and native is NativeState.ACTIVE:
        state = TaskState.STARTING
    return TaskStatus(role=role, rank=rank, state=state, host=record.host, pid=record.pid,
                      exit_code=record.exit_code, signal=record.signal, note=note,
                      log=record.log, native=native_id, started_at=record.started_at,
                      ended_at=record.ended_at, metrics=dict(record.metrics))
