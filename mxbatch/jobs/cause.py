"""The cause of a failed job in the role's own words: the last lines of the first
failing task's output, for the failure summary of ``submit --wait``, ``launch``,
``wait`` and ``status``.

``excerpt`` (pure) picks the lines: the role's output without supervisor notes, up to
the last line of its last Python traceback when it has one (what follows, such as the
role hook's ``exiting with code 1``, adds nothing), at most ``EXCERPT_LINES`` lines.
``failure_cause`` reads them from the task's log through its backend; it never fails:
a log that cannot be read gives no excerpt.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..backends.base import Backend
from ..backends.records import JobRecord
from ..backends.status import JobState, JobStatus
from ..errors import MxbatchError
from ..runtime import notes

#: how many lines of the failing role's output the summary quotes at most
EXCERPT_LINES = 5
#: how much of the end of a local log is read for it
TAIL_BYTES = 64 * 1024
#: how many lines of a log read in full (a backend's own reader) are kept
TAIL_LINES = 2000
TRACEBACK = "Traceback (most recent call last):"


@dataclasses.dataclass(frozen=True)
class Cause:
    """The last words of the task that ended the job: ``task`` (``worker[1]``), its log,
    and the quoted lines."""

    task: str
    log: str
    lines: Tuple[str, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {"task": self.task, "log": self.log, "lines": list(self.lines)}


def excerpt(lines: Sequence[str], limit: int = EXCERPT_LINES) -> List[str]:
    """The lines to quote from a task's log lines (see the module docstring)."""
    own = [line.rstrip("\r\n") for line in lines if not notes.is_note(line)]
    end = len(own)
    start = _last_traceback(own)
    if start is not None:
        end = start + 1
        while end < len(own) and own[end][:1] in (" ", "\t"):
            end += 1  # the frames; own[end] is the exception's line
        end = min(end + 1, len(own))
    while end > 0 and not own[end - 1].strip():
        end -= 1
    return own[max(0, end - limit):end]


def _last_traceback(lines: Sequence[str]) -> Optional[int]:
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].strip() == TRACEBACK:
            return index
    return None


def failure_cause(backend: Backend, record: JobRecord, status: JobStatus) -> Optional[Cause]:
    """The ``Cause`` of a failed job; None when it did not fail, no task caused it, or
    nothing of the task's output can be read."""
    if status.state is not JobState.FAILED or not status.cause_task:
        return None
    task = status.task(status.cause_task)
    if task is None:
        return None
    try:
        lines = _tail(backend, record, task.role, task.rank, status.attempt)
    except (OSError, MxbatchError, ValueError):
        return None
    quoted = excerpt(lines)
    if not quoted:
        return None
    layout = record.layout.attempt(status.attempt)
    return Cause(task=task.label, log=task.log or layout.task_log(task.role.value, task.rank),
                 lines=tuple(quoted))


def _tail(backend: Backend, record: JobRecord, role, rank: int,
          attempt: int = 0) -> List[str]:
    """The last lines of one task's log (of ``attempt``): the end of the local file, or
    what the backend's own reader gives (YARN: the NodeManager)."""
    if backend.log_reader(record, role, rank) is None:
        path = record.layout.attempt(attempt).task_log(role.value, rank)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - TAIL_BYTES))
                data = handle.read()
        except FileNotFoundError:
            return []
        lines = data.decode(errors="replace").splitlines()
        return lines[1:] if size > TAIL_BYTES else lines  # the first may be cut
    return list(backend.logs(record, role, rank))[-TAIL_LINES:]
