"""A job as a sequence of attempts: the restart policy, and the record of every attempt.

A ps-lite job cannot take a new member mid-run, so a restart relaunches the whole job:
every role of attempt k has stopped before attempt k+1 starts, with the same job id
and run directory (``RunLayout.attempt``: each attempt its own task records, logs and
abort record). Three things live here, standard library only:

- ``RestartPlan``: the spec's ``restarts`` block as the runtime reads it from
  ``plan.json`` (how many restarts, on which ``EndReason``, the backoff, the
  checkpoint signal with its grace and lead);
- ``AttemptRecord``/``AttemptsRecord``: ``attempts.json``, written only by the process
  that drives the job's attempts (the local job manager, the ssh/MPI controller, a batch
  or YARN job's driver): every attempt with its native ids, its end reason and what the
  policy decided, and the set of hosts excluded for the later attempts;
- ``decide``: the restart policy, on the end reasons alone, in one place for every
  backend.
"""

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .files import atomic_write_json, read_json
from .states import AbortRecord, EndReason

#: what ``restarts.on`` lists by default
DEFAULT_ON = (EndReason.FAILURE, EndReason.PREEMPTED, EndReason.NODE_FAILURE,
              EndReason.WALLTIME)
#: what ``restarts.on`` may list: every reason that is not an outcome of its own
RESTARTABLE = tuple(r for r in EndReason if r not in (EndReason.SUCCEEDED,
                                                      EndReason.CANCELLED))
#: other names ``restarts.on`` accepts (the issue's words)
ON_ALIASES = {"preemption": EndReason.PREEMPTED}
#: reasons the job itself caused: the same one twice in a row ends the job
_OWN_FAULTS = (EndReason.FAILURE, EndReason.STALL, EndReason.EXIT_HANG,
               EndReason.STARTUP_DEADLINE)


@dataclass(frozen=True)
class RestartPlan:
    """``restarts`` of the spec: relaunch the job at most ``max`` times when an attempt
    ends for a reason in ``on``, ``backoff_s`` after the previous attempt ended. On
    preemption or walltime, workers get ``checkpoint_signal`` (None: none) and
    ``checkpoint_grace_s`` to exit before the usual teardown; the scheduler's walltime
    warning comes ``checkpoint_lead_s`` before the limit."""

    max: int = 0
    on: Tuple[str, ...] = tuple(r.value for r in DEFAULT_ON)
    backoff_s: float = 10.0
    checkpoint_signal: Optional[str] = "SIGUSR1"
    checkpoint_grace_s: float = 120.0
    checkpoint_lead_s: float = 120.0

    @property
    def enabled(self) -> bool:
        return self.max > 0

    @property
    def attempts(self) -> int:
        """The most attempts the job may have."""
        return self.max + 1

    def restarts_on(self, reason: EndReason) -> bool:
        return self.enabled and reason.value in self.on

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["on"] = list(self.on)
        return data

    @classmethod
    def from_dict(cls, data: Optional[Dict[str, Any]]) -> "RestartPlan":
        if not isinstance(data, dict):
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        if "on" in known:
            known["on"] = tuple(str(v) for v in known["on"])
        return cls(**known)


