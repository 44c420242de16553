"""Watching a job's tasks: the decisions, without I/O.

One agent per job is its watcher: the one that supervises the scheduler task. It
alone reads every task record (by name, a few times a minute at most per task) and
decides, through ``JobWatch``:

- the startup deadline: tasks still PENDING when it passed;
- lost tasks: an active task whose heartbeat has not changed for
  ``heartbeat_timeout`` (its supervisor is gone: killed, or its host is);
- a dist_sync deadlock: a worker has finished its code (its hook said so, or it
  succeeded) while another, which had reached the scheduler, has used no CPU and
  written no output for ``exit_timeout``, and whose stack (dumped in that idle spell:
  ``TaskRecord.stack``) is in MXNet, or not known: it waits in a push, pull or barrier
  for a worker that will never send again (uneven batches per worker,
  apache/mxnet#7888). One idle in its own code (a sleep of its own) is no deadlock;
- stalls: a role stopped (SIGSTOP, a frozen host) for ``stall_timeout``, or a worker
  that has used no CPU and written no output for that long;

each reason says only what was measured (``diagnosis``): where the role is, from its
stack; that it is stopped; the batches each worker pushed, when two were counted; and
where the other idle roles are;
- when every worker's own code has finished (training is over: a worker still running
  ``exit_grace`` later is ended), and when every worker has succeeded (then servers and
  the scheduler end);

and publishes a ``DigestRecord`` with it. Every other agent reads only the digest
and the abort record (``DigestFollower``): O(1) file operations per task per second,
whatever the job's size. A digest that stops changing means the watcher is gone:
the followers then abort the job themselves.

Staleness is judged on the watcher's own monotonic clock (when it last saw a
heartbeat *change*), so clock skew between hosts does not matter.
"""

from typing import Dict, List, Optional, Sequence, Tuple

from . import diagnosis
from .planfile import RunPlan
from .rendezvous import TaskKey
from .roles import Role
from .states import AbortKind, AbortRecord, DigestRecord, EndReason, TaskRecord, TaskState

#: how many tasks a stall reason lists, the most idle first
STALL_REASON_TASKS = 8


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


def startup_abort(plan: RunPlan, missing: List[str], by: str,
                  queued: Sequence[str] = ()) -> AbortRecord:
    """The abort of a job whose ``missing`` tasks never started; ``queued``: the batch
    system's ids of what still waits for them (named in the reason)."""
    shown = missing if len(missing) <= 20 else missing[:20] + ["and %d more" % (len(missing)
                                                                                   - 20)]
    waiting = list(queued) if len(queued) <= 5 else list(queued[:5]) + ["..."]
    return AbortRecord(
        kind=AbortKind.FAILED, by=by, end=EndReason.STARTUP_DEADLINE,
        reason="startup deadline (%gs) passed and %s never started: %s%s"
               % (plan.startup_timeout_s, "this task" if len(missing) == 1 else "these tasks",
                  ", ".join(shown),
                  " (still queued: %s)" % ", ".join(waiting) if waiting else ""),
        extra={"missing": len(missing)})


def workers_succeeded(plan: RunPlan, records: Dict[TaskKey, TaskRecord]) -> bool:
    workers = plan.tasks_of(Role.WORKER)
    return bool(workers) and all(
        (records.get((w.role, w.rank)) or _NONE).state is TaskState.SUCCEEDED for w in workers)


def workers_finished(plan: RunPlan, records: Dict[TaskKey, TaskRecord]) -> bool:
    """Every worker's own code has finished (``code_finished``): training is over."""
    workers = plan.tasks_of(Role.WORKER)
    return bool(workers) and all(code_finished(records.get((w.role, w.rank)) or _NONE)
                                 for w in workers)


def workers_ended(plan: RunPlan, records: Dict[TaskKey, TaskRecord]) -> bool:
    """Every worker has ended, whatever its state."""
    return all((records.get((w.role, w.rank)) or _NONE).state.final
               for w in plan.tasks_of(Role.WORKER))


_NONE = TaskRecord(role=Role.WORKER, rank=-1, state=TaskState.UNKNOWN)


def _label(record: TaskRecord) -> str:
    return "%s[%d]" % (record.role.value, record.rank)


