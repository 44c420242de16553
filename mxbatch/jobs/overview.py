"""The submitted jobs at a glance, for ``list`` and ``clean``: each job's state, when
it ended and how long it took, chosen by backend, state and age, newest first.

A job whose state cannot be read (its run directory is gone, its scheduler does not
answer) is ``UNKNOWN``; ``clean`` removes such a job only when asked for that state.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Iterable, Iterator, Optional

from ..backends.records import JobRecord
from ..backends.status import JobState
from ..errors import MxbatchError
from .submit import backend_for_record


class StateFilter(str, enum.Enum):
    """What ``--state`` selects: one job state, any ended one, or the unreadable."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ENDED = "ended"  # succeeded, failed or cancelled
    UNKNOWN = "unknown"  # the state cannot be read

    def matches(self, summary: "JobSummary") -> bool:
        if self is StateFilter.UNKNOWN:
            return summary.state is None
        if summary.state is None:
            return False
        if self is StateFilter.ENDED:
            return summary.ended
        return summary.state.value.lower() == self.value


#: the state shown of a job whose record was saved before its launch finished
SUBMITTING = "SUBMITTING"


@dataclasses.dataclass(frozen=True)
class JobSummary:
    """One job: its record, its state (None: unknown, ``problem`` says why), whether it
    ended and when (the last task's end)."""

    record: JobRecord
    state: Optional[JobState]
    ended: bool = False
    ended_at: Optional[float] = None
    problem: str = ""

    @property
    def state_text(self) -> str:
        if self.state is None and self.record.submitting:
            return SUBMITTING
        return self.state.value if self.state is not None else "UNKNOWN"

    def duration_s(self, now: float) -> float:
        """Submission to its end (to ``now`` while it has not ended)."""
        end = self.ended_at if self.ended and self.ended_at else now
        return max(0.0, end - self.record.submitted_at)

    def age_s(self, now: float) -> float:
        """How long ago it ended (or was submitted, when its end is unknown)."""
        return max(0.0, now - (self.ended_at or self.record.submitted_at))


def summarize(record: JobRecord) -> JobSummary:
    """The job's state as its backend reports it now (unknown while it is submitted)."""
    if record.submitting:
        return JobSummary(record, None, problem="its submission has not finished (or its "
                                                "submitter ended before it did)")
    try:
        status = backend_for_record(record).status(record)
    except (MxbatchError, OSError, ValueError) as exc:
        message = exc.format_message() if isinstance(exc, MxbatchError) else str(exc)
        return JobSummary(record, None, problem=message)
    return JobSummary(record, status.state, ended=status.terminal, ended_at=status.ended_at)


def select(records: Iterable[JobRecord], *, backend: Optional[str] = None,
           state: Optional[StateFilter] = None, older_than_s: Optional[float] = None,
           last: Optional[int] = None, now: Optional[float] = None) -> Iterator[JobSummary]:
    """The summaries of ``records`` (newest first) that match: ``backend`` (before any
    backend is asked), ``state``, ended (or, unknown, submitted) at least
    ``older_than_s`` ago; at most ``last`` of them."""
    now = time.time() if now is None else now
    count = 0
    for record in records:
        if last is not None and count >= last:
            return
        if backend is not None and record.backend != backend:
            continue
        summary = summarize(record)
        if state is not None and not state.matches(summary):
            continue
        if older_than_s is not None and summary.age_s(now) < older_than_s:
            continue
        count += 1
        yield summary