@dataclass
class AttemptRecord:
    """One attempt of the job. ``reason`` and what follows are set once it ended;
    ``native``: the backend's ids of this attempt (a batch job's array jobs, a YARN
    application) as plain data; ``excluded``: the hosts it was launched without;
    ``restart_reason``: why it was launched (the previous attempt's end)."""

    index: int
    started_at: float
    ended_at: Optional[float] = None
    reason: Optional[EndReason] = None
    detail: str = ""
    role: Optional[str] = None
    rank: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    startup: bool = False
    hosts: List[str] = field(default_factory=list)
    excluded: List[str] = field(default_factory=list)
    restart_reason: Optional[EndReason] = None
    native: Dict[str, Any] = field(default_factory=dict)
    decision: str = ""

    @property
    def ended(self) -> bool:
        return self.reason is not None

    @property
    def cause(self) -> Tuple[Any, ...]:
        """What must match for two attempts to have ended "the same way"."""
        return (self.reason, self.role, self.rank, self.exit_code, self.signal)

    @property
    def task(self) -> str:
        """The blamed task, ``worker[1]``, or "" when none is."""
        return "%s[%d]" % (self.role, self.rank) if self.role and self.rank is not None else ""

    def end_with(self, end: "AttemptEnd", at: Optional[float] = None) -> None:
        self.ended_at = time.time() if at is None else at
        self.reason = end.reason
        self.detail = end.detail
        self.role, self.rank = end.role, end.rank
        self.exit_code, self.signal = end.exit_code, end.signal
        self.startup = end.startup
        self.hosts = list(end.hosts)

    def summary(self) -> str:
        """``attempt 1: preempted (worker[0]: supervisor received SIGTERM)``."""
        if not self.ended:
            return "attempt %d: running" % self.index
        assert self.reason is not None
        return "attempt %d: %s%s" % (self.index, self.reason.value,
                                     " (%s)" % self.detail if self.detail else "")

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["reason"] = self.reason.value if self.reason is not None else None
        data["restart_reason"] = (self.restart_reason.value
                                  if self.restart_reason is not None else None)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AttemptRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        known["reason"] = EndReason.parse(known.get("reason"))
        known["restart_reason"] = EndReason.parse(known.get("restart_reason"))
        return cls(**known)


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended, as its driver learnt it (from the attempt's abort record,
    its task records, or the backend's native facts)."""

    reason: EndReason
    detail: str = ""
    role: Optional[str] = None
    rank: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    startup: bool = False
    hosts: Tuple[str, ...] = ()

    @classmethod
    def of_abort(cls, abort: AbortRecord) -> "AttemptEnd":
        return cls(reason=abort.end_reason, detail=abort.reason,
                   role=abort.role.value if abort.role is not None else None,
                   rank=abort.rank, exit_code=abort.exit_code, signal=abort.signal,
                   startup=abort.startup, hosts=tuple(abort.hosts))


@dataclass
class AttemptsRecord:
    """``attempts.json``: the job's attempts, oldest first (the last is the current one).
    ``excluded_hosts``: every host a node failure was blamed on, left out of every
    later attempt; ``final``: no attempt follows (``outcome``, and ``note`` says why);
    ``next_at``: while waiting to relaunch, when the next attempt starts;
    ``driver``: the process that drives the attempts (pid, start time in clock ticks
    after boot: ``procs.Process``, host)."""

    job_id: str
    max_restarts: int = 0
    attempts: List[AttemptRecord] = field(default_factory=list)
    excluded_hosts: List[str] = field(default_factory=list)
    final: bool = False
    outcome: Optional[EndReason] = None
    note: str = ""
    next_at: Optional[float] = None
    driver_pid: Optional[int] = None
    driver_host: str = ""
    driver_started: Optional[int] = None

    @property
    def current(self) -> AttemptRecord:
        return self.attempts[-1]

    @property
    def waiting(self) -> bool:
        """Between two attempts: the current one ended and another will start."""
        return not self.final and bool(self.attempts) and self.current.ended

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["attempts"] = [a.to_dict() for a in self.attempts]
        data["outcome"] = self.outcome.value if self.outcome is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AttemptsRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        known["attempts"] = [AttemptRecord.from_dict(a) for a in known.get("attempts") or []]
        known["outcome"] = EndReason.parse(known.get("outcome"))
        known["excluded_hosts"] = [str(h) for h in known.get("excluded_hosts") or []]
        return cls(**known)

    @classmethod
    def parse(cls, data: Any) -> Optional["AttemptsRecord"]:
        """The record in decoded JSON; None when absent, empty or unreadable."""
        if not isinstance(data, dict) or not data.get("attempts"):
            return None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, KeyError):
            return None


def read_attempts(path: str) -> Optional[AttemptsRecord]:
    """The attempts record at ``path``; None before the first attempt started."""
    return AttemptsRecord.parse(read_json(path))


def write_attempts(path: str, record: AttemptsRecord) -> None:
    atomic_write_json(path, record.to_dict())


@dataclass(frozen=True)
class Decision:
    """What the policy decided after an attempt ended, and why (shown in ``status``)."""

    restart: bool
    why: str


def decide(plan: RestartPlan, history: Sequence[AttemptRecord]) -> Decision:
    """Whether to relaunch the job after its last attempt (``history[-1]``) ended.

    On the end reasons alone, for every backend: success and cancellation end the job;
    a reason ``restarts.on`` does not list ends it; so does an exhausted budget
    (``restarts.max``); a failure whose task never reached the scheduler (a typo, a
    missing module: it fails the same way every time) ends it at once; and a failure
    the job caused itself (a failure, a stall, an exit hang, a missed start-up deadline)
    that ends two attempts in a row with the same cause ends it too."""
    last = history[-1]
    reason = last.reason
    assert reason is not None, "decide() on an attempt that has not ended"
    if reason is EndReason.SUCCEEDED:
        return Decision(False, "succeeded")
    if reason is EndReason.CANCELLED:
        return Decision(False, "cancelled")
    if not plan.enabled:
        return Decision(False, "restarts are off (restarts.max 0)")
    if reason.value not in plan.on:
        return Decision(False, "not restarted: %s is not in restarts.on (%s)"
                        % (reason.value, ", ".join(plan.on)))
    if len(history) > plan.max:
        return Decision(False, "not restarted: restarts.max %d exhausted (%d attempts)"
                        % (plan.max, len(history)))
    if reason is EndReason.FAILURE and last.startup:
        who = last.task or "a task"
        return Decision(False, "not restarted: %s failed before it reached the scheduler "
                               "(a start-up failure recurs on every attempt)" % who)
    if reason in _OWN_FAULTS and len(history) >= 2 and history[-2].cause == last.cause:
        return Decision(False, "not restarted: attempts %d and %d ended the same way "
                               "(%s)" % (history[-2].index, last.index,
                                         last.detail or reason.value))
    return Decision(True, "restarting as attempt %d (restarts.max %d)"
                    % (last.index + 1, plan.max))


def excluded_after(record: AttemptsRecord, end: AttemptEnd) -> List[str]:
    """The hosts to leave out of the next attempts: those before, and the hosts a node
    failure blamed."""
    hosts = list(record.excluded_hosts)
    if end.reason is EndReason.NODE_FAILURE:
        hosts += [h for h in end.hosts if h and h not in hosts]
    return hosts