class HeartbeatWatch:
    """Remembers when each active task's heartbeat last changed."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._seen: Dict[TaskKey, Tuple[int, float]] = {}

    def stale(self, records: Dict[TaskKey, TaskRecord], now: float) -> List[TaskRecord]:
        """Active records whose heartbeat has not changed for ``timeout_s`` (``now``: a
        monotonic clock)."""
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
    """A task whose heartbeat stopped is lost with its host: a node failure."""
    return AbortRecord(
        kind=AbortKind.FAILED, by=by, role=record.role, rank=record.rank, log=record.log,
        end=EndReason.NODE_FAILURE, hosts=[record.host] if record.host else [],
        reason="%s lost: no heartbeat for %gs (host %s, supervisor pid %s)"
               % (_label(record), timeout_s, record.host, record.supervisor_pid))


def stalled(record: TaskRecord, timeout_s: float) -> Optional[str]:
    """How ``record``'s role stalls, if it does: stopped for ``timeout_s``, or (a
    worker) no CPU and no output for that long. Servers and the scheduler may
    legitimately idle while workers compute, so only being stopped counts for them."""
    if not record.state.active:
        return None
    if record.stopped_s >= timeout_s:
        return ("its process has been stopped (SIGSTOP or frozen) for %ds, so it cannot "
                "show its stack" % record.stopped_s)
    if record.role is Role.WORKER and record.idle_s >= timeout_s:
        if record.stopped_s > 0:  # idle since just before it was seen stopped
            return ("its process has been stopped (SIGSTOP or frozen): no CPU and no "
                    "output for %ds, so it cannot show its stack" % record.idle_s)
        place = diagnosis.where(record)
        return "it has used no CPU and written no output for %ds%s" % (
            record.idle_s, " " + place if place else "")
    return None


def stall_abort(plan: RunPlan, records: Dict[TaskKey, TaskRecord], by: str
                ) -> Optional[AbortRecord]:
    """The abort for the task that stalled first (the longest stopped or idle), naming
    how long each task had been idle; None if nothing stalls."""
    timeout = plan.stall_timeout_s
    if not timeout:
        return None
    stalls = [(record, how) for record in records.values()
              for how in [stalled(record, timeout)] if how]
    if not stalls:
        return None
    first, how = max(stalls, key=lambda s: (s[0].stopped_s, s[0].idle_s))
    active = sorted((r for r in records.values() if r.state.active),
                    key=lambda r: -max(r.idle_s, r.stopped_s))
    idle = ", ".join("%s %ds" % (_label(r), max(r.idle_s, r.stopped_s))
                     for r in active[:STALL_REASON_TASKS])
    more = len(active) - STALL_REASON_TASKS
    return AbortRecord(
        kind=AbortKind.FAILED, by=by, role=first.role, rank=first.rank, log=first.log,
        end=EndReason.STALL,
        reason="%s stalled: %s (stall timeout %gs); idle time of each task: %s%s%s"
               % (_label(first), how, timeout, idle, " and %d more" % more if more > 0 else "",
                  diagnosis.others(records.values(), [first])),
        extra={"stalled": [_label(r) for r, _ in stalls]})


def code_finished(record: TaskRecord) -> bool:
    """The role's own code has finished: its hook said so, or it succeeded."""
    return record.code_finished_at is not None or record.state is TaskState.SUCCEEDED


def _maybe_in_mxnet(record: TaskRecord) -> bool:
    """The role may be blocked in MXNet: its stack says so, or is not known. One whose
    stack shows its own code is busy there (a sleep, a wait of its own): no deadlock of
    the kvstore's, and only the stall timeout applies."""
    stack = diagnosis.stack_of(record)
    return stack is None or stack.in_mxnet


def deadlock_abort(plan: RunPlan, records: Dict[TaskKey, TaskRecord], by: str
                   ) -> Optional[AbortRecord]:
    """The abort for a worker blocked since another worker finished its code (see the
    module docstring), the longest idle one named; None if there is none."""
    timeout = plan.exit_timeout_s
    if not timeout:
        return None
    workers = [records[(t.role, t.rank)] for t in plan.tasks_of(Role.WORKER)
               if (t.role, t.rank) in records]
    finished = [r for r in workers if code_finished(r)]
    blocked = [r for r in workers
               if r.state.active and not code_finished(r) and r.reached_at is not None
               and r.idle_s >= timeout and not r.stopped_s and _maybe_in_mxnet(r)]
    if not finished or not blocked:
        return None
    first = max(blocked, key=lambda r: r.idle_s)
    names = [_label(r) for r in finished]
    shown = ", ".join(names[:STALL_REASON_TASKS]) + (
        " and %d more" % (len(names) - STALL_REASON_TASKS) if len(names) > STALL_REASON_TASKS
        else "")
    return AbortRecord(
        kind=AbortKind.FAILED, by=by, role=first.role, rank=first.rank, log=first.log,
        end=EndReason.EXIT_HANG,
        reason="%s finished; %s blocked %ds %s (no CPU and no output; "
               "rendezvous.exit_timeout %gs)%s%s"
               % (shown, _label(first), first.idle_s,
                  diagnosis.where(first) or "(its stack is not known)", timeout,
                  diagnosis.batches(workers), diagnosis.others(records.values(), [first])),
        extra={"finished": names, "blocked": [_label(r) for r in blocked]})


