"""A job's state, merged from the supervisors' task records and the backend's view.

Backends report, per task, only what they can see natively (``NativeState``:
queued, active, gone); the supervisors' records say what happened inside.
``merge`` combines both with one set of rules for every backend, for the job's current
attempt; ``with_attempts`` then adds what ``attempts.json`` says of every attempt
(the job goes on between two attempts, and ends when the attempt loop says so).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..runtime.attempts import AttemptsRecord
from ..runtime.metrics import SAMPLES_PER_SEC
from ..runtime.planfile import RunPlan
from ..runtime.rendezvous import TaskKey
from ..runtime.roles import Role
from ..runtime.states import AbortKind, AbortRecord, EndReason, TaskRecord, TaskState
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
    """One task as ``status`` shows it: its state, where and as which process it ran,
    how it ended (exit code or signal, a note), its log, and the backend's own word
    (``native``)."""

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
    #: what the role runs (Python, MXNet: versions and paths), as its hook reported it
    environment: Dict[str, Any] = dataclasses.field(default_factory=dict)
    #: when the role's script's own code finished, as its hook reported it
    code_finished_at: Optional[float] = None
    #: how long the role still ran after its code finished before mxbatch ended it
    exit_hang_s: Optional[float] = None
    #: what its supervisor last measured of the running role (``TaskRecord``): when it
    #: last showed progress (CPU or output) and wrote output, its CPU seconds and recent
    #: CPU use (percent of a core), where its idle main thread is (``stacks.MainStack``),
    #: a worker's counted kvstore pushes and batches
    progress_at: Optional[float] = None
    output_at: Optional[float] = None
    cpu_s: Optional[float] = None
    cpu_pct: Optional[float] = None
    stack: Dict[str, Any] = dataclasses.field(default_factory=dict)
    pushes: Optional[int] = None
    batches: Optional[int] = None

    @classmethod
    def of_record(cls, record: TaskRecord, **status: Any) -> "TaskStatus":
        """The status of a task whose supervisor's record is ``record``: every field the
        two share by name is the record's (a copy: the record is not shared), ``status``
        the fields only a status has or that the status decides (``state``, ``note``,
        ``native``, ``kv_rank``). A field added to both needs no code here."""
        shared = {f.name for f in dataclasses.fields(cls)} & \
            {f.name for f in dataclasses.fields(TaskRecord)}
        copied = {name: copy.copy(getattr(record, name)) for name in shared - set(status)}
        return cls(**copied, **status)

    @property
    def samples_per_sec(self) -> Optional[float]:
        return self.metrics.get(SAMPLES_PER_SEC)

    @property
    def label(self) -> str:
        return f"{self.role.value}[{self.rank}]"


@dataclasses.dataclass
class AttemptStatus:
    """One attempt of the job, as ``status`` shows it: ``reason`` is how it ended (None:
    it runs), ``decision`` what the restart policy made of it."""

    index: int
    started_at: float
    ended_at: Optional[float] = None
    reason: Optional[str] = None
    detail: str = ""
    decision: str = ""
    restart_reason: Optional[str] = None
    excluded: List[str] = dataclasses.field(default_factory=list)
    native: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class JobStatus:
    """The job's state; its tasks are those of the current attempt (``attempt``, of at
    most ``max_attempts``), ``attempts`` every attempt so far."""

    job_id: str
    backend: str
    state: JobState
    tasks: List[TaskStatus]
    reason: str = ""
    log: Optional[str] = None
    terminal: bool = False
    attempt: int = 0
    max_attempts: int = 1
    attempts: List[AttemptStatus] = dataclasses.field(default_factory=list)
    excluded_hosts: List[str] = dataclasses.field(default_factory=list)
    #: the task whose failure ended the job (``worker[1]``), when one did
    cause_task: str = ""
    #: the workers' latest throughput together (running workers; all of them once none
    #: runs), None while no worker reported one
    samples_per_sec: Optional[float] = None
    #: running workers far slower than their peers (``stragglers``)
    stragglers: List[str] = dataclasses.field(default_factory=list)
    #: what the outcome alone does not say (roles ended for MXNet's exit hang)
    note: str = ""

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


#: a task the scheduler no longer holds whose supervisor never wrote a record
NEVER_STARTED = "left the queue without starting"


def never_started_note(said: str = "") -> str:
    """Why a task that left the queue without starting is lost: what the scheduler's
    accounting says (``said``) when the backend has it, else where to look."""
    if said:
        return f"{NEVER_STARTED}: {said}"
    return f"{NEVER_STARTED} (can its node see the run directory? `mxbatch doctor` checks)"


def never_started(plan: RunPlan, records: Mapping[TaskKey, TaskRecord],
                  native: Mapping[TaskKey, NativeState]) -> List[TaskKey]:
    """The tasks the scheduler no longer holds whose supervisor never wrote a record
    (or only its pending one), in task order."""
    found = []
    for info in plan.tasks:
        key = (info.role, info.rank)
        record = records.get(key)
        if native.get(key) is NativeState.GONE and (
                record is None or record.state is TaskState.PENDING):
            found.append(key)
    return found


def merge(plan: RunPlan, backend: str, records: Mapping[TaskKey, TaskRecord],
          abort: Optional[AbortRecord], native: Mapping[TaskKey, NativeState],
          native_ids: Optional[Mapping[TaskKey, str]] = None,
          lost_note: str = "", gone_notes: Optional[Mapping[TaskKey, str]] = None
          ) -> JobStatus:
    """The job's status from records, abort record and native task states.
    ``lost_note``: why an active task whose native state is gone is lost, when the
    backend knows better than "its supervisor is gone without a final record";
    ``gone_notes``: what the scheduler says of tasks that left its queue without
    starting (``never_started_note``)."""
    tasks = []
    for info in plan.tasks:
        key = (info.role, info.rank)
        tasks.append(_task_status(info.role, info.rank, records.get(key),
                                  native.get(key, NativeState.UNKNOWN), abort,
                                  (native_ids or {}).get(key), lost_note,
                                  (gone_notes or {}).get(key, "")))
    _set_kv_ranks(tasks, records)
    active = any(t.state.active for t in tasks)
    queued = any(t.state is TaskState.PENDING for t in tasks)
    total, slow = throughput(tasks)
    lost = [t for t in tasks if t.state is TaskState.LOST]
    status = JobStatus(job_id=plan.job_id, backend=backend, state=JobState.RUNNING,
                       tasks=tasks, samples_per_sec=total, stragglers=slow,
                       note=exit_hang_note(tasks))
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


def exit_hang_note(tasks: List[TaskStatus]) -> str:
    """The roles mxbatch ended after their code had finished, and how long each hung:
    ``MXNet's exit hang: worker[0] (hung 60s) and worker[1] (hung 61s) were ended by
    mxbatch after their code had finished ...``; empty if none."""
    hung = [t for t in tasks if t.exit_hang_s is not None]
    if not hung:
        return ""
    names = _listed([f"{t.label} (hung {round(t.exit_hang_s or 0)}s)" for t in hung])
    were, whose = ("was", "its") if len(hung) == 1 else ("were", "their")
    return (f"MXNet's exit hang: {names} {were} ended by mxbatch after {whose} code had "
            "finished (rendezvous.exit_grace, exit_timeout)")


def _listed(items: List[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


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
        import statistics  # only with metrics (the module costs a job's start-up time)

        for task in running:
            peers = [t.samples_per_sec or 0.0 for t in running if t is not task]
            if (task.samples_per_sec or 0.0) < STRAGGLER_RATIO * statistics.median(peers):
                slow.append(task.label)
    return total, slow


def _cause_task(abort: AbortRecord, tasks: List[TaskStatus]) -> str:
    """The task a failure abort names, else the first task that failed by itself; none
    for a walltime: the job's clock ended it, and no role's last words say why."""
    if abort.end_reason is EndReason.WALLTIME:
        return ""
    if abort.role is not None and abort.rank is not None:
        return f"{abort.role.value}[{abort.rank}]"
    failed = [t for t in tasks if t.state is TaskState.FAILED]
    return failed[0].label if failed else ""


def _task_status(role: Role, rank: int, record: Optional[TaskRecord], native: NativeState,
                 abort: Optional[AbortRecord], native_id: Optional[str],
                 lost_note: str = "", gone_note: str = "") -> TaskStatus:
    if record is None:
        record = TaskRecord(role=role, rank=rank, state=TaskState.PENDING)
    state = record.state
    note = record.note
    if state.active and native is NativeState.GONE:
        state, note = TaskState.LOST, (lost_note or note
                                       or "its supervisor is gone without a final record")
    elif state is TaskState.PENDING and native is NativeState.GONE:
        if abort is not None:
            state, note = TaskState.CANCELLED, "never started: " + abort.reason
        else:
            state, note = TaskState.LOST, never_started_note(gone_note)
    elif state is TaskState.PENDING and native is NativeState.ACTIVE:
        state = TaskState.STARTING
    return TaskStatus.of_record(record, state=state, note=note, native=native_id)


def with_attempts(status: JobStatus, plan: RunPlan, record: Optional[AttemptsRecord],
                  driver_alive: bool, now: Optional[float] = None) -> JobStatus:
    """``status`` (of the current attempt, from ``merge``) with the job's attempts.

    While the attempt loop goes on (its driver lives and it has not said the job is
    over) the job is not over, whatever the current attempt's state: between two
    attempts it is RUNNING, saying which attempt ended how and when the next starts.
    Once the loop is final, the job's state is its outcome, and the reason says why no
    attempt followed. Without a record (a job the loop has not started yet, or a job
    without a loop: a batch job with restarts off) the status is the attempt's alone."""
    status.max_attempts = plan.restarts.attempts
    if record is None:
        return status
    now = time.time() if now is None else now
    status.attempt = record.current.index
    status.excluded_hosts = list(record.excluded_hosts)
    status.attempts = [AttemptStatus(index=a.index, started_at=a.started_at,
                                     ended_at=a.ended_at,
                                     reason=a.reason.value if a.reason else None,
                                     detail=a.detail, decision=a.decision,
                                     restart_reason=(a.restart_reason.value
                                                     if a.restart_reason else None),
                                     excluded=list(a.excluded), native=dict(a.native))
                       for a in record.attempts]
    current = record.current
    if record.final:
        outcome = record.outcome
        active = any(t.state.active for t in status.tasks)
        if outcome is EndReason.SUCCEEDED:
            status.state = JobState.SUCCEEDED
        elif outcome is EndReason.CANCELLED:
            status.state = JobState.CANCELLED
            status.reason = status.reason or record.note
        else:
            status.state = JobState.FAILED
            cause = current.detail or (outcome.value if outcome else "")
            if len(record.attempts) > 1 or plan.restarts.enabled:
                cause = "%s (%s)" % (cause, record.note) if record.note else cause
            status.reason = cause
        status.terminal = not active
        return status
    if not driver_alive:
        return status  # the loop is gone: what the attempt's records say, as without one
    status.terminal = False
    if record.waiting:
        status.state = JobState.RUNNING
        wait = max(0.0, (record.next_at or now) - now)
        status.reason = ("attempt %d ended: %s%s; attempt %d starts %s"
                         % (current.index, current.reason.value if current.reason else "?",
                            " (%s)" % current.detail if current.detail else "",
                            current.index + 1,
                            "in %ds" % round(wait) if wait >= 1 else "now"))
    # else the attempt runs, or has just ended and the loop has yet to record it
    return status
