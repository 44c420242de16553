"""Task states and the records supervisors keep in ``tasks/<role>-<rank>.json``."""

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, Optional, Tuple


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


@dataclass
class TaskRecord:
    """What a supervisor says about its task. ``heartbeat`` grows while it lives."""

    role: str
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

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TaskRecord":
        data = dict(data)
        data["state"] = TaskState(data["state"])
        return cls(**data)


def collect_task_records(items: Iterable[Any]) -> Dict[Tuple[str, int], "TaskRecord"]:
    """Task records by (role, rank) from decoded JSON values; unreadable ones are skipped
    (a record being written, or one from another version)."""
    records = {}
    for data in items:
        if data is None:
            continue
        try:
            record = TaskRecord.from_dict(data)
        except (TypeError, ValueError, KeyError):
            continue
        records[(record.role, record.rank)] = record
    return records


@dataclass
class AbortRecord:
    """Why the job is ending early. The first writer wins; later ones are ignored."""

    kind: AbortKind
    reason: str
    role: Optional[str] = None
    rank: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    log: Optional[str] = None
    at: float = 0.0
    by: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AbortRecord":
        data = dict(data)
        data["kind"] = AbortKind(data["kind"])
        return cls(**data)

    @classmethod
    def parse(cls, data: Optional[Any]) -> Optional["AbortRecord"]:
        """The record in decoded JSON; None when absent or unreadable."""
        if data is None:
            return None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, KeyError):
            return None