class JobWatch:
    """The watcher's decisions (see the module docstring)."""

    def __init__(self, plan: RunPlan, by: str) -> None:
        self.plan = plan
        self.by = by
        self.heartbeats = HeartbeatWatch(plan.heartbeat_timeout_s)
        self.seq = 0
        self.workers_done_at: Optional[float] = None
        self.workers_ended_at: Optional[float] = None
        self.workers_finished_at: Optional[float] = None

    def check(self, records: Dict[TaskKey, TaskRecord], wall: float, mono: float
              ) -> Optional[AbortRecord]:
        """Why the job must abort now, if it must; ``records`` are every task's."""
        missing = missing_at_deadline(self.plan, records, wall)
        if missing:
            return startup_abort(self.plan, missing, by=self.by)
        stale = self.heartbeats.stale(records, mono)
        if stale:
            return lost_abort(stale[0], self.plan.heartbeat_timeout_s, by=self.by)
        abort = (deadlock_abort(self.plan, records, by=self.by)
                 or stall_abort(self.plan, records, by=self.by))
        if abort is not None:
            return abort
        if self.workers_done_at is None and workers_succeeded(self.plan, records):
            self.workers_done_at = wall
        if not workers_finished(self.plan, records):
            self.workers_finished_at = None  # a worker's program started again
        elif self.workers_finished_at is None:
            self.workers_finished_at = wall
        return None

    def digest(self, records: Dict[TaskKey, TaskRecord], wall: float,
               final: bool = False) -> DigestRecord:
        """The next digest (``final``: the watcher is leaving, stop watching it)."""
        self.seq += 1
        states: Dict[str, int] = {}
        for record in records.values():
            states[record.state.value] = states.get(record.state.value, 0) + 1
        if self.workers_ended_at is None and workers_ended(self.plan, records):
            self.workers_ended_at = wall
        return DigestRecord(job_id=self.plan.job_id, seq=self.seq, watcher=self.by, at=wall,
                            workers_done_at=self.workers_done_at, states=states, final=final,
                            workers_ended_at=self.workers_ended_at,
                            workers_finished_at=self.workers_finished_at)


class DigestFollower:
    """A member agent's view of the watcher, through its digests (monotonic clock)."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.last_seq: Optional[int] = None
        self.changed_at: Optional[float] = None
        self.final = False
        #: when this agent first saw that every worker had succeeded
        self.workers_done_seen: Optional[float] = None
        #: when this agent first saw that every worker had ended (succeeded or not)
        self.workers_ended_seen: Optional[float] = None
        #: when this agent first saw that every worker's code had finished
        self.workers_finished_seen: Optional[float] = None

    def observe(self, digest: Optional[DigestRecord], mono: float) -> None:
        if digest is None or digest.job_id != self.plan.job_id:
            return
        if digest.seq != self.last_seq:
            self.last_seq, self.changed_at = digest.seq, mono
        self.final = self.final or digest.final
        if digest.workers_done_at is not None and self.workers_done_seen is None:
            self.workers_done_seen = mono
        if digest.workers_ended_at is not None and self.workers_ended_seen is None:
            self.workers_ended_seen = mono
        if digest.workers_finished_at is None:
            self.workers_finished_seen = None
        elif self.workers_finished_seen is None:
            self.workers_finished_seen = mono

    def watcher_lost(self, mono: float) -> Optional[str]:
        """Why the watcher counts as gone: its digest stopped changing (after it had
        started, and unless it said it was leaving)."""
        if self.changed_at is None or self.final:
            return None
        quiet = mono - self.changed_at
        if quiet <= self.plan.heartbeat_timeout_s:
            return None
        return ("the job's watcher (the supervisor of scheduler[0]) is lost: its digest has "
                "not changed for %ds" % quiet)
