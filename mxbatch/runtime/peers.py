"""Watching the other tasks of a job: startup deadline, stale heartbeats, finished workers.

Every supervisor (and the local manager, and ``mxbatch wait``) runs the same
checks, so a failure is noticed by whoever looks first. Staleness is judged on
the watcher's own monotonic clock (when it last saw a heartbeat *change*), so
clock skew between hosts does not matter.
"""

import time
from typing import Dict, List, Optional, Tuple

from .planfile import RunPlan
from .rendezvous import TaskKey
from .roles import Role
from .states import AbortKind, AbortRecord, TaskRecord, TaskState


def missing_at_deadline(plan: RunPlan, records: Dict[TaskKey, TaskRecord],
                        now: float) -> List[str]:
    """Labels of tasks that have not started although the startup deadline passed."""
    if now < plan.startup_deadline:
        return []
    missing = []
    for task in plan.tasks:
        record = records.get((task.role, task.rank))
        if record is None or record.state in (TaskState.PENDING, TaskState.UNKNOWN):
            missing.append(task.label)
    return missing


def startup_abort(plan: RunPlan, missing: List[str], by: str) -> AbortRecord:
    return AbortRecord(
        kind=AbortKind.FAILED, by=by,
        reason="startup deadline (%gs) passed and %s never started: %s"
               % (plan.startup_timeout_s, "this task" if len(missing) == 1 else "these tasks",
                  ", ".join(missing)),
        extra={"missing": missing})


def workers_succeeded(plan: RunPlan, records: Dict[TaskKey, TaskRecord]) -> bool:
    workers = plan.tasks_of(Role.WORKER)
    return bool(workers) and all(
        (records.get((w.role, w.rank)) or _NONE).state is TaskState.SUCCEEDED for w in workers)


_NONE = TaskRecord(role=Role.WORKER, rank=-1, state=TaskState.UNKNOWN)


class HeartbeatWatch:
    """Remembers when each active task's heartbeat last changed."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._seen: Dict[TaskKey, Tuple[int, float]] = {}

    def stale(self, records: Dict[TaskKey, TaskRecord],
              now: Optional[float] = None) -> List[TaskRecord]:
        """Active records whose heartbeat has not changed for ``timeout_s``."""
        now = time.monotonic() if now is None else now
        stale = []
        for key, record in records.items():
            if not record.state.active:
                self._seen.pop(key, None)
                continue
            beat, since = self._seen.get(key, (None, now))
            if beat != record.heartbeat:
                self._seen[key] = (record.heartbeat, now)
            elif now - since > self.timeout_s:
                stale.append(record)
        return stale


def lost_abort(record: TaskRecord, timeout_s: float, by: str) -> AbortRecord:
    return AbortRecord(
        kind=AbortKind.FAILED, by=by, role=record.role, rank=record.rank, log=record.log,
        reason="%s[%d] lost: no heartbeat for %gs (host %s, supervisor pid %s)"
               % (record.role.value, record.rank, timeout_s, record.host, record.supervisor_pid))
