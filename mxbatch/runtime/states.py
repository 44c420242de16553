"""The records tasks share through the rendezvous, and the states they carry.

- ``SchedulerRecord``: where the ps-lite scheduler listens (``scheduler.json``);
- ``TaskRecord``: what a supervisor says of its task (``tasks/<role>-<rank>.json``);
- ``AbortRecord``: why the job ends early (``abort.json``; the first one wins), with
  the ``EndReason`` every backend maps its native facts onto;
- ``DigestRecord``: what the job's watcher saw of all tasks (``digest.json``).

Each is a dataclass with ``to_dict``/``from_dict`` (plain JSON data) and a
``parse`` that returns None for absent or unreadable data (a file being written,
or one from another version), so readers never see half a record.
"""

import enum
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Iterable, List, Optional, Tuple, Type, TypeVar

from .roles import Role

R = TypeVar("R")


def _known(cls: Type[Any], data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` without keys ``cls`` does not have (written by a newer version)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _parse(cls: Type[R], data: Optional[Any]) -> Optional[R]:
    if not isinstance(data, dict):
        return None
    try:
        return cls.from_dict(data)  # type: ignore[attr-defined]
    except (TypeError, ValueError, KeyError):
        return None


class TaskState(str, enum.Enum):
    PENDING = "PENDING"      # not started yet (queued)
    STARTING = "STARTING"    # supervisor up, waiting for the scheduler / port
    RUNNING = "RUNNING"      # role process running
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"  # stopped because the job was aborted or cancelled
    LOST = "LOST"            # supervisor vanished without a final record
    UNKNOWN = "UNKNOWN"

    @property
    def active(self) -> bool:
        return self in (TaskState.STARTING, TaskState.RUNNING)

    @property
    def final(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED,
                        TaskState.LOST)


class AbortKind(str, enum.Enum):
    FAILED = "FAILED"        # a task failed, was lost, or a deadline passed
    CANCELLED = "CANCELLED"  # a user asked for it


class EndReason(str, enum.Enum):
    """Why an attempt of a job ended: the one vocabulary every backend maps its native
    facts onto, and the only thing the restart policy (``attempts.decide``) looks at."""

    SUCCEEDED = "succeeded"
    FAILURE = "failure"                    # a role exited non-zero (or could not start)
    STALL = "stall"                        # a role stopped, or a worker silent and idle
    EXIT_HANG = "exit_hang"                # a worker blocked after another's code finished
    #                                        (a dist_sync deadlock: the job cannot end)
    STARTUP_DEADLINE = "startup_deadline"  # tasks had not started by the deadline
    PREEMPTED = "preempted"                # the cluster took the resources back
    WALLTIME = "walltime"                  # the time limit (less the checkpoint lead)
    NODE_FAILURE = "node_failure"          # a task was lost with its host
    CANCELLED = "cancelled"                # a user asked for it

    @property
    def checkpoints(self) -> bool:
        """Workers get the checkpoint signal before the attempt is torn down."""
        return self in (EndReason.PREEMPTED, EndReason.WALLTIME)

    @classmethod
    def parse(cls, value: Optional[str]) -> Optional["EndReason"]:
        """The reason named ``value``; None for None or a name of a newer version."""
        try:
            return cls(value) if value else None
        except ValueError:
            return None


@dataclass(frozen=True)
class SchedulerRecord:
    """Where the scheduler of ``job_id`` listens. Published as soon as its role starts
    (``listening`` false), again once the listening socket on the port is the role's
    own (true: only then do members start); a new ``attempt`` means it moved to another
    port before it listened; ``ended``: its role exited with 0 without ever listening
    (a command that is no ps-lite scheduler), so members start without one."""

    job_id: str
    ip: str
    port: int
    host: str = ""
    pid: Optional[int] = None
    attempt: int = 1
    listening: bool = False
    ended: bool = False
    # what the scheduler's role runs, as its hook reported it before it listened
    # (``rolehook.RoleEnvironment``; empty: not known): every member compares its own
    environment: Dict[str, Any] = field(default_factory=dict)

    @property
    def joinable(self) -> bool:
        """Members may start their roles: the scheduler's own socket listens (or it
        ended without one, and there is nothing to join)."""
        return self.listening or self.ended

    @property
    def address(self) -> str:
        return "%s:%d" % (self.ip, self.port)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SchedulerRecord":
        data = _known(cls, data)
        data["port"] = int(data["port"])
        return cls(**data)

    @classmethod
    def parse(cls, data: Optional[Any]) -> Optional["SchedulerRecord"]:
        """The record in decoded JSON; None when absent or unreadable."""
        return _parse(cls, data)


@dataclass
class TaskRecord:
    """What a supervisor says about its task. ``heartbeat`` grows while it lives."""

    role: Role
    rank: int
    state: TaskState
    host: str = ""
    supervisor_pid: Optional[int] = None
    pid: Optional[int] = None          # the role process (also its process group)
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    heartbeat: int = 0
    note: str = ""
    log: str = ""
    # seconds the role has shown no progress (no CPU used, no output) and has been
    # stopped (SIGSTOP, a frozen cgroup), as its supervisor last measured
    idle_s: float = 0.0
    stopped_s: float = 0.0
    # when the role was first seen connected to the ps-lite scheduler (the scheduler:
    # listening); None while it has not reached it (a failure then is a start-up one)
    reached_at: Optional[float] = None
    # the latest metrics the role printed (``metrics``: samples_per_sec from MXNet's
    # Speedometer, or MXBATCH_METRIC lines) and when they last changed
    metrics: Dict[str, float] = field(default_factory=dict)
    metrics_at: Optional[float] = None
    # where a server or worker listens (``ip:port``), when its supervisor chose the port:
    # ps-lite's rank order follows it (``backends.psrank``)
    address: str = ""
    # what the role runs, as its hook reported it (``rolehook.RoleEnvironment``)
    environment: Dict[str, Any] = field(default_factory=dict)
    # when the role's hook said the script's own code had finished (None: not, or no hook)
    code_finished_at: Optional[float] = None
    # the role was still running this long after its code had finished, and its
    # supervisor ended it (``rendezvous.exit_timeout``: MXNet's exit hang)
    exit_hang_s: Optional[float] = None
    # when the supervisor started the role's process (its exec), and the CPU seconds the
    # supervisor itself had used by then: for an attached ``mxbatch launch``, the CLI's
    # own cost up to its first role
    exec_at: Optional[float] = None
    exec_cpu_s: Optional[float] = None
    # a server or worker: the agent loop's time when its supervisor read the scheduler's
    # listening record and began to start the role (a local job's members: the same
    # turn, the same time, as the scheduler's ``reached_at``)
    joined_at: Optional[float] = None
    # what its supervisor measured of the running role: when it last showed progress
    # (used CPU or wrote output of its own: ``idle_s`` counts from then), when it last
    # wrote output, the CPU seconds its processes have used and their CPU use over the
    # last few seconds (percent of one core)
    progress_at: Optional[float] = None
    output_at: Optional[float] = None
    cpu_s: Optional[float] = None
    cpu_pct: Optional[float] = None
    # where the role's main thread is, as its stack dump in this idle spell showed it
    # (``stacks.MainStack``; empty: the role is busy, or it could not be asked)
    stack: Dict[str, Any] = field(default_factory=dict)
    # a worker's pushes through its dist kvstore, as its hook counted them: calls of
    # push and pushpull, and the most pushes of one key (its batches)
    pushes: Optional[int] = None
    batches: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["role"] = self.role.value
        data["state"] = self.state.value
        return data

    @property
    def key(self) -> Tuple[Role, int]:
        return self.role, self.rank

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TaskRecord":
        data = _known(cls, data)
        data["role"] = Role(data["role"])
        data["state"] = TaskState(data["state"])
        return cls(**data)

    @classmethod
    def parse(cls, data: Optional[Any]) -> Optional["TaskRecord"]:
        """The record in decoded JSON; None when absent or unreadable."""
        return _parse(cls, data)


def collect_task_records(items: Iterable[Any]) -> Dict[Tuple[Role, int], "TaskRecord"]:
    """Task records by (role, rank) from decoded JSON values; unreadable ones are skipped
    (a record being written, or one from another version)."""
    records = {}
    for data in items:
        record = TaskRecord.parse(data)
        if record is not None:
            records[record.key] = record
    return records


@dataclass
class AbortRecord:
    """Why the job (one attempt of it) is ending early. The first writer wins; later
    ones are ignored. ``end``: the ``EndReason`` (None in records of older versions:
    ``end_reason`` derives one); ``hosts``: the hosts a node failure blames;
    ``startup``: the blamed task never reached the scheduler (a start-up failure)."""

    kind: AbortKind
    reason: str
    role: Optional[Role] = None
    rank: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    log: Optional[str] = None
    at: float = 0.0
    by: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)
    end: Optional[EndReason] = None
    hosts: List[str] = field(default_factory=list)
    startup: bool = False

    @property
    def end_reason(self) -> EndReason:
        """``end``, or for a record without one what its kind says."""
        if self.end is not None:
            return self.end
        return EndReason.CANCELLED if self.kind is AbortKind.CANCELLED else EndReason.FAILURE

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        data["role"] = self.role.value if self.role is not None else None
        data["end"] = self.end.value if self.end is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AbortRecord":
        data = _known(cls, data)
        data["kind"] = AbortKind(data["kind"])
        if data.get("role") is not None:
            data["role"] = Role(data["role"])
        data["end"] = EndReason.parse(data.get("end"))
        data["hosts"] = [str(h) for h in data.get("hosts") or []]
        return cls(**data)

    @classmethod
    def parse(cls, data: Optional[Any]) -> Optional["AbortRecord"]:
        """The record in decoded JSON; None when absent or unreadable."""
        return _parse(cls, data)


@dataclass(frozen=True)
class DigestRecord:
    """What the job's watcher (the supervisor of the scheduler task) last saw of every
    task, published every few seconds so that the others need not read every task
    record: ``seq`` grows with each publication (a digest that stops changing means
    the watcher is gone, unless ``final``); ``workers_done_at`` is when every worker
    had succeeded, ``workers_finished_at`` since when every worker's code has
    finished."""

    job_id: str
    seq: int
    watcher: str = ""
    at: float = 0.0
    workers_done_at: Optional[float] = None
    states: Dict[str, int] = field(default_factory=dict)
    # the watcher has ended (its own tasks are done): stop expecting new digests
    final: bool = False
    # when every worker had ended, whatever its state (after a checkpoint abort the
    # other roles wait for it before they stop)
    workers_ended_at: Optional[float] = None
    # since when every worker's own code has finished (its hook said so, or it
    # succeeded): training is over, a worker still running gets ``exit_grace``
    workers_finished_at: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "DigestRecord":
        data = _known(cls, data)
        data["seq"] = int(data["seq"])
        return cls(**data)

    @classmethod
    def parse(cls, data: Optional[Any]) -> Optional["DigestRecord"]:
        """The record in decoded JSON; None when absent or unreadable."""
        return _parse(cls, data)
